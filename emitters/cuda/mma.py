"""The tensor-core core: GEMM, and conv2d as implicit GEMM, on ``mma.sync.m16n8k16`` (bf16/fp16 in, fp32
accumulate), sm_80 and later.

One block computes a ``bm x bn`` tile of C with ``(bm/wm) x (bn/wn)`` warps. Operand tiles stream
through a ``stages``-deep ring of shared-memory slots filled by 16-byte ``cp.async`` (zero-filled past
the edges, so any M, N, K runs); the matching ``cp.async.wait_group stages-2`` before each slot is
read. Shared tiles are swizzled by the layouts of ``plan.py`` (from ``emitters/layout.py``), read into
registers by ``ldmatrix`` (``.trans`` for mn-major tiles), with the fragments of the next k16 step
loaded while the current one multiplies (register double buffering); the ldmatrix addresses are a few
per-thread base registers plus constants (``fragment_offsets``), so the main loop does no index
arithmetic. Blocks whose tiles all lie inside the matrices run a copy of the main loop with unchecked
copies; edge blocks the checked one. Blocks are rasterized in groups of ``raster`` block rows so that
neighbours share operand lines in L2; ``persist`` > 0 (GEMM) walks the tiles with one block per SM. The epilogue applies the IR's
fused ops in order (in fp32, one rounding at the end). With ``epilogue="smem"`` (GEMM and NHWC conv, not
persistent) the warps first write their fp32 accumulators to a staging tile in the drained pipeline's
shared memory (``plan.CStage``), then every thread reads 8 consecutive columns of one row and stores them
as one 16-byte vector (bias and residual read as 16-byte vectors too): a warp writes 512 contiguous bytes.
Rows whose length is not a multiple of 8 store element by element. ``"direct"`` stores from the fragments,
two elements per 32-bit store where the row allows.

Operands whose rows are not 16-byte aligned (k or n not a multiple of 8) load through registers
element by element: slower, still correct. The convolution gathers A = im2col(x) on the fly: the pixel
coordinates of a tile line are computed once per block with magic-number division, the (c, r, s) of
every k either kept in a shared-memory table (hoisted) or recomputed per tile.

Here: the hero and the space, the block's head, the fragment loads and the main loop; the global ->
shared copies are in ``mma_loaders.py``, the C stores (direct and staged) in ``mma_epilogue.py``.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from ..cstyle import Param
from .conv import CONV_ARGS, conv_prologue, gemm_scalars
from .mma_epilogue import direct_epilogue, staged_epilogue
from .mma_loaders import loader_step
from .plan import MmaKernel, MmaPlan, mma_kernel
from .render import CudaRenderer, Rendered
from .schedule import CudaSchedule


def hero_schedule(op: Any, host: Any) -> CudaSchedule:
    """128x256x32 GEMM blocks of 8 warps (64x64 each) and 4 cp.async stages (256x128x32 for convolutions),
    or 128x128x64 with 3 when that fills the last wave of blocks better, rasterized in groups of 8 block
    rows."""
    # Two tiles within 2 % of each other at 4096^3 on an H200 (370 and 376 TFLOP/s,
    # docs/device-runs/h200-cuda-kernels-and-tuner/cuda/bench-probe):
    # take the one whose last wave of blocks is fuller on this GPU's SMs.
    conv = op.kind == "conv2d"
    m, n = (op.gemm_m, op.gemm_n) if conv else (op.m, op.n)
    big = CudaSchedule("mma", bm=256, bn=128, bk=32, wm=64, wn=64, stages=4, raster=8)
    small = CudaSchedule("mma", bm=128, bn=128, bk=64, wm=64, wn=32, stages=3, raster=8)
    wide = CudaSchedule("mma", bm=128, bn=256, bk=32, wm=64, wn=64, stages=4, raster=8)
    sms = sm_count(host)

    def waves(s: CudaSchedule) -> int:
        return -(-(-(-m // s.bm) * -(-n // s.bn)) // sms)

    from .smem import vector_copies

    if not all(vector_copies(op)):  # rows not 16-byte aligned: the register copy path, lighter with bk 32
        return dataclasses.replace(small, bk=32, stages=4)
    if not conv and op.epilogue:  # the 64x64 warp tile spills beside a fused epilogue's registers
        return small
    if conv and n >= 256:  # 128x256 led the N32 C256 56x56 probe: 328 vs 270-282 TFLOP/s
        # (docs/device-runs/h200-cuda-kernels-and-tuner/cuda/bench-table-and-search-space)
        return wide if 2 * waves(wide) <= waves(small) else small
    if not conv:  # H200 run 08 (docs/device-runs/h200-cuda-kernels-and-tuner/cuda/gemm-staged-epilogue),
        # staged epilogue: 128x256x32 s4 led at 4096^3, 8192^3 and 4000^3 (481, 507 and 436 TFLOP/s;
        # 128x256x64 s3, run 07's pick at 8192^3: 505)
        return wide if 2 * waves(wide) <= waves(small) else small
    # 256x128 led at 4096^3 and 8192^3 on an H200 (416 and 451 TFLOP/s,
    # docs/device-runs/h200-cuda-kernels-and-tuner/cuda/bench-table-and-search-space): take it
    # unless its last wave leaves the GPU emptier (a big tile does twice the work of a small one)
    return big if 2 * waves(big) <= waves(small) else small


def sm_count(host: Any) -> int:
    gpus = getattr(getattr(host, "nvidia", None), "devices", None) or []
    return int(getattr(gpus[0], "sm_count", 0) or 132) if gpus else 132


def search_space(op: Any, hero: Any, arch: Any) -> list[CudaSchedule]:
    """Block tiles 64..256, warp tiles 32..64, bk 32 or 64, 2..5 stages, 2..8 warps (checked by build)."""
    cands: list[CudaSchedule] = []
    for bm in (64, 128, 256):
        for bn in (64, 128, 256):
            for wm, wn in ((64, 64), (64, 32), (32, 64), (32, 32)):
                for bk in (32, 64):
                    for stages in (2, 3, 4, 5):
                        if 2 <= (bm // wm) * (bn // wn) <= 8:
                            cands.append(CudaSchedule("mma", bm, bn, bk, wm, wn, stages, raster=8))
    return cands


def render(op: Any, schedule: Any, arch: Any) -> tuple[Rendered, dict[str, float | int]]:
    return render_mma(op, schedule, arch), gemm_scalars(op)


def render_mma(op: Any, schedule: Any, arch: Any, renderer: CudaRenderer | None = None) -> Rendered:
    """The kernel's text in steps over its plan (``plan.MmaKernel``): the block's head, the loaders, the
    fragment loads, the main loop (twice where blocks may take the unchecked copies) and the C store."""
    r = renderer or CudaRenderer()
    k = mma_kernel(op, schedule, arch.smem_optin)
    s, plan = k.s, k.smem
    to_f, from_f = r.converters(k.dtype)
    w: list[str] = [r.prelude(1), r.tensor_prelude(k.dtype)]
    w.append(f"{r.inline_prefix}uint32_t offA(uint32_t line, uint32_t col) "
             f"{{ return {plan.a.c_offset('line', 'col')}; }}")
    w.append(f"{r.inline_prefix}uint32_t offB(uint32_t line, uint32_t col) "
             f"{{ return {plan.b.c_offset('line', 'col')}; }}")
    body = _head(k)
    if k.conv:
        conv_prologue(op, s, plan, body, k.threads, k.copies("a")[2], k.copies("a")[1], k.hoist, r.barrier)
    loader_step(k, body)
    body += [f"float acc[{s.wm // 16}][{s.wn // 8}][4];", _zero_acc(s, ""),
             f"uint32_t fa[2][{s.wm // 16}][4], fb[2][{s.wn // 8}][2];", "const int lj = lane >> 3, lr = lane & 7;"]
    body.extend(_fragment_loads(plan, s).splitlines())
    direct = direct_epilogue(op, s, k.epi, to_f, from_f, k.conv, s.wm // 16, s.wn // 8)
    if k.persistent or k.conv:
        body += _mainloop(k, False, direct, r)
    else:  # the pipeline and main loop written out twice: unchecked copies where the block's tiles lie inside
        body += [f"if (m0 + {s.bm} <= M && n0 + {s.bn} <= N && K % {s.bk} == 0) {{", *_mainloop(k, True, direct, r),
                 "} else {", *_mainloop(k, False, direct, r), "}"]
    if plan.c_stage is not None:
        body.extend(staged_epilogue(s, plan.c_stage, k.epi, to_f, from_f, k.mnk[1] % 8 == 0, k.threads, r.barrier).splitlines())
    elif not k.persistent:
        body.extend(direct.splitlines())
    src = "\n".join(w) + "\n\n" + _signature(r, k) + " {\n" + "\n".join("    " + ln for ln in body) + "\n}\n"
    M, N, _ = k.mnk
    tiles = -(-M // s.bm) * -(-N // s.bn)
    grid = (min(tiles, s.persist * max(1, arch.sm_count)) if k.persistent else tiles, 1, 1)
    params = (("x", "weight") if k.conv else ("a", "b")) + ("out", "bias", "residual", "M", "N", "K", "alpha") + \
        (CONV_ARGS if k.conv else ())
    return Rendered(k.name, k.name, src, params, grid, (k.threads, 1, 1), plan.smem_bytes, _metadata(k, grid))


def _signature(r: CudaRenderer, k: MmaKernel) -> str:
    elem = k.dtype
    params = [Param("A", elem, True, True, True), Param("B", elem, True, True, True), Param("Cout", elem, True, False, True),
              Param("bias", elem, True, True, True), Param("resid", elem, True, True, True),
              Param("M", "int"), Param("N", "int"), Param("K", "int"), Param("alpha", "float")]
    params += [Param(a, "int") for a in CONV_ARGS] if k.conv else []
    return r.render_kernel_signature(k.name, params, launch_bounds=(k.threads, k.s.min_blocks))


def _head(k: MmaKernel) -> list[str]:
    """The block's indices, its tile origin (rasterized: groups of ``raster`` block rows walk the N direction
    together), the loader's own tile where it runs ahead (persistent), the shared-memory bases."""
    s = k.s
    warps_n = s.bn // s.wn
    out = ["extern __shared__ __align__(1024) unsigned char tr_smem[];",
           "const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;",
           f"const int warp_m = warp / {warps_n}, warp_n = warp % {warps_n};",
           f"const int grid_m = (M + {s.bm - 1}) / {s.bm}, grid_n = (N + {s.bn - 1}) / {s.bn};",
           "auto tile_origin = [&](int pid, int& m0_, int& n0_) {",
           f"  const int per_group = {s.raster} * grid_n, group = pid / per_group;",
           f"  const int first_m = group * {s.raster}, gsize = min(grid_m - first_m, {s.raster});",
           "  const int in_group = pid - group * per_group;",
           f"  m0_ = (first_m + in_group % gsize) * {s.bm}; n0_ = (in_group / gsize) * {s.bn};",
           "};",
           "int m0, n0;",
           "tile_origin(blockIdx.x, m0, n0);"]
    if k.persistent:  # the loader runs ahead of the compute across tile boundaries: its own tile and origin
        out += ["const int tiles = grid_m * grid_n;",
                "int c_tile = blockIdx.x, l_tile = blockIdx.x, l_kt = 0, lm0 = m0, ln0 = n0;"]
    return out + ["const uint32_t smem0 = tr_smem_addr(tr_smem);",
                  f"const uint32_t sA = smem0, sB = smem0 + {s.stages * k.smem.a.size_bytes}u;",
                  f"const int ktiles = (K + {s.bk - 1}) / {s.bk};"]


