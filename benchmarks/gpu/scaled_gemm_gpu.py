"""The Hopper 8-bit GEMM with scales (issue 35: emitters/cuda/hopper/scaled_gemm.py) on an sm_90 GPU.

    python benchmarks/gpu/scaled_gemm_gpu.py --part check [--small] [--cases fp8-out]  # every mode verified
    python benchmarks/gpu/scaled_gemm_gpu.py --part rows --rows fp8|fp8-tensor|fp8-out|int8|block|edge [--sweep]

``check`` builds each (op, schedule) of ``CASES`` (FP8 e4m3/e5m2 and int8; tensor, row, block128 and no scales; bf16,
fp16, fp32 and int32 out; tile, split-K, cluster, ping-pong and swapped schedules; M, N, K off the tiles) and checks
its output against the float64 reference on two fresh random inputs (``--small``: the few small ones, for
compute-sanitizer); ``--ahead 0`` renders the FP8 tiles without the overlap of a tile's stores with the next
tile's first steps (a probe beside the kernel's own). ``rows`` runs ``bench`` (verified on fresh random inputs, then timed beside the vendor with CUDA
events, L2 flushed before each call) over the llm-gemm shapes: ``fp8`` (e4m3, row scales, bf16 out) and ``fp8-tensor``
against ``torch._scaled_mm`` (cuBLASLt, its default accumulation), ``int8`` (int32 out) against ``torch._int_mm``,
``block`` (1x128 / 128x128 scales) against torch's block-scaled ``_scaled_mm`` where it has one (the baseline times
bf16 cuBLAS and per-tensor FP8 on the same shape beside it), ``edge`` shapes outside the suites; ``--sweep`` adds
other schedules for each row.
"""

from __future__ import annotations

import argparse
import dataclasses
import time

import numpy as np

from tracea.doctor import probe
from tracea.doctor.errors import BadInputError, UnsupportedError
from tracea.emitters import cuda
from tracea.emitters.bench import bench
from tracea.emitters.cuda import mma, schedule_from_json
from tracea.emitters.cuda.gemv_tma import GemvTmaSchedule as G
from tracea.emitters.cuda.hopper import scaled_gemm as sg
from tracea.emitters.cuda.hopper.schedule import WgmmaSchedule as W
from tracea.kernels import ScaledGemm, relative_error, tolerance
from tracea.kernels.dtypes import to_float64
from tracea.kernels.ops.gemm import PROJECTIONS, TOKENS

VARIANT = "cuda-wgmma.scaled_gemm"
TILE = W(bm=128, bn=128, stages=6, consumers=2, store="tma")
NARROW = W(bm=64, bn=128, stages=8, consumers=1)
SWAP = W(bm=64, bn=16, stages=8, consumers=1, swap=True)
WIDE = W(bm=128, bn=256, stages=4, consumers=2, store="tma")


