"""The mma.sync core's loaders (``mma.py``): an operand tile from global into shared memory by 16-byte
``cp.async`` (zero-filled past the edges), or element by element through registers where the rows are
not 16-byte aligned; ``load_tile`` tests every row and k, ``load_tile_fast`` (blocks whose tiles all lie
inside the matrices) tests nothing and steps one pointer per operand, ``load_next`` feeds the persistent
grid. The conv's gathered A tile comes from ``conv.conv_loader``.
"""

from __future__ import annotations

from typing import Any

from .conv import conv_loader
from .plan import MmaKernel


def loader_step(k: MmaKernel, body: list[str]) -> None:
    """The global -> shared copies: per-thread setups of the vectorised operands, ``load_tile`` ("checked":
    tests every row and k) and ``load_tile_fast`` (blocks whose tiles all lie inside the matrices: tests
    nothing, steps one pointer per operand), and ``load_next`` of the persistent grid."""
    s, plan, nt, (lm0, ln0) = k.s, k.smem, k.threads, k.origin
    a_lines, a_cpl, a_iter = k.copies("a")
    b_lines, b_cpl, b_iter = k.copies("b")

    def loaders(fast: bool) -> list[str]:
        out = [_gemm_loader("B", "B", plan.b_kmajor, k.b_vec, b_lines, b_cpl, b_iter, nt, ln0, "N",
                            "K" if plan.b_kmajor else "N", fast)]
        if k.conv:
            out.append(conv_loader(k.op, k.a_vec, a_lines, a_cpl, a_iter, nt, k.hoist))
        else:
            out.append(_gemm_loader("A", "A", plan.a_kmajor, k.a_vec, a_lines, a_cpl, a_iter, nt, lm0, "M",
                                    "K" if plan.a_kmajor else "M", fast))
        return out

    for tag, kmaj, vec_, lines_, cpl_, it_, mn0, mnt in (
            ("A", plan.a_kmajor, k.a_vec, a_lines, a_cpl, a_iter, lm0, "M"),
            ("B", plan.b_kmajor, k.b_vec, b_lines, b_cpl, b_iter, ln0, "N")):
        if vec_ and nt % cpl_ == 0 and not (k.conv and tag == "A"):  # the conv A tile is a gather
            body.extend(_gemm_loader_setup(tag, kmaj, lines_, cpl_, it_, nt, mn0, mnt,
                                           "K" if kmaj else mnt, plan.a if tag == "A" else plan.b).splitlines())
    for fast in (False, True) if not (k.conv or k.persistent) else (False,):
        body += [f"auto load_tile{'_fast' if fast else ''} = [&](int kt, int slot) {{",
                 f"  const int k0 = kt * {s.bk};",
                 f"  const uint32_t baseA = sA + slot * {plan.a.size_bytes}u, baseB = sB + slot * {plan.b.size_bytes}u;",
                 "  if (kt < ktiles) {"]
        for text in loaders(fast):
            body.extend("    " + ln for ln in text.splitlines())
        body += ["  }", "};"]
    if k.persistent:  # the next k tile of the loader's tile; past its last, the next tile's origin and sources
        setups = " ".join(f"setup_{t}();" for t in ("A", "B") if f"auto setup_{t} =" in "\n".join(body))
        body += ["auto load_next = [&](int slot) {",
                 "  if (l_tile < tiles) {",
                 "    load_tile(l_kt, slot);",
                 "    if (++l_kt == ktiles) {",
                 "      l_kt = 0; l_tile += gridDim.x;",
                 f"      if (l_tile < tiles) {{ tile_origin(l_tile, lm0, ln0); {setups} }}",
                 "    }",
                 "  }",
                 "};"]


