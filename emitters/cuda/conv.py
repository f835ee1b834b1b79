"""The implicit-GEMM convolution's address code, shared by the mma.sync and SIMT cores: the runtime
integers of a conv (magic numbers for every divisor, ``magic.py``), the decomposition of a GEMM k into
(channel, filter row, filter column), the per-thread pixel corners and the gathered A tile of the mma
core's loader.
"""

from __future__ import annotations

from typing import Any

from .magic import as_int32, magic
from .plan import MmaPlan


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


def k_decompose(op: Any, k: str) -> str:
    """C statements setting kc, kr, ks (channel, filter row, filter column) of GEMM index ``k``."""
    if op.layout == "nhwc":  # k = (r * S + s) * C + c
        return (f"const int rs_ = tr_div({k}, (uint32_t)Cd_mul, (uint32_t)Cd_shr); const int kc = {k} - rs_ * C; "
                "const int kr = tr_div(rs_, (uint32_t)Sd_mul, (uint32_t)Sd_shr); const int ks = rs_ - kr * S;")
    return (f"const int kc = tr_div({k}, (uint32_t)RS_mul, (uint32_t)RS_shr); const int rs_ = {k} - kc * R * S; "
            "const int kr = tr_div(rs_, (uint32_t)Sd_mul, (uint32_t)Sd_shr); const int ks = rs_ - kr * S;")


def k_offset(op: Any) -> str:
    """The x offset of (kc, kr, ks) relative to a pixel's (h0, w0) corner, and its (dh, dw)."""
    if op.layout == "nhwc":
        return "(kr * DH * W + ks * DW) * C + kc"
    return "kc * H * W + kr * DH * W + ks * DW"


def gemm_scalars(op: Any) -> dict[str, float | int]:
    """The runtime scalars of a GEMM-shaped kernel (mma and SIMT cores): the implicit GEMM's for a conv."""
    if op.kind == "conv2d":
        return {"M": op.gemm_m, "N": op.gemm_n, "K": op.gemm_k, "alpha": 1.0, **conv_scalars(op)}
    return {"M": op.m, "N": op.n, "K": op.k, "alpha": op.alpha}


def conv_prologue(op: Any, s: Any, plan: MmaPlan, body: list[str], nt: int, a_iter: int, a_cpl: int,
                  hoist: bool, barrier: str) -> None:
    """Per-thread pixel corners of the A lines it loads (fixed for the whole k loop), and the k table
    (published by the renderer's ``barrier``)."""
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
        b("  " + k_decompose(op, "k"))
        b(f"  ktab[k] = make_int2({k_offset(op)}, ((kr * DH) << 16) | (ks * DW));")
        b("}")
        b(barrier)


def conv_loader(op: Any, vec: bool, lines: int, cpl: int, iters: int, nt: int, hoist: bool) -> str:
    """The A tile of the implicit GEMM: rows are output pixels, k = (c, r, s) gathered from x."""
    total = lines * cpl
    guard = "" if total % nt == 0 else f"if (c < {total}) "

    def lookup(k: str) -> str:
        if hoist:
            return (f"const int2 t_ = ktab[{k}]; const int koff = t_.x, dh_ = t_.y >> 16, dw_ = t_.y & 0xffff;")
        return (k_decompose(op, k) + f" const int koff = {k_offset(op)}, dh_ = kr * DH, dw_ = ks * DW;")

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