def _cases() -> list[tuple[ScaledGemm, W, bool]]:
    """(op, schedule, small): every scale mode, output type and schedule form the kernel renders."""
    c: list[tuple[ScaledGemm, W, bool]] = []
    for dt in ("fp8e4m3", "fp8e5m2"):
        c += [(ScaledGemm(256, 384, 512, dt, "bf16", "tensor"), TILE, True),
              (ScaledGemm(200, 136, 1040, dt, "fp16", "row"), TILE, True),
              (ScaledGemm(131, 250, 768, dt, "fp32", "row"), dataclasses.replace(TILE, store="direct"), True),
              (ScaledGemm(384, 256, 1024, dt, "bf16", "block128"), TILE, True)]
    c += [(ScaledGemm(300, 520, 2048, "fp8e4m3", "bf16", "row"), dataclasses.replace(TILE, split=2), True),
          (ScaledGemm(128, 256, 4096, "fp8e4m3", "fp32", "block128"), dataclasses.replace(NARROW, split=4), True),
          (ScaledGemm(256, 512, 1024, "fp8e4m3", "bf16", "row"), dataclasses.replace(TILE, cluster=2), False),
          (ScaledGemm(256, 512, 1024, "fp8e4m3", "fp16", "tensor"), W(bm=64, bn=128, stages=6, consumers=2,
                                                                     pingpong=True, store="tma"), False),
          (ScaledGemm(512, 1000, 2048, "fp8e4m3", "bf16", "block128"), W(bm=128, bn=64, stages=8, consumers=2), False),
          (ScaledGemm(256, 384, 4096, "fp8e4m3", "fp32", "row"), dataclasses.replace(TILE, store="direct"), False),
          (ScaledGemm(200, 264, 1040, "fp8e5m2", "bf16", "tensor"), dataclasses.replace(TILE, cluster=2), True),
          (ScaledGemm(1, 520, 1024, "fp8e4m3", "bf16", "row"), SWAP, True),
          (ScaledGemm(5, 4096, 4096, "fp8e4m3", "bf16", "tensor"), dataclasses.replace(SWAP, bn=8, split=0), True),
          (ScaledGemm(40, 1000, 2048, "fp8e5m2", "fp32", "row"), dataclasses.replace(SWAP, bn=40, split=3), False),
          (ScaledGemm(16, 4096, 1024, "fp8e4m3", "bf16", "block128"), dataclasses.replace(NARROW, split=0), True),
          (ScaledGemm(256, 384, 512, "int8", "int32", "none"), W(bm=128, bn=256, stages=4, consumers=2), True),
          (ScaledGemm(129, 200, 1040, "int8", "int32", "none"), W(bm=128, bn=128, stages=6, consumers=2), True),
          (ScaledGemm(16, 1000, 4096, "int8", "int32", "none"), dataclasses.replace(SWAP, bn=16), True),
          (ScaledGemm(24, 300, 512, "int8", "int32", "none"), dataclasses.replace(SWAP, bn=24), False),
          (ScaledGemm(260, 512, 768, "int8", "bf16", "row"), dataclasses.replace(TILE, bn=256, stages=4), True),
          (ScaledGemm(100, 96, 1024, "int8", "fp32", "row"), W(bm=64, bn=64, stages=8, consumers=1), True),
          (ScaledGemm(64, 512, 512, "int8", "fp16", "tensor"), dataclasses.replace(TILE, cluster=2), False),
          (ScaledGemm(3, 700, 2048, "int8", "fp32", "tensor"), dataclasses.replace(SWAP, bn=8), True)]
    # wide FP8 tiles: 128 x 192 folded whole, 128 x 256 folded in two column parts (block128: one scale block each)
    c += [(ScaledGemm(300, 520, 1024, "fp8e4m3", "bf16", "row"), WIDE, True),
          (ScaledGemm(260, 600, 1040, "fp8e5m2", "fp16", "tensor"), dataclasses.replace(WIDE, bn=192), True),
          (ScaledGemm(384, 520, 1024, "fp8e4m3", "bf16", "block128"), WIDE, True),
          (ScaledGemm(256, 1000, 2048, "fp8e4m3", "bf16", "row"), W(bm=64, bn=256, stages=4, consumers=2,
                                                                 pingpong=True, store="tma"), False),
          (ScaledGemm(300, 520, 2048, "fp8e4m3", "fp32", "row"), dataclasses.replace(WIDE, split=2, store="direct"),
           False),
          (ScaledGemm(512, 768, 1024, "fp8e4m3", "bf16", "tensor"), dataclasses.replace(WIDE, cluster=2), False)]
    # more tiles than blocks: each block stores a tile while the next one's first steps run (promotion._overlapped);
    # odd and even k-step counts, one k step, edges, direct stores; the swapped decode form unsplit (N = 11008's
    # heroes take the overlap with 172 tiles)
    c += [(ScaledGemm(2000, 2100, 1152, "fp8e4m3", "bf16", "row"), TILE, True),
          (ScaledGemm(1536, 2048, 128, "fp8e4m3", "fp16", "tensor"), TILE, True),
          (ScaledGemm(1100, 2500, 1024, "fp8e5m2", "fp32", "row"), dataclasses.replace(TILE, store="direct"), False),
          (ScaledGemm(4096, 4096, 256, "fp8e4m3", "bf16", "row"), TILE, False),
          (ScaledGemm(3, 11008, 1024, "fp8e4m3", "bf16", "row"), SWAP, True),
          # 64 x 64 on one consumer (the few-row hero): more tiles than blocks, odd k steps, edges
          (ScaledGemm(200, 4000, 768, "fp8e4m3", "bf16", "row"), W(bm=64, bn=64, stages=12, consumers=1, store="tma",
                                                                 l2_hint="first"), True),
          (ScaledGemm(130, 4100, 1152, "fp8e5m2", "fp16", "tensor"), W(bm=64, bn=64, stages=12, consumers=1,
                                                                      store="tma"), False)]
    return c + _epilogue_cases() + _gemv_cases()