def _gemm_loader(tag: str, ptr: str, kmajor: bool, vec: bool, lines: int, cpl: int, iters: int, nt: int,
                 mn0: str, mn_total: str, ld: str, fast: bool = False) -> str:
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
    if vec and nt % cpl == 0:  # addresses precomputed once per tile origin (_gemm_loader_setup)
        step = nt // cpl
        koff = "(size_t)k0" if kmajor else f"(size_t)k0 * {ld}"
        out = ["{", f"const uint16_t* p_ = {tag}_src + {koff};"]
        if fast:  # a whole tile inside the matrix: no checks, one pointer stepped by a row distance
            for i in range(iters):
                out.append(f"tr_cp16(base{tag} + {_soff(tag, i)}, p_, 16u);" +
                           (f" p_ += {tag}_rs;" if i + 1 < iters else ""))
            out.append("}")
            return "\n".join(out)
        if kmajor:
            out.append(f"const bool okk = k0 + {tag}_ch * 8 < K;")
        for i in range(iters):
            ok = f"(({tag}_okm >> {i}) & 1)"
            cond = f"okk && {ok}" if kmajor else f"{ok} && k0 + {tag}_line0 + {i * step} < K"
            src = f"p_ + {i} * {tag}_rs" if i else "p_"
            out.append(f"{{ const bool ok = {cond}; "
                       f"tr_cp16(base{tag} + {_soff(tag, i)}, ok ? {src} : {ptr}, ok ? 16u : 0u); }}")
        out.append("}")
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


def _soff(tag: str, i: int) -> str:
    return f"{tag}_soff{i}"


def _gemm_loader_setup(tag: str, kmajor: bool, lines: int, cpl: int, iters: int, nt: int, mn0: str,
                       mn_total: str, ld: str, layout: Any) -> str:
    """Per-thread constants of a vectorised operand copy: every chunk a thread copies sits in the same
    16-byte column of the tile (``nt`` is a multiple of the chunks per line), so its shared offsets, source
    pointer and row checks are fixed while the tile origin stays (``setup_X()`` recomputes them for a new
    one); each k tile then adds k0 and copies. The shared offsets of a thread's later chunks are its first
    plus a constant where the swizzle allows (checked on the layout for every thread), so they cost no
    register; the row checks are one bit mask."""
    import numpy as np

    step = nt // cpl
    tid = np.arange(nt)
    line0, ch = tid // cpl, tid % cpl
    first = np.asarray(layout.offset(np.minimum(line0, layout.rows - 1), ch * 8), dtype=np.int64)
    out = [f"const int {tag}_ch = tid % {cpl}, {tag}_line0 = tid / {cpl};",
           f"const uint32_t {_soff(tag, 0)} = off{tag}({tag}_line0, {tag}_ch * 8);"]
    for i in range(1, iters):
        line = line0 + i * step
        live = line < layout.rows
        off = np.asarray(layout.offset(np.where(live, line, 0), ch * 8), dtype=np.int64)
        d = (off - first)[live]
        if d.size and (d == d[0]).all():
            out.append(f"const uint32_t {_soff(tag, i)} = {_soff(tag, 0)} + {int(d[0])}u;")
        else:
            out.append(f"const uint32_t {_soff(tag, i)} = off{tag}({tag}_line0 + {i * step}, {tag}_ch * 8);")
    out += [f"const uint16_t* {tag}_src; uint32_t {tag}_okm;",
            f"const size_t {tag}_rs = (size_t){step} * {ld};  /* elements between a thread's chunks */",
            f"auto setup_{tag} = [&]() {{",
            f"  {tag}_okm = 0u;",
            f"  #pragma unroll\n  for (int i = 0; i < {iters}; ++i) {{",
            f"    const int line = {tag}_line0 + i * {step};"]
    if kmajor:  # line: a row of the m/n extent; k advances along it
        out += [f"    if (line < {lines} && {mn0} + line < {mn_total}) {tag}_okm |= 1u << i;",
                "  }",
                f"  {tag}_src = {tag} + (size_t)({mn0} + {tag}_line0) * {ld} + {tag}_ch * 8;"]
    else:  # line: a k row; the chunk's m/n columns are fixed
        out += [f"    if (line < {lines} && {mn0} + {tag}_ch * 8 < {mn_total}) {tag}_okm |= 1u << i;",
                "  }",
                f"  {tag}_src = {tag} + (size_t){tag}_line0 * {ld} + ({mn0} + {tag}_ch * 8);"]
    out += ["};", f"setup_{tag}();"]
    return "\n".join(out)
