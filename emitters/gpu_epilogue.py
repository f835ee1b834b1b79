"""How a GPU kernel's accumulators leave for C, CUDA's and HIP's alike (CUTLASS's collective epilogue, small):
the fused epilogue applied to each fp32 value, then one writer per way out.

- ``element_ops``: the epilogue at one element of C: its operands read (``Operands``: into locals or in
  place, each under its own guard), then emitters/gpu.py's statements over ``v``. Every writer calls it.
- ``direct_store``: from registers to memory. The kernel describes its register tile (``Walk``: its loops,
  each with the lines that open its body, the indices, guards and row pointers; the lines that open an
  element, its value ``v`` and its column); the writer applies the epilogue to each element and stores
  each group of adjacent columns (``Dest``): one vector store where the row allows, element by element
  up to N otherwise.
- ``staged_store``: through a tile in shared memory (``Staging``): the kernel's fragments staged in fp32
  pass by pass, then the block reads 8 columns a thread, applies the epilogue and stores 16 bytes.

The TMA store is Hopper's alone (emitters/cuda/hopper/epilogue.py) and calls ``element_ops`` and ``pack2``.
Texts only: the converters (``tr_f2bf``, ``tr_from_float``) and the barrier come from each backend's renderer.
"""

from __future__ import annotations

from dataclasses import dataclass

from tracea.kernels.epilogue import statements

from .gpu import EPILOGUE


@dataclass(frozen=True)
class Operands:
    """How the epilogue reads its operands at one element: each expression (already in fp32) with the
    condition under which it may be read ("": always; else 0 is read outside it), read into the locals
    ``bias_v`` and ``res_v`` first (``preload``) or in place in the statements; ``before``: lines that read
    a group's operands ahead of its elements (as one vector)."""

    bias: str = "0.0f"
    residual: str = "0.0f"
    bias_guard: str = ""
    residual_guard: str = ""
    preload: bool = True
    before: tuple[str, ...] = ()


def _guarded(expr: str, guard: str) -> str:
    return f"{guard} ? {expr} : 0.0f" if guard else expr


def element_ops(epi: tuple[str, ...], ops: Operands) -> list[str]:
    """The lines applying the chain ``epi`` (kernels/epilogue.py's order) to fp32 ``v``."""
    bias, residual = _guarded(ops.bias, ops.bias_guard), _guarded(ops.residual, ops.residual_guard)
    if not ops.preload:
        return statements(epi, EPILOGUE, bias=bias, residual=residual)
    loads = [f"const float {name} = {expr};" for op, name, expr in (("bias", "bias_v", bias), ("residual", "res_v", residual))
             if op in epi]
    return loads + statements(epi, EPILOGUE, bias="bias_v", residual="res_v")


def pack2(convert: str, lo: str, hi: str) -> str:
    """Two fp32 values as one 32-bit word of 16-bit C elements, ``lo`` in the low half."""
    return f"(uint32_t){convert}({lo}) | ((uint32_t){convert}({hi}) << 16)"


@dataclass(frozen=True)
class Loop:
    """One loop of a register tile's walk (or a guard's block, ``unroll`` off), with the lines that open its
    body; ``braces`` off: a loop whose body is the next loop alone."""

    head: str
    body: tuple[str, ...] = ()
    unroll: bool = True
    braces: bool = True


@dataclass(frozen=True)
class Walk:
    """A thread's accumulators as C's elements: the loops over them, outermost first, and the lines that
    open one element (its value ``v``, its column). ``group`` adjacent columns are stored together, their
    values gathered in the array ``values`` (declared by the innermost loop's body) over ``e``."""

    loops: tuple[Loop, ...]
    element: tuple[str, ...] = ()
    group: int = 1
    values: str = ""