def _zero_acc(s: Any, ind: str) -> str:
    return (f"{ind}#pragma unroll\n{ind}for (int i = 0; i < {s.wm // 16}; ++i)\n{ind}#pragma unroll\n"
            f"{ind}for (int j = 0; j < {s.wn // 8}; ++j)\n{ind}#pragma unroll\n{ind}for (int e = 0; e < 4; ++e) "
            "acc[i][j][e] = 0.0f;")


def _mainloop(k: MmaKernel, fast: bool, direct: str, r: CudaRenderer) -> list[str]:
    """The cp.async pipeline's prologue and the k loop: wait for the slot read next in the last k16 step,
    issue the next tile's copies in the first, fragments of step kk + 1 loaded while kk multiplies. The
    persistent grid stores each tile (``direct``) at its last k step and goes on to the next."""
    s, st, kk_steps = k.s, k.s.stages, k.s.bk // 16
    lt = "load_tile_fast" if fast else "load_tile"
    load = "load_next(t)" if k.persistent else f"{lt}(t, t)"
    out = [f"#pragma unroll\nfor (int t = 0; t < {st - 1}; ++t) {{ {load}; TR_CP_COMMIT(); }}",
           f"TR_CP_WAIT({st - 2});\n{r.barrier}",
           "load_frags(0, 0, 0);",
           f"int read_slot = 0, write_slot = {st - 1};"]
    if k.persistent:
        out += ["const int iters = (tiles - (int)blockIdx.x + (int)gridDim.x - 1) / (int)gridDim.x * ktiles;",
                "int kt = 0;",
                "for (int it = 0; it < iters; ++it) {"]
    else:
        out.append("for (int kt = 0; kt < ktiles; ++kt) {")
    out += [f"  #pragma unroll\n  for (int kk = 0; kk < {kk_steps}; ++kk) {{",
            f"    if (kk == {kk_steps - 1}) {{",
            f"      TR_CP_WAIT({st - 2});\n      {r.barrier}",
            f"      read_slot = read_slot == {st - 1} ? 0 : read_slot + 1;",
            "    }",
            f"    load_frags((kk + 1) & 1, read_slot, (kk + 1) % {kk_steps});",
            "    if (kk == 0) {",
            f"      {'load_next(write_slot)' if k.persistent else f'{lt}(kt + {st - 1}, write_slot)'}; TR_CP_COMMIT();",
            f"      write_slot = write_slot == {st - 1} ? 0 : write_slot + 1;",
            "    }",
            f"    #pragma unroll\n    for (int i = 0; i < {s.wm // 16}; ++i)\n    #pragma unroll\n"
            f"    for (int j = 0; j < {s.wn // 8}; ++j)",
            "      tr_mma(acc[i][j], fa[kk & 1][i], fb[kk & 1][j]);",
            "  }"]
    if k.persistent:  # the tile's last k step: store it, clear the accumulators, take the next tile
        out += ["  if (++kt == ktiles) {", "    kt = 0;", *("    " + ln for ln in direct.splitlines()),
                _zero_acc(s, "    "), "    c_tile += gridDim.x;", "    if (c_tile < tiles) tile_origin(c_tile, m0, n0);",
                "  }"]
    return out + ["}", "TR_CP_WAIT(0);"]


