"""The SIMT GEMM's cp.async pipeline (``stages`` 3..4): global -> shared without registers in between.

The two-stage kernel (``simt.py``) moves each operand tile through registers, which costs a thread 8-16
registers and lets only one tile be in flight. Here every element goes straight to its place in the
k-major shared tile by ``cp.async``: 16 bytes where the global rows run along the tile's contiguous side and
start on 16 bytes (A column-major, B row-major), else one 4-byte copy per element (the transposing case: A
row-major is stored ``[k][m]``), zero-filled past the edges. ``stages - 1`` tiles are in flight while one
is multiplied; one barrier a tile: the slot written at tile ``kt`` was last read at tile ``kt - 1``, before
the barrier every warp passed to reach ``kt``.
"""

from __future__ import annotations

from typing import Any

from . import simt_fill
from .plan import SimtKernel
from .render import CudaRenderer

HELPERS = r"""static __device__ __forceinline__ void tr_cpa16(void* dst, const float* src, uint32_t bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n"
                 :: "r"((uint32_t)__cvta_generic_to_shared(dst)), "l"(src), "r"(bytes) : "memory");
}
static __device__ __forceinline__ void tr_cpa4(void* dst, const float* src, uint32_t bytes) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n"
                 :: "r"((uint32_t)__cvta_generic_to_shared(dst)), "l"(src), "r"(bytes) : "memory");
}
"""