def _gemv_cases() -> list[tuple[ScaledGemm, G, bool]]:
    """FP8 decode on the TMA-fed gemv (``emitters/cuda/gemv_tma.py``, m16n8k32): one and two 8-row groups, N and K
    off the boxes, long K in fp32, splits in a cluster and through the workspace, e5m2,
    the epilogue."""
    return [(ScaledGemm(1, 4096, 4096, "fp8e4m3", "bf16", "tensor"), G(boxes=2, splits=2), True),
            (ScaledGemm(5, 520, 1040, "fp8e4m3", "fp32", "row"), G(), True),
            (ScaledGemm(16, 1000, 14336, "fp8e4m3", "fp32", "row"), G(splits=4), True),
            (ScaledGemm(16, 700, 2048, "fp8e5m2", "fp16", "tensor"), G(boxes=4, stages=3), True),
            (ScaledGemm(9, 4096, 11008, "fp8e4m3", "bf16", "row"), G(splits=11), False),
            (ScaledGemm(12, 11008, 4096, "fp8e4m3", "bf16", "row", epilogue="bias,gelu,residual"), G(), False),
            (ScaledGemm(16, 4096, 14336, "fp8e4m3", "fp32", "tensor"), G(boxes=2, splits=2), False),
            (ScaledGemm(3, 136, 4096, "fp8e4m3", "fp32", "tensor", epilogue="bias,relu,scale", alpha=0.5),
             G(warps=8, boxes=4, splits=3), True)]


def _epilogue_cases() -> list[tuple[ScaledGemm, W, bool]]:
    """The fused chain after the scales, in every store form (TMA staging, direct fp32, swapped, split-K
    per element, int8's per-element scales, the overlapped walk over more tiles than blocks)."""
    return [
        (ScaledGemm(256, 384, 512, "fp8e4m3", "bf16", "row", epilogue="bias,gelu,residual"), TILE, True),
        (ScaledGemm(131, 250, 768, "fp8e4m3", "fp32", "row", epilogue="bias,relu,scale", alpha=0.5),
         dataclasses.replace(TILE, store="direct"), True),
        (ScaledGemm(1, 520, 1024, "fp8e4m3", "bf16", "row", epilogue="bias"), SWAP, True),
        (ScaledGemm(16, 1000, 4096, "fp8e4m3", "fp32", "tensor", epilogue="residual,relu"),
         dataclasses.replace(SWAP, split=0), True),
        (ScaledGemm(260, 512, 768, "int8", "bf16", "row", epilogue="bias,gelu"),
         dataclasses.replace(TILE, bn=256, stages=4), True),
        (ScaledGemm(2000, 2100, 1152, "fp8e4m3", "fp16", "row", epilogue="bias,scale,residual", alpha=-1.5),
         TILE, False),
        (ScaledGemm(300, 520, 2048, "fp8e4m3", "bf16", "row", epilogue="bias"), dataclasses.replace(TILE, split=2),
         True),
    ]