@dataclass(frozen=True)
class Dest:
    """Where a group of C's elements goes: ``element``, the element's lvalue (``{c}`` its column expression,
    ``{pc}`` the same parenthesised where compound, ``{k}`` its place in the group); ``convert`` from fp32
    to C's type ("": C is fp32); ``col`` the group's first column; ``vector`` the group's address for one
    vector store ("": element by element), under the run-time condition ``aligned`` beside the bounds;
    ``inside``, how many of the group's leading columns are known to lie inside N; ``decl``, lines before
    the stores."""

    element: str
    convert: str = ""
    col: str = "col"
    vector: str = ""
    aligned: str = ""
    inside: int = 0
    decl: tuple[str, ...] = ()

    def at(self, k: int | str) -> str:
        c = self.col if k == 0 else f"{self.col} + {k}"
        return self.element.format(c=c, pc=c if k == 0 else f"({c})", k=k)

    def value(self, x: str) -> str:
        return f"{self.convert}({x})" if self.convert else x


def row_pointer(ctype: str, nchw: bool) -> tuple[list[str], str]:
    """``crow``, C's row ``row`` (an NCHW conv's output pixel: its channels ``P * Q`` apart), and the
    element template that indexes it by column."""
    if nchw:
        return (["const int img = tr_div(row, (uint32_t)PQ_mul, (uint32_t)PQ_shr), pq = row - img * P * Q;",
                 f"{ctype}* crow = Cout + (size_t)img * N * P * Q + pq;"], "crow[(size_t){pc} * P * Q]")
    return [f"{ctype}* crow = Cout + (size_t)row * N;"], "crow[{c}]"


@dataclass(frozen=True)
class Style:
    """How the text is laid out: ``indent`` a level, ``depth`` the first loop's level, ``pragma_left``
    pragmas at column 0 (the HIP kernels' text), ``flat_element`` the element loop's body at the loop's own
    level (the stem kernel's text)."""

    indent: str = "  "
    depth: int = 0
    pragma_left: bool = False
    flat_element: bool = False


class _Lines:
    """Lines at levels, and the loops open (whether braced, how many levels each took)."""

    def __init__(self, style: Style) -> None:
        self.style, self.depth = style, style.depth
        self.out: list[str] = []
        self.open_: list[tuple[bool, int]] = []

    def add(self, *lines: str, extra: int = 0) -> None:
        self.out += [self.style.indent * (self.depth + extra) + ln if ln else "" for ln in lines]

    def enter(self, lp: Loop, flat: bool = False) -> None:
        if lp.unroll:
            self.out.append("#pragma unroll" if self.style.pragma_left else self.style.indent * self.depth + "#pragma unroll")
        self.add(lp.head + (" {" if lp.braces else ""))
        self.open_.append((lp.braces, 0 if flat else 1))
        self.depth += 0 if flat else 1
        self.add(*lp.body)

    def leave(self) -> None:
        braces, step = self.open_.pop()
        self.depth -= step
        if braces:
            self.add("}")


def _group_stores(d: Dest, values: str, g: int) -> list[tuple[int, str]]:
    """(level, line) storing ``g`` values: one element; a pair of 16-bit values as one 32-bit word, its
    two stores written out; a wider fp32 group as one float vector, its stores a loop."""
    if g == 1:
        return [(0, f"{d.at(0)} = {d.value('v')};")]
    if g == 2:
        assert d.convert, "a pair is stored as one word of 16-bit elements"
        word = f"*(uint32_t*){d.vector} = {pack2(d.convert, f'{values}[0]', f'{values}[1]')};"
        if d.vector and d.inside >= 2:
            return [(0, word)]
        each = [(0, ("" if k < d.inside else f"if ({d.col}{f' + {k}' if k else ''} < N) ")
                 + f"{d.at(k)} = {d.value(f'{values}[{k}]')};") for k in (0, 1)]
        if not d.vector:
            return each
        cond = " && ".join(x for x in (f"{d.col} + 1 < N", d.aligned) if x)
        return [(0, f"if ({cond}) {{"), (1, word), (0, "} else {"), *[(1, ln) for _, ln in each], (0, "}")]
    assert not d.convert, "a wider group is stored as fp32 vectors"
    loop = f"for (int e = 0; e < {g}; ++e) if ({d.col} + e < N) {d.at('e')} = {values}[e];"
    if not d.vector:
        return [(0, "#pragma unroll"), (0, loop)]
    vec = f"float{g}"
    return [(0, f"if ({d.col} + {g - 1} < N) *({vec}*){d.vector} = make_{vec}({', '.join(f'{values}[{k}]' for k in range(g))});"),
            (0, "else {"), (1, "#pragma unroll"), (1, loop), (0, "}")]


