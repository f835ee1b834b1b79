"""The small-channel convolution's device code (the plan and index math: ``stem.py``).

A block: its first tile's input rows in flight while the filter slice and the k table go into shared
memory once; then per tile (whole output rows of one image) the input rows by ``cp.async`` (``issue``;
the head chunk's bytes before a row zeroed by the thread that copied them once they land, ``fix``), the
gathered A fragments against ldmatrix'd filter fragments, the epilogue on the fragments into a shared
output tile, 16-byte stores.
"""

from __future__ import annotations

from typing import Any

from ..cstyle import Param
from ..gpu_epilogue import Dest, Loop, Operands, Style, Walk, direct_store
from .render import CudaRenderer, Rendered
from .stem import Geometry, StemSchedule, blocks_per_sm, epilogue, fragment_table, geometry, row_base


def _constants(op: Any, s: StemSchedule, g: Geometry) -> str:
    (sh, sw), (ph, pw), (dh, dw) = op.stride, op.padding, op.dilation
    vals = {"CV_N": op.n, "CV_H": op.h, "CV_W": op.w, "CV_C": op.c, "CV_K": op.k, "CV_P": op.p, "CV_Q": op.q,
            "CV_SH": sh, "CV_SW": sw, "CV_PH": ph, "CV_PW": pw, "CV_DH": dh, "CV_DW": dw,
            "RSC": g.rsc, "KP": g.kp, "STEPS": g.steps, "SPW": -(-g.steps // s.ksplit), "BN": g.bn, "NT": g.nt,
            "MT": g.mt, "WM": g.wm, "KS": s.ksplit, "ROWS": g.rows, "BM": g.bm, "IH": g.ih, "IWC": g.iw * op.c,
            "IWS": g.iws, "PADL": g.padl, "NCH": g.nch, "PATCH": g.patch, "TILES": g.tiles,
            "PBLK": -(-op.p // g.rows), "WSTRIDE": g.wstride, "SSTRIDE": g.sstride, "NTHREADS": 32 * s.warps,
            "STAGES": s.stages, "WC": op.w * op.c, "XTOTAL": op.n * op.h * op.w * op.c,
            "PWC": pw * op.c, "PADC": pw * op.c + max(0, g.iw - pw - op.w) * op.c}
    vals.update({f"OFF_{k.upper()}": v for k, v in g.offsets.items()})
    table = ", ".join(str(v) for row in fragment_table(op, g) for v in row)
    rows = g.wm * g.mt * 16
    bases = ", ".join(str(row_base(op, g, m)) for m in range(rows))
    return "\n".join([*(f"#define {k} {v}" for k, v in vals.items()),
                      f"__constant__ int KTAB[{g.kp}] = {{{table}}};  /* [step][quad lane][4]: k offsets */",
                      f"__constant__ int RBASE[{rows}] = {{{bases}}};  /* tile pixel -> patch offset */"])


IDS = ["const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, q = lane & 3;",
       "const int wm = warp % WM, ks = warp / WM;",
       "const int n0 = blockIdx.y * BN;"]


def _setup(g: Geometry) -> list[str]:
    """The filter slice (zero past K and past R*S*C), the k table, the bias, each thread's pixel bases, while
    the first tile's rows are in flight (the loop's first barrier publishes them). The patches need no
    zeroing: a tile writes every element it reads (tests/emitters/cuda/test_cuda_stem.py's model starts from NaN)."""
    out = [
        "{  /* the block's filter rows are contiguous: 16-byte loads, scattered into rows of KP */",
        "    const int lim = min(BN, CV_K - n0) * RSC;",
        "    const uint16_t* src = Wt + (size_t)n0 * RSC;",
        "    for (int c = tid; c < (lim + 7) / 8; c += NTHREADS) {",
        "        const int e = 8 * c;",
        "        uint16_t v[8];",
        "        if (e + 8 <= lim) {",
        "            const uint4 u = __ldg((const uint4*)(src + e));",
        "            const uint32_t w4[4] = {u.x, u.y, u.z, u.w};",
        "            #pragma unroll",
        "            for (int i = 0; i < 8; ++i) v[i] = (uint16_t)(w4[i >> 1] >> ((i & 1) * 16));",
        "        } else {",
        "            #pragma unroll",
        "            for (int i = 0; i < 8; ++i) v[i] = e + i < lim ? src[e + i] : (uint16_t)0;",
        "        }",
        "        #pragma unroll",
        "        for (int i = 0; i < 8; ++i) {",
        "            const int n = (e + i) / RSC, k = e + i - n * RSC;",
        "            if (e + i < lim) ws[n * WSTRIDE + k] = v[i];",
        "        }",
        "    }",
        "    for (int e = tid; e < BN * (KP - RSC); e += NTHREADS)  /* zero columns past R*S*C */",
        "        ws[(e / (KP - RSC)) * WSTRIDE + RSC + e % (KP - RSC)] = (uint16_t)0;",
        "    for (int e = max(0, CV_K - n0) * KP + tid; e < BN * KP; e += NTHREADS)  /* rows past K */",
        "        ws[(e / KP) * WSTRIDE + e % KP] = (uint16_t)0;",
        "}",
        "for (int e = tid; e < KP; e += NTHREADS) ktab[e] = KTAB[e];",
        "for (int e = tid; e < BN; e += NTHREADS) sbias[e] = bias != nullptr && n0 + e < CV_K ? TO_F(bias[n0 + e]) : 0.0f;",
        "int rb[MT][2];  /* the patch offset of the pixel of fragment rows g and g + 8 (every tile alike) */",
        "#pragma unroll",
        "for (int i = 0; i < MT; ++i) {",
        "    #pragma unroll",
        "    for (int h = 0; h < 2; ++h) {",
        "        const int m = (wm * MT + i) * 16 + g + 8 * h;",
        "        rb[i][h] = RBASE[m];",
        "    }",
        "}",
    ]
    if g.kp == g.rsc:  # no padded columns to zero
        out = [ln for ln in out if "(KP - RSC)" not in ln]
    return out


def _copies() -> list[str]:
    """``issue(t, buf)``: tile t's input rows into patch stage ``buf``, 16-byte chunks in the row's global
    phase (zero-filled past the row and past x), the padding columns the chunks do not cover and
    out-of-range rows zeroed by plain stores; ``fix(t, buf)``: after its own copies land, the owner of each
    row's head chunk zeroes what it copied from before the row. Every element is written once per stage
    and tile, by one thread (a plain store beside another thread's cp.async to the same element is a
    write-write race, however both end: compute-sanitizer's racecheck)."""
    head = ["    const int img = t / PBLK, h0 = (t - img * PBLK) * (ROWS * CV_SH) - CV_PH;",
            "    const int e0 = (img * CV_H + h0) * WC, d0 = PADL + (e0 & 7);",
            "    uint16_t* pb = patch + buf * PATCH;"]
    return [
        "auto issue = [&](int t, int buf) {",
        "    if (t >= TILES) return;", *head,
        "    const uint32_t pa = tr_smem_addr(pb);",
        "    for (int c = tid; c < IH * NCH; c += NTHREADS) {",
        "        const int ih = c / NCH, j = c - ih * NCH;",
        "        if ((unsigned)(h0 + ih) >= (unsigned)CV_H) continue;",
        "        const int er = e0 + ih * WC, d = d0 + ih * IWS, gs = (er & ~7) + 8 * j;",
        "        const int n = min(8, min(er + WC, XTOTAL) - gs);",
        "        tr_cp16(pa + 2u * (uint32_t)((d & ~7) + 8 * j), n > 0 ? (const void*)(X + gs) : (const void*)X,",
        "                n > 0 ? 2u * (uint32_t)n : 0u);",
        "    }",
        "    if (PADC > 0) {  /* only what no copy writes: one write per element (racecheck: no WAW with cp.async) */",
        "        for (int e = tid; e < IH * PADC; e += NTHREADS) {",
        "            const int ih = e / PADC, z = e - ih * PADC;",
        "            if ((unsigned)(h0 + ih) >= (unsigned)CV_H) continue;",
        "            const int d = d0 + ih * IWS, at = z < PWC ? d - PWC + z : d + WC + (z - PWC);",
        "            if (at < (d & ~7) || at >= (d & ~7) + 8 * NCH) pb[at] = (uint16_t)0;",
        "        }",
        "    }",
        "    if (h0 < 0 || h0 + IH > CV_H) {  /* rows of padding */",
        "        for (int e = tid; e < IH * IWC; e += NTHREADS) {",
        "            const int ih = e / IWC, z = e - ih * IWC;",
        "            if ((unsigned)(h0 + ih) < (unsigned)CV_H) continue;",
        "            pb[d0 + ih * IWS - PWC + z] = (uint16_t)0;",
        "        }",
        "    }",
        "};",
        "auto fix = [&](int t, int buf) {",
        "    if (t >= TILES) return;", *head,
        "    #pragma unroll",
        "    for (int ih = 0; ih < IH; ++ih) {",
        "        if ((ih * NCH) % NTHREADS != tid || (unsigned)(h0 + ih) >= (unsigned)CV_H) continue;",
        "        const int d = d0 + ih * IWS;",
        "        for (int z = d & ~7; z < d; ++z) pb[z] = (uint16_t)0;",
        "    }",
        "};",
    ]


def _mainloop(g: Geometry, s: StemSchedule) -> list[str]:
    """The warp's k steps: 4 tap offsets (one 16-byte table read), the filter fragments of all n8 tiles
    (ldmatrix.x4 two at a time), then per m16 tile 8 gathered halves packed into the A fragment."""
    kk = "u" if s.ksplit == 1 else "ks * SPW + u"
    out = ["float acc[MT][NT][4];",
           "#pragma unroll\nfor (int i = 0; i < MT; ++i)\n#pragma unroll\nfor (int j = 0; j < NT; ++j)\n"
           "#pragma unroll\nfor (int e = 0; e < 4; ++e) acc[i][j][e] = 0.0f;",
           "const uint16_t* xp = patch + buf * PATCH + (d0 - PWC);  /* column w = -PW of patch row 0 */",
           "#pragma unroll",
           "for (int u = 0; u < SPW; ++u) {",
           f"    const int kk = {kk};",
           "    if (kk < STEPS) {",
           "        const int4 o = ((const int4*)ktab)[kk * 4 + q];",
           "        uint32_t b[NT][2];",
           "        #pragma unroll",
           "        for (int p = 0; p < NT / 2; ++p) {",
           "            uint32_t r4[4];",
           "            tr_ldm4(r4, wb + 2u * (uint32_t)(p * 16 * WSTRIDE + kk * 16));",
           "            b[2 * p][0] = r4[0]; b[2 * p][1] = r4[1]; b[2 * p + 1][0] = r4[2]; b[2 * p + 1][1] = r4[3];",
           "        }",
           "        #pragma unroll",
           "        for (int i = 0; i < MT; ++i) {",
           "            if ((wm * MT + i) * 16 >= BM) continue;",
           "            const uint16_t* x0 = xp + rb[i][0];",
           "            const uint16_t* x1 = xp + rb[i][1];",
           "            const uint32_t a[4] = {(uint32_t)x0[o.x] | ((uint32_t)x0[o.y] << 16),",
           "                                   (uint32_t)x1[o.x] | ((uint32_t)x1[o.y] << 16),",
           "                                   (uint32_t)x0[o.z] | ((uint32_t)x0[o.w] << 16),",
           "                                   (uint32_t)x1[o.z] | ((uint32_t)x1[o.w] << 16)};",
           "            #pragma unroll",
           "            for (int j = 0; j < NT; ++j) tr_mma(acc[i][j], a, b[j]);",
           "        }",
           "    }",
           "}"]
    return out


def _reduce_and_stage(op: Any, s: StemSchedule, r: CudaRenderer) -> list[str]:
    """k-split partials summed in warp order (ks = 1, 2, ...), the fused ops in fp32, two rounded values
    a 32-bit store into the output tile."""
    epi, from_f = epilogue(op), r.converters(op.dtype.value)[1]
    out: list[str] = []
    if s.ksplit > 1:
        idx = "((((KX * WM + wm) * MT + i) * NT + j) * 4 + e) * 32 + lane"
        loop = ("#pragma unroll\nfor (int i = 0; i < MT; ++i)\n#pragma unroll\nfor (int j = 0; j < NT; ++j)\n"
                "#pragma unroll\nfor (int e = 0; e < 4; ++e) ")
        out += ["if (ks > 0) {", "    const int KX = ks - 1;", "    " + loop + f"red[{idx}] = acc[i][j][e];", "}",
                r.barrier,
                "if (ks == 0) {", "    for (int KX = 0; KX < KS - 1; ++KX) {",
                "        " + loop + f"acc[i][j][e] += red[{idx}];", "    }", "}"]
    walk = Walk((Loop("for (int i = 0; i < MT; ++i)"),
                 Loop("for (int h = 0; h < 2; ++h)", ("const int m = (wm * MT + i) * 16 + g + 8 * h;",)),
                 Loop("for (int j = 0; j < NT; ++j)", ("const int col = j * 8 + 2 * q;", "float v2[2];"))),
                ("float v = acc[i][j][2 * h + e];",), 2, "v2")
    to_tile = Dest("", from_f, vector="(stg + m * SSTRIDE + col)", inside=2)  # the tile holds whole pairs
    return out + ["if (ks == 0) {",
                  *([f"    const float alpha = {float(getattr(op, 'alpha', 1.0))!r}f;"] if "scale" in epi else []),
                  *direct_store(walk, epi, Operands("sbias[col + e]"), to_tile, Style("    ", 1, flat_element=True)),
                  "}"]


def _store(op: Any) -> list[str]:
    """The tile's rows (contiguous in NHWC) from the output tile: 16-byte vectors where K % 8 == 0."""
    out = ["{",
           "    const int img = t / PBLK, p0 = (t - img * PBLK) * ROWS;",
           "    const int npix = min(ROWS, CV_P - p0) * CV_Q;",
           "    uint16_t* ob = Cout + (size_t)(img * CV_P + p0) * CV_Q * CV_K + n0;"]
    if op.k % 8 == 0:
        out += ["    for (int c = tid; c < npix * (BN / 8); c += NTHREADS) {",
                "        const int m = c / (BN / 8), ch = c - m * (BN / 8);",
                "        if (n0 + ch * 8 < CV_K)",
                "            *(uint4*)(ob + (size_t)m * CV_K + ch * 8) = *(const uint4*)(stg + m * SSTRIDE + ch * 8);",
                "    }"]
    else:
        out += ["    for (int c = tid; c < npix * BN; c += NTHREADS) {",
                "        const int m = c / BN, col = c - m * BN;",
                "        if (n0 + col < CV_K) ob[(size_t)m * CV_K + col] = stg[m * SSTRIDE + col];",
                "    }"]
    return out + ["}"]


def _tile_loop(op: Any, g: Geometry, s: StemSchedule, r: CudaRenderer) -> list[str]:
    """Tiles blockIdx.x, + gridDim.x, ...: two stages copy the next tile's rows before this one's mmas;
    one stage copies them after the output tile is staged, while its stores go out."""
    two = s.stages == 2
    out = ["const uint32_t wb = tr_smem_addr(ws) + 2u * (uint32_t)(((lane >> 4) * 8 + (lane & 7)) * WSTRIDE "
           "+ ((lane >> 3) & 1) * 8);",
           "int buf = 0;",
           "for (int t = blockIdx.x; t < TILES; t += gridDim.x) {"]
    if two:
        out += ["    issue(t + gridDim.x, buf ^ 1);", "    TR_CP_COMMIT();", "    TR_CP_WAIT(1);"]
    else:
        out += ["    TR_CP_WAIT(0);"]
    out += ["    fix(t, buf);", "    " + r.barrier,
            "    const int d0 = PADL + (((t / PBLK) * CV_H + (t % PBLK) * (ROWS * CV_SH) - CV_PH) * WC & 7);"]
    body = [*_mainloop(g, s), *_reduce_and_stage(op, s, r), r.barrier]
    if not two:
        body += ["issue(t + gridDim.x, 0);", "TR_CP_COMMIT();"]
    body += _store(op)
    if two:
        body.append("buf ^= 1;")
    out += ["    " + ln for b in body for ln in b.splitlines()]
    return out + ["}"]


def render(op: Any, schedule: Any, arch: Any) -> tuple[Rendered, dict[str, float | int]]:
    return render_stem(op, schedule, arch), {}


def render_stem(op: Any, schedule: StemSchedule, arch: Any, renderer: CudaRenderer | None = None) -> Rendered:
    r = renderer or CudaRenderer()
    s = schedule
    g = geometry(op, s)
    dtype = op.dtype.value
    to_f = r.converters(dtype)[0]
    occ = blocks_per_sm(g, s, arch)
    threads = 32 * s.warps
    name = f"tr_stem_{dtype}_{s.name}"
    params = [Param("X", dtype, True, True, True), Param("Wt", dtype, True, True, True),
              Param("Cout", dtype, True, False, True), Param("bias", dtype, True, True, True)]
    signature = r.render_kernel_signature(name, params, launch_bounds=(threads, occ))
    body = ["extern __shared__ __align__(16) unsigned char tr_smem[];",
            "uint16_t* ws = (uint16_t*)(tr_smem + OFF_W);",
            "int* ktab = (int*)(tr_smem + OFF_KTAB);",
            "float* sbias = (float*)(tr_smem + OFF_BIAS);",
            "uint16_t* patch = (uint16_t*)(tr_smem + OFF_PATCH);",
            "uint16_t* stg = (uint16_t*)(tr_smem + OFF_STAGE);",
            "float* red = (float*)(tr_smem + OFF_RED);",
            "(void)red;",
            *IDS, *_copies(), "issue(blockIdx.x, 0);", "TR_CP_COMMIT();", *_setup(g),
            *_tile_loop(op, g, s, r)]
    src = "\n".join([r.prelude(1), r.tensor_prelude(dtype), _constants(op, s, g), f"#define TO_F {to_f}",
                     signature + " {",
                     *("    " + ln for b in body for ln in b.splitlines()), "}"]) + "\n"
    grid = (max(1, min(g.tiles, max(1, arch.sm_count) * occ // g.ntiles)), g.ntiles, 1)
    meta = {"name": name,
            "tile": {"rows": g.rows, "pixels": g.bm, "channels": g.bn, "warps": s.warps, "ksplit": s.ksplit,
                     "m16_per_warp": g.mt, "stages": s.stages, "reduction": g.rsc, "reduction_padded": g.kp},
            "fragments": {"dtype_in": dtype, "dtype_acc": "fp32", "mma": "m16n8k16 (A gathered, B by ldmatrix)"},
            "launch": {"grid": list(grid), "block": [threads, 1, 1], "dynamic_smem": g.smem,
                       "blocks_per_sm": occ, "tiles": g.tiles},
            "patch": {"rows": g.ih, "row_stride": g.iws, "elements": g.patch},
            "epilogue": list(epilogue(op))}
    return Rendered(name, name, src, ("x", "weight", "out", "bias"), grid, (threads, 1, 1), g.smem, meta)
