"""The scaled 8-bit GEMM's baselines on the host: the fastest int8 GEMM torch offers on this CPU for the op's
function, chosen by timing each candidate a few calls; NumPy's float32 matmul of the 8-bit values where torch is
absent (no int8 GEMM in NumPy, and its name says so).

Candidates (each computes the op's output; bench verifies it against the reference before timing):
- ``torch._int_mm`` (int8 x int8 -> int32, B read as given), the scales applied after in torch;
- oneDNN's quantized linear (``torch.ops.onednn.qlinear_pointwise``, the kernel Inductor's x86 int8 path calls):
  A as unsigned bytes with zero point 128 (the same values), B prepacked once outside the timing as a user's
  weights are, B's scale per column inside, A's tensor scale inside or its row scales after, fp32 or bf16 out.

Block scales have no int8 path in torch: the baseline there is torch's fp32 matmul of operands dequantized once
outside the timing, named so. A fused epilogue (bias, activation, residual) runs after each, in fp32, as torch or
NumPy ops.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from tracea.kernels.dtypes import to_float64
from tracea.kernels.epilogue import apply as apply_epilogue

from . import NUMPY_INPLACE, Baseline, TorchOut, blas_name, f32, torch_math, torch_or_none

WARMUP, TRIES = 3, 5  # calls each candidate warms up with (oneDNN builds its kernel in its first calls), then is timed


def _torch_out(op: Any, torch: Any) -> Any:
    """C's torch dtype."""
    return {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16, "int32": torch.int32}[
        op.out_dtype.value]


def _epilogue_operands(op: Any, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The fused epilogue's bias and residual as float32 (stored in C's type)."""
    return {k: f32(inputs[k], op.out_dtype) for k in op.epilogue_shapes()}


def _seconds(run: Callable[[], Any]) -> float:
    """The fastest of ``TRIES`` calls after ``WARMUP``: the choice compares each library at its best."""
    for _ in range(WARMUP):
        run()
    best = float("inf")
    for _ in range(TRIES):
        t0 = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - t0)
    return best


def _torch_candidates(op: Any, inputs: dict[str, np.ndarray], torch: Any) -> dict[str, Callable[[], Any]]:
    a = torch.from_numpy(inputs["a"])
    b = torch.from_numpy(inputs["b"])
    b_kn = b.t() if op.layout_b == "col" else b  # k x n, column-major when B came n x k
    out_dtype = _torch_out(op, torch)
    sa = torch.from_numpy(inputs["scale_a"]) if "scale_a" in inputs else None
    sb = torch.from_numpy(inputs["scale_b"]) if "scale_b" in inputs else None

    extra = {k: torch.from_numpy(v) for k, v in _epilogue_operands(op, inputs).items()}
    math = torch_math(torch)

    def fused(y: Any) -> Any:  # the op's epilogue in fp32 on the scaled product, then C's type
        return apply_epilogue(op.epilogue, y, extra, op.alpha, math).to(out_dtype)

    def scaled(acc: Any) -> Any:
        if op.scale == "none":
            return acc
        y = acc.to(torch.float32)
        y.mul_(sa[:, None] if op.scale == "row" else sa).mul_(sb[None, :] if op.scale == "row" else sb)
        return fused(y)

    found = {"torch._int_mm": lambda: scaled(torch._int_mm(a, b_kn))}
    qlinear = getattr(getattr(torch.ops, "onednn", None), "qlinear_pointwise", None)
    if qlinear is not None and op.scale in ("tensor", "row") and op.out_dtype.value in ("fp32", "bf16"):
        try:
            w = torch.ops.onednn.qlinear_prepack(b_kn.t().contiguous(), None)
        except RuntimeError:
            return found
        au8 = (a.to(torch.int16) + 128).to(torch.uint8)
        w_scale = sb.expand(op.n).contiguous() if op.scale == "tensor" else sb
        zeros = torch.zeros(op.n, dtype=torch.int32)
        x_scale = float(sa[0]) if op.scale == "tensor" else 1.0
        row = sa[:, None] if op.scale == "row" else None

        def onednn() -> Any:
            y = qlinear(au8, x_scale, 128, w, w_scale, zeros, None, 1.0, 0, out_dtype, "none", [], "")
            y = y.mul_(row) if row is not None else y
            return fused(y.float()) if op.epilogue else y

        found["oneDNN qlinear_pointwise"] = onednn
    return found


def _block_dequantized(op: Any, inputs: dict[str, np.ndarray], torch: Any) -> Baseline:
    """block128: the float32 matmul of the operands dequantized once (torch's where it is installed, else NumPy's)."""
    a = to_float64(inputs["a"], op.dtype)
    b = to_float64(inputs["b"], op.dtype)
    b = b.T if op.layout_b == "col" else b
    sa = np.repeat(inputs["scale_a"].astype(np.float64), 128, axis=1)
    sb = np.repeat(np.repeat(inputs["scale_b"].astype(np.float64), 128, axis=0), 128, axis=1)[:, : op.n]
    da, db = (a * sa).astype(np.float32), (b * sb).astype(np.float32)
    extra = _epilogue_operands(op, inputs)
    if torch is None:
        return Baseline(f"numpy.matmul ({blas_name()}) of operands dequantized once to fp32 (no block-scaled int8 GEMM)",
                        lambda: apply_epilogue(op.epilogue, da @ db, extra, op.alpha, NUMPY_INPLACE))
    ta, tb = torch.from_numpy(da), torch.from_numpy(db)
    return Baseline(f"torch {torch.__version__} fp32 matmul of operands dequantized once (torch has no "
                    "block-scaled int8 GEMM)",
                    lambda: apply_epilogue(op.epilogue, (ta @ tb).numpy(), extra, op.alpha, NUMPY_INPLACE))


def _numpy(op: Any, inputs: dict[str, np.ndarray]) -> Baseline:
    """NumPy's float32 matmul of the 8-bit values, then the scales (tensor, row) in place."""
    a = to_float64(inputs["a"], op.dtype).astype(np.float32)
    b = to_float64(inputs["b"], op.dtype).astype(np.float32)
    b = b.T if op.layout_b == "col" else b
    out = np.empty((op.m, op.n), np.float32)
    sa, sb = inputs.get("scale_a"), inputs.get("scale_b")
    extra = _epilogue_operands(op, inputs)

    def run() -> np.ndarray:
        y = np.matmul(a, b, out=out)
        if op.scale == "row":
            y *= sa[:, None]
            y *= sb[None, :]
        elif op.scale == "tensor":
            y *= sa[0] * sb[0]
        return apply_epilogue(op.epilogue, y, extra, op.alpha, NUMPY_INPLACE)

    return Baseline(f"numpy.matmul ({blas_name()}, the 8-bit values widened to fp32: no int8 GEMM without torch)",
                    run)