def _metadata(k: MmaKernel, grid: tuple[int, int, int]) -> dict[str, Any]:
    s, plan, N = k.s, k.smem, k.mnk[1]
    meta = {
        "name": k.name,
        "tile": {"M": s.bm, "N": s.bn, "K": s.bk, "stages": s.stages, "warp": [s.wm, s.wn]},
        "fragments": {"mma": "mma.sync.aligned.m16n8k16", "dtype_in": k.dtype, "dtype_acc": "fp32",
                      "load": "ldmatrix.x4" + ("" if plan.a_kmajor else " (A .trans)") +
                              ("" if plan.b_kmajor else " (B .trans)")},
        "smem": {"a": plan.a.describe(), "b": plan.b.describe(), "a_vector_copy": k.a_vec,
                 "b_vector_copy": k.b_vec, "coordinate_table_bytes": plan.table_bytes},
        "launch": {"grid": list(grid), "block": [k.threads, 1, 1], "dynamic_smem": plan.smem_bytes},
        "epilogue": list(k.epi),
        "c_store": ({"staged": "smem", "passes": plan.c_stage.passes, "bytes": plan.c_stage.size_bytes,
                     "vector": "16 B" if N % 8 == 0 else "scalar"} if plan.c_stage else {"staged": "none"}),
    }
    if k.conv:
        meta["conv"] = {"layout": k.op.layout, "hoist": "smem" if k.hoist else "recompute"}
    return meta


