"""The SIMT cp.async pipeline's lane fill (``fill`` "lanes" and "spread"): how an operand tile reaches
shared memory when its global rows are not 16-byte copies along the shared lines.

The "quads" fill (``simt_async.issue``) gives each thread 4 neighbouring elements of a global row, so a
warp's 4-byte copy touches 32 places 16 bytes apart: about four times the L1 sectors of a row read lane by
lane (the loss the two-stage kernel's ``simt_loads._lane_scalars`` removed, docs/benchmarks.md), and each
copy recomputes its coordinates and guards. Here neighbouring lanes copy neighbouring elements, one 4-byte
``cp.async`` each, as cuBLAS's ``..._ffma_aligna4`` kernel does for odd leading dimensions:

- a thread's elements lie whole tile lines apart, or a fixed column apart (threads and tile extents are
  powers of two), so each has a constant shared offset and a 32-bit global offset computed once (a k-major
  operand: one a copy; else one a column, the copies' lines a multiple of the leading dimension apart),
  added to the tile's base pointer; a k-major operand's base passes through an empty ``asm`` (``tr_base``)
  so that the compiler adds each offset to it instead of folding k0 into 64-bit offsets (4 instructions a
  copy before, 2 after, at 1000x999x1001 on sm_90a);
- the tile's rows (columns) past M (N) copy row M - 1 (column N - 1) instead: their products land only in
  outputs the epilogue does not store, so a k tile inside K copies without guards; the main loop runs
  those tiles in one loop and the rest (the tile that crosses K's end, zero-filled by src-size 0 from the
  operand's base, and the tiles past the end) in a second, so that the hot loop has no branches;
- "spread": the copies of the tile ``stages - 1`` ahead are spread over the current tile's k steps, a few
  between each step's FMAs, instead of issued together at its start; the commit follows the last.

An operand whose global rows do run along the shared lines and start on 16 bytes (B row-major, A
column-major, aligned) keeps the 16-byte copies of ``simt_async.issue``.
"""

from __future__ import annotations

from .plan import SIMT_PAD, SimtKernel

HELPERS = r"""static __device__ __forceinline__ void tr_cpf4(void* dst, const float* src) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n"
                 :: "r"((uint32_t)__cvta_generic_to_shared(dst)), "l"(src) : "memory");
}
static __device__ __forceinline__ const float* tr_base(const float* p) { asm("" : "+l"(p)); return p; }
"""


def _operand(k: SimtKernel, which: str) -> tuple[bool, bool, int]:
    """(k contiguous in global memory, 16-byte copies along the shared lines, the rows' contiguous length)."""
    op = k.op
    kmaj = op.layout_a == "row" if which == "a" else op.layout_b == "col"
    run = op.k if kmaj else (op.m if which == "a" else op.n)
    return kmaj, not kmaj and run % 4 == 0, run


def vector_operands(k: SimtKernel) -> list[tuple[str, bool, int]]:
    """(operand, k-major, rows' contiguous length) of the operands that keep 16-byte copies."""
    return [(w, *_operand(k, w)[::2]) for w in "ab" if _operand(k, w)[1]]


