"""The tensor-core core: GEMM, and conv2d as implicit GEMM, on ``mma.sync.m16n8k16`` (bf16/fp16 in, fp32
accumulate), sm_80 and later.

One block computes a ``bm x bn`` tile of C with ``(bm/wm) x (bn/wn)`` warps. Operand tiles stream
through a ``stages``-deep ring of shared-memory slots filled by 16-byte ``cp.async`` (zero-filled past
the edges, so any M, N, K runs); the matching ``cp.async.wait_group stages-2`` before each slot is
read. Shared tiles are swizzled by the layouts of ``plan.py`` (from ``emitters/layout.py``), read into
registers by ``ldmatrix`` (``.trans`` for mn-major tiles), with the fragments of the next k16 step
loaded while the current one multiplies (register double buffering). Blocks are rasterized in groups
of ``raster`` block rows so that neighbours share operand lines in L2. The epilogue applies the IR's
fused ops in order and stores two elements per 32-bit store where the row allows.

Operands whose rows are not 16-byte aligned (k or n not a multiple of 8) load through registers
element by element: slower, still correct. The convolution gathers A = im2col(x) on the fly: the pixel
coordinates of a tile line are computed once per block with magic-number division, the (c, r, s) of
every k either kept in a shared-memory table (hoisted) or recomputed per tile.
"""

from __future__ import annotations

from typing import Any

from .magic import as_int32, magic
from .plan import MmaPlan, mma_plan
from .render import PRELUDE, Rendered, prelude_sm80

EPI_CODE = {
    "bias": "v += bias_v;",
    "relu": "v = fmaxf(v, 0.0f);",
    "gelu": "v = tr_gelu(v);",
    "scale": "v *= alpha;",
    "residual": "v += res_v;",
}


def _cvt(dtype: str) -> tuple[str, str]:
    return ("tr_bf2f", "tr_f2bf") if dtype == "bf16" else ("tr_h2f", "tr_f2h")


def conv_scalars(op: Any) -> dict[str, int]:
    """The runtime integers of a conv kernel (magic numbers for every divisor it uses)."""
    pq = op.p * op.q
    rs = op.r * op.s
    d: dict[str, int] = {"C": op.c, "H": op.h, "W": op.w, "P": op.p, "Q": op.q, "R": op.r, "S": op.s,
                         "SH": op.stride[0], "SW": op.stride[1], "PH": op.padding[0], "PW": op.padding[1],
                         "DH": op.dilation[0], "DW": op.dilation[1]}
    for name, div in (("PQ", pq), ("Qd", op.q), ("Cd", op.c), ("Sd", op.s), ("RS", rs)):
        mul, shr = magic(div)
        d[f"{name}_mul"], d[f"{name}_shr"] = as_int32(mul), shr
    return d


CONV_ARGS = ("C", "H", "W", "P", "Q", "R", "S", "SH", "SW", "PH", "PW", "DH", "DW",
             "PQ_mul", "PQ_shr", "Qd_mul", "Qd_shr", "Cd_mul", "Cd_shr", "Sd_mul", "Sd_shr", "RS_mul", "RS_shr")


def _k_decompose(op: Any, k: str) -> str:
    """C statements setting kc, kr, ks (channel, filter row, filter column) of GEMM index ``k``."""
    if op.layout == "nhwc":  # k = (r * S + s) * C + c
        return (f"const int rs_ = tr_div({k}, (uint32_t)Cd_mul, (uint32_t)Cd_shr); const int kc = {k} - rs_ * C; "
                "const int kr = tr_div(rs_, (uint32_t)Sd_mul, (uint32_t)Sd_shr); const int ks = rs_ - kr * S;")
    return (f"const int kc = tr_div({k}, (uint32_t)RS_mul, (uint32_t)RS_shr); const int rs_ = {k} - kc * R * S; "
            "const int kr = tr_div(rs_, (uint32_t)Sd_mul, (uint32_t)Sd_shr); const int ks = rs_ - kr * S;")


