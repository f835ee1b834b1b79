"""The Hopper kernels' epilogue: what a consumer warpgroup does with its fp32 accumulators once a tile's
mainloop is done. The fused element-wise ops (bias, relu, gelu, scale, residual, in the IR's order)
come from the GPU epilogue (``emitters/gpu_epilogue.py``); then C leaves either through the TMA store
(staged in swizzled shared memory, bulk tensor stores) or through direct, predicated register stores
(the GPU epilogue's ``direct_store``); before the block exits, the TMA stores in flight are drained.
Its PTX statements are the renderer's (``CudaRenderer.asm``).

The text reads the consumer's locals (``acc``, ``row0``, ``col0``, ``part``, ``cw``, ``cstep``,
``warp``, ``lane``, ``tid``, ``tm``, ``tn``, ``cstage``) and the kernel's ``C``, ``bias``,
``residual``, ``alpha``, ``M``, ``N``, ``tmC``, ``store_tma``. A kernel hands its ``Stores`` to the
mainloop's consumers.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ... import gpu_epilogue
from ...cstyle import CodeWriter
from ...gpu_epilogue import Dest, Loop, Operands, Style, Walk, element_ops
from ...layout import TileLayout
from ..render import CudaRenderer
from .ptx import PACK2
from .schedule import C_ATOM_BYTES, ELEM_BYTES, SWIZZLE, WgmmaSchedule


def operands(r: CudaRenderer, dtype: str, guard: str = "", swap: bool = False) -> Operands:
    """Bias and residual at (``row``, ``col``), read in place; ``guard``: only where it holds (the TMA-store
    path visits rows past M). ``swap``: the kernel's tile is of C^T, so C's column is the kernel's row."""
    if swap:
        return Operands(r.to_float(dtype, "bias[row]"), r.to_float(dtype, "residual[(int64_t)col * M + row]"), guard,
                        guard, preload=False)
    return Operands(r.to_float(dtype, "bias[col]"), r.to_float(dtype, "residual[(int64_t)row * N + col]"), guard, guard,
                    preload=False)


def register_walk(w: CodeWriter, sched: WgmmaSchedule) -> None:
    """The heads of the direct stores' walk over a consumer's accumulators (m64 slice ``i``, 8-column group ``j``,
    row half ``h``), each unrolled; the caller writes the body at 12 spaces and closes the three."""
    for depth, head in enumerate((f"for (int i = 0; i < {sched.m_slices}; ++i) {{",
                                  f"for (int j = 0; j < {sched.bn // 8}; ++j) {{", "for (int h = 0; h < 2; ++h) {")):
        w("    " * depth + "#pragma unroll")
        w("    " * depth + head)


def swapped_elements(w: CodeWriter, value: list[str], store: str) -> None:
    """The body of ``register_walk`` under ``swap`` (C^T's tile): each of the thread's two columns of the group,
    inside M x N, its ``value`` lines and then ``store`` (C's element at ``C[col * M + row]``)."""
    w("            #pragma unroll")
    w("            for (int e = 0; e < 2; ++e) {")
    w("                const int row = row0 + i * 64 + h * 8, col = col0 + j * 8 + e;")
    w("                if (row < M && col < N) {")
    for line in value:
        w("                    " + line)
    w("                    " + store)
    w("                }")
    w("            }")


def tma_store(sched: WgmmaSchedule, r: CudaRenderer, dtype: str, epilogue: tuple[str, ...],
              when: str = "store_tma", dequant: tuple[str, ...] = ()) -> str:
    """``store="tma"``: each consumer warpgroup writes its part of C, 64 x 64 at a time, into a staging
    atom laid out as TMA's 128B swizzle (the same ``TileLayout`` algebra as the operands: the lanes of a
    warp hit 8 different 16-byte bank groups), fences it to the async proxy, and one thread issues the
    bulk tensor store; two atoms alternate so the next is written while the last is read out. TMA clips
    rows and columns past M and N. When ``store_tma`` is 0 (C rows not 16-byte aligned) the loop is
    skipped and the direct stores after it run instead (``when``: the condition). ``dequant``: lines over ``v``,
    ``row`` and ``col`` (the kernel's) ahead of the epilogue (the scaled GEMM's scales). Ends with ``continue``."""
    if sched.store != "tma":
        return ""
    if sched.swap:  # one staging block a slice: C's bn rows x 64 columns
        return staged_stores(sched, r, when, None, "i", lambda w: _stage_swapped(w, r, dtype, epilogue, sched, dequant),
                              f"tm * {sched.bm} + part * {sched.wm} + i * 64, tn * {sched.bn}")
    return staged_stores(sched, r, when, sched.bn // 64, f"(i * {sched.bn // 64} + a)",
                          lambda w: _stage_atom(w, r, dtype, epilogue, dequant),
                          f"tn * {sched.bn} + a * 64, tm * {sched.bm} + part * {sched.wm} + i * 64")


