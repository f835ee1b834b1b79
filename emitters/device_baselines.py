"""The vendor baselines of every on-device backend (``ON_DEVICE``: CUDA, and HIP through PyTorch for ROCm,
whose ``torch.cuda`` is the same API): PyTorch's own kernels (cuBLAS/hipBLAS, cuDNN/MIOpen, torch.softmax,
SDPA) in the same process and on the same device, timed like Tracea's kernels (device events around each
call, L2 flushed before each, warm-up, median and p95). fp32 baselines run with TF32 off, so both sides do
fp32 arithmetic. Without torch the bench still verifies and times Tracea's kernel and says why there is no
baseline. A backend reaches these through its protocol members ``bench_on_device`` and ``vendor_on_device``
(emitters/backend.py); nothing outside the backends imports this module for them.
"""

from __future__ import annotations

import importlib.util
import statistics
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from tracea.kernels import relative_error
from tracea.kernels.dtypes import poison, to_float64

from .baselines import device_call
from .timing import HOLD_CYCLES, Timing, _p95


@dataclass(frozen=True)
class GpuBaseline:
    name: str
    run: Callable[[], Any] | None  # returns a torch tensor on the device; None: unavailable
    reason: str | None = None
    also: tuple[tuple[str, Callable[[], Any]], ...] = ()  # (name, call): timed in the same run, reported beside


def torch_baseline(op: Any, inputs: dict[str, np.ndarray]) -> GpuBaseline:
    if importlib.util.find_spec("torch") is None:
        return GpuBaseline("torch (cuBLAS/cuDNN)", None, "torch is not installed (pip install 'tracea[torch]')")
    import torch

    if not torch.cuda.is_available():
        return GpuBaseline("torch (cuBLAS/cuDNN)", None, "torch sees no CUDA device")
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cudnn.benchmark = True

    def dev(x: np.ndarray):
        if op.dtype.value == "bf16" and x.dtype == np.uint16:  # (an int32 input, a block table, stays int32)
            return torch.from_numpy(x.view(np.int16)).view(torch.bfloat16).cuda()
        return torch.from_numpy(np.ascontiguousarray(x)).cuda()

    t = {k: dev(v) for k, v in inputs.items()}
    make = device_call(op.kind)
    if make is None:
        return GpuBaseline("torch", None, f"no torch baseline for {op.kind}")
    name, run, *also = make(op, t, torch)
    label = f"torch {torch.__version__} "
    return GpuBaseline(label + name, run, also=tuple((label + n, r) for n, r in (also[0] if also else ())))


def time_torch(run: Callable[[], Any], warmup: int, repeats: int, flush_l2: bool = True,
               hold_cycles: int = HOLD_CYCLES, flush: Callable[[], Any] | None = None) -> Timing:
    """Median and p95 of ``repeats`` calls of ``run`` between CUDA events, each after the L2 is emptied (``flush``,
    default a memset over twice the L2 where ``flush_l2``) and the stream held busy for ``hold_cycles``."""
    import torch

    if flush is None and flush_l2:
        buf = torch.empty(2 * max(torch.cuda.get_device_properties(0).L2_cache_size, 1 << 26), dtype=torch.uint8,
                          device="cuda")
        flush = buf.zero_
    for _ in range(warmup):
        run()
    pairs = []
    for _ in range(repeats):
        if flush is not None:
            flush()
        if hold_cycles:
            torch.cuda._sleep(hold_cycles)
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        run()
        e.record()
        pairs.append((s, e))
    torch.cuda.synchronize()
    ms = sorted(s.elapsed_time(e) for s, e in pairs)
    return Timing(statistics.median(ms), _p95(ms), ms[0], len(ms))