def _fp8_out_cases() -> list[tuple[ScaledGemm, W | G, bool]]:
    """FP8 C with its amax (hopper/fp8_out.py) in every store form: tiles, a 2-block cluster, split-K (row scales
    per element), the overlapped walk over more tiles than blocks, block scales, swapped decode tiles split,
    an odd N (byte stores), e5m2 and e4m3 in and out, a fused chain (bf16 operands)."""
    d = dataclasses.replace(TILE, store="direct")
    return [
        (ScaledGemm(256, 384, 512, "fp8e4m3", "fp8e4m3", "tensor"), d, True),
        (ScaledGemm(131, 250, 768, "fp8e4m3", "fp8e5m2", "row", epilogue="bias,relu"), d, True),
        (ScaledGemm(5, 4096, 4096, "fp8e4m3", "fp8e4m3", "tensor"), dataclasses.replace(SWAP, bn=8, split=0), True),
        (ScaledGemm(40, 1000, 2048, "fp8e5m2", "fp8e4m3", "row", epilogue="residual"),
         dataclasses.replace(SWAP, bn=40, split=3, store="direct"), True),
        (ScaledGemm(384, 256, 1024, "fp8e4m3", "fp8e4m3", "block128"), d, True),
        (ScaledGemm(300, 520, 2048, "fp8e4m3", "fp8e4m3", "row"), dataclasses.replace(d, split=2), True),
        (ScaledGemm(129, 333, 512, "fp8e4m3", "fp8e4m3", "row"), d, True),
        (ScaledGemm(200, 264, 1040, "fp8e4m3", "fp8e4m3", "tensor"), dataclasses.replace(d, cluster=2), False),
        (ScaledGemm(2000, 2100, 1152, "fp8e5m2", "fp8e4m3", "row", epilogue="bias,gelu,residual"), d, False),
        (ScaledGemm(4096, 4096, 4096, "fp8e4m3", "fp8e4m3", "tensor"), sg.hero_schedule(
            ScaledGemm(4096, 4096, 4096, "fp8e4m3", "fp8e4m3", "tensor")), False),
        # staged for the TMA store (fp8_out.ByteStores.tma): tiles, split-K, a cluster, 128 x 256 block-scaled, a
        # chain; N = 2100 and 520 make no map (rows not 16-byte multiples): the direct stores behind the same kernel
        (ScaledGemm(256, 384, 512, "fp8e4m3", "fp8e4m3", "tensor"), TILE, True),
        (ScaledGemm(300, 1024, 2048, "fp8e4m3", "fp8e5m2", "row"), dataclasses.replace(TILE, split=2), True),
        (ScaledGemm(256, 512, 1024, "fp8e5m2", "fp8e4m3", "tensor", epilogue="bias,relu"),
         dataclasses.replace(TILE, cluster=2), True),
        (ScaledGemm(384, 512, 1024, "fp8e4m3", "fp8e4m3", "block128"), WIDE, True),
        (ScaledGemm(2000, 2048, 1152, "fp8e4m3", "fp8e4m3", "row", epilogue="bias,gelu,residual"), TILE, False),
        (ScaledGemm(2000, 2100, 1152, "fp8e4m3", "fp8e4m3", "row"), TILE, False),
        (ScaledGemm(300, 520, 2048, "fp8e4m3", "fp8e4m3", "tensor"), TILE, True),
        # decode on the TMA gemv (gemv_tma_fp8._fp8_c): unsplit, a cluster's split, the workspace's
        (ScaledGemm(1, 4096, 4096, "fp8e4m3", "fp8e4m3", "tensor"), G(boxes=4), True),
        (ScaledGemm(16, 4096, 14336, "fp8e4m3", "fp8e4m3", "row", epilogue="bias,gelu"), G(splits=4), True),
        (ScaledGemm(9, 1000, 4096, "fp8e5m2", "fp8e5m2", "row", epilogue="residual"), G(stages=3, splits=11), True),
        (ScaledGemm(5, 520, 1040, "fp8e4m3", "fp8e4m3", "row"), G(warps=8, stages=2, splits=3), False),
    ]


