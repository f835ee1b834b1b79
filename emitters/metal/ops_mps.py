"""Tracea's Metal kernels on the caller's own ``mps`` tensors (``tracea.ops``), through PyTorch's
``torch.mps.compile_shader``: the kernel's MSL compiled once by PyTorch's Metal device, then encoded on
PyTorch's MPS stream over the tensors' own buffers, so it is ordered with the torch ops before and after it
and nothing is copied.

What PyTorch does with the call (torch/csrc/mps/Module.cpp, ``_mps_ShaderLibrary`` and ``_mps_MetalKernel``;
aten/src/ATen/native/mps/OperationUtils.mm, ``MetalShaderLibrary`` and ``MetalKernelFunction``):

* ``torch.mps.compile_shader(source)`` compiles with ``newLibraryWithSource`` (a Metal language version from
  3.0 up, by macOS release; safe math unless ``PYTORCH_MPS_FAST_MATH`` is set), after inlining the
  ``#include``s it finds under torch's own include folder (``<metal_stdlib>`` is left for Metal); a kernel is
  the library's attribute of its name.
  Documented from PyTorch 2.7 (docs.pytorch.org/docs/2.7/generated/torch.mps.compile_shader.html);
* ``kernel(*args, threads=(x, y, z), group_size=(x, y, z))`` binds a tensor argument i with ``setBuffer`` at
  its storage offset (index i: the kernel's ``[[buffer(i)]]``) and calls ``dispatchThreads(threads,
  group_size)``. Threads of a whole number of threadgroups make that ``dispatchThreadgroups(grid, block)``:
  ``threads`` is the grid times the block in each dimension. ``max_threads_per_threadgroup`` and
  ``static_thread_group_memory_length`` are the pipeline's limits;
* a Python number is passed as an int64 or a float by ``setBytes`` (a cast to int32 exists only in newer
  versions), so each ``constant`` scalar goes as a one-element tensor of its own type (int32, uint32 bits in
  an int32, float32): a buffer bound to a ``constant`` argument, made once per device.

The same shader runs NumPy storage arrays where PyObjC's Metal is not installed (``run_arrays``,
``time_arrays``: runtime.py's ``OpKernel`` falls back to it): each array's bytes copied into a ``uint8`` mps
tensor (a kernel binds a buffer's address, whatever its tensor's dtype), the output's bytes copied back, and
the launches timed with MPS events as PyTorch's own calls are (torch_mps.py ``time_mps``).
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from typing import Any

from tracea.doctor.errors import BadInputError, CompileError, UnsupportedError

from ..timing import Timing
from .core import THREADGROUP_MEMORY, Launch
from .dispatch import check_launch, pack, scalar_array

HINT = "on a Mac with Apple silicon: a PyTorch with MPS (2.7 or later), tensors on device='mps'"


def mps_problem() -> str | None:
    """None when this process can launch kernels on mps tensors; otherwise why not, in one line."""
    if importlib.util.find_spec("torch") is None:
        return "PyTorch is not installed (pip install torch)"
    import torch

    if not hasattr(torch.mps, "compile_shader"):
        return f"torch {torch.__version__} has no torch.mps.compile_shader (PyTorch 2.7 and later have it)"
    if not torch.backends.mps.is_available():
        built = torch.backends.mps.is_built()
        return "torch sees no MPS device" + ("" if built else " (this torch is built without MPS: MPS is macOS's)")
    return None


def dispatch_sizes(launch: Launch) -> tuple[tuple[int, int, int], tuple[int, int, int]]:
    """(threads, group_size) for ``dispatchThreads``: the grid of whole threadgroups, in threads."""
    g, b = launch.grid, launch.block
    return (g[0] * b[0], g[1] * b[1], g[2] * b[2]), (b[0], b[1], b[2])


def launch_args(launch: Launch, feeds: dict[str, Any], out: Any, scalars: dict[int, Any]) -> list[Any]:
    """The kernel's arguments in ``[[buffer(i)]]`` order: the input tensors by name, ``out``, and the scalar
    argument i as ``scalars[i]``; ``BadInputError`` for an input the call does not give."""
    args: list[Any] = []
    for i, (kind, value) in enumerate(launch.args):
        if kind == "in":
            if value not in feeds:
                raise BadInputError(f"{launch.name}: no input {value!r} (given: {', '.join(sorted(feeds)) or 'none'})")
            args.append(feeds[value])
        elif kind == "out":
            args.append(out)
        else:
            args.append(scalars[i])
    return args


def scalar_tensors(launch: Launch, make: Callable[[Any], Any]) -> dict[int, Any]:
    """Each scalar argument's index -> ``make(its one-element array)``, the uint32 ones as int32 bits (torch's
    int32 tensor holds the same four bytes)."""
    out = {}
    for i, (kind, value) in enumerate(launch.args):
        if kind in ("in", "out"):
            continue
        arr = scalar_array(kind, value)
        out[i] = make(arr.view("int32") if kind == "u32" else arr)
    return out


class MpsShader:
    """One ``Launch`` compiled by ``torch.mps.compile_shader``: ``shader(feeds, out)`` launches it on mps
    tensors (the inputs by name, the output written in place) on PyTorch's current MPS stream."""

    def __init__(self, launch: Launch) -> None:
        problem = mps_problem()
        if problem:
            raise UnsupportedError(f"Tracea's Metal kernels cannot run on mps tensors here: {problem}", HINT)
        import torch

        self.launch, self.torch = launch, torch
        try:
            self.fn = getattr(torch.mps.compile_shader(launch.source), launch.name)
        except (RuntimeError, AttributeError) as exc:
            raise CompileError(f"torch.mps.compile_shader did not build {launch.name}: "
                               f"{(str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]}") from None
        limit = getattr(self.fn, "max_threads_per_threadgroup", None)
        check_launch(launch, limit if limit else launch.threads, THREADGROUP_MEMORY,
                     getattr(self.fn, "static_thread_group_memory_length", 0) or 0)
        self.threads, self.group = dispatch_sizes(launch)
        self._scalars: dict[str, dict[int, Any]] = {}

    def __call__(self, feeds: dict[str, Any], out: Any) -> None:
        where = [f"{n} on {t.device}" for n, t in (*feeds.items(), ("out", out)) if t.device.type != "mps"]
        if where:
            raise BadInputError(f"{self.launch.name}: every tensor must be on mps ({', '.join(where)})")
        key = str(out.device)
        scalars = self._scalars.get(key)
        if scalars is None:
            torch = self.torch
            scalars = self._scalars[key] = scalar_tensors(self.launch,
                                                          lambda a: torch.from_numpy(a).to(out.device))
        self.fn(*launch_args(self.launch, feeds, out, scalars), threads=self.threads, group_size=self.group)

    def _on_device(self, inputs: dict[str, Any], out: Any) -> tuple[dict[str, Any], Any]:
        """Byte copies of NumPy storage arrays on the mps device (checked as runtime.pack checks them)."""
        pack(self.launch, inputs, out)
        torch = self.torch

        def dev(arr: Any) -> Any:
            return torch.from_numpy(arr.reshape(-1).view("uint8")).to("mps")

        names = {v for k, v in self.launch.args if k == "in"}
        return {n: dev(inputs[n]) for n in names}, dev(out)

    def run_arrays(self, inputs: dict[str, Any], out: Any) -> None:
        """One launch on copies of NumPy storage arrays; ``out`` is copied in first (an element the kernel does
        not write keeps its value) and back after."""
        feeds, dev_out = self._on_device(inputs, out)
        self(feeds, dev_out)
        if out.nbytes:
            out.reshape(-1).view("uint8")[:] = dev_out.cpu().numpy()

    def time_arrays(self, inputs: dict[str, Any], out: Any, warmup: int, repeats: int, flush: bool = True) -> Timing:
        """The launch on copies of the arrays timed between MPS events (torch_mps.py ``time_mps``)."""
        from .torch_mps import time_mps

        feeds, dev_out = self._on_device(inputs, out)
        return time_mps(lambda: self(feeds, dev_out), max(warmup, 0), max(repeats, 1), flush)
