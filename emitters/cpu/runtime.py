"""Loading a compiled CPU kernel with ctypes and calling it on NumPy arrays.

``CpuKernel.__call__`` checks every input (names, shapes, storage dtypes: each input's own,
``op.input_dtype``, as attention's int32 block table and lengths), makes a strided input
contiguous, and writes into ``out`` when one is given: with contiguous inputs and an ``out`` the call
allocates nothing (the kernel keeps its packing buffers and thread pool between calls).
"""

from __future__ import annotations

import ctypes
import threading
from pathlib import Path
from typing import Any

import numpy as np

from tracea.doctor.errors import BadInputError, LaunchError

from ..artifact import Artifact
from ..host_compiler import in_cache
from .render import Rendered


def _load(binary: str, entry: str) -> tuple[Any, Any]:
    lib = ctypes.CDLL(binary)
    return lib, getattr(lib, entry)


def _rebuilt(artifact: Artifact, problem: str) -> Artifact:
    """A cached binary that would not load: removed and compiled again from the artifact's own source,
    flags and compiler, once."""
    import dataclasses
    import os

    from .. import host_compiler as cc

    try:
        inode = os.stat(artifact.binary).st_ino
    except OSError:
        inode = None
    cc.discard_cached(Path(artifact.binary), problem, inode)
    name = Path(artifact.binary).name.rsplit("-", 1)[0]
    binary, hit, seconds = cc.compile_cached(artifact.source, name, list(artifact.flags),
                                             cc.Compiler(artifact.compiler, artifact.compiler_version))
    return dataclasses.replace(artifact, binary=str(binary), cache_hit=hit, compile_seconds=seconds)