def host(op: Any, inputs: dict[str, np.ndarray]) -> Baseline:
    torch = torch_or_none()
    if op.scale == "block128":
        return _block_dequantized(op, inputs, torch)
    if torch is None:
        return _numpy(op, inputs)
    found = _torch_candidates(op, inputs, torch)
    timed = {name: _seconds(run) for name, run in found.items()}
    best = min(timed, key=timed.__getitem__)
    others = ", ".join(f"{n} {1e3 * s:.2f} ms" for n, s in timed.items() if n != best)
    run = found[best]
    return Baseline(f"torch {torch.__version__} {best} (CPU; the fastest of the int8 GEMMs tried"
                    + (f"; {others}" if others else "") + ")", lambda: TorchOut(run()))


def device(op: Any, t: dict[str, Any], torch: Any) -> tuple[Any, ...]:
    """On a GPU: ``torch._int_mm`` (int8) with the scales after, or ``torch._scaled_mm`` (FP8, tensor and row scales:
    cuBLASLt, its default accumulation, with its ``use_fast_accum`` form timed beside it as a reference), B
    column-major as both take it. Block scales: torch's block-scaled
    ``_scaled_mm`` (cuBLASLt's 1x128 / 128x128 mode, CUDA 12.9+) where this torch has it and it agrees with the
    operands dequantized, else the float32 matmul of operands dequantized once (named so); either way, bf16 cuBLAS and
    per-tensor FP8 on the same shape are timed beside it as speed references. A fused epilogue runs after the
    library's call, in torch, fp32 (its own references beside stay the plain product)."""
    if op.fp8_out:
        return _fp8_out_calls(op, t, torch)
    found = _device_calls(op, t, torch)
    if not op.epilogue:
        return found
    extra = _operands_on_device(op, t, torch)
    math = torch_math(torch)
    out_dtype = _torch_out(op, torch)

    def fused(run: Callable[[], Any]) -> Callable[[], Any]:  # the chain after the library's call, in fp32 (unfused)
        return lambda: apply_epilogue(op.epilogue, run().float(), extra, op.alpha, math).to(out_dtype)

    return (f"{found[0]}, then the epilogue in torch", fused(found[1]), *found[2:])