def bench_on_device(kernel: Any, op: Any, inputs: dict[str, np.ndarray], ref: np.ndarray, tol: float,
                    warmup: int, repeats: int) -> dict[str, Any]:
    """Verify ``kernel`` on ``inputs`` (in this process: a CUDA context does not survive a fork), then time
    it and the torch baseline on the device. Returns BenchResult fields."""
    out = np.empty(op.output_shape(), op.output_dtype.storage)
    out.fill(poison(out.dtype))  # every element must be written
    try:
        kernel(inputs, out)
    except Exception as exc:  # noqa: BLE001 - a launch or memory error is a recorded result
        return {"status": "runtime_failed", "error": f"{type(exc).__name__}: {exc}"}
    err = relative_error(to_float64(out, op.output_dtype), ref)
    if not err <= tol:
        return {"status": "wrong_result", "rel_err": err, "error": f"relative error {err:.3g} exceeds {tol:.1g}"}
    if (side := op.side_problem(inputs)) is not None:  # what the kernel writes beside C (an FP8 C's amax)
        return {"status": "wrong_result", "rel_err": err, "error": side}
    base = torch_baseline(op, inputs)
    fields: dict[str, Any] = {"status": "ok", "rel_err": err, "baseline_name": base.name,
                              "baseline_reason": base.reason}
    repeats = max(repeats, 10)
    fields["tracea"] = kernel.time(inputs, warmup=max(warmup, 1), repeats=repeats)
    if base.run is not None:
        try:
            fields["baseline_rel_err"] = _torch_rel_err(base.run, ref)
        except TORCH_REFUSALS as exc:  # a case the library does not take (torch._scaled_mm's N % 16, ...): no ratio
            fields["baseline_reason"] = f"{base.name} refuses this case: {_first_line(exc)}"
        else:
            fields["baseline"] = time_torch(base.run, max(warmup, 1), repeats)
    for name, run in base.also:  # a second baseline: its figure joins the baseline's name (report and JSON)
        try:
            err = _torch_rel_err(run, ref)
        except TORCH_REFUSALS as exc:
            fields["baseline_name"] += f"; also tried: {name}: refuses this case ({_first_line(exc)})"
            continue
        t = time_torch(run, max(warmup, 1), repeats)
        fields["baseline_name"] += (f"; also timed: {name}: p50 {t.p50_ms:.3f} ms, p95 {t.p95_ms:.3f} ms, "
                                    f"{t.p50_ms / fields['tracea'].p50_ms:.2f}x Tracea's time, rel err {err:.1e}")
    return fields


TORCH_REFUSALS = (RuntimeError, ValueError, TypeError)  # how torch says a call does not take a case


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0][:160]


def _torch_rel_err(run: Callable[[], Any], ref: np.ndarray) -> float:
    y = run()
    y = y.float() if str(y.dtype) == "torch.bfloat16" or "float8" in str(y.dtype) else y
    return relative_error(y.double().cpu().numpy(), ref)


def vendor_on_device(op: Any, inputs: dict[str, np.ndarray], ref: np.ndarray, warmup: int, repeats: int,
                     kernel: Any = None) -> dict[str, Any]:
    """The vendor library on the device for the tuner's worker: torch's call for ``op`` verified against
    ``ref``, then timed with device events and the L2 flushed, as ``tracea bench`` times it ({name, p50_ms,
    p95_ms, rel_err}, or {name, reason} where torch has none). With ``kernel``, the two are timed in three
    alternating rounds (so a change of clocks hits both) and the least disturbed round of each is kept, with
    Tracea's as ``tracea_p50_ms`` / ``tracea_p95_ms``."""
    b = torch_baseline(op, inputs)
    if b.run is None:
        return {"name": b.name, "reason": b.reason}
    try:
        err = _torch_rel_err(b.run, ref)
    except TORCH_REFUSALS as exc:
        return {"name": b.name, "reason": f"refuses this case: {_first_line(exc)}"}
    warmup, repeats = max(1, int(warmup)), max(10, int(repeats))
    if kernel is None:
        t = time_torch(b.run, warmup, repeats)
        return {"name": b.name, "p50_ms": t.p50_ms, "p95_ms": t.p95_ms, "rel_err": err}
    rounds = [(kernel.time(inputs, warmup, repeats, flush_l2=True), time_torch(b.run, warmup, repeats))
              for _ in range(3)]
    k = min((r[0] for r in rounds), key=lambda t: t.p50_ms)
    base = min((r[1] for r in rounds), key=lambda t: t.p50_ms)
    return {"name": b.name, "p50_ms": base.p50_ms, "p95_ms": base.p95_ms, "rel_err": err,
            "tracea_p50_ms": k.p50_ms, "tracea_p95_ms": k.p95_ms, "interleaved": True}