def _frag_coords(plan: MmaPlan, which: str, kk: int, idx: int, w0: Any, lane: Any) -> tuple[Any, Any]:
    """(line, col) in the operand tile of the row address that ``lane`` gives to the ldmatrix.x4 of
    fragment ``idx`` (A: the 16-row block i; B: the pair p of n8 tiles) in k16 step ``kk``; ``w0`` is the
    warp's first row (A) or column (B) of the block tile. On NumPy arrays, or on C names (strings) for
    the kernel source, which then uses its ``lj = lane >> 3`` and ``lr = lane & 7``."""
    if isinstance(lane, str):
        lo16, hi, lj1, lj2, lr = f"({lane} & 15)", f"({lane} >> 4)", "(lj & 1)", "(lj >> 1)", "lr"
    else:
        lo16, hi, lj1, lj2, lr = lane & 15, lane >> 4, (lane >> 3) & 1, lane >> 4, lane & 7
    kmajor = plan.a_kmajor if which == "a" else plan.b_kmajor
    if isinstance(lane, str):
        if which == "a":
            return ((f"{w0} + {idx * 16} + {lo16}", f"{kk * 16} + {hi} * 8") if kmajor else
                    (f"{kk * 16} + {lj2} * 8 + {lr}", f"{w0} + {idx * 16} + {lj1} * 8"))
        return ((f"{w0} + {idx * 16} + {lj2} * 8 + {lr}", f"{kk * 16} + {lj1} * 8") if kmajor else
                (f"{kk * 16} + {lj1} * 8 + {lr}", f"{w0} + {idx * 16} + {lj2} * 8"))
    if which == "a":
        return ((w0 + idx * 16 + lo16, kk * 16 + hi * 8) if kmajor else
                (kk * 16 + lj2 * 8 + lr, w0 + idx * 16 + lj1 * 8))
    return ((w0 + idx * 16 + lj2 * 8 + lr, kk * 16 + lj1 * 8) if kmajor else
            (kk * 16 + lj1 * 8 + lr, w0 + idx * 16 + lj2 * 8))