TORCH_FP8 = {"fp8e4m3": "float8_e4m3fn", "fp8e5m2": "float8_e5m2"}


def _operands(op: Any, t: dict[str, Any], torch: Any) -> tuple[Any, Any]:
    """A and B as ``_scaled_mm``/``_int_mm`` take them: FP8 bytes viewed as torch's float8, B k x n column-major."""
    fp8 = TORCH_FP8.get(op.dtype.value)
    a = t["a"].view(getattr(torch, fp8)) if fp8 else t["a"]
    b = t["b"].view(getattr(torch, fp8)) if fp8 else t["b"]
    return a, b.t() if op.layout_b == "col" else b.t().contiguous().t()


def _fp8_scales(op: Any, t: dict[str, Any]) -> tuple[Any, Any]:
    """Tensor or row scales in ``_scaled_mm``'s shapes: () each, or (m, 1) and (1, n)."""
    row = op.scale == "row"
    return (t["scale_a"].reshape(-1, 1) if row else t["scale_a"].reshape(()),
            t["scale_b"].reshape(1, -1) if row else t["scale_b"].reshape(()))


def _device_calls(op: Any, t: dict[str, Any], torch: Any) -> tuple[Any, ...]:
    a, b_cm = _operands(op, t, torch)
    out_dtype = _torch_out(op, torch)
    if op.scale == "block128":
        return _block_scaled(op, a, b_cm, t, torch, out_dtype)
    row = op.scale == "row"
    if op.dtype.value in TORCH_FP8:
        sa, sb = _fp8_scales(op, t)
        fast = (("_scaled_mm use_fast_accum=True (cuBLASLt's faster, less exact accumulation: a reference, not the "
                 "baseline)", lambda: torch._scaled_mm(a, b_cm, scale_a=sa, scale_b=sb, out_dtype=out_dtype,
                                                       use_fast_accum=True)),)
        return ("_scaled_mm (cuBLASLt, its default accumulation)",
                lambda: torch._scaled_mm(a, b_cm, scale_a=sa, scale_b=sb, out_dtype=out_dtype), fast)
    if op.scale == "none":
        return "_int_mm", lambda: torch._int_mm(a, b_cm)
    sa = t["scale_a"][:, None] if row else t["scale_a"]
    sb = t["scale_b"][None, :] if row else t["scale_b"]
    return "_int_mm, scaled after", lambda: (torch._int_mm(a, b_cm).float() * sa * sb).to(out_dtype)


def _operands_on_device(op: Any, t: dict[str, Any], torch: Any) -> dict[str, Any]:
    """The epilogue's bias and residual as fp32 tensors (bf16 ones arrive as their 16-bit patterns)."""
    bf16 = op.operand_dtype.value == "bf16"
    return {k: (t[k].view(torch.bfloat16) if bf16 and t[k].dtype != torch.bfloat16 else t[k]).float()
            for k in ("bias", "residual") if k in t}


