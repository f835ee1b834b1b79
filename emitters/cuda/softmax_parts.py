"""What every form of the softmax core shares: the vector loads and stores by storage type and width, the
kernel's head (prelude, converters, the (max, sum) fold, the signature), and the slots of rows whose length
is not a multiple of the vector.

Row ``r`` starts at element ``r * cols``: with ``cols`` a multiple of ``vec`` every row starts on a 16-byte
vector. Otherwise the forms address the row through the aligned vectors ("slots") it overlaps: slot ``i``
holds elements ``i * vec - off .. i * vec - off + vec - 1`` of the row (``off`` = the row's start modulo
``vec``). Slots ``h .. nf - 1`` lie inside the row and take one 16-byte access; the first (the head, when
``off`` > 0) and the last (the tail) are partial and are read and written element by element, the
elements outside the row read as -inf and never written.
"""

from __future__ import annotations

import math

from ..cstyle import Param
from .render import CudaRenderer

LOADS = {  # (storage, vec) -> (C type of one vector access, code unpacking it into float f[vec])
    ("fp32", 1): ("float", "f[0] = v;"),
    ("fp32", 2): ("float2", "f[0] = v.x; f[1] = v.y;"),
    ("fp32", 4): ("float4", "f[0] = v.x; f[1] = v.y; f[2] = v.z; f[3] = v.w;"),
    ("h", 1): ("uint16_t", "f[0] = CVT(v);"),
    ("h", 2): ("uint32_t", "f[0] = CVT((uint16_t)v); f[1] = CVT((uint16_t)(v >> 16));"),
    ("h", 4): ("uint2", "f[0] = CVT((uint16_t)v.x); f[1] = CVT((uint16_t)(v.x >> 16)); "
                        "f[2] = CVT((uint16_t)v.y); f[3] = CVT((uint16_t)(v.y >> 16));"),
    ("h", 8): ("uint4", "f[0] = CVT((uint16_t)v.x); f[1] = CVT((uint16_t)(v.x >> 16)); "
                        "f[2] = CVT((uint16_t)v.y); f[3] = CVT((uint16_t)(v.y >> 16)); "
                        "f[4] = CVT((uint16_t)v.z); f[5] = CVT((uint16_t)(v.z >> 16)); "
                        "f[6] = CVT((uint16_t)v.w); f[7] = CVT((uint16_t)(v.w >> 16));"),
}
STORES = {
    ("fp32", 1): "v = f[0];",
    ("fp32", 2): "v = make_float2(f[0], f[1]);",
    ("fp32", 4): "v = make_float4(f[0], f[1], f[2], f[3]);",
    ("h", 1): "v = BACK(f[0]);",
    ("h", 2): "v = P2(f[0], f[1]);",
    ("h", 4): "v = make_uint2(P2(f[0], f[1]), P2(f[2], f[3]));",
    ("h", 8): "v = make_uint4(P2(f[0], f[1]), P2(f[2], f[3]), P2(f[4], f[5]), P2(f[6], f[7]));",
}


def header(r: CudaRenderer, dtype: str, name: str, threads: int, extra: tuple[Param, ...] = (),
           bounds: tuple[int, ...] | None = None, shared: bool = True) -> list[str]:
    """The prelude, the (max, sum) fold, the kernel's signature (X, Y, rows, cols, then ``extra``; launch
    bounds ``bounds``, else the block size) and, when ``shared``, the block reduction's arrays."""
    warps = threads // 32
    # the 16-bit converters behind CVT and BACK (fp32 rows define them unused, spelled as for fp16)
    cvt, back = r.converters("bf16" if dtype == "bf16" else "fp16")
    params = [Param("X", dtype, True, True, True), Param("Y", dtype, True, False, True),
              Param("rows", "int"), Param("cols", "int"), *extra]
    return [r.prelude(1),
            f"#define CVT {cvt}\n#define BACK {back}",
            f"{r.inline_prefix}uint32_t P2(float a, float b) "
            f"{{ return (uint32_t){back}(a) | ((uint32_t){back}(b) << 16); }}",
            f"{r.inline_prefix}void tr_fold(float& m, float& s, float m2, float s2) {{",
            "    const float mx = fmaxf(m, m2);",
            "    s = (m == TR_NEG_INF ? 0.0f : s * __expf(m - mx)) + (m2 == TR_NEG_INF ? 0.0f : s2 * __expf(m2 - mx));",
            "    m = mx;",
            "}",
            r.render_kernel_signature(name, params, launch_bounds=bounds or (threads,)) + " {",
            *([f"    __shared__ float red_m[{warps}], red_s[{warps}];"] if shared else [])]