def staged_stores(sched: WgmmaSchedule, r: CudaRenderer, when: str, atoms: int | None, even_buf: str,
                   stage: Callable[[CodeWriter], None], coords: str) -> str:
    """The TMA store's walk over a consumer's part of C: each m64 slice's ``atoms`` staging atoms (None: one, no
    loop), each written by ``stage`` into one of two alternating buffers (named where it is written when a tile
    has an even count: ``even_buf``; carried in ``cstep`` otherwise) between warpgroup barriers, fenced to the
    async proxy, and stored by one thread's bulk tensor store at ``coords``."""
    w = CodeWriter()
    w(f"if ({when}) {{")
    w(f"    const uint32_t catoms = cstage + cw * {2 * C_ATOM_BYTES}u;")
    w("    #pragma unroll")
    w(f"    for (int i = 0; i < {sched.m_slices}; ++i) {{")
    depth = 2
    if atoms is not None:
        w("        #pragma unroll")
        w(f"        for (int a = 0; a < {atoms}; ++a) {{")
        depth = 3
    pad = "    " * depth
    if sched.m_slices * (atoms or 1) % 2:  # an odd count of atoms a tile: the alternation carries over
        w(f"{pad}const uint32_t buf = catoms + (cstep & 1) * {C_ATOM_BYTES}u;")
        w(f"{pad}++cstep;")
    else:  # an even count: each atom's buffer is known where it is written (nothing carried between tiles)
        w(f"{pad}const uint32_t buf = catoms + ({even_buf} & 1) * {C_ATOM_BYTES}u;")
    warpgroup = r.asm("bar.sync", threads=128, id="1 + cw")
    w(f'{pad}if (tid == 0) {r.asm("bulk.wait_read", n=1)}')
    w(f"{pad}{warpgroup}")
    with w.indented(depth):
        stage(w)
    w(f'{pad}{r.asm("fence.proxy.async")}')
    w(f"{pad}{warpgroup}")
    w(f"{pad}if (tid == 0) {{")
    w(f"{pad}    tr_tma_store_2d(&tmC, {coords}, buf);")
    w(f'{pad}    {r.asm("bulk.commit")}')
    w(f"{pad}}}")
    if atoms is not None:
        w("        }")
    w("    }")
    w("    continue;")
    w("}")
    return w.render().replace("\n", "\n            ")


def _stage_atom(w: CodeWriter, r: CudaRenderer, dtype: str, epilogue: tuple[str, ...],
                dequant: tuple[str, ...] = ()) -> None:
    """One 64 x 64 atom of C: the epilogue applied, two values packed by one conversion (``PACK2``) per 32-bit
    shared store at the atom's 128B-swizzled offset."""
    lay = TileLayout(64, 64, ELEM_BYTES, "row", swizzle=SWIZZLE)
    w("#pragma unroll")
    w("for (int jj = 0; jj < 8; ++jj) {")
    w("    #pragma unroll")
    w("    for (int h = 0; h < 2; ++h) {")
    w("        const int row = row0 + i * 64 + h * 8, r_in = warp * 16 + lane / 4 + h * 8;")
    w("        const int c_in = jj * 8 + 2 * (lane % 4);")
    w("        float out[2];")
    w("        #pragma unroll")
    w("        for (int e = 0; e < 2; ++e) {")
    w("            const int col = col0 + (a * 8 + jj) * 8 + e;")
    w("            const bool inside = row < M && col < N;")
    w("            float v = acc[i][4 * (a * 8 + jj) + 2 * h + e];")
    for line in (*dequant, *element_ops(epilogue, operands(r, dtype, "inside"))):
        w("            " + line)
    w("            out[e] = v;")
    w("        }")
    w(f"        const uint32_t word = {PACK2[dtype]}(out[0], out[1]);")
    w("        " + r.asm("st.shared.b32", addr=f"buf + {lay.c_offset('r_in', 'c_in')}", value="word"))
    w("    }")
    w("}")


def _stage_swapped(w: CodeWriter, r: CudaRenderer, dtype: str, epilogue: tuple[str, ...], sched: WgmmaSchedule,
                   dequant: tuple[str, ...] = ()) -> None:
    """``swap``: one m64 slice of the kernel's C^T tile (64 of C's columns x ``bn`` of its rows) staged as C's ``bn``
    x 64 block, row-major and 128B-swizzled (a line a row of C: the kernel's column), one 16-bit store an element,
    the epilogue applied (bias along the kernel's rows); the store then writes it at (C's column, C's row)."""
    lay = TileLayout(sched.bn, 64, ELEM_BYTES, "row", swizzle=SWIZZLE)
    w("#pragma unroll")
    w(f"for (int j = 0; j < {sched.bn // 8}; ++j) {{")
    w("    #pragma unroll")
    w("    for (int h = 0; h < 2; ++h) {")
    w("        #pragma unroll")
    w("        for (int e = 0; e < 2; ++e) {")
    w("            const int row = row0 + i * 64 + h * 8, r_in = warp * 16 + lane / 4 + h * 8;")
    w("            const int c_in = j * 8 + 2 * (lane % 4) + e, col = col0 + j * 8 + e;")
    w("            const bool inside = row < M && col < N;")
    w("            float v = acc[i][4 * j + 2 * h + e];")
    for line in (*dequant, *element_ops(epilogue, operands(r, dtype, "inside", swap=True))):
        w("            " + line)
    conv = r.converters(dtype)[1]
    w("            " + r.asm("st.shared.b16", addr=f"buf + {lay.c_offset('c_in', 'r_in')}", value=f"{conv}(v)"))
    w("        }")
    w("    }")
    w("}")