def _k_offset(op: Any) -> str:
    """The x offset of (kc, kr, ks) relative to a pixel's (h0, w0) corner, and its (dh, dw)."""
    if op.layout == "nhwc":
        return "(kr * DH * W + ks * DW) * C + kc"
    return "kc * H * W + kr * DH * W + ks * DW"


def render_mma(op: Any, schedule: Any, arch: Any) -> Rendered:
    s = schedule
    conv = op.kind == "conv2d"
    plan: MmaPlan = mma_plan(op, s, arch_smem=arch.smem_optin)
    dtype = op.dtype.value
    to_f, from_f = _cvt(dtype)
    nt = s.block_threads
    warps_n = s.bn // s.wn
    mt, ntile = s.wm // 16, s.wn // 8
    kk_steps = s.bk // 16
    M, N, K = (op.gemm_m, op.gemm_n, op.gemm_k) if conv else (op.m, op.n, op.k)
    epi = ("bias",) if conv and op.bias else (() if conv else op.epilogue)
    # alignment of the global rows (16-byte cp.async needs rows starting on 16 bytes)
    if conv:
        a_vec = op.layout == "nhwc" and op.c % 8 == 0
        b_vec = K % 8 == 0
    else:
        a_vec = (K if plan.a_kmajor else M) % 8 == 0
        b_vec = (K if plan.b_kmajor else N) % 8 == 0
    hoist = plan.table_bytes > 0
    name = (f"tr_{op.kind}_mma_{dtype}_{'a' + ('k' if plan.a_kmajor else 'm')}{'b' + ('k' if plan.b_kmajor else 'n')}"
            f"_{s.name}" + (f"_{op.layout}" if conv else "") + ("_" + "_".join(epi) if epi else ""))
    name = name.replace("<", "").replace(">", "").replace(",", "")
    w: list[str] = [PRELUDE.replace("NARGS", "1"), prelude_sm80(dtype)]
    w.append(f"static __device__ __forceinline__ uint32_t offA(uint32_t line, uint32_t col) "
             f"{{ return {plan.a.c_offset('line', 'col')}; }}")
    w.append(f"static __device__ __forceinline__ uint32_t offB(uint32_t line, uint32_t col) "
             f"{{ return {plan.b.c_offset('line', 'col')}; }}")
    scal = ["int M", "int N", "int K", "float alpha"] + ([f"int {a}" for a in CONV_ARGS] if conv else [])
    params = (("x", "weight") if conv else ("a", "b")) + ("out", "bias", "residual", "M", "N", "K", "alpha") + \
        (CONV_ARGS if conv else ())
    sig = (f'extern "C" __global__ void __launch_bounds__({nt}, {s.min_blocks}) {name}('
           "const uint16_t* __restrict__ A, const uint16_t* __restrict__ B, uint16_t* __restrict__ Cout, "
           "const uint16_t* __restrict__ bias, const uint16_t* __restrict__ resid, " + ", ".join(scal) + ")")
    body: list[str] = []
    b = body.append
    b("extern __shared__ __align__(1024) unsigned char tr_smem[];")
    b("const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;")
    b(f"const int warp_m = warp / {warps_n}, warp_n = warp % {warps_n};")
    # rasterization: groups of RASTER block rows walk the N direction together
    b(f"const int grid_m = (M + {s.bm - 1}) / {s.bm}, grid_n = (N + {s.bn - 1}) / {s.bn};")
    b(f"const int pid = blockIdx.x, per_group = {s.raster} * grid_n, group = pid / per_group;")
    b(f"const int first_m = group * {s.raster}, gsize = min(grid_m - first_m, {s.raster});")
    b("const int in_group = pid - group * per_group;")
    b(f"const int m0 = (first_m + in_group % gsize) * {s.bm}, n0 = (in_group / gsize) * {s.bn};")
    b("const uint32_t smem0 = tr_smem_addr(tr_smem);")
    b(f"const uint32_t sA = smem0, sB = smem0 + {s.stages * plan.a.size_bytes}u;")
    b(f"const int ktiles = (K + {s.bk - 1}) / {s.bk};")
    a_lines, a_cpl = plan.a.rows, plan.a.cols // 8
    b_lines, b_cpl = plan.b.rows, plan.b.cols // 8
    a_iter = -(-(a_lines * a_cpl) // nt)
    b_iter = -(-(b_lines * b_cpl) // nt)
    if conv:
        _conv_prologue(op, s, plan, body, nt, a_iter, a_cpl, hoist)
    # ---- loaders
    loaders: list[str] = []
    loaders.append(_gemm_loader("B", "B", plan.b_kmajor, b_vec, b_lines, b_cpl, b_iter, nt, "n0", "N",
                                "K" if plan.b_kmajor else "N"))
    if conv:
        loaders.append(_conv_loader(op, a_vec, a_lines, a_cpl, a_iter, nt, hoist))
    else:
        loaders.append(_gemm_loader("A", "A", plan.a_kmajor, a_vec, a_lines, a_cpl, a_iter, nt, "m0", "M",
                                    "K" if plan.a_kmajor else "M"))
    for tag, kmaj, vec_, lines_, cpl_, it_, mn0, mnt in (
            ("A", plan.a_kmajor, a_vec, a_lines, a_cpl, a_iter, "m0", "M"),
            ("B", plan.b_kmajor, b_vec, b_lines, b_cpl, b_iter, "n0", "N")):
        if vec_ and nt % cpl_ == 0 and not (conv and tag == "A"):  # the conv A tile is a gather
            body.extend(_gemm_loader_setup(tag, kmaj, lines_, cpl_, it_, nt, mn0, mnt,
                                           "K" if kmaj else mnt).splitlines())
    b("auto load_tile = [&](int kt, int slot) {")
    b(f"  const int k0 = kt * {s.bk};")
    b(f"  const uint32_t baseA = sA + slot * {plan.a.size_bytes}u, baseB = sB + slot * {plan.b.size_bytes}u;")
    b("  if (kt < ktiles) {")
    for text in loaders:
        body.extend("    " + ln for ln in text.splitlines())
    b("  }")
    b("};")
    # ---- fragment loads
    b(f"float acc[{mt}][{ntile}][4];")
    b(f"#pragma unroll\nfor (int i = 0; i < {mt}; ++i)\n#pragma unroll\nfor (int j = 0; j < {ntile}; ++j)\n"
      "#pragma unroll\nfor (int e = 0; e < 4; ++e) acc[i][j][e] = 0.0f;")
    b(f"uint32_t fa[2][{mt}][4], fb[2][{ntile}][2];")
    b("const int lj = lane >> 3, lr = lane & 7;")
    b("auto load_frags = [&](int buf, int slot, int kk) {")
    b(f"  const uint32_t baseA = sA + slot * {plan.a.size_bytes}u, baseB = sB + slot * {plan.b.size_bytes}u;")
    b(f"  #pragma unroll\n  for (int i = 0; i < {mt}; ++i) {{")
    if plan.a_kmajor:
        b(f"    tr_ldm4(fa[buf][i], baseA + offA(warp_m * {s.wm} + i * 16 + (lane & 15), kk * 16 + (lane >> 4) * 8));")
    else:
        b(f"    tr_ldm4t(fa[buf][i], baseA + offA(kk * 16 + (lj >> 1) * 8 + lr, warp_m * {s.wm} + i * 16 + (lj & 1) * 8));")
    b("  }")
    b(f"  #pragma unroll\n  for (int p = 0; p < {ntile // 2}; ++p) {{")
    b("    uint32_t r[4];")
    if plan.b_kmajor:
        b(f"    tr_ldm4(r, baseB + offB(warp_n * {s.wn} + p * 16 + (lj >> 1) * 8 + lr, kk * 16 + (lj & 1) * 8));")
    else:
        b(f"    tr_ldm4t(r, baseB + offB(kk * 16 + (lj & 1) * 8 + lr, warp_n * {s.wn} + p * 16 + (lj >> 1) * 8));")
    b("    fb[buf][2 * p][0] = r[0]; fb[buf][2 * p][1] = r[1]; fb[buf][2 * p + 1][0] = r[2]; fb[buf][2 * p + 1][1] = r[3];")
    b("  }")
    b("};")
    # ---- pipeline
    st = s.stages
    b(f"#pragma unroll\nfor (int t = 0; t < {st - 1}; ++t) {{ load_tile(t, t); TR_CP_COMMIT(); }}")
    b(f"TR_CP_WAIT({st - 2});\n__syncthreads();")
    b("load_frags(0, 0, 0);")
    b(f"int read_slot = 0, write_slot = {st - 1};")
    b("for (int kt = 0; kt < ktiles; ++kt) {")
    b(f"  #pragma unroll\n  for (int kk = 0; kk < {kk_steps}; ++kk) {{")
    b(f"    if (kk == {kk_steps - 1}) {{")
    b(f"      TR_CP_WAIT({st - 2});\n      __syncthreads();")
    b(f"      read_slot = read_slot == {st - 1} ? 0 : read_slot + 1;")
    b("    }")
    b(f"    load_frags((kk + 1) & 1, read_slot, (kk + 1) % {kk_steps});")
    b("    if (kk == 0) {")
    b(f"      load_tile(kt + {st - 1}, write_slot); TR_CP_COMMIT();")
    b(f"      write_slot = write_slot == {st - 1} ? 0 : write_slot + 1;")
    b("    }")
    b(f"    #pragma unroll\n    for (int i = 0; i < {mt}; ++i)\n    #pragma unroll\n    for (int j = 0; j < {ntile}; ++j)")
    b("      tr_mma(acc[i][j], fa[kk & 1][i], fb[kk & 1][j]);")
    b("  }")
    b("}")
    b("TR_CP_WAIT(0);")
    # ---- epilogue
    body.extend(_epilogue(op, s, epi, to_f, from_f, conv, mt, ntile).splitlines())
    src = "\n".join(w) + "\n\n" + sig + " {\n" + "\n".join("    " + ln for ln in body) + "\n}\n"
    grid = (-(-M // s.bm) * -(-N // s.bn), 1, 1)
    meta = {
        "name": name,
        "tile": {"M": s.bm, "N": s.bn, "K": s.bk, "stages": s.stages, "warp": [s.wm, s.wn]},
        "fragments": {"mma": "mma.sync.aligned.m16n8k16", "dtype_in": dtype, "dtype_acc": "fp32",
                      "load": "ldmatrix.x4" + ("" if plan.a_kmajor else " (A .trans)") +
                              ("" if plan.b_kmajor else " (B .trans)")},
        "smem": {"a": plan.a.describe(), "b": plan.b.describe(), "a_vector_copy": a_vec, "b_vector_copy": b_vec,
                 "coordinate_table_bytes": plan.table_bytes},
        "launch": {"grid": list(grid), "block": [nt, 1, 1], "dynamic_smem": plan.smem_bytes},
        "epilogue": list(epi),
    }
    if conv:
        meta["conv"] = {"layout": op.layout, "hoist": "smem" if hoist else "recompute"}
    return Rendered(name, name, src, params, grid, (nt, 1, 1), plan.smem_bytes, meta)


def _gemm_loader(tag: str, ptr: str, kmajor: bool, vec: bool, lines: int, cpl: int, iters: int, nt: int,
                 mn0: str, mn_total: str, ld: str) -> str:
    """One operand tile from a plain row- or column-major matrix (``ld`` = its row length)."""
    if kmajor:
        coords = f"const int mn = {mn0} + line, kq = k0 + ch * 8;"
        row, col, ok = "mn", "kq", f"mn < {mn_total} && kq < K"
    else:
        coords = f"const int kq = k0 + line, mn = {mn0} + ch * 8;"
        row, col, ok = "kq", "mn", f"kq < K && mn < {mn_total}"
    total = lines * cpl
    guard = "" if total % nt == 0 else f"if (c < {total}) "
    out = [f"#pragma unroll\nfor (int i = 0; i < {iters}; ++i) {{",
           f"  const int c = tid + i * {nt};",
           f"  {guard}{{",
           f"    const int line = c / {cpl}, ch = c % {cpl};",
           f"    {coords}",
           f"    const uint32_t dst = base{tag} + off{tag}(line, ch * 8);"]
    if vec and nt % cpl == 0:  # addresses precomputed once per block (_gemm_loader_setup)
        step = nt // cpl
        if kmajor:
            ok_k = f"k0 + {tag}_ch * 8 < K"
            out = [f"{{ const bool okk = {ok_k};",
                   f"#pragma unroll\nfor (int i = 0; i < {iters}; ++i) {{",
                   f"  const bool ok = okk && {tag}_ok[i];",
                   f"  tr_cp16(base{tag} + {tag}_soff[i], ok ? {tag}_src[i] + k0 : {ptr}, ok ? 16u : 0u);",
                   "}", "}"]
        else:
            out = [f"#pragma unroll\nfor (int i = 0; i < {iters}; ++i) {{",
                   f"  const bool ok = {tag}_ok[i] && k0 + {tag}_line0 + i * {step} < K;",
                   f"  tr_cp16(base{tag} + {tag}_soff[i], ok ? {tag}_src[i] + (size_t)k0 * {ld} : {ptr}, "
                   "ok ? 16u : 0u);",
                   "}"]
        return "\n".join(out)
    if vec:
        out += [f"    const bool ok = {ok};",
                f"    const uint16_t* src = ok ? {ptr} + (size_t){row} * {ld} + {col} : {ptr};",
                "    tr_cp16(dst, src, ok ? 16u : 0u);"]
    else:
        inner = "kq + e" if kmajor else "kq"
        innermn = "mn" if kmajor else "mn + e"
        out += ["    uint32_t v[4] = {0u, 0u, 0u, 0u};",
                "    #pragma unroll\n    for (int e = 0; e < 8; ++e) {",
                f"      const int kk_ = {inner}, mm_ = {innermn};",
                f"      if (kk_ < K && mm_ < {mn_total}) v[e >> 1] |= (uint32_t){ptr}[(size_t)"
                + ("mm_ * " + ld + " + kk_" if kmajor else "kk_ * " + ld + " + mm_") + "] << ((e & 1) * 16);",
                "    }",
                "    tr_sts128(dst, v[0], v[1], v[2], v[3]);"]
    out += ["  }", "}"]
    return "\n".join(out)


def _gemm_loader_setup(tag: str, kmajor: bool, lines: int, cpl: int, iters: int, nt: int, mn0: str,
                       mn_total: str, ld: str) -> str:
    """Per-thread constants of a vectorised operand copy: every chunk a thread copies sits in the same
    16-byte column of the tile (``nt`` is a multiple of the chunks per line), so its shared offsets, source
    pointers and row checks are fixed for the whole k loop; each tile then adds k0 and copies."""
    total = lines * cpl
    out = [f"const int {tag}_ch = tid % {cpl}, {tag}_line0 = tid / {cpl};",
           f"uint32_t {tag}_soff[{iters}]; const uint16_t* {tag}_src[{iters}]; bool {tag}_ok[{iters}];",
           f"#pragma unroll\nfor (int i = 0; i < {iters}; ++i) {{",
           f"  const int line = {tag}_line0 + i * {nt // cpl};",
           f"  {tag}_soff[i] = off{tag}(line, {tag}_ch * 8);"]
    if kmajor:  # line: a row of the m/n extent; k advances along it
        out += [f"  const int mn = {mn0} + line;",
                f"  {tag}_ok[i] = line < {lines} && mn < {mn_total};",
                f"  {tag}_src[i] = {tag} + (size_t)({tag}_ok[i] ? mn : 0) * {ld} + {tag}_ch * 8;"]
    else:  # line: a k row; the chunk's m/n columns are fixed
        out += [f"  const int mn = {mn0} + {tag}_ch * 8;",
                f"  {tag}_ok[i] = line < {lines} && mn < {mn_total};",
                f"  {tag}_src[i] = {tag} + (size_t)line * {ld} + ({tag}_ok[i] ? mn : 0);"]
    del total
    out.append("}")
    return "\n".join(out)


def _conv_prologue(op: Any, s: Any, plan: MmaPlan, body: list[str], nt: int, a_iter: int, a_cpl: int,
                   hoist: bool) -> None:
    """Per-thread pixel corners of the A lines it loads (fixed for the whole k loop), and the k table."""
    b = body.append
    b(f"int px_base[{a_iter}], px_h[{a_iter}], px_w[{a_iter}];")
    b(f"#pragma unroll\nfor (int i = 0; i < {a_iter}; ++i) {{")
    b(f"  const int m = m0 + (tid + i * {nt}) / {a_cpl};")
    b("  const int img = tr_div(m, (uint32_t)PQ_mul, (uint32_t)PQ_shr), pq = m - img * P * Q;")
    b("  const int p = tr_div(pq, (uint32_t)Qd_mul, (uint32_t)Qd_shr), q = pq - p * Q;")
    b("  px_h[i] = p * SH - PH; px_w[i] = q * SW - PW;")
    if op.layout == "nhwc":
        b("  px_base[i] = ((img * H + px_h[i]) * W + px_w[i]) * C;")
    else:
        b("  px_base[i] = (img * C * H + px_h[i]) * W + px_w[i];")
    b("  if (m >= M) { px_h[i] = -(1 << 28); px_base[i] = 0; }  /* past the last pixel: every tap is padding */")
    b("}")
    if hoist:
        table_off = plan.stages * plan.stage_bytes
        b(f"int2* ktab = (int2*)(tr_smem + {table_off});")
        b(f"for (int k = tid; k < K; k += {nt}) {{")
        b("  " + _k_decompose(op, "k"))
        b(f"  ktab[k] = make_int2({_k_offset(op)}, ((kr * DH) << 16) | (ks * DW));")
        b("}")
        b("__syncthreads();")


def _conv_loader(op: Any, vec: bool, lines: int, cpl: int, iters: int, nt: int, hoist: bool) -> str:
    """The A tile of the implicit GEMM: rows are output pixels, k = (c, r, s) gathered from x."""
    total = lines * cpl
    guard = "" if total % nt == 0 else f"if (c < {total}) "

    def lookup(k: str) -> str:
        if hoist:
            return (f"const int2 t_ = ktab[{k}]; const int koff = t_.x, dh_ = t_.y >> 16, dw_ = t_.y & 0xffff;")
        return (_k_decompose(op, k) + f" const int koff = {_k_offset(op)}, dh_ = kr * DH, dw_ = ks * DW;")

    out = [f"#pragma unroll\nfor (int i = 0; i < {iters}; ++i) {{",
           f"  const int c = tid + i * {nt};",
           f"  {guard}{{",
           f"    const int line = c / {cpl}, ch = c % {cpl};",
           "    const int kq = k0 + ch * 8;",
           "    const uint32_t dst = baseA + offA(line, ch * 8);"]
    if vec:  # NHWC, C % 8 == 0: the 8 k of a chunk are 8 consecutive channels of one pixel
        out += ["    bool ok = false; const uint16_t* src = A;",
                "    if (kq < K) {",
                "      " + lookup("kq"),
                "      const int h = px_h[i] + dh_, w = px_w[i] + dw_;",
                "      ok = (unsigned)h < (unsigned)H && (unsigned)w < (unsigned)W;",
                "      if (ok) src = A + (px_base[i] + koff);",
                "    }",
                "    tr_cp16(dst, src, ok ? 16u : 0u);"]
    else:
        out += ["    uint32_t v[4] = {0u, 0u, 0u, 0u};",
                "    #pragma unroll\n    for (int e = 0; e < 8; ++e) {",
                "      const int kx = kq + e;",
                "      if (kx < K) {",
                "        " + lookup("kx"),
                "        const int h = px_h[i] + dh_, w = px_w[i] + dw_;",
                "        if ((unsigned)h < (unsigned)H && (unsigned)w < (unsigned)W)",
                "          v[e >> 1] |= (uint32_t)A[px_base[i] + koff] << ((e & 1) * 16);",
                "      }",
                "    }",
                "    tr_sts128(dst, v[0], v[1], v[2], v[3]);"]
    out += ["  }", "}"]
    return "\n".join(out)


def _epilogue(op: Any, s: Any, epi: tuple[str, ...], to_f: str, from_f: str, conv: bool, mt: int, ntile: int) -> str:
    nchw = conv and op.layout == "nchw"
    lines = [f"#pragma unroll\nfor (int i = 0; i < {mt}; ++i) {{",
             "  #pragma unroll\n  for (int half = 0; half < 2; ++half) {",
             f"    const int row = m0 + warp_m * {s.wm} + i * 16 + (lane >> 2) + half * 8;",
             "    if (row >= M) continue;"]
    if nchw:
        lines += ["    const int img = tr_div(row, (uint32_t)PQ_mul, (uint32_t)PQ_shr), pq = row - img * P * Q;",
                  "    uint16_t* crow = Cout + (size_t)img * N * P * Q + pq;"]
    else:
        lines += ["    uint16_t* crow = Cout + (size_t)row * N;"]
    if "residual" in epi:
        lines += ["    const uint16_t* rrow = resid + (size_t)row * N;"]
    lines += [f"    #pragma unroll\n    for (int j = 0; j < {ntile}; ++j) {{",
              f"      const int col = n0 + warp_n * {s.wn} + j * 8 + (lane & 3) * 2;",
              "      float out2[2];",
              "      #pragma unroll\n      for (int e = 0; e < 2; ++e) {",
              "        float v = acc[i][j][half * 2 + e];",
              "        const int cc = col + e;"]
    if "bias" in epi:
        lines += [f"        const float bias_v = cc < N ? {to_f}(bias[cc]) : 0.0f;"]
    if "residual" in epi:
        lines += [f"        const float res_v = (cc < N) ? {to_f}(rrow[cc]) : 0.0f;"]
    lines += ["        " + EPI_CODE[e] for e in epi]
    lines += ["        out2[e] = v;", "      }"]
    if nchw:
        lines += [f"      if (col < N) crow[(size_t)col * P * Q] = {from_f}(out2[0]);",
                  f"      if (col + 1 < N) crow[(size_t)(col + 1) * P * Q] = {from_f}(out2[1]);"]
    else:
        lines += ["      if (col + 1 < N && (N & 1) == 0) {",
                  f"        *(uint32_t*)(crow + col) = (uint32_t){from_f}(out2[0]) | ((uint32_t){from_f}(out2[1]) << 16);",
                  "      } else {",
                  f"        if (col < N) crow[col] = {from_f}(out2[0]);",
                  f"        if (col + 1 < N) crow[col + 1] = {from_f}(out2[1]);",
                  "      }"]
    lines += ["    }", "  }", "}"]
    return "\n".join(lines)
