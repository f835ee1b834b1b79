"""The SIMT core's two-stage main loop (``stages`` 2, ``simt.py``): each operand tile moves from global
memory into registers (``loaders``: ``simt_loads.py``'s code) while the current one is multiplied, then
into the other of two k-major shared buffers, one barrier a k tile; each k step reads a lane's fragments
(two float4 of A, two of B: ``frags`` 1, or a step ahead with ``frags`` 2) for its 8 x 8 outer product.
The cp.async pipeline (``stages`` 3..4) is ``simt_async.py``.
"""

from __future__ import annotations

from . import simt_async
from .plan import SimtKernel
from .render import CudaRenderer
from .simt_loads import conv_operand, operand
from .simt_split import k_range


def loaders(k: SimtKernel, r: CudaRenderer) -> tuple[str, tuple[str, str, int], tuple[str, str, int]]:
    """(conv prologue, (load, store, registers) of A, of B): global -> registers -> shared."""
    s, nt = k.s, k.threads
    op = k.op
    if k.conv:  # B: filters K x (C R S), k contiguous: the GEMM loader of a column-major B
        pro, a_load, a_store, a_iters = conv_operand(op, s, nt, k.hoist, r.barrier)
        b_load, b_store, b_iters, _ = operand("b", True, k.mnk[2], s, nt, packed=False)
    else:
        pro = ""
        a_kmaj, b_kmaj = op.layout_a == "row", op.layout_b == "col"
        a_load, a_store, a_iters, _ = operand("a", a_kmaj, op.k if a_kmaj else op.m, s, nt)
        b_load, b_store, b_iters, _ = operand("b", b_kmaj, op.k if b_kmaj else op.n, s, nt)
    return pro, (a_load, a_store, a_iters), (b_load, b_store, b_iters)


def mainloop(k: SimtKernel, a: tuple[str, str, int], b: tuple[str, str, int], r: CudaRenderer) -> list[str]:
    """The first tile stored, then per k tile: the next one loaded into registers, the 8 x 8 outer
    products from 16-byte shared reads, the registers stored to the other buffer, one barrier."""
    s = k.s
    (a_load, a_store, a_iters), (b_load, b_store, b_iters) = a, b
    return [f"float4 ra[{a_iters}], rb[{b_iters}];",
            "float acc[8][8];",
            "#pragma unroll\nfor (int i = 0; i < 8; ++i)\n#pragma unroll\nfor (int j = 0; j < 8; ++j) acc[i][j] = 0.0f;",
            *k_range(s),
            a_load, b_load, a_store, b_store,
            r.barrier,
            f"const int am = warp_m * {s.wm} + lm * 4, bn_ = warp_n * {s.wn} + ln * 4;",
            *(_kloop_frags2(k, a, b, r) if s.frags == 2 else _kloop(k, a, b, r))]


def _kloop(k: SimtKernel, a: tuple[str, str, int], b: tuple[str, str, int], r: CudaRenderer) -> list[str]:
    """Per k tile: the next tile's global loads, the ``bk`` steps of 8 x 8 outer products (each reading its
    fragments, then multiplying), the stores to the other buffer and the barrier."""
    s = k.s
    (a_load, a_store, _), (b_load, b_store, _) = a, b
    return ["for (int kt = 0; kt < ktiles; ++kt) {",
            f"  k0 = (kt + 1) * {s.bk};" if s.split_k == 1 else f"  k0 = (kt0 + kt + 1) * {s.bk};",
            "  const bool more = kt + 1 < ktiles;",
            "  if (more) {", a_load, b_load, "  }",
            f"  #pragma unroll\n  for (int k = 0; k < {s.bk}; ++k) {{",
            "    float a[8], b[8];",
            "    const float4 a0 = *(const float4*)&As[buf][k][am], "
            f"a1 = *(const float4*)&As[buf][k][am + {s.wm // 2}];",
            "    const float4 b0 = *(const float4*)&Bs[buf][k][bn_], "
            f"b1 = *(const float4*)&Bs[buf][k][bn_ + {s.wn // 2}];",
            "    a[0] = a0.x; a[1] = a0.y; a[2] = a0.z; a[3] = a0.w; a[4] = a1.x; a[5] = a1.y; a[6] = a1.z; a[7] = a1.w;",
            "    b[0] = b0.x; b[1] = b0.y; b[2] = b0.z; b[3] = b0.w; b[4] = b1.x; b[5] = b1.y; b[6] = b1.z; b[7] = b1.w;",
            simt_async.fma_block(s),
            "  }",
            "  if (more) {",
            "    buf ^= 1;", a_store, b_store,
            "    " + r.barrier,
            "  }",
            "}"]


def _fragment(k: SimtKernel, i: str, buf: str, kk: str) -> list[str]:
    """Fragment set ``i`` (A's two float4 of 4 rows, half a warp tile apart; B's two of 4 columns) read from
    shared buffer ``buf`` at k row ``kk``."""
    s = k.s
    return [f"fa[{i}][0] = *(const float4*)&As[{buf}][{kk}][am]; "
            f"fa[{i}][1] = *(const float4*)&As[{buf}][{kk}][am + {s.wm // 2}];",
            f"fb[{i}][0] = *(const float4*)&Bs[{buf}][{kk}][bn_]; "
            f"fb[{i}][1] = *(const float4*)&Bs[{buf}][{kk}][bn_ + {s.wn // 2}];"]


def _kloop_frags2(k: SimtKernel, a: tuple[str, str, int], b: tuple[str, str, int], r: CudaRenderer) -> list[str]:
    """``frags`` 2: each k step first reads the next step's fragments into the other register set, then
    multiplies the ones read a step earlier. The last step of a tile stores the next tile to the other buffer
    and waits at the barrier before reading that tile's first fragments, so that their latency hides behind
    the step's 64 FMAs instead of stalling the warps after the barrier (one barrier a tile still: every read
    of the buffer being written was issued before the previous tile's barrier)."""
    s = k.s
    (a_load, a_store, _), (b_load, b_store, _) = a, b
    uses = ("a[0] = fa[c][0].x; a[1] = fa[c][0].y; a[2] = fa[c][0].z; a[3] = fa[c][0].w; "
            "a[4] = fa[c][1].x; a[5] = fa[c][1].y; a[6] = fa[c][1].z; a[7] = fa[c][1].w;",
            "b[0] = fb[c][0].x; b[1] = fb[c][0].y; b[2] = fb[c][0].z; b[3] = fb[c][0].w; "
            "b[4] = fb[c][1].x; b[5] = fb[c][1].y; b[6] = fb[c][1].z; b[7] = fb[c][1].w;")
    return ["float4 fa[2][2], fb[2][2];",
            *_fragment(k, "0", "0", "0"),
            "for (int kt = 0; kt < ktiles; ++kt) {",
            f"  k0 = (kt + 1) * {s.bk};" if s.split_k == 1 else f"  k0 = (kt0 + kt + 1) * {s.bk};",
            "  const bool more = kt + 1 < ktiles;",
            "  if (more) {", a_load, b_load, "  }",
            f"  #pragma unroll\n  for (int k = 0; k < {s.bk}; ++k) {{",
            f"    if (k == {s.bk - 1} && more) {{",
            "      buf ^= 1;", a_store, b_store,
            "      " + r.barrier,
            "    }",
            "    const int c = k & 1;",
            *("    " + x for x in _fragment(k, "c ^ 1", "buf", f"(k + 1) % {s.bk}")),
            "    float a[8], b[8];",
            *("    " + x for x in uses),
            simt_async.fma_block(s),
            "  }",
            "}"]