def _swapped_direct_store(sched: WgmmaSchedule, r: CudaRenderer, dtype: str, epilogue: tuple[str, ...],
                          dequant: tuple[str, ...] = ()) -> str:
    """``swap``: register stores of the kernel's C^T tile into C transposed, one 16-bit store an element (the
    kernel's row ``row`` is C's column, its column ``col`` C's row: ``C[col * M + row]``), predicated on the
    kernel's M and N."""
    conv = r.converters(dtype)[1]
    w = CodeWriter()
    w("#pragma unroll")
    w(f"for (int i = 0; i < {sched.m_slices}; ++i) {{")
    w("    #pragma unroll")
    w(f"    for (int j = 0; j < {sched.bn // 8}; ++j) {{")
    w("        #pragma unroll")
    w("        for (int h = 0; h < 2; ++h) {")
    w("            #pragma unroll")
    w("            for (int e = 0; e < 2; ++e) {")
    w("                const int row = row0 + i * 64 + h * 8, col = col0 + j * 8 + e;")
    w("                if (row < M && col < N) {")
    w("                    float v = acc[i][4 * j + 2 * h + e];")
    for line in (*dequant, *element_ops(epilogue, operands(r, dtype, swap=True))):
        w("                    " + line)
    w(f"                    C[(int64_t)col * M + row] = {conv}(v);")
    w("                }")
    w("            }")
    w("        }")
    w("    }")
    w("}")
    return "            " + w.render().replace("\n", "\n            ") + "\n"


def direct_store(sched: WgmmaSchedule, r: CudaRenderer, dtype: str, epilogue: tuple[str, ...],
                 groups: bool = False, dequant: tuple[str, ...] = ()) -> str:
    """Register stores of the consumer's part of C (``gpu_epilogue.direct_store``), predicated on M and N:
    the epilogue applied per element, two columns packed into one 4-byte store where N is even.
    ``groups``: only the float4 groups ``g0 <= i * bn / 8 + j < g1`` (the spread split-K fix-up's share of
    a tile)."""
    if sched.swap:  # no spread fix-up with swapped operands (validate), so no groups
        return _swapped_direct_store(sched, r, dtype, epilogue, dequant)
    g = sched.bn // 8
    share = f" && i * {g} + j >= g0 && i * {g} + j < g1" if groups else ""
    walk = Walk((Loop(f"for (int i = 0; i < {sched.m_slices}; ++i)"), Loop(f"for (int j = 0; j < {g}; ++j)"),
                 Loop("for (int h = 0; h < 2; ++h)", ("const int row = row0 + i * 64 + h * 8;", "const int c0 = col0 + j * 8;")),
                 Loop(f"if (row < M && c0 < N{share})", ("float out[2];",), unroll=False)),
                ("const int col = c0 + e < N ? c0 + e : c0;", "float v = acc[i][4 * j + 2 * h + e];", *dequant), 2,
                "out")
    dest = Dest("p[{k}]", r.converters(dtype)[1], "c0", "p", "(N & 1) == 0", 1, ("uint16_t* p = C + (int64_t)row * N + c0;",))
    return "\n".join(gpu_epilogue.direct_store(walk, epilogue, operands(r, dtype), dest, Style("    ", 3))) + "\n"


def tma_store_drain(sched: WgmmaSchedule) -> str:
    """The staging atoms must outlive the bulk stores reading them: wait until they have been read (not
    until the writes land: the grid's completion makes them visible, as CUTLASS's epilogue relies on)
    before the block exits."""
    if sched.store != "tma":
        return ""
    return f'if (tid == 0) {CudaRenderer().asm("bulk.wait_read", n=0)}'


@dataclass(frozen=True)
class Stores:
    """The epilogue of one kernel, as the consumers place it (``mainloop.consumer_branch``): ``tma(when)``
    the TMA store of C where ``when`` holds, ``direct(groups)`` the register stores otherwise (``groups``:
    a spread split-K unit's share), ``drain()`` after the walk. ``dtype`` is C's, ``epilogue`` the fused ops
    in order, ``dequant`` lines ahead of them (``tma_store``)."""

    sched: WgmmaSchedule
    r: CudaRenderer
    dtype: str
    epilogue: tuple[str, ...]
    dequant: tuple[str, ...] = ()

    def tma(self, when: str) -> str:
        return tma_store(self.sched, self.r, self.dtype, self.epilogue, when, self.dequant)

    def direct(self, groups: bool = False) -> str:
        return direct_store(self.sched, self.r, self.dtype, self.epilogue, groups=groups, dequant=self.dequant)

    def drain(self) -> str:
        return tma_store_drain(self.sched)
