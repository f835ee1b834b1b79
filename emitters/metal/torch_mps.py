"""PyTorch on Apple's GPU (the ``mps`` device) as the Metal backend's vendor baseline, and the verify-then-time
of a Tracea kernel beside it: what emitters/device_baselines.py does for CUDA, with MPS's own pieces.

* The calls are PyTorch's own, the ones the CUDA baseline makes (emitters/baselines/<op>.py ``device``):
  ``torch.matmul`` with the epilogue in torch, ``F.conv2d`` (an NHWC op's tensors permuted to NCHW views of the
  same bytes, the result permuted back), ``torch.softmax``, ``F.scaled_dot_product_attention`` (``is_causal``
  or a lower-right causal bias, ``enable_gqa`` for grouped heads). On MPS they run MPSGraph, Metal Performance
  Shaders or PyTorch's own Metal kernels; the name says "PyTorch MPS" and torch's version.
* Timing: ``torch.mps.Event(enable_timing=True)`` around each call (``record``, then ``elapsed_time`` in
  milliseconds after ``torch.mps.synchronize``: docs.pytorch.org/docs/stable/generated/torch.mps.event.Event
  .html), each after a write of ``runtime.FLUSH_BYTES`` so it starts from memory, after a warm-up; median, p95
  and fastest as every Tracea timing (emitters/timing.py). MPS has no ``torch.cuda._sleep``, so nothing holds
  the queue ahead of the host: a call shorter than PyTorch's dispatch may count idle time, which the spread
  check (emitters/stability.py, applied by bench.py's ``measure_stable``) reports as unstable.
* Accuracy: MPS has no float64, so a result is brought to the CPU before it is widened for the error.

Everything but the device is a parameter: on a machine without MPS the same code runs with ``device="cpu"``
(tests/emitters/metal: the calls checked against the reference, the assembly of the result).
"""

from __future__ import annotations

import importlib.util
import re
import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from tracea.kernels import relative_error
from tracea.kernels.dtypes import poison, to_float64

from ..baselines import device_call
from ..device_baselines import TORCH_REFUSALS, GpuBaseline, _first_line
from ..timing import Timing, _p95
from .dispatch import FLUSH_BYTES

VENDOR_WORDS = re.compile(r"\s*\((?:cuBLAS|cuDNN|CPU)\b[^)]*\)")  # the CUDA/CPU baselines' notes: not what runs here


def label(torch: Any, device: str) -> str:
    return f"PyTorch {'MPS' if device == 'mps' else device.upper()} {torch.__version__}"


def device_problem(torch: Any, device: str) -> str | None:
    """Why torch cannot compute on ``device`` here, or None."""
    if device == "mps" and not torch.backends.mps.is_available():
        built = torch.backends.mps.is_built()
        return "torch sees no MPS device" + ("" if built else " (this torch is built without MPS: MPS is macOS's)")
    return None


def to_torch(x: np.ndarray, op: Any, torch: Any, device: str) -> Any:
    """A storage array as a tensor on ``device``: bf16's uint16 bits as torch.bfloat16 (an int32 index array
    beside bf16 operands stays int32)."""
    x = np.ascontiguousarray(x)
    if op.dtype.value == "bf16" and x.dtype == np.uint16:
        return torch.from_numpy(x.view(np.int16)).view(torch.bfloat16).to(device)
    return torch.from_numpy(x).to(device)


def baseline(op: Any, inputs: dict[str, np.ndarray], device: str = "mps") -> GpuBaseline:
    """PyTorch's call for ``op`` on ``device`` over copies of ``inputs`` (or why there is none)."""
    if importlib.util.find_spec("torch") is None:
        return GpuBaseline("PyTorch MPS", None, "torch is not installed (pip install torch)")
    import torch

    name = label(torch, device)
    why = device_problem(torch, device)
    make = device_call(op.kind)
    if why is None and make is None:
        why = f"PyTorch has no call for {op.kind} here"
    if why is not None:
        return GpuBaseline(name, None, why)
    t = {k: to_torch(v, op, torch, device) for k, v in inputs.items()}
    call, run, *also = make(op, t, torch)  # type: ignore[misc]
    return GpuBaseline(f"{name} {VENDOR_WORDS.sub('', call)}", run,
                       also=tuple((f"{name} {VENDOR_WORDS.sub('', n)}", r) for n, r in (also[0] if also else ())))


def torch_rel_err(run: Callable[[], Any], ref: np.ndarray) -> float:
    """The relative error of ``run()``'s tensor against ``ref``, widened on the CPU (MPS has no float64)."""
    y = run().detach().to("cpu")
    y = y.float() if y.is_floating_point() else y
    return relative_error(y.double().numpy(), ref)


def time_mps(run: Callable[[], Any], warmup: int, repeats: int, flush: bool = True) -> Timing:
    """Median, p95 and fastest of ``repeats`` calls of ``run`` between MPS events, each after a cache flush."""
    import torch

    buf = torch.empty(FLUSH_BYTES, dtype=torch.uint8, device="mps") if flush else None
    for _ in range(warmup):
        run()
    pairs = []
    for _ in range(repeats):
        if buf is not None:
            buf.zero_()
        s, e = torch.mps.Event(enable_timing=True), torch.mps.Event(enable_timing=True)
        s.record()
        run()
        e.record()
        pairs.append((s, e))
    torch.mps.synchronize()
    ms = sorted(s.elapsed_time(e) for s, e in pairs)
    return Timing(statistics.median(ms), _p95(ms), ms[0], len(ms))