def _run_case(k: object, op: ScaledGemm, seed: int) -> tuple[float, str]:
    """The case's relative error on fresh inputs, and what is wrong beside C (an FP8 C's amax; the second seed
    saturates: scale_out 64 times the usual, so values past the type's range are clamped)."""
    inputs = op.random_inputs(np.random.default_rng(seed))
    if op.fp8_out and seed == 2:
        inputs["scale_out"] = inputs["scale_out"] * np.float32(64)
    if op.fp8_out:
        inputs["amax"][:] = -1.0  # written, not raised: a value left from before must not survive
    out = np.full(op.output_shape(), 0x7F, op.out_dtype.storage)
    k(inputs, out)
    got = out.astype(np.float64) if op.out_dtype.value in ("fp32", "int32") else to_float64(out, op.out_dtype)
    err = relative_error(got, op.reference(inputs))
    side = op.side_problem(inputs)
    if op.fp8_out:
        ref = op.reference(inputs)
        side = (side or "") + f" amax {inputs['amax'][0]:.6g}, saturated {np.mean(np.abs(ref) == op.out_dtype.max_finite):.1%}"
    return err, side or ""


class NoGpu:
    nvidia = None


def check(small: bool, which: str = "all") -> int:
    bad = 0
    for op, s, is_small in (_cases() if which == "all" else []) + _fp8_out_cases():
        if small and not is_small:
            continue
        try:
            k = cuda.build(op, VARIANT, s, NoGpu())
        except Exception as exc:  # noqa: BLE001 - a refusal or compile error is a line, then the next case
            bad += 1
            print(f"{op.case_label():<52} {s.name:<40} BUILD {type(exc).__name__}: {exc}"[:240], flush=True)
            continue
        for seed in (1, 2):
            err, side = _run_case(k, op, seed)
            ok = err <= tolerance(op) and "exceeds" not in side
            bad += not ok
            inputs = op.random_inputs(np.random.default_rng(seed))
            print(f"{op.case_label():<52} {s.name:<40} seed {seed}: rel err {err:.2e} (bound {tolerance(op):.1e}) "
                  f"{'ok' if ok else 'WRONG'}{side}{'' if small else _vendor_error(op, inputs)}", flush=True)
    print(f"check: {bad} wrong or failed")
    return bad


def _vendor_error(op: ScaledGemm, inputs: dict) -> str:
    """torch._scaled_mm's (cuBLASLt's) relative error on the same inputs, for an FP8 op it computes (tensor or row
    scales): the yardstick of the FP8 tolerance. "" without torch or for other ops."""
    if op.dtype.value == "int8" or op.scale not in ("tensor", "row"):
        return ""
    try:
        import torch
    except ImportError:
        return ""
    from tracea.emitters.baselines.scaled_gemm import device

    t = {n: torch.from_numpy(np.ascontiguousarray(v)).cuda() for n, v in inputs.items()}
    try:
        y = device(op, t, torch)[1]()
    except RuntimeError as exc:  # a shape cuBLASLt refuses (N not a multiple of 16, ...)
        return f"; _scaled_mm refuses it: {str(exc).splitlines()[0][:60]}"
    except ValueError as exc:  # a type pair it refuses (e5m2 x e5m2)
        return f"; _scaled_mm refuses it: {str(exc).splitlines()[0][:60]}"
    return f"; _scaled_mm {relative_error(y.float().double().cpu().numpy(), op.reference(inputs)):.2e}"


def row_ops(which: str) -> list[ScaledGemm]:
    if which == "fp8":
        return [ScaledGemm(m, n, k, "fp8e4m3", "bf16", "row") for m in TOKENS for n, k in PROJECTIONS]
    if which == "fp8-tensor":
        return [ScaledGemm(m, n, k, "fp8e4m3", "bf16", "tensor") for m in TOKENS for n, k in PROJECTIONS]
    if which == "int8":
        return [ScaledGemm(m, n, k, "int8", "int32", "none") for m in (128, 2048, 8192) for n, k in PROJECTIONS]
    if which == "block":
        return [ScaledGemm(m, n, k, "fp8e4m3", "bf16", "block128") for m, n, k in
                ((4096, 4096, 4096), (8192, 8192, 8192), (2048, 14336, 4096), (2048, 4096, 14336), (128, 4096, 4096),
                 (16, 4096, 4096))]
    if which == "fp8-out":  # FP8 C with its amax, per tensor (cuBLASLt's D scale fuses only there)
        return [ScaledGemm(m, n, k, "fp8e4m3", "fp8e4m3", "tensor") for m in (1, 16, 128, 2048, 8192)
                for n, k in PROJECTIONS[:3]]
    if which == "edge":  # outside the suites: other N x K, odd M
        return [ScaledGemm(m, n, k, "fp8e4m3", "bf16", "row") for m, n, k in
                ((4, 3072, 8192), (32, 8192, 3072), (100, 6144, 4096), (777, 5120, 13824), (3000, 1024, 4096))]
    raise SystemExit(f"--rows: fp8, fp8-tensor, fp8-out, int8, block or edge, not {which}")