class Fill:
    """The lane fill of kernel ``k``: its setup, its copies of a k tile (whole or guarded) as a burst or
    spread over the k steps; ``vec`` the statements of the 16-byte copies (``vector_operands``), ``commit``
    the renderer's statement that closes a tile's group of copies."""

    def __init__(self, k: SimtKernel, vec: list[str], commit: str) -> None:
        self.k, self.s, self.vec, self.commit = k, k.s, vec, commit
        self.ops = [w for w in "ab" if not _operand(k, w)[1]]

    def _copies(self, which: str) -> list[tuple[int, int, int]]:
        """(tile line, column, copy) of each of a thread's copies from its first element (element
        ``tid + i * threads`` of the tile, lines of ``_line`` elements along the global rows)."""
        nt, line = self.k.threads, self._line(which)
        total = self._ext(which) * self.s.bk
        return [((i * nt) // line, (i * nt) % line, i) for i in range(-(-total // nt))]

    def _ext(self, which: str) -> int:
        return self.s.bm if which == "a" else self.s.bn

    def _line(self, which: str) -> int:
        return self.s.bk if _operand(self.k, which)[0] else self._ext(which)

    def setup(self) -> list[str]:
        """Each thread's first element of the tiles (line ``l0``, column ``c0``), its shared pointer (slot 0,
        k tile 0) and its global offsets (k tile 0, clamped to the matrix)."""
        out = []
        for w in self.ops:
            kmaj = _operand(self.k, w)[0]
            mn0, MN = ("m0", "M") if w == "a" else ("n0", "N")
            line, ld = self._line(w), ("K" if kmaj else MN)
            out += [f"const int {w}c0 = tid % {line}, {w}l0 = tid / {line};",
                    f"float* const {w}s0 = &{w.upper()}s[0]" + (f"[{w}c0][{w}l0];" if kmaj else f"[{w}l0][{w}c0];")]
            if kmaj:  # an mn index a line (clamped), k along it
                out += [f"int {w}o{i} = min({mn0} + {w}l0 + {dl}, {MN} - 1) * {ld} + {w}c0 + {dc};"
                        for dl, dc, i in self._copies(w)]
            else:  # k a line, an mn index along it (clamped)
                out += [f"int {w}o_{dc} = {w}l0 * {ld} + min({mn0} + {w}c0 + {dc}, {MN} - 1);"
                        for dc in sorted({dc for _, dc, _ in self._copies(w)})] + [f"int {w}ld = {ld};"]
        return out

    def whole_tiles(self) -> str:
        """``kt_whole``: the main-loop iterations whose tile ``stages - 1`` ahead lies inside K."""
        base = " - kt0" if self.s.split_k > 1 else ""
        return f"const int kt_whole = max(0, min(ktiles, K / {self.s.bk}{base}) - {self.s.stages - 1});"

    def _decls(self, tile: str) -> list[str]:
        """The tile's k row ``k0``, the global bases at it and the shared pointers into slot ``ws``."""
        s = self.s
        base = f"(kt0 + {tile}) * {s.bk}" if s.split_k > 1 else f"({tile}) * {s.bk}"
        out = [f"const int k0 = {base};"]
        for w in self.ops:
            X, slot = w.upper(), s.bk * (self._ext(w) + SIMT_PAD)
            if _operand(self.k, w)[0]:
                out.append(f"const float* const {w}g = tr_base({X} + k0);")
            else:  # a base a column group: its copies' lines a multiple of the leading dimension on
                out += [f"const float* const {w}g{dc} = {X} + (size_t)k0 * {w}ld + {w}o_{dc};"
                        for dc in sorted({dc for _, dc, _ in self._copies(w)})]
            out.append(f"float* const {w}w = {w}s0 + ws * {slot};")
        return out

    def _lines(self, guarded: bool) -> list[str]:
        """A thread's copies of the tile at ``k0`` into slot ``ws`` (A's, then B's), one statement each:
        unguarded (a tile inside K), or zero-filling past K (``guarded``)."""
        nt, out = self.k.threads, []
        for w in self.ops:
            kmaj = _operand(self.k, w)[0]
            pitch, total = self._ext(w) + SIMT_PAD, self._ext(w) * self.s.bk
            for dl, dc, i in self._copies(w):
                dst = f"{w}w + {dc * pitch + dl if kmaj else dl * pitch + dc}"
                src = f"{w}g + {w}o{i}" if kmaj else f"{w}g{dc} + {dl} * {w}ld" if dl else f"{w}g{dc}"
                if guarded:
                    kk = f"k0 + {w}c0 + {dc}" if kmaj else f"k0 + {w}l0 + {dl}"
                    stmt = f"{{ const bool ok_ = {kk} < K; tr_cpa4({dst}, ok_ ? {src} : {w.upper()}, ok_ ? 4u : 0u); }}"
                else:
                    stmt = f"tr_cpf4({dst}, {src});"
                # a thread past the tile's elements (fewer elements than threads) copies nothing
                out.append(f"if (tid < {total - i * nt}) {stmt}" if (i + 1) * nt > total else stmt)
        return out

    def burst(self, tile: str, guarded: bool) -> list[str]:
        """All copies of k tile ``tile`` (this block's) into slot ``ws``, then one commit either way (group
        ``t`` is tile ``t``); ``guarded``: only if the tile exists, zero-filled past K."""
        body = [*self._decls(tile), *self._lines(guarded), *self.vec]
        if guarded:
            return [f"if ({tile} < ktiles) {{", *("  " + x for x in body), "}", self.commit]
        return [*body, self.commit]

    def tile(self, tile: str, guarded: bool) -> tuple[list[str], list[str], list[str]]:
        """(head, steps, turn) of a main-loop iteration that fills k tile ``tile`` (``simt_async._kt_loop``):
        "lanes" all at the head; "spread" a share in each k step (as even as they go, the 16-byte copies in
        the first), the commit and the next write slot at the turn."""
        nxt = f"ws = ws + 1 == {self.s.stages} ? 0 : ws + 1;"
        if self.s.fill == "lanes":
            return ["  {", *("    " + x for x in self.burst(tile, guarded)), "  }", "  " + nxt], [], []
        lines, bk = self._lines(guarded), self.s.bk
        head = self._decls(tile) + ([f"const bool cp_live = {tile} < ktiles;"] if guarded else [])
        steps = []
        for j in range(bk):
            part = lines[j * len(lines) // bk:(j + 1) * len(lines) // bk] + (self.vec if j == 0 else [])
            if part:
                cond = f"k == {j}" + (" && cp_live" if guarded else "")
                steps += [f"if ({cond}) {{", *("  " + x for x in part), "}"]
        return ["  " + x for x in head], steps, [self.commit, nxt]