def block_merge(warps: int, indent: str, barrier: str) -> list[str]:
    """Lines merging every thread's running (max, sum) pair ``(m, s)`` into the block's: a warp shuffle
    tree, then the warps' pairs through shared memory (``red_m``, ``red_s``, read after the renderer's
    ``barrier``), in warp order."""
    i = indent
    return [f"{i}#pragma unroll\n{i}for (int o = 16; o > 0; o >>= 1) {{",
            f"{i}    const float m2 = __shfl_xor_sync(0xffffffffu, m, o), s2 = __shfl_xor_sync(0xffffffffu, s, o);",
            f"{i}    tr_fold(m, s, m2, s2);",
            f"{i}}}",
            f"{i}if ((tid & 31) == 0) {{ red_m[tid >> 5] = m; red_s[tid >> 5] = s; }}",
            f"{i}{barrier}",
            f"{i}m = red_m[0]; s = red_s[0];\n{i}#pragma unroll\n{i}for (int w = 1; w < {warps}; ++w) "
            "tr_fold(m, s, red_m[w], red_s[w]);"]


def vector_access(dtype: str, vec: int) -> tuple[str, str, str]:
    """(C type of one ``vec``-element access, code unpacking it into ``float f[vec]``, code packing ``f``
    back into ``v``) for rows of ``dtype``."""
    key = "fp32" if dtype == "fp32" else "h"
    return (*LOADS[(key, vec)], STORES[(key, vec)])


def row_vectors(cols: int, vec: int) -> int:
    """Slots a row may overlap: ``cols / vec`` when every row starts on a vector, else one partial slot
    more for a row starting mid-vector (its offset is at most ``vec - gcd(cols, vec)``)."""
    if cols % vec == 0:
        return cols // vec
    return -(-(cols + vec - math.gcd(cols, vec)) // vec)


def odd_row(vec: int, vtype: str, row: str, n: str, indent: str) -> list[str]:
    """Declarations locating row ``row`` (``n`` elements: ``cols``, or 0 for a row past the end) in slots:
    ``off``, ``nv`` (slots overlapped), full slots ``h .. nf - 1``, vector pointers ``xr``/``yr`` and
    element pointers ``xe``/``ye`` at the row's first slot."""
    i = indent
    return [f"{i}const size_t start = (size_t)({row}) * (size_t)cols;",
            f"{i}const int off = (int)(start & {vec - 1});  /* the row's elements start mid-vector */",
            f"{i}const int nv = (off + {n} + {vec - 1}) / {vec}, nf = (off + {n}) / {vec}, h = off ? 1 : 0;",
            f"{i}const auto* xe = X + (start - off);",
            f"{i}auto* ye = Y + (start - off);",
            f"{i}const {vtype}* xr = (const {vtype}*)xe;",
            f"{i}{vtype}* yr = ({vtype}*)ye;"]


def load_slot(dtype: str, vec: int, vtype: str, unpack: str, i: str, load: str, indent: str,
              n: str = "cols") -> list[str]:
    """Slot ``i`` into ``float f[vec]``: one vector access (``load``: the access's spelling, e.g.
    ``__ldcs(xr + {i})``) when it lies inside the row, else element by element, -inf outside the row."""
    cvt = "" if dtype == "fp32" else "CVT"
    d = indent
    return [f"{d}if ({i} >= h && {i} < nf) {{ const {vtype} v = {load}; {unpack} }}",
            f"{d}else {{\n{d}    #pragma unroll\n{d}    for (int e = 0; e < {vec}; ++e) {{",
            f"{d}        const int q = {i} * {vec} + e;",
            f"{d}        f[e] = (unsigned)(q - off) < (unsigned){n} ? {cvt}(xe[q]) : TR_NEG_INF;",
            f"{d}    }}\n{d}}}"]


def store_slot(dtype: str, vec: int, vtype: str, pack: str, i: str, indent: str, n: str = "cols") -> list[str]:
    """``float f[vec]`` into slot ``i``: one streaming vector store inside the row, else the row's
    elements one by one."""
    back = "" if dtype == "fp32" else "BACK"
    d = indent
    return [f"{d}if ({i} >= h && {i} < nf) {{ {vtype} v; {pack} __stcs(yr + {i}, v); }}",
            f"{d}else {{\n{d}    #pragma unroll\n{d}    for (int e = 0; e < {vec}; ++e) {{",
            f"{d}        const int q = {i} * {vec} + e;",
            f"{d}        if ((unsigned)(q - off) < (unsigned){n}) ye[q] = {back}(f[e]);",
            f"{d}    }}\n{d}}}"]