def candidates(op: ScaledGemm) -> list[W]:
    hero = sg.hero_schedule(op, HOST_SMS)
    int8 = op.dtype.value == "int8"
    if op.m <= 64 and op.scale != "block128":
        # the swapped wgmma tiles' own hero (FP8 decode of <= 16 rows is the TMA gemv's: the sweep's gemv forms)
        forms = [hero] + [dataclasses.replace(hero, split=0 if not int8 else 1, stages=st, bm=bm, consumers=c)
                          for st in (6, 12) for bm, c in ((64, 1), (128, 2))]
        # unsplit, deep rings (cuBLASLt's per-tensor decode: 64 x 8 tiles, 16 stages, no split, call 21)
        forms += [dataclasses.replace(hero, split=1, stages=st) for st in (8, 12)]
    elif op.m <= 256 and op.scale != "block128":
        forms = [dataclasses.replace(NARROW, store="tma", split=0), dataclasses.replace(NARROW, store="tma", split=0,
                 stages=5, l2_hint="first"), dataclasses.replace(NARROW, bn=192, store="tma", split=0, stages=5,
                 l2_hint="first"), dataclasses.replace(TILE, split=2, stages=5),
                 dataclasses.replace(NARROW, bn=256, store="tma", split=0, stages=4, l2_hint="first"),
                 dataclasses.replace(WIDE, split=0, l2_hint="first"),
                 # 64 x 64 tiles unsplit (cuBLASLt's per-tensor tile at 128 x 4096 x 4096: 64 x 64, 13 stages), two
                 # product sets with the stores overlapped; and split
                 W(bm=64, bn=64, stages=12, consumers=1, store="tma"),
                 W(bm=64, bn=64, stages=12, consumers=1, store="tma", l2_hint="first"),
                 W(bm=64, bn=64, stages=8, consumers=1, store="tma"),
                 W(bm=64, bn=64, stages=12, consumers=1, store="tma", split=0)]
    elif int8:
        forms = [W(bm=128, bn=256, stages=4, consumers=2, store=hero.store), W(bm=128, bn=128, stages=6, consumers=2,
                 store=hero.store), W(bm=128, bn=256, stages=4, consumers=2, cluster=2, store=hero.store),
                 W(bm=128, bn=128, stages=6, consumers=2, pingpong=True, store=hero.store)]
    elif op.scale == "block128":
        forms = [TILE, WIDE, dataclasses.replace(TILE, cluster=2), dataclasses.replace(TILE, stages=5)]
    else:
        forms = [TILE, WIDE, dataclasses.replace(TILE, cluster=2), dataclasses.replace(TILE, stages=5),
                 dataclasses.replace(TILE, raster="n")]
    out = []
    for s in forms:
        try:
            sg.check(op, s)
        except Exception:  # noqa: BLE001 - a form this op cannot take
            continue
        if s not in out and (s != hero or op.m <= 64):
            out.append(s)
    return out + _gemv_forms(op)


def _gemv_forms(op: ScaledGemm) -> list[G]:
    """The TMA gemv's forms for an FP8 decode row: rings of 4-8 stages of 2 or 4 boxes, splits 1, 2 and 4."""
    from tracea.emitters.cuda import gemv_tma

    if gemv_tma.refusal(op):
        return []
    out = []
    for w, st, b in ((4, 4, 2), (4, 8, 2), (4, 4, 4), (8, 4, 4)):
        for k in (1, 2, 4):
            try:
                G(warps=w, stages=st, boxes=b, splits=k).validate(op)
            except (BadInputError, UnsupportedError):
                continue
            out.append(G(warps=w, stages=st, boxes=b, splits=k))
    return out