def direct_store(walk: Walk, epi: tuple[str, ...], ops: Operands, dest: Dest, style: Style = Style()) -> list[str]:
    """The register tile ``walk`` to ``dest``, the epilogue ``epi`` applied to each element."""
    w = _Lines(style)
    for lp in walk.loops:
        w.enter(lp)
    w.add(*ops.before)
    if walk.group > 1:
        w.enter(Loop(f"for (int e = 0; e < {walk.group}; ++e)"), flat=style.flat_element)
        w.add(*walk.element, *element_ops(epi, ops), f"{walk.values}[e] = v;")
        w.leave()
    else:
        w.add(*walk.element, *element_ops(epi, ops))
    w.add(*dest.decl)
    for extra, line in _group_stores(dest, walk.values, walk.group):
        w.add(line, extra=extra)
    while w.open_:
        w.leave()
    return w.out


@dataclass(frozen=True)
class Staging:
    """A kernel's fp32 staging of C in shared memory, ``passes`` passes over the tile ``cst``: ``stage``, the
    lines writing one pass's fragments; ``read``, the block's walk over it, giving each thread 8 columns
    ``v8`` of one row of C (``row``, ``col``, ``crow``); ``free``, why the kernel's shared memory is free
    for it once the first barrier has passed."""

    stage: tuple[str, ...]
    read: tuple[str, ...]
    passes: int
    free: str


def staged_store(tile: Staging, epi: tuple[str, ...], ops: Operands, convert: str, n_vec: bool, barrier: str) -> list[str]:
    """C through the staging ``tile``, pass by pass: the fragments staged, a ``barrier``, each thread's
    chunk read back, the epilogue applied and the chunk stored as 16 bytes (``n_vec``: N a multiple of 8,
    so every row starts on 16 bytes and a chunk is whole or wholly past N) or element by element; a
    barrier before the next pass overwrites the tile."""
    chunk = _Lines(Style(depth=2))
    chunk.add(*ops.before)
    chunk.enter(Loop("for (int e = 0; e < 8; ++e)"))
    chunk.add("float v = v8[e];", *element_ops(epi, ops), "v8[e] = v;")
    chunk.leave()
    L = [f"{barrier}  /* {tile.free} */",
         "float* cst = (float*)tr_smem;",
         f"#pragma unroll\nfor (int pass = 0; pass < {tile.passes}; ++pass) {{",
         *tile.stage,
         f"  {barrier}",
         *tile.read,
         *chunk.out,
         *_chunk_store(convert, n_vec),
         "  }",
         f"  if (pass + 1 < {tile.passes}) {barrier}  /* the tile is read before the next pass writes it */",
         "}"]
    return [ln for ln in L if ln.strip()]


def _chunk_store(convert: str, n_vec: bool) -> list[str]:
    """The chunk to C: one 16-byte store (``n_vec``), or element by element up to N."""
    if n_vec:
        return ["    uint32_t o_[4];",
                "    #pragma unroll\n    for (int q = 0; q < 4; ++q)",
                f"      o_[q] = {pack2(convert, 'v8[2 * q]', 'v8[2 * q + 1]')};",
                "    *(uint4*)(crow + col) = make_uint4(o_[0], o_[1], o_[2], o_[3]);"]
    return ["    #pragma unroll\n    for (int e = 0; e < 8; ++e)",
            f"      if (col + e < N) crow[col + e] = {convert}(v8[e]);"]
