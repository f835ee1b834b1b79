"""The CUDA-core (SIMT) fp32 core: GEMM, and conv2d as implicit GEMM, without tensor cores.

A block computes ``bm x bn`` of C with warps of ``wm x wn``; each lane an 8 x 8 piece made of 2 x 2
sub-tiles of 4 x 4 (half a warp tile apart), so that its shared-memory reads are 16-byte ``float4``
loads that neighbouring lanes share (broadcast) instead of conflicting. Both operand tiles are stored
k-major-transposed in shared memory (``[bk][bm + pad]``, ``[bk][bn + pad]``) in two buffers: the next
tile is loaded from global memory into registers (``float4`` where the rows are 16-byte aligned) while
the current one is multiplied, then stored to the other buffer (one barrier per k step). Rows that are
not 16-byte aligned (odd leading dimensions) move as scalars, neighbouring lanes on neighbouring elements,
into the same registers.

``split_k`` > 1 (GEMM): the grid holds that many blocks per tile, each multiplying an even share of the
k tiles; each stores its partial tile in the workspace (``workspace_bytes``, allocated and zeroed once by
the runtime) and the last block of the tile to arrive sums the parts in order and runs the epilogue once,
so the result does not depend on the order of arrival. The hero takes a split or a smaller tile only
where 128x128 tiles leave SMs idle (``fill_gpu``).

Other forms (``forms``, searched and swept): ``frags`` 2 reads the next k step's fragments during this one;
``order`` "snake" issues the 64 FMAs in an order that lets the register reuse cache feed neighbours;
``stages`` 3..4 fill shared memory by cp.async instead (``simt_async.py``), which also carries the 8 x 16
thread tiles (``thread_n`` 16: four B sub-tiles a quarter of the warp tile apart); with ``fill`` "lanes" or
"spread" its copies go lane by lane, 4 bytes each, with offsets computed once (``simt_fill.py``:
``FILL_FORMS``, for odd leading dimensions).

Here: the heroes, the forms and the space, the block's head and the epilogue; the two-stage main loop is
``simt_mainloop.py``, the K split's ranges, workspace and reduction ``simt_split.py``.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from ..cstyle import Param
from ..gpu_epilogue import Dest, Loop, Operands, Walk, direct_store, row_pointer
from . import simt_async, simt_fill, simt_gemv
from .conv import CONV_ARGS, gemm_scalars
from .plan import SIMT_PAD, SimtKernel, simt_kernel
from .render import CudaRenderer, Rendered
from .schedule import CudaSchedule
from .simt_mainloop import loaders, mainloop
from .simt_split import split_reduction, workspace_bytes


def hero_schedule(op: Any, host: Any) -> CudaSchedule:
    """128x128x16 blocks of 8x8-per-thread: bk 16 ran at 45 TFLOP/s on an H200 at 4096^3, bk 8 at 26
    (docs/device-runs/h200-cuda-kernels-and-tuner/cuda/bench-probe). A GEMM whose 128x128 tiles leave SMs
    idle takes the tile and K split that fill the GPU best (``fill_gpu``)."""
    if op.kind != "gemm":
        return CudaSchedule("simt", bm=128, bn=128, bk=16, wm=32, wn=64, raster=8, **_hero_core(op))
    if op.m <= GEMV_MAX_M and op.layout_b == "row":
        return gemv_schedule(op, sm_count(host))
    big = CudaSchedule("simt", raster=8, **HERO_BIG, **_hero_core(op))
    sms = sm_count(host)
    lanes = _lane_filled(op, sms, host)
    if lanes is not None:
        return lanes
    if _tiles(op, big) >= sms:
        return big
    return fill_gpu(op, sms)


# Odd rows (an operand row not on 16 bytes) whose 64x128 grid is one full wave and whose K is not long take the
# first lane-filled form. On an H100 (2026-11-26, docs/device-runs/h100-simt-lane-filled-one-wave-shapes/, two passes, against
# torch with TF32 off), against the hero: 1000x999x1001 0.905x / 0.907x (0.861x / 0.867x), 999x1023x513 0.84x
# (0.72x), 997x1021x777 0.87x (0.77x), 1020x900x2047 0.886x (0.889x); not at K = 3001 (0.81x against 0.88x)
# nor where the grid is two waves (777x1333x555 0.50x against 0.59x) or more (1500x999x1001, even).
LANES_WAVE = 0.9  # the least share of the SMs the grid must fill (and it must fit them)
LANES_MAX_K = 2048


def _lane_filled(op: Any, sms: int, host: Any = None) -> CudaSchedule | None:
    """The lane-filled hero for ``op``, or None: GEMMs only, odd rows, K up to LANES_MAX_K, a one-wave grid,
    and cp.async (sm_80 and later; a host report without a GPU is taken as one)."""
    from tracea.doctor.errors import TraceaError

    if op.kind != "gemm" or _hero_core(op) is not HERO_CORE or op.k > LANES_MAX_K:
        return None
    if getattr(getattr(host, "nvidia", None), "devices", None):
        from .arch import arch_of_host

        if arch_of_host(host).cc < (8, 0):
            return None
    s = fill_forms()[0]
    if not LANES_WAVE * sms <= _tiles(op, s) <= sms:
        return None
    try:
        s.validate(op)
    except TraceaError:
        return None
    return s


# The hero's core form: the two-stage register-staged kernel, FMAs row by row; HERO_BIG its GEMM tile where
# the tiles fill the GPU (else ``fill_gpu`` picks the tile and split, with HERO_CORE). To be chosen from
# benchmarks/gpu/simt_odd.py --sweep's table of forms (the cp.async pipeline, ``stages`` 3..4, and with it
# ``thread_n`` 16, are for GEMM only: a convolution keeps the two-stage 128x128 row-order form).
HERO_CORE = {"stages": 2, "frags": 1, "order": "rows"}
# GEMMs whose operand rows all start on 16 bytes (float4 loads) take double-buffered fragments in snake
# order instead: on an H100, the best form by geometric mean of the sweep's shapes, and the best at 4096^3
# (0.904x against 0.865x) and 1000^3 (1.02x against 0.98x); where a row is odd the scalar loader's registers
# leave it no better (1000x999x1001 0.83-0.86x against 0.84-0.88x, 777x1333x555 0.60x against 0.62x).
# docs/device-runs/h100-cuda-suites-splitk-im2col-stem/simt-forms/,
# docs/device-runs/h100-splitk-simt-attention/spread-fixup-simt-sweep/ and .../two-consumer-forms-base-pointer-loader/.
HERO_CORE_ALIGNED = {"stages": 2, "frags": 2, "order": "snake"}
HERO_BIG = {"bm": 128, "bn": 128, "bk": 16, "wm": 32, "wn": 64, "thread_n": 8}


# GEMMs of at most this many rows (B row-major) take the gemv form (0: never): its FMAs are all useful where a
# tile of 8 rows a thread wastes most of them at M = 1..48, and it streams B with more loads in flight. Off:
# on the H100 its first GPU run stopped on an illegal address (docs/device-runs/h100-cuda-suites-splitk-im2col-stem/simt-forms/),
# which the CPU emulator of tests/emitters/cuda/test_simt_core.py does not reproduce; it stays out of the hero and the space
# until it runs clean under compute-sanitizer.
GEMV_MAX_M = 0
GEMV_SEARCHED = False


def gemv_schedule(op: Any, sms: int, split: int | None = None) -> CudaSchedule:
    """The gemv form: the rows in as few groups of at most 48 as go (``bm`` a multiple of 8), split over K so
    that about 3 blocks an SM stream B (a part keeps 256 k or more)."""
    groups = -(-op.m // simt_gemv.MAX_M)
    bm = -(-op.m // groups // 8) * 8 if groups > 1 else min(simt_gemv.MAX_M, -(-op.m // 8) * 8)
    tiles = -(-op.m // bm) * -(-op.n // 128)
    if split is None:
        split = max(1, min(32, -(-3 * sms // tiles), op.k // 256))
    return CudaSchedule("simt", bm=bm, bn=128, bk=16, wm=bm, wn=16, stages=2, raster=8, split_k=split, form="gemv")


def _hero_core(op: Any) -> dict[str, Any]:
    """HERO_CORE for a GEMM (HERO_CORE_ALIGNED where every operand row starts on 16 bytes); a convolution
    keeps the two-stage row-order form (its heroes stay as recorded)."""
    if op.kind != "gemm":
        return {"stages": 2, "frags": 1, "order": "rows"}
    a_len = op.k if op.layout_a == "row" else op.m
    b_len = op.n if op.layout_b == "row" else op.k
    return HERO_CORE_ALIGNED if a_len % 4 == 0 and b_len % 4 == 0 else HERO_CORE


# (bm, bn, wm, wn, blocks an SM holds: 190-250 registers a thread under launch bounds (threads, 1), sm_90a)
# (32x64, one warp, spills at bk 16 with odd leading dimensions: searched, not a hero)
SMALL_TILES = ((128, 128, 32, 64, 1), (64, 128, 32, 64, 2), (128, 64, 64, 32, 2), (64, 64, 32, 64, 4))
SATURATE_WARPS = 8  # warps of 8x8 threads that keep an SM's FMA pipes busy (the 4096^3 hero runs 8)
# A part's partial tile stored, and read back by its tile's last block, against one k16 step of the same
# block (2048 FMA cycles): 64 KiB at 23 B a cycle (an SM's share of L2 when all read) is 1.4 steps, at 64
# (an SM's own port, when only the tiles' last blocks read) 0.5; an estimate, not yet measured
SPLIT_COST = 0.75
SMALL_TILE_COST = 0.1  # time per extra operand load of a smaller tile, against the 128x128 tile's multiply


def _tiles(op: Any, s: Any) -> int:
    return -(-op.m // s.bm) * -(-op.n // s.bn)


def fill_cost(op: Any, s: Any, per_sm: int, sms: int) -> float:
    """Modelled time of ``s`` for ``op``, in k16 steps of a 128x128 block on a busy SM: the busiest SM's
    blocks, each its tile's area times its part's k steps (plus the split's partial stored and summed),
    at a speed rising with the SM's resident warps up to ``SATURATE_WARPS``. Not calibrated on a GPU yet
    (benchmarks/gpu/simt_odd.py --sweep measures the candidates it weighs)."""
    blocks = _tiles(op, s) * s.split_k
    kt = -(-op.k // 16)
    steps = -(-kt // s.split_k) + (SPLIT_COST * s.split_k if s.split_k > 1 else 0)
    on_sm = -(-blocks // sms)
    speed = min(1.0, min(per_sm, on_sm) * s.warps / SATURATE_WARPS)
    # a smaller tile loads more per multiply ((bm + bn) / (bm bn): 1.5x at 64x128, 2x at 64x64, 3x at 32x64)
    loads = 1 + SMALL_TILE_COST * ((s.bm + s.bn) * 64 / (s.bm * s.bn) - 1)
    return on_sm * steps * (s.bm * s.bn) / (128 * 128) / speed * loads


def fill_gpu(op: Any, sms: int) -> CudaSchedule:
    """The tile and split of least ``fill_cost`` (ties: the bigger tile, the smaller split): a part keeps
    at least 4 k tiles of 16."""
    best: tuple[float, int, CudaSchedule] | None = None
    for bm, bn, wm, wn, per_sm in SMALL_TILES:
        for split in range(1, MAX_HERO_SPLIT + 1):
            s = CudaSchedule("simt", bm=bm, bn=bn, bk=16, wm=wm, wn=wn, raster=8, split_k=split, **_hero_core(op))
            if split > 1 and -(-op.k // 16) < 4 * split:
                break
            cost = fill_cost(op, s, per_sm, sms)
            if best is None or cost < best[0] * 0.98:
                best = (cost, split, s)
    assert best is not None
    return best[2]


MAX_HERO_SPLIT = 16


def sm_count(host: Any) -> int:
    """The host GPU's SM count (an H100's 132 when the report has none)."""
    gpus = getattr(getattr(host, "nvidia", None), "devices", None) or []
    return int(getattr(gpus[0], "sm_count", 0) or 132) if gpus else 132


# Forms of the core beside the hero's, (bm, bn, bk, wm, wn, stages, min_blocks, frags, order[, thread_n]):
# the FMAs in snake order, the fragments double-buffered in registers (frags 2), a cp.async pipeline
# (stages 3, 4), two blocks an SM or 16-warp blocks at 128 registers a thread, bk 32, 8 x 16 thread tiles.
# Not yet measured on a GPU: benchmarks/gpu/simt_odd.py --sweep times them beside the hero.
CORE_FORMS = ((128, 128, 16, 32, 64, 2, 1, 1, "snake"), (128, 128, 16, 32, 64, 2, 1, 2, "rows"),
              (128, 128, 16, 32, 64, 2, 1, 2, "snake"), (128, 128, 16, 64, 32, 2, 1, 1, "snake"),
              (128, 128, 16, 32, 64, 3, 1, 1, "rows"), (128, 128, 16, 32, 64, 3, 1, 1, "snake"),
              (128, 128, 16, 32, 64, 4, 1, 1, "snake"), (128, 128, 16, 32, 64, 3, 1, 2, "snake"),
              (128, 128, 16, 32, 64, 4, 1, 2, "snake"), (128, 128, 32, 32, 64, 3, 1, 1, "snake"),
              (128, 128, 8, 32, 64, 2, 2, 1, "rows"), (128, 128, 8, 32, 64, 4, 2, 1, "snake"),
              (128, 256, 8, 32, 64, 2, 1, 2, "rows"), (128, 256, 8, 32, 64, 4, 1, 1, "snake"),
              (256, 128, 8, 64, 32, 4, 1, 1, "snake"),
              (64, 128, 16, 32, 64, 3, 1, 1, "snake"), (128, 64, 16, 64, 32, 3, 1, 1, "snake"),
              (64, 64, 16, 32, 64, 3, 1, 1, "snake"), (64, 64, 8, 32, 64, 2, 1, 2, "snake"),
              # 8 x 16 thread tiles (thread_n 16): 6 shared reads per 128 FMAs instead of 4 per 64
              (128, 256, 8, 64, 64, 3, 1, 1, "snake", 16), (128, 256, 8, 32, 128, 3, 1, 1, "snake", 16),
              (256, 128, 8, 64, 64, 3, 1, 1, "snake", 16), (128, 256, 8, 64, 64, 4, 1, 1, "snake", 16),
              (128, 256, 8, 64, 64, 4, 1, 2, "snake", 16), (128, 128, 8, 64, 64, 3, 1, 1, "snake", 16))
# M <= 64: tiles short in M and long in N (warps of 16 x 128 lanes' outputs), split over K
SKINNY_FORMS = ((64, 256, 16, 32, 64, 4, 1, 1, "snake"), (64, 256, 8, 32, 64, 2, 1, 1, "rows"),
                (32, 256, 8, 16, 128, 2, 1, 1, "rows"), (32, 256, 8, 16, 128, 4, 1, 1, "snake"),
                (32, 512, 8, 16, 128, 3, 1, 1, "snake"), (16, 512, 8, 16, 128, 3, 1, 1, "snake"),
                (16, 512, 8, 16, 128, 4, 1, 1, "snake"), (64, 512, 8, 32, 128, 3, 1, 1, "snake", 16),
                (64, 256, 8, 32, 128, 3, 1, 1, "snake", 16), (32, 512, 8, 16, 256, 3, 1, 1, "snake", 16))


# cp.async forms filled lane by lane (``fill``, simt_fill.py), aimed at odd leading dimensions (issue 16):
# cuBLAS's sm80 fp32 kernel on 1000x999x1001 (64x128x8 tiles, 4 warps of 64x32, 3 stages, 4-byte copies;
# docs/benchmarks.md); its copies spread over the k steps; 4 stages; bk 16; the 8-warp 128x128 tile. The
# min_blocks hold them at 128 registers (168 for spread and bk 16), where NVRTC builds them without spills
# for sm_80 and sm_90a (tests/emitters/cuda/test_simt_core.py); split over K, the 8-warp one spills 32 B on sm_80 (values
# kept for the loop over the last k tiles, not in the main loop), none on sm_90a. Not yet measured on a GPU:
# benchmarks/gpu/simt_odd.py --compare times them beside the hero.
# Measured on an H100 (2026-11-26, docs/device-runs/h100-simt-lane-filled-forms/, against torch with TF32 off): at
# 1000x999x1001 0.900x / 0.893x / 0.861x against the hero's 0.870x; the forms capped at 128 registers (4 blocks
# a SM, and the 8-warp 128x128x8 at 2) spilled on aligned shapes and were dropped.
# The first form without its register cap (min_blocks 1: 164-179 registers, no spills) ran 0.905x there against
# 0.895x capped at 168, and is the hero's on one-wave odd shapes (``_lane_filled``).
FILL_FORMS = ((64, 128, 16, 64, 32, 3, 1, "lanes"), (64, 128, 8, 64, 32, 3, 1, "lanes"),
              (64, 128, 8, 64, 32, 3, 3, "spread"))


def fill_forms() -> list[CudaSchedule]:
    """``FILL_FORMS`` as schedules (fragments double-buffered, snake order, unsplit)."""
    return [CudaSchedule("simt", bm, bn, bk, wm, wn, st, raster=8, min_blocks=b, frags=2, order="snake", fill=f)
            for bm, bn, bk, wm, wn, st, b, f in FILL_FORMS]


def forms(op: Any) -> list[CudaSchedule]:
    """``CORE_FORMS``, for a GEMM ``FILL_FORMS`` and, for a GEMM of at most 64 rows, ``SKINNY_FORMS``, unsplit;
    a convolution only those of the two-stage kernel (its gathered loads have no cp.async form)."""
    gemm = op.kind == "gemm"
    gemv = [gemv_schedule(op, 132, 1)] if GEMV_SEARCHED and gemm and op.m <= 2 * simt_gemv.MAX_M \
        and op.layout_b == "row" else []

    def rows(table: tuple) -> list[CudaSchedule]:
        return [CudaSchedule("simt", bm, bn, bk, wm, wn, st, raster=8, min_blocks=b, frags=f, order=o,
                             thread_n=tn[0] if tn else 8)
                for bm, bn, bk, wm, wn, st, b, f, o, *tn in table if gemm or st == 2]

    return rows(CORE_FORMS) + (fill_forms() if gemm else []) + rows(SKINNY_FORMS if gemm and op.m <= 64 else ()) \
        + gemv


def search_space(op: Any, hero: Any, arch: Any) -> list[CudaSchedule]:
    """Block tiles 32x64..128x128, both warp shapes, bk 8 or 16, and the ``forms``; for a GEMM each (of the
    forms: those with double-buffered fragments or short tiles) also split over K in 2..16 parts where its
    tiles leave SMs idle (build drops what does not validate)."""
    tiles = [(bm, bn) for bm, bn in ((128, 128), (128, 64), (64, 128), (64, 64))]
    out = [CudaSchedule("simt", bm, bn, bk, wm, wn, 2, raster=8)
           for bm, bn in tiles for wm, wn in ((32, 64), (64, 32)) for bk in (8, 16)]
    if op.kind != "gemm":
        return out + forms(op)
    sms = max(1, getattr(arch, "sm_count", 0) or 132)
    out += [CudaSchedule("simt", bm, bn, bk, wm, wn, 2, raster=8) for bm, bn, wm, wn in ((32, 64, 32, 64),
                                                                                          (64, 32, 64, 32))
            for bk in (8, 16)]
    extra = forms(op)
    split = [dataclasses.replace(s, split_k=k) for s in out + [f for f in extra if f.frags == 2 or f.bm < 64
                                                                 or f.form == "gemv"]
             if _tiles(op, s) < 2 * sms for k in (2, 3, 4, 6, 8, 12, 16) if -(-op.k // s.bk) >= 2 * k]
    return out + extra + split


def render(op: Any, schedule: Any, arch: Any) -> tuple[Rendered, dict[str, float | int]]:
    return render_simt(op, schedule, arch), gemm_scalars(op)


def render_simt(op: Any, schedule: Any, arch: Any, renderer: CudaRenderer | None = None) -> Rendered:
    """The kernel's text in steps over its plan (``plan.SimtKernel``): the operand loaders, the block's head,
    the double-buffered main loop, the K split's reduction (``split_k`` > 1) and the C store."""
    r = renderer or CudaRenderer()
    k = simt_kernel(op, schedule, arch.smem_optin)
    s, nt = k.s, k.threads
    if s.form == "gemv":
        return simt_gemv.render(op, s, arch, k.name, k.epi, r)
    if s.stages > 2:  # the cp.async pipeline (GEMM)
        helpers = simt_async.HELPERS + (simt_fill.HELPERS if s.fill != "quads" else "")
        body = [helpers + _signature(r, k) + " {", *_head(k), *simt_async.mainloop(k, r)]
    else:
        pro, a, b = loaders(k, r)
        body = [_signature(r, k) + " {", *_head(k), pro, *mainloop(k, a, b, r)]
    L = [r.prelude(1), *body, *split_reduction(k, r), _simt_epilogue(op, s, k.epi, k.conv), "}"]
    M, N, _ = k.mnk
    tiles = -(-M // s.bm) * -(-N // s.bn)
    grid = (tiles * s.split_k, 1, 1)
    params = (("x", "weight") if k.conv else ("a", "b")) + ("out", "bias", "residual", "M", "N", "K", "alpha") + \
        (CONV_ARGS if k.conv else ()) + (("workspace",) if s.split_k > 1 else ())
    meta = {"name": k.name, "tile": {"M": s.bm, "N": s.bn, "K": s.bk, "stages": s.stages, "warp": [s.wm, s.wn],
                                     "thread": [8, s.thread_n]},
            "fragments": {"mma": "fma.rn.f32 (CUDA cores)", "dtype_in": "fp32", "dtype_acc": "fp32"},
            "launch": {"grid": list(grid), "block": [nt, 1, 1], "dynamic_smem": k.smem}, "epilogue": list(k.epi)}
    if k.conv:
        meta["conv"] = {"layout": op.layout, "hoist": "smem" if k.hoist else "recompute"}
    if s.split_k > 1:  # the partials and the tiles' arrival counters (zeroed once; each launch leaves them at 0)
        meta["tile"]["split_k"] = s.split_k
        meta["workspace_bytes"] = workspace_bytes(tiles, s)
        meta["reduction"] = "last block of each tile, parts in order (deterministic)"
    if s.frags == 2:
        meta["tile"]["frags"] = 2
    return Rendered(k.name, k.name, "\n".join(L) + "\n", params, grid, (nt, 1, 1), k.smem, meta)


def _signature(r: CudaRenderer, k: SimtKernel) -> str:
    params = [Param("A", "fp32", True, True, True), Param("B", "fp32", True, True, True),
              Param("Cout", "fp32", True, False, True), Param("bias", "fp32", True, True, True),
              Param("resid", "fp32", True, True, True), Param("M", "int"), Param("N", "int"), Param("K", "int"),
              Param("alpha", "float")]
    params += [Param(a, "int") for a in CONV_ARGS] if k.conv else []
    params += [Param("W", "fp32", True, False, True)] if k.s.split_k > 1 else []
    return r.render_kernel_signature(k.name, params, launch_bounds=(k.threads, k.s.min_blocks))


def _head(k: SimtKernel) -> list[str]:
    """The shared tiles, the lane's place in its warp tile and the block's rasterized tile origin."""
    s = k.s
    pa, pb = s.bm + SIMT_PAD, s.bn + SIMT_PAD
    warps_n, lanes_n = s.bn // s.wn, s.wn // s.thread_n  # lanes across the warp tile's n extent
    return ["extern __shared__ __align__(16) float tr_smem_f[];",
            f"float (*As)[{s.bk}][{pa}] = (float (*)[{s.bk}][{pa}])tr_smem_f;",
            f"float (*Bs)[{s.bk}][{pb}] = (float (*)[{s.bk}][{pb}])(tr_smem_f + {s.stages * s.bk * pa});",
            "const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;",
            f"const int warp_m = warp / {warps_n}, warp_n = warp % {warps_n};",
            f"const int lm = lane / {lanes_n}, ln = lane % {lanes_n};",
            f"const int grid_m = (M + {s.bm - 1}) / {s.bm}, grid_n = (N + {s.bn - 1}) / {s.bn};",
            _tile_index(s) + f"per_group = {s.raster} * grid_n, group = pid / per_group;",
            f"const int first_m = group * {s.raster}, gsize = min(grid_m - first_m, {s.raster});",
            "const int in_group = pid - group * per_group;",
            f"const int m0 = (first_m + in_group % gsize) * {s.bm}, n0 = (in_group / gsize) * {s.bn};"]


def _tile_index(s: Any) -> str:
    """The block's tile (``pid``) and, with a K split, its part: the grid is ``split_k`` copies of the tiles,
    part-major, so that the blocks resident together rasterize over the tiles as without a split."""
    if s.split_k == 1:
        return "const int pid = blockIdx.x, "
    return "const int part = blockIdx.x / (grid_m * grid_n), pid = blockIdx.x - part * (grid_m * grid_n), "


def _simt_epilogue(op: Any, s: Any, epi: tuple[str, ...], conv: bool) -> str:
    """The thread's 8 x ``thread_n`` tile to C (``gpu_epilogue.direct_store``): rows ``am + (i & 3)`` and
    ``wm / 2`` below, four adjacent columns a store (one float4 where N is a multiple of 4)."""
    nchw = conv and op.layout == "nchw"
    rows, element = row_pointer("float", nchw)
    walk = Walk((Loop("for (int i = 0; i < 8; ++i)",
                      (f"const int row = m0 + am + (i & 3) + (i >> 2) * {s.wm // 2};", "if (row >= M) continue;", *rows)),
                 Loop(f"for (int h = 0; h < {s.thread_n // 4}; ++h)",
                      (f"const int col = n0 + bn_ + h * {s.wn // (s.thread_n // 4)};", "float o[4];"))),
                ("const int cc = col + e;", "float v = acc[i][h * 4 + e];"), 4, "o")
    ops = Operands("bias[cc]", "resid[(size_t)row * N + cc]", "cc < N", "cc < N")
    vec_ok = not nchw and (op.k if conv else op.n) % 4 == 0
    return "\n".join(direct_store(walk, epi, ops, Dest(element, vector="(crow + col)" if vec_ok else "")))
