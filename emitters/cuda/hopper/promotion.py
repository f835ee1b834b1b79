"""The promoted mainloop of the Hopper 8-bit GEMM (FP8's, as cuBLASLt's default and DeepSeek-V3's recipe accumulate):
each k step's wgmmas (128 8-bit k values) accumulate from zero into a register set of their own, are awaited, and are
added into the tile's fp32 sums ``acc`` by the CUDA cores, so the tensor cores' narrower accumulation never runs over
more than one step. Two forms, by the registers a consumer has (``Fold``, chosen in ``scaled_gemm.fold_form``):

- ``buffers`` 2: two sets of step products. Step k's wgmmas are issued into one while step k-1's, done, are added
  from the other (``wgmma.wait_group 1``), so the tensor cores never wait for the additions. Three sets of the
  tile's accumulators a thread: 128 x 128 tiles on two consumers (cuBLASLt's FP8 tile on an H200, named by its
  kernels: ``nvjet_sm90_qqtst_128x128_128x6``).
- ``buffers`` 1: one set, each step awaited before its products are added (the tensor cores then run the other
  consumer's step); ``chunks`` 2 issues and adds a wide tile's columns in two parts (``step_acc`` half as wide, each
  part's wgmmas on its own rows of B's stage), so 128 x 256 tiles keep their sums and half a step's products.

It reads the mainloop's layouts and barriers (``mainloop.py``); the consumers' branch there calls it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from ..render import CudaRenderer
from .mainloop import _release, _turn_pass, descriptor_strides, operand_layouts
from .schedule import BK, ELEM_BYTES, WgmmaSchedule


@dataclass(frozen=True)
class Fold:
    """How a k step's products are added into the sums. ``before``: lines at the top of each step, ahead of the
    full-barrier wait (block scales' loads, whose latency the wait hides) into ``names``, which ``decl`` declares
    ahead of the k loop (once a product set); ``factor``: a C
    expression of ``i`` (m slice), ``j`` (accumulator) and ``c`` (column part) that multiplies a product ("": none);
    ``chunks``: column parts (``buffers`` 1 only); ``buffers``: sets of step products (2: a step issued while the one
    before is added); ``ahead`` (two sets over a walk of whole tiles): 1, the next tile's first step issued before
    the tile before it is stored (``overlapped``), 0: none."""

    before: str = ""
    factor: str = ""
    chunks: int = 1
    buffers: int = 1
    names: tuple[str, ...] = ()
    decl: str = ""
    ahead: int = 0

    def declarations(self, m_slices: int, n_regs: int, acc: str) -> str:
        """The step products' registers, declared beside ``acc``."""
        width = n_regs // self.chunks
        sets = ", ".join(f"step_acc{b if self.buffers > 1 else ''}[{m_slices}][{width}]" for b in range(self.buffers))
        return f"\n        {acc} {sets};  /* one k step's products (of one column part), added into acc */"

    def mainloop(self, sched: WgmmaSchedule, r: CudaRenderer, walk: Any) -> str:
        """The consumers' k loop of one tile under this fold (fp32 accumulators), both operands K-major, then the
        sums pinned (``mainloop.consumer_branch`` calls it)."""
        loop = _double(sched, walk, self) if self.buffers == 2 else _single(sched, walk, self)
        return loop + f"""
            {_turn_pass(sched)}
            {_pinned(sched, r)}"""

    def overlapped(self, sched: WgmmaSchedule, r: CudaRenderer, walk: Any, epilogue: str) -> str:
        """The consumers' walk with each tile's epilogue moved after the next tile's first step is issued
        (``_overlapped``); ``epilogue`` stores the tile (``tm``, ``tn``) from ``acc``."""
        return _overlapped(sched, r, walk, self, epilogue)

    def renamed(self, text: str, b: int) -> str:
        """``text`` with ``names`` (and ``step_acc``) of product set ``b``."""
        for name in (*self.names, "step_acc"):
            text = re.sub(rf"\b{name}\b", f"{name}{b}", text)
        return text


def _geometry(sched: WgmmaSchedule) -> dict[str, int]:
    a_lay, b_lay = operand_layouts(sched.bm, True), operand_layouts(sched.bn, True)
    (a_lbo, a_sbo), (b_lbo, b_sbo) = descriptor_strides(a_lay), descriptor_strides(b_lay)
    return {"a_lbo": a_lbo, "a_sbo": a_sbo, "b_lbo": b_lbo, "b_sbo": b_sbo, "a_bytes": sum(t.size_bytes for t in a_lay),
            "a_mstep": 64 * a_lay[0].pitch_bytes, "b_pitch": b_lay[0].pitch_bytes}


def _issue(sched: WgmmaSchedule, g: dict[str, int], target: str, b_offset: str = "") -> str:
    """One step's (or column part's) wgmma group on stage ``s`` into ``target``, committed."""
    return f"""TR_WGMMA_FENCE();
                    #pragma unroll
                    for (int k16 = 0; k16 < {BK // 16}; ++k16) {{
                        const uint64_t db = tr_desc(sb{b_offset} + k16 * {16 * ELEM_BYTES}u, {g['b_lbo']}u, {g['b_sbo']}u);
                        #pragma unroll
                        for (int i = 0; i < {sched.m_slices}; ++i)
                            tr_wgmma({target}[i], tr_desc(sa + i * {g['a_mstep']}u + k16 * {16 * ELEM_BYTES}u,
                                     {g['a_lbo']}u, {g['a_sbo']}u), db, k16);
                    }}
                    TR_WGMMA_COMMIT();"""


def _stage_bases(sched: WgmmaSchedule, g: dict[str, int]) -> str:
    return (f"const uint32_t sa = smem + s * {sched.stage_bytes}u + part * {sched.m_slices * g['a_mstep']}u;\n"
            f"                    const uint32_t sb = smem + s * {sched.stage_bytes}u + {g['a_bytes']}u;")


def _add(sched: WgmmaSchedule, source: str, factor: str, part_regs: int, first: str = "0") -> str:
    """``acc`` += ``source`` (times ``factor``), ``source`` holding columns ``first`` * ``part_regs`` on."""
    times = f" * ({factor})" if factor else ""
    part = "" if first == "c" else f"const int c = {first}; (void)c;\n                    "
    return f"""{part}#pragma unroll
                    for (int i = 0; i < {sched.m_slices}; ++i) {{
                        #pragma unroll
                        for (int jj = 0; jj < {part_regs}; ++jj) {{
                            const int j = {first} * {part_regs} + jj;
                            acc[i][j] += {source}[i][jj]{times};
                        }}
                    }}"""


def _single(sched: WgmmaSchedule, walk: Any, fold: Fold) -> str:
    """One set of products: each step (each of its column parts) awaited, then added; the stage released after the
    last part's wait."""
    g = _geometry(sched)
    chunks, part_regs = fold.chunks, sched.bn // 2 // fold.chunks
    before = f"\n                {fold.before}" if fold.before else ""
    b_part = sched.bn // chunks * g["b_pitch"]  # a part's rows of B (K-major: one line a row)
    decl = f"{fold.decl}\n            " if fold.decl else ""
    return f"""            {decl}for ({walk.k_range()}) {{{before}
                tr_mbar_wait(bars + 8u * s, phase);
                {{
                    {_stage_bases(sched, g)}
                    #pragma unroll
                    for (int c = 0; c < {chunks}; ++c) {{
                    {_issue(sched, g, "step_acc", f" + c * {b_part}u")}
                    TR_WGMMA_WAIT(0);
                    if (c == {chunks - 1} && lane == 0) {_release("s", sched)}
                    {_add(sched, "step_acc", fold.factor, part_regs, "c")}
                    }}
                }}
                if (++s == {sched.stages}) {{ s = 0; phase ^= 1u; }}
            }}"""


def _double(sched: WgmmaSchedule, walk: Any, fold: Fold) -> str:
    """Two sets of products: the first step issued into set 0, then steps in pairs (into set 1, then set 0), each
    issue followed by ``wait_group 1`` (the step before done: its stage released, its products added from the other
    set), and the last one or two steps after the loop. Each pair leaves the loop as it found it (set 0's group in
    flight), so ptxas sees one state at the loop's head and waits for nothing more. After each issue ``ps`` is the
    stage of the step just issued and ``pp`` that of the one before it; ``kk`` in ``before`` is the step whose scales
    it loads. One column part only (``fold_form`` pairs two sets with one part)."""
    assert fold.chunks == 1, "two product sets take the tile's columns whole"
    g = _geometry(sched)
    first, end = walk.k_bounds()
    decl = "\n                ".join(fold.renamed(fold.decl, b) for b in range(2)) if fold.decl else ""
    return f"""            if (({end}) > ({first})) {{
                uint32_t ps = 0, pp = 0;  /* the stages of the last step issued and of the one before */
                {decl}
                {{
                    {_step(sched, g, fold, 0, f"({first})")}
                }}
                int kk = ({first}) + 1;
                {_pairs(sched, g, fold, end)}
            }}"""


def _step(sched: WgmmaSchedule, g: dict[str, int], fold: Fold, b: int, step: str) -> str:
    """k step ``step`` (a C expression) issued into product set ``b`` on ring stage ``s`` once it is full, after
    ``fold.before`` (its block scales' loads, into set ``b``'s names); the ring advanced (``ps``: its stage, ``pp``:
    the step before's)."""
    before = re.sub(r"\bkk\b", step, fold.renamed(fold.before, b))
    return f"""{before}
                tr_mbar_wait(bars + 8u * s, phase);
                {{
                {_stage_bases(sched, g)}
                {_issue(sched, g, f"step_acc{b}")}
                }}
                pp = ps; ps = s; if (++s == {sched.stages}) {{ s = 0; phase ^= 1u; }}"""


def _added(sched: WgmmaSchedule, fold: Fold, b: int, wait: int = 1) -> str:
    """Set ``b``'s step awaited (``wait_group wait``), its stage released, its products (times ``fold.factor``)
    added into the sums."""
    return f"""TR_WGMMA_WAIT({wait});
                if (lane == 0) {_release("pp" if wait else "ps", sched)}
                {{
                {_add(sched, f"step_acc{b}", fold.renamed(fold.factor, b), sched.bn // 2)}
                }}"""


def _stored(epilogue: str, when: str) -> str:
    """The stores of the tile whose sums ``acc`` holds (``ptm``, ``ptn``), in a ``do ... while (0)`` that the
    epilogue's ``continue`` leaves."""
    store = epilogue.replace("\n", "\n    ")
    return f"""if (ptm >= 0) {{  /* the tile before, stored {when} */
                const int tm = ptm, tn = ptn;
                do {{
    {store}
                }} while (0);
            }}"""


def _pairs(sched: WgmmaSchedule, g: dict[str, int], fold: Fold, end: str) -> str:
    """From step ``kk`` with set 0's group in flight: the steps in pairs (into set 1, then set 0), each issue followed
    by the other set's addition, then the last one or two steps; nothing in flight after."""
    return f"""for (; kk + 1 < ({end}); kk += 2) {{
                {_step(sched, g, fold, 1, "kk")}
                {_added(sched, fold, 0)}
                {_step(sched, g, fold, 0, "(kk + 1)")}
                {_added(sched, fold, 1)}
            }}
            if (kk < ({end})) {{
                {_step(sched, g, fold, 1, "kk")}
                {_added(sched, fold, 0)}
                {_added(sched, fold, 1, 0)}
            }} else {{
                {_added(sched, fold, 0, 0)}
            }}"""


def _overlapped(sched: WgmmaSchedule, r: CudaRenderer, walk: Any, fold: Fold, epilogue: str) -> str:
    """Two product sets over a walk of whole tiles, the tile before stored while this one's first step runs: at a
    tile's head its first step is issued, then the sums ``acc`` still hold, of the tile before (``ptm``, ``ptn``),
    are stored (``_stored``), and only then are this tile's products added. The tensor cores so run a step (about
    0.3 us on 128 x 128) while the consumers scale, convert and store; the last tile is stored after the walk. Every
    tile ends with no group in flight, and the state at each join is one (set 0's group in flight on both sides of
    ``ptm >= 0`` and at the pairs' head), so ptxas injects no wait. Two steps ahead would hold three sets of sums
    through the stores: ptxas serializes the wgmmas and spills (NVRTC 13.0, 128 x 128), so one it is. Needs
    ``k_iters >= 1`` (the caller's branch)."""
    g = _geometry(sched)
    first, end = walk.k_bounds()
    decl = "\n            ".join(fold.renamed(fold.decl, b) for b in range(2)) if fold.decl else ""
    return f"""        int ptm = -1, ptn = 0;  /* the tile whose sums acc holds until they are stored */
{walk.consumer_loop()}
            uint32_t ps = 0, pp = 0;  /* the stages of the last step issued and of the one before */
            {decl}
            {_step(sched, g, fold, 0, f"({first})")}
            {_stored(epilogue, "while this tile's first step runs")}
            {_zeroed(sched)}
            int kk = ({first}) + 1;
            {_pairs(sched, g, fold, end)}
            {_pinned(sched, r)}
            ptm = tm; ptn = tn;
        }}
        {_stored(epilogue, "after the walk: nothing else runs")}"""


def _zeroed(sched: WgmmaSchedule) -> str:
    return f"""#pragma unroll
            for (int i = 0; i < {sched.m_slices}; ++i) {{
                #pragma unroll
                for (int j = 0; j < {sched.bn // 2}; ++j) acc[i][j] = 0.0f;
            }}"""


def _pinned(sched: WgmmaSchedule, r: CudaRenderer) -> str:
    """The sums pinned in registers where the loop leaves them (the compiler moves nothing across)."""
    return f"""#pragma unroll
            for (int i = 0; i < {sched.m_slices}; ++i) {{
                #pragma unroll
                for (int j = 0; j < {sched.bn // 2}; ++j) {r.asm("compiler.pin", value="acc[i][j]")}
            }}"""