def issue(which: str, kmaj: bool, contiguous_len: int, s: Any, nt: int) -> str:
    """The copies of operand ``which``'s tile at ``k0`` into slot ``ws``: each thread 4 elements along the
    global rows' contiguous side per slot, as the two-stage loader (``simt._operand``) maps them."""
    if which == "a":
        mn0, mn_total, ext, smem, P = "m0", "M", s.bm, "As", "A"
    else:
        mn0, mn_total, ext, smem, P = "n0", "N", s.bn, "Bs", "B"
    ld = "K" if kmaj else mn_total
    vec = not kmaj and contiguous_len % 4 == 0
    along = s.bk if kmaj else ext
    per_line, total = along // 4, (ext * s.bk) // 4
    out = []
    for i in range(-(-total // nt)):
        e = f"(tid + {i * nt})"
        guard = "" if total % nt == 0 or (i + 1) * nt <= total else f"if ({e} < {total}) "
        if kmaj:
            coords = f"const int kk = ({e} % {per_line}) * 4, mm = {e} / {per_line};"
            g = f"(size_t)({mn0} + mm) * {ld} + k0 + kk"
            line_ok, along_ok = f"{mn0} + mm < {mn_total}", "k0 + kk{} < K"
            dst = f"&{smem}[ws][kk + {{}}][mm]"
        else:
            coords = f"const int mm = ({e} % {per_line}) * 4, kk = {e} / {per_line};"
            g = f"(size_t)(k0 + kk) * {ld} + {mn0} + mm"
            line_ok, along_ok = "k0 + kk < K", f"{mn0} + mm{{}} < {mn_total}"
            dst = f"&{smem}[ws][kk][mm + {{}}]"
        if vec:
            body = (f"const bool ok_ = {line_ok} && {along_ok.format('')}; "
                    f"tr_cpa16({dst.format(0)}, ok_ ? {P} + {g} : {P}, ok_ ? 16u : 0u);")
        elif contiguous_len % 4 == 0:  # rows start on 16 bytes: the 4 elements are all inside or all outside
            body = (f"const bool ok_ = {line_ok} && {along_ok.format('')}; const float* p_ = ok_ ? {P} + {g} : {P}; "
                    + " ".join(f"tr_cpa4({dst.format(j)}, p_ + {j}, ok_ ? 4u : 0u);" for j in range(4)))
        else:
            cps = []
            for j in range(4):
                ok = f"ok_ && {along_ok.format(f' + {j}' if j else '')}"
                cps.append(f"tr_cpa4({dst.format(j)}, {ok} ? p_ + {j} : {P}, {ok} ? 4u : 0u);")
            body = f"const bool ok_ = {line_ok}; const float* p_ = ok_ ? {P} + {g} : {P}; " + " ".join(cps)
        out.append(f"{guard}{{ {coords} {body} }}")
    return "\n".join(out)


def issue_tile(k: SimtKernel, tile: str, r: CudaRenderer) -> str:
    """Both operands of k tile ``tile`` (this block's) into slot ``ws``, when it exists; then one commit
    either way, so that group ``t`` is always tile ``t``."""
    s, op = k.s, k.op
    a_kmaj, b_kmaj = op.layout_a == "row", op.layout_b == "col"
    a = issue("a", a_kmaj, op.k if a_kmaj else op.m, s, k.threads)
    b = issue("b", b_kmaj, op.k if b_kmaj else op.n, s, k.threads)
    base = f"(kt0 + {tile})" if s.split_k > 1 else f"({tile})"
    return "\n".join([f"if ({tile} < ktiles) {{", f"  const int k0 = {base} * {s.bk};", a, b, "}", r.asm("cp.async.commit")])


def fma_block(s: Any) -> str:
    """A k step's 64 FMAs of the 8 x 8 outer product: row by row (``order`` "rows"), or column by column with
    the rows walked down and up in turn ("snake": neighbouring FMAs share an operand, which the register reuse
    cache then supplies, fewer register-bank conflicts in ptxas's allocation)."""
    tn = s.thread_n
    if s.order == "rows":
        return (f"    #pragma unroll\n    for (int i = 0; i < 8; ++i)\n    #pragma unroll\n    for (int j = 0; j < {tn}; ++j) "
                "acc[i][j] = fmaf(a[i], b[j], acc[i][j]);")
    steps = [(i if j % 2 == 0 else 7 - i, j) for j in range(tn) for i in range(8)]
    return "\n".join("    " + " ".join(f"acc[{i}][{j}] = fmaf(a[{i}], b[{j}], acc[{i}][{j}]);" for i, j in steps[r:r + 8])
                     for r in range(0, 8 * tn, 8))


def _next(v: str, s: Any) -> str:
    return f"{v} = {v} + 1 == {s.stages} ? 0 : {v} + 1;"


def mainloop(k: SimtKernel, r: CudaRenderer) -> list[str]:
    """The prologue's ``stages - 1`` tiles in flight, then per k tile: the tile ``stages - 1`` ahead issued
    into the slot freed at the last barrier, the ``bk`` steps of 8 x 8 outer products on slot ``rs``, the
    wait for the next tile and the barrier (with ``frags`` 2 inside the last step, before the next tile's
    first fragments are read). ``fill`` "lanes"/"spread" (``simt_fill``): the k tiles whose copies lie
    inside K in one loop, unguarded, the rest in a second."""
    s = k.s
    pro = [f"const int ktiles = (K + {s.bk - 1}) / {s.bk};"] if s.split_k == 1 else [
        f"const int kt_all = (K + {s.bk - 1}) / {s.bk};",
        f"const int kt0 = (int)(((long long)part * kt_all) / {s.split_k}), "
        f"ktiles = (int)(((long long)(part + 1) * kt_all) / {s.split_k}) - kt0;"]
    tn, nb = s.thread_n, s.thread_n // 4  # a thread's columns, as float4 sub-tiles
    pro += [f"float acc[8][{tn}];",
            f"#pragma unroll\nfor (int i = 0; i < 8; ++i)\n#pragma unroll\nfor (int j = 0; j < {tn}; ++j) acc[i][j] = 0.0f;",
            "int ws = 0, rs = 0;"]
    ahead = f"kt + {s.stages - 1}"
    if s.fill == "quads":
        for t in range(s.stages - 1):
            pro += [issue_tile(k, str(t), r), _next("ws", s)]
        loops = [_kt_loop(k, r, "for (int kt = 0; kt < ktiles; ++kt) {", [issue_tile(k, ahead, r), _next("ws", s)], [], [])]
    else:
        f = simt_fill.Fill(k, [x for w, kmaj, run in simt_fill.vector_operands(k)
                               for x in issue(w, kmaj, run, s, k.threads).split("\n")], r.asm("cp.async.commit"))
        pro += f.setup()
        for t in range(s.stages - 1):
            pro += ["{", *f.burst(str(t), True), "}", _next("ws", s)]
        pro += [f.whole_tiles(), "int kt = 0;"]
        loops = [_kt_loop(k, r, f"for (; kt < {loop}; ++kt) {{", *f.tile(ahead, guarded))
                 for loop, guarded in (("kt_whole", False), ("ktiles", True))]
    pro += [*_wait(s, r), f"const int am = warp_m * {s.wm} + lm * 4, bn_ = warp_n * {s.wn} + ln * 4;"]
    if s.frags == 2:
        pro += [f"float4 fa[2][2], fb[2][{nb}];", *_fragment(s, "0", "0", "0")]
    return pro + [x for loop in loops for x in loop] + [r.asm("cp.async.wait", n=0)]


def _wait(s: Any, r: CudaRenderer) -> list[str]:
    return [r.asm("cp.async.wait", n=s.stages - 2), r.barrier]


def _kt_loop(k: SimtKernel, r: CudaRenderer, opener: str, head: list[str], steps: list[str], turn: list[str]) -> list[str]:
    """One loop over k tiles: ``head`` at the top of each (the copies issued there, or what the steps'
    copies need), ``steps`` inside each k step (copies spread over them), ``turn`` once the last step's
    copies are issued (commit, next write slot), then the wait and barrier for the next tile."""
    s = k.s
    tn, nb = s.thread_n, s.thread_n // 4
    two, wait = s.frags == 2, _wait(s, r)
    body = [opener, *head, f"  #pragma unroll\n  for (int k = 0; k < {s.bk}; ++k) {{", *("    " + x for x in steps)]
    if two:
        body += [f"    if (k == {s.bk - 1}) {{", *("      " + x for x in turn), *("      " + w for w in wait),
                 "      " + _next("rs", s), "    }",
                 "    const int c = k & 1;",
                 *("    " + x for x in _fragment(s, "c ^ 1", "rs", f"(k + 1) % {s.bk}"))]
    else:
        body += ["    const int c = 0;", f"    float4 fa[1][2], fb[1][{nb}];",
                 *("    " + x for x in _fragment(s, "0", "rs", "k"))]
    body += [f"    float a[8], b[{tn}];",
             "    a[0] = fa[c][0].x; a[1] = fa[c][0].y; a[2] = fa[c][0].z; a[3] = fa[c][0].w; "
             "a[4] = fa[c][1].x; a[5] = fa[c][1].y; a[6] = fa[c][1].z; a[7] = fa[c][1].w;",
             "    " + " ".join(f"b[{4 * q + e}] = fb[c][{q}].{x};" for q in range(nb) for e, x in enumerate("xyzw")),
             fma_block(s),
             "  }"]
    if not two:
        body += [*("  " + x for x in turn), *("  " + w for w in wait), "  " + _next("rs", s)]
    return body + ["}"]


def _fragment(s: Any, i: str, buf: str, kk: str) -> list[str]:
    """A's two float4 (4 rows each, half the warp tile apart) and B's ``thread_n / 4`` (4 columns each, a
    ``thread_n / 4``-th of the warp tile apart) of k row ``kk`` of slot ``buf`` into fragment set ``i``."""
    nb = s.thread_n // 4
    return [f"fa[{i}][0] = *(const float4*)&As[{buf}][{kk}][am]; "
            f"fa[{i}][1] = *(const float4*)&As[{buf}][{kk}][am + {s.wm // 2}];",
            " ".join(f"fb[{i}][{q}] = *(const float4*)&Bs[{buf}][{kk}][bn_{f' + {q * s.wn // nb}' if q else ''}];"
                     for q in range(nb))]