def _fp8_out_calls(op: Any, t: dict[str, Any], torch: Any) -> tuple[Any, ...]:
    """An FP8 C: ``_scaled_mm`` into the FP8 out_dtype with ``scale_out`` folded into A's scales (``scale_result``,
    cuBLASLt's D scale, is dropped by torch 2.10 and 2.11: its output came back unscaled, 0.94 off the reference on
    an H200; torch returns no amax either) where no epilogue is fused; beside it (or as the baseline), what a user
    writes for the whole function: the product in fp32 (``_scaled_mm``, or the block-scaled path), the epilogue,
    the amax (``torch.amax``), then the quantization (clamped to the finite range, as the kernel saturates)."""
    fp8 = getattr(torch, TORCH_FP8[op.out_dtype.value])
    wide = _device_calls(dataclasses.replace(op, out_dtype="fp32", epilogue=(), alpha=1.0), t, torch)
    so, top = t["scale_out"].reshape(()), op.out_dtype.max_finite
    extra = _operands_on_device(op, t, torch)
    math = torch_math(torch)

    def unfused() -> Any:
        y = apply_epilogue(op.epilogue, wide[1](), extra, op.alpha, math) if op.epilogue else wide[1]()
        t["amax"].copy_(y.abs().amax().reshape(1))
        return (y * so).clamp(-top, top).to(fp8)

    named = f"{wide[0]} into fp32, {'the epilogue, ' if op.epilogue else ''}torch.amax, quantized (clamped, .to)"
    if op.epilogue or op.scale == "block128":
        return named, unfused
    a, b_cm = _operands(op, t, torch)
    sa, sb = _fp8_scales(op, t)
    sa_so = (sa * so).contiguous()  # (once, outside the timing: a caller's scales are ready)
    return ("_scaled_mm into FP8 with scale_out folded into scale_a (no amax; torch 2.10-2.11 ignore scale_result "
            "there, pytorch#190449)",
            lambda: torch._scaled_mm(a, b_cm, scale_a=sa_so, scale_b=sb, out_dtype=fp8), ((named, unfused),))


def _block_scaled(op: Any, a: Any, b_cm: Any, t: dict[str, Any], torch: Any, out_dtype: Any) -> tuple[Any, ...]:
    sa_full = t["scale_a"].repeat_interleave(128, 1)
    sb_full = t["scale_b"].repeat_interleave(128, 0).repeat_interleave(128, 1)[:, : op.n]
    da, db = a.float() * sa_full, b_cm.float() * sb_full
    want = da @ db
    d16a, d16b = da.to(torch.bfloat16), db.to(torch.bfloat16)
    one = torch.ones((), device=a.device)
    also = (("bf16 matmul (cuBLAS) of the operands dequantized, same shape (a speed reference)", lambda: d16a @ d16b),
            ("_scaled_mm per-tensor FP8 (cuBLASLt) of the same bytes, scales 1 (a speed reference: another function)",
             lambda: torch._scaled_mm(a, b_cm, scale_a=one, scale_b=one, out_dtype=out_dtype)))
    found = _torch_blockwise(op, a, b_cm, t, torch, out_dtype, want)
    if found is not None:
        return found + (also,)
    return ("float32 matmul of operands dequantized once (this torch has no block-scaled FP8 GEMM that agreed)",
            lambda: (da @ db).to(out_dtype), also)


def _torch_blockwise(op: Any, a: Any, b_cm: Any, t: dict[str, Any], torch: Any, out_dtype: Any,
                     want: Any) -> tuple[str, Callable[[], Any]] | None:
    """torch's block-scaled ``_scaled_mm`` (A's 1x128 scales (m, k/128) outer-dim-major; B's 128x128 ones K-major, the
    k blocks padded to a multiple of 4 as cuBLASLt documents, or unpadded), the first form that runs and agrees with
    the dequantized product within 2 % (a wrong layout reads the wrong scales); None where none does."""
    kb = op.k // 128
    sa = t["scale_a"].t().contiguous().t()
    sb = t["scale_b"]
    l4 = -(-kb // 4) * 4
    padded = torch.zeros((sb.shape[1], l4), dtype=torch.float32, device=sb.device)
    padded[:, :kb] = sb.t()
    forms = (("K blocks padded to 4", padded.t()), ("K blocks padded to 4 in the stride only", padded.t()[:kb]),
             ("unpadded", sb.t().contiguous().t()))
    for label, sb_form in forms:
        try:
            y = torch._scaled_mm(a, b_cm, scale_a=sa, scale_b=sb_form, out_dtype=out_dtype)
        except (RuntimeError, ValueError, TypeError, IndexError):
            continue
        if float((y.float() - want).norm() / want.norm().clamp_min(1e-30)) < 2e-2:
            return (f"_scaled_mm block-scaled 1x128 x 128x128 (cuBLASLt; B's scales {label})",
                    lambda sb_form=sb_form: torch._scaled_mm(a, b_cm, scale_a=sa, scale_b=sb_form, out_dtype=out_dtype))
    return None