def time_host(run: Callable[[], Any], warmup: int, repeats: int, flush: bool = True) -> Timing:
    """The same figures from the host's clock around each call (the CPU device's, where torch's calls are
    synchronous)."""
    for _ in range(warmup):
        run()
    ms = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        run()
        ms.append((time.perf_counter() - t0) * 1e3)
    ms.sort()
    return Timing(statistics.median(ms), _p95(ms), ms[0], len(ms))


def timer_for(device: str) -> Callable[..., Timing]:
    return time_mps if device == "mps" else time_host


def verify(kernel: Any, op: Any, inputs: dict[str, np.ndarray], ref: np.ndarray,
           tol: float) -> tuple[float, dict[str, Any] | None]:
    """(relative error, None) when ``kernel`` writes every element of a poisoned output within ``tol`` of
    ``ref`` (and what it writes beside it is right: ``op.side_problem``); else (error, the failed result's
    fields: ``runtime_failed`` or ``wrong_result``)."""
    out = np.empty(op.output_shape(), op.output_dtype.storage)
    out.fill(poison(out.dtype))
    try:
        kernel(inputs, out)
    except Exception as exc:  # noqa: BLE001 - a launch or memory error is a recorded result
        return float("inf"), {"status": "runtime_failed", "error": f"{type(exc).__name__}: {exc}"}
    err = relative_error(to_float64(out, op.output_dtype), ref)
    if not err <= tol:  # NaN and inf fail too
        return err, {"status": "wrong_result", "rel_err": err, "error": f"relative error {err:.3g} exceeds {tol:.1g}"}
    side = op.side_problem(inputs)
    if side is not None:
        return err, {"status": "wrong_result", "rel_err": err, "error": side}
    return err, None


def bench(kernel: Any, op: Any, inputs: dict[str, np.ndarray], ref: np.ndarray, tol: float, warmup: int,
          repeats: int, device: str = "mps") -> dict[str, Any]:
    """The backend's ``bench_on_device``: verify, then time Tracea's kernel and PyTorch's call (and any second
    call beside it) on ``device``; BenchResult fields, as emitters/device_baselines.py's."""
    err, failed = verify(kernel, op, inputs, ref, tol)
    if failed is not None:
        return failed
    base = baseline(op, inputs, device)
    fields: dict[str, Any] = {"status": "ok", "rel_err": err, "baseline_name": base.name,
                              "baseline_reason": base.reason}
    warmup, repeats = max(warmup, 1), max(repeats, 10)
    timer = timer_for(device)
    fields["tracea"] = kernel.time(inputs, warmup=warmup, repeats=repeats)
    if base.run is not None:
        try:
            fields["baseline_rel_err"] = torch_rel_err(base.run, ref)
        except TORCH_REFUSALS as exc:
            fields["baseline_reason"] = f"{base.name} refuses this case: {_first_line(exc)}"
        else:
            fields["baseline"] = timer(base.run, warmup, repeats)
    for name, run in base.also:
        try:
            also_err = torch_rel_err(run, ref)
        except TORCH_REFUSALS as exc:
            fields["baseline_name"] += f"; also tried: {name}: refuses this case ({_first_line(exc)})"
            continue
        t = timer(run, warmup, repeats)
        fields["baseline_name"] += (f"; also timed: {name}: p50 {t.p50_ms:.3f} ms, p95 {t.p95_ms:.3f} ms, "
                                    f"{t.p50_ms / fields['tracea'].p50_ms:.2f}x Tracea's time, rel err {also_err:.1e}")
    return fields


def vendor(op: Any, inputs: dict[str, np.ndarray], ref: np.ndarray, warmup: int, repeats: int, kernel: Any = None,
           device: str = "mps") -> dict[str, Any]:
    """The backend's ``vendor_on_device``: PyTorch's call verified against ``ref`` and timed ({name, p50_ms,
    p95_ms, rel_err}, or {name, reason}); with ``kernel``, the two timed in three alternating rounds and the
    least disturbed round of each kept (Tracea's as ``tracea_p50_ms`` / ``tracea_p95_ms``)."""
    b = baseline(op, inputs, device)
    if b.run is None:
        return {"name": b.name, "reason": b.reason}
    try:
        err = torch_rel_err(b.run, ref)
    except TORCH_REFUSALS as exc:
        return {"name": b.name, "reason": f"refuses this case: {_first_line(exc)}"}
    warmup, repeats = max(1, int(warmup)), max(10, int(repeats))
    timer = timer_for(device)
    if kernel is None:
        t = timer(b.run, warmup, repeats)
        return {"name": b.name, "p50_ms": t.p50_ms, "p95_ms": t.p95_ms, "rel_err": err}
    rounds = [(kernel.time(inputs, warmup, repeats, flush_l2=True), timer(b.run, warmup, repeats)) for _ in range(3)]
    k = min((r[0] for r in rounds), key=lambda t: t.p50_ms)
    base = min((r[1] for r in rounds), key=lambda t: t.p50_ms)
    return {"name": b.name, "p50_ms": base.p50_ms, "p95_ms": base.p95_ms, "rel_err": err,
            "tracea_p50_ms": k.p50_ms, "tracea_p95_ms": k.p95_ms, "interleaved": True}