class CpuKernel:
    """A compiled kernel for one operation: ``kernel(op.random_inputs(rng))`` or ``kernel(inputs, out=buf)``."""

    def __init__(self, op: Any, artifact: Artifact, rendered: Rendered) -> None:
        self.op = op
        self.artifact = artifact
        try:
            self._lib, fn = _load(artifact.binary, rendered.entry)
        except (OSError, AttributeError) as exc:
            if not (artifact.cache_hit and in_cache(artifact.binary)):
                raise LaunchError(f"cannot load {artifact.binary}: {exc}",
                                  "delete the file if it is a cache entry, and build again") from None
            self.artifact = artifact = _rebuilt(artifact, f"the loader refused it: {exc}")
            try:
                self._lib, fn = _load(artifact.binary, rendered.entry)
            except (OSError, AttributeError) as exc2:
                raise LaunchError(f"cannot load {artifact.binary}, even compiled again: {exc2}",
                                  "check the compiler (TRACEA_CC) and the cache folder's disk") from None
        fn.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
        fn.restype = ctypes.c_int
        self._fn = fn
        self._names = rendered.buffers
        self._bufs = (ctypes.c_void_p * len(rendered.buffers))()
        self._dims = (ctypes.c_int64 * len(rendered.dims))(*rendered.dims)
        self._fparams = (ctypes.c_double * max(1, len(rendered.fparams)))(*rendered.fparams)
        self._shapes = {k: tuple(v) for k, v in op.shapes().items()}
        # the inputs this op has, in the entry's buffer order; absent optional buffers stay NULL
        self._in_names = tuple(n for n in rendered.buffers if n in self._shapes)
        self._in_shapes = tuple(self._shapes[n] for n in self._in_names)
        self._in_dtypes = tuple(op.input_dtype(n) for n in self._in_names)  # the fast path's, read once
        self._in_slots = tuple(rendered.buffers.index(n) for n in self._in_names)
        self._out_slot = rendered.buffers.index("out")
        self._ptr_slots = (*self._in_slots, self._out_slot)  # launch_ptrs' order: ptr_names
        self._dtype = op.output_dtype.storage
        self._out_shape = tuple(op.output_shape())
        self._lock = threading.Lock()

    @property
    def threads(self) -> int:
        return int(self.artifact.schedule.get("threads", 1))

    def _input(self, inputs: Any, name: str) -> np.ndarray:
        try:
            x = inputs[name]
        except (KeyError, TypeError):
            raise BadInputError(f"inputs: missing {name!r} (expected {', '.join(self._shapes)})") from None
        if not isinstance(x, np.ndarray):
            raise BadInputError(f"inputs[{name!r}]: expected a NumPy array, got {type(x).__name__}")
        if x.shape != self._shapes[name]:
            raise BadInputError(f"inputs[{name!r}]: shape {x.shape}, expected {self._shapes[name]}")
        want = self.op.input_dtype(name)
        if x.dtype != want:
            raise BadInputError(f"inputs[{name!r}]: dtype {x.dtype}, expected {want}" + (
                f" (the storage of {self.op.dtype.value})" if want == self._dtype else ""))
        return x if x.flags.c_contiguous else np.ascontiguousarray(x)

    def _checked(self, inputs: Any, out: np.ndarray | None) -> tuple[list[np.ndarray], np.ndarray]:
        """The slow path: every check, with a message naming what is wrong."""
        if not hasattr(inputs, "keys"):
            raise BadInputError(f"inputs: expected a dict of arrays ({', '.join(self._shapes)})")
        unknown = sorted(set(inputs.keys()) - set(self._shapes))
        if unknown:
            raise BadInputError(f"inputs: unexpected {unknown[0]!r} (expected {', '.join(self._shapes)})")
        arrays = [self._input(inputs, name) for name in self._in_names]
        if out is None:
            out = np.empty(self._out_shape, dtype=self._dtype)
        else:
            if not isinstance(out, np.ndarray) or out.shape != self._out_shape or out.dtype != self._dtype:
                got = f"{out.shape} {out.dtype}" if isinstance(out, np.ndarray) else type(out).__name__
                raise BadInputError(f"out: expected a {self._out_shape} {self._dtype} array, got {got}")
            if not out.flags.c_contiguous or not out.flags.writeable:
                raise BadInputError("out: must be C-contiguous and writeable")
        return arrays, out

    def __call__(self, inputs: dict[str, np.ndarray], out: np.ndarray | None = None) -> np.ndarray:
        # Fast path (the timed one): the arrays as op.random_inputs() makes them and a given out buffer
        # pass with a few attribute reads; anything else takes the slow path, which explains itself.
        dtype = self._dtype
        try:
            arrays = [inputs[name] for name in self._in_names]
            fast = len(inputs) == len(arrays) and all(
                type(x) is np.ndarray and x.dtype == want and x.shape == shape and x.flags.c_contiguous
                for x, shape, want in zip(arrays, self._in_shapes, self._in_dtypes, strict=True))
        except (KeyError, TypeError):
            fast = False
        if fast and out is None:
            out = np.empty(self._out_shape, dtype=dtype)
        elif not fast or type(out) is not np.ndarray or out.dtype != dtype or out.shape != self._out_shape \
                or not out.flags.c_contiguous or not out.flags.writeable:
            arrays, out = self._checked(inputs, out)
        ptrs = [x.__array_interface__["data"][0] for x in arrays]
        optr = out.__array_interface__["data"][0]
        oend = optr + out.nbytes
        for name, x, p in zip(self._in_names, arrays, ptrs, strict=True):
            if p < oend and optr < p + x.nbytes:
                raise BadInputError(f"out: overlaps the input {name!r}; give a separate buffer")
        with self._lock:
            bufs = self._bufs
            for i, p in zip(self._in_slots, ptrs, strict=True):
                bufs[i] = p
            bufs[self._out_slot] = optr
            rc = self._fn(bufs, self._dims, self._fparams)
        if rc != 0:
            raise LaunchError(f"{self.artifact.name}: the kernel could not allocate its packing buffers (code {rc})",
                              "free memory or use smaller mc/kc/nc blocks")
        return out

    @property
    def ptr_names(self) -> tuple[str, ...]:
        """The buffers ``launch_ptrs`` takes, in its order: the op's inputs in the entry's order, then "out"."""
        return (*self._in_names, "out")

    def launch_ptrs(self, ptrs: tuple[int, ...], stream: int = 0) -> None:
        """One call on buffers the caller has already checked (``tracea.ops``' prepared calls): an address for
        each of ``ptr_names``, each dense, of the op's shape and storage dtype, the output apart from the
        inputs. ``stream`` is there for the GPU kernels' form and not read."""
        with self._lock:
            bufs = self._bufs
            for i, p in zip(self._ptr_slots, ptrs):  # noqa: B905 - ptrs has ptr_names' length (the caller's contract)
                bufs[i] = p
            rc = self._fn(bufs, self._dims, self._fparams)
        if rc != 0:
            raise LaunchError(f"{self.artifact.name}: the kernel could not allocate its packing buffers (code {rc})",
                              "free memory or use smaller mc/kc/nc blocks")

    def __repr__(self) -> str:
        return f"CpuKernel({self.artifact.name}, variant={self.artifact.variant}, threads={self.threads})"