def line(op: ScaledGemm, label: str, name: str, r: object) -> None:
    ms = r.tracea.p50_ms if r.tracea else None
    p95 = r.tracea.p95_ms if r.tracea else None
    base = r.baseline.p50_ms if r.baseline else None
    ratio = "unstable" if r.unstable else (f"{r.ratio:.2f}" if r.ratio else "-")
    tf = op.flops / (ms * 1e-3) / 1e12 if ms else None
    print(f"{op.case_label():<50} {label:<6} {name:<44} {r.status:<10} {ms and round(ms, 4)!s:>8} "
          f"{p95 and round(p95, 4)!s:>8} {base and round(base, 4)!s:>8} {ratio:>8} {tf and round(tf)!s:>5} "
          f"{(r.error or '')[:120]}", flush=True)


def rows(which: str, sweep: bool, match: str, budget: float) -> None:
    t0, said = time.time(), False
    print(f"{'row':<50} {'form':<6} {'schedule':<44} {'status':<10} {'p50 ms':>8} {'p95 ms':>8} {'vendor':>8} "
          f"{'ratio':>8} {'TF/s':>5}")
    for op in row_ops(which):
        if match and not any(m in op.case_label() for m in match.split(",")):
            continue
        if time.time() - t0 > budget:
            print(f"budget of {budget:.0f} s spent: the rows after {op.case_label()} were not run")
            break
        r = bench(op, HOST, backend="cuda", variant=VARIANT, repeats=30)
        line(op, "hero", schedule_from_json(r.schedule).name if r.schedule else "-", r)
        if r.baseline_name and (which in ("block", "fp8", "fp8-tensor", "fp8-out") or not said):
            print(f"    vendor: {r.baseline_name}", flush=True)
            said = True
        for s in candidates(op) if sweep else ():
            if ONLY and not any(x in s.name for x in ONLY.split(",")):
                continue
            rr = bench(op, HOST, backend="cuda", variant=VARIANT, repeats=30, tuned=lambda _o, _v, s=s: s.to_json())
            line(op, "sweep", s.name, rr)


HOST = None
HOST_SMS = 132
ONLY = ""


def main() -> None:
    global HOST, HOST_SMS, ONLY
    ap = argparse.ArgumentParser()
    ap.add_argument("--part", choices=("check", "rows"), required=True)
    ap.add_argument("--small", action="store_true")
    ap.add_argument("--cases", choices=("all", "fp8-out"), default="all", help="check: every case, or the FP8 C's")
    ap.add_argument("--rows", default="fp8")
    ap.add_argument("--sweep", action="store_true")
    ap.add_argument("--producer-regs", type=int, default=0, help="registers the producer keeps (0: the schedule's)")
    ap.add_argument("--fast-accum", action="store_true", help="probe: FP8 accumulated by the tensor cores alone")
    ap.add_argument("--ahead", type=int, default=-1, choices=(-1, 0, 1), help="probe: the next tile's k steps issued before a tile is "
                    "stored, block scales too (0: none; -1: the kernel's own, scaled_gemm.AHEAD and BLOCK_AHEAD)")
    ap.add_argument("--match", default="", help="comma-separated parts of the rows' labels")
    ap.add_argument("--only", default="", help="comma-separated parts of the swept schedules' names (--sweep)")
    ap.add_argument("--budget", type=float, default=1e9)
    a = ap.parse_args()
    ONLY = a.only
    if a.ahead >= 0:
        sg.AHEAD = sg.BLOCK_AHEAD = a.ahead
    if a.part == "check":
        raise SystemExit(1 if check(a.small, a.cases) else 0)
    if a.producer_regs:
        W.producer_regs = a.producer_regs
    if a.fast_accum:
        sg._fold = lambda op, sched: None
    HOST = probe()
    HOST_SMS = mma.sm_count(HOST)
    rows(a.rows, a.sweep, a.match, a.budget)


if __name__ == "__main__":
    main()