def fragment_offsets(plan: MmaPlan, s: Any, which: str) -> tuple[list[tuple[int, int]], dict[tuple[int, int],
                                                                                          tuple[int, int]]]:
    """The ldmatrix addressing of one operand, folded: a few per-thread base offsets computed once per
    block, and for every (k16 step, fragment) the base it adds to and a compile-time constant.

    Returns (bases, uses): ``bases`` the (kk, idx) whose full swizzled offset is a register; ``uses`` maps
    every (kk, idx) to (base number, constant) with offset(kk, idx) == offset(base) + constant for every
    warp and lane, checked here on the layout itself (the swizzle's XOR often moves only bits that a
    fragment's step leaves alone; where it does not, that fragment gets a base of its own). So the main
    loop does no index arithmetic: each ldmatrix is [base register + slot + immediate]."""
    import numpy as np

    layout = plan.a if which == "a" else plan.b
    extent, step = (s.wm, s.bm) if which == "a" else (s.wn, s.bn)
    n_idx = s.wm // 16 if which == "a" else s.wn // 16
    lane = np.arange(32)[None, :]
    wm0 = np.arange(0, step, extent)[:, None]
    bases: list[tuple[int, int]] = []
    base_off: list[np.ndarray] = []
    uses: dict[tuple[int, int], tuple[int, int]] = {}
    for kk in range(s.bk // 16):
        for idx in range(n_idx):
            line, col = _frag_coords(plan, which, kk, idx, wm0, lane)
            off = np.asarray(layout.offset(line, col), dtype=np.int64)
            for j, bo in enumerate(base_off):
                d = off - bo
                if (d == d.flat[0]).all() and d.flat[0] >= 0:
                    uses[(kk, idx)] = (j, int(d.flat[0]))
                    break
            else:
                uses[(kk, idx)] = (len(bases), 0)
                bases.append((kk, idx))
                base_off.append(off)
    return bases, uses


def _fragment_loads(plan: MmaPlan, s: Any) -> str:
    """The per-thread fragment base offsets and the ``load_frags(buf, slot, kk)`` lambda (kk and buf are
    compile-time constants once the k16 loop is unrolled, so only one branch survives)."""
    mt, ntile = s.wm // 16, s.wn // 8
    out: list[str] = []
    folded: dict[str, dict[tuple[int, int], tuple[int, int]]] = {}
    for which, tag, w0 in (("a", "A", f"warp_m * {s.wm}"), ("b", "B", f"warp_n * {s.wn}")):
        bases, uses = fragment_offsets(plan, s, which)
        folded[which] = uses
        regs = []
        for j, (kk, idx) in enumerate(bases):
            line, col = _frag_coords(plan, which, kk, idx, w0, "lane")
            regs.append(f"fo{tag}{j} = off{tag}({line}, {col})")
        out.append("const uint32_t " + ", ".join(regs) + ";")
    out.append("auto load_frags = [&](int buf, int slot, int kk) {")
    out.append(f"  const uint32_t baseA = sA + slot * {plan.a.size_bytes}u, baseB = sB + slot * {plan.b.size_bytes}u;")
    for kk in range(s.bk // 16):
        out.append(f"  {'if' if kk == 0 else 'else if'} (kk == {kk}) {{")
        for i in range(mt):
            j, c = folded["a"][(kk, i)]
            fn = "tr_ldm4" if plan.a_kmajor else "tr_ldm4t"
            out.append(f"    {fn}(fa[buf][{i}], baseA + foA{j} + {c}u);")
        for p in range(ntile // 2):
            j, c = folded["b"][(kk, p)]
            fn = "tr_ldm4" if plan.b_kmajor else "tr_ldm4t"
            out.append(f"    {{ uint32_t r[4]; {fn}(r, baseB + foB{j} + {c}u);")
            out.append(f"      fb[buf][{2 * p}][0] = r[0]; fb[buf][{2 * p}][1] = r[1]; "
                       f"fb[buf][{2 * p + 1}][0] = r[2]; fb[buf][{2 * p + 1}][1] = r[3]; }}")
        out.append("  }")
    out.append("};")
    return "\n".join(out)
