"""The Hopper kernels' mainloop: the producer and consumer warpgroups around a ring of shared-memory stages.

One block is ``1 + consumers`` warpgroups. Warpgroup 0 is the producer: it gives registers back
(``setmaxnreg.dec``) and fills the next free stage of the ring for each k step (wait ``empty[s]``,
``arrive.expect_tx`` on ``full[s]``, copy): ``tma_producer`` issues TMA copies of both operands (the
GEMM; with a 2-block cluster, each block loads half of B, or of A along N, and multicasts it), ``gather_producer`` has
its 128 threads gather the activations with ``cp.async`` (the implicit-GEMM conv) while TMA brings the
filter. The consumer warpgroups (``consumer_branch``) take registers (``setmaxnreg.inc``), wait
``full[s]``, issue ``bk / 16`` wgmma per m64 slice they own, keep one wgmma group in flight and release
the stage before it (one arrive per warp on ``empty[s]``, and on the peer's in a pair), then run the
epilogue. Both sides walk the tiles in the scheduler's order, so the producer runs into the next tile while
the consumers are in their epilogue.

The mainloop knows neither: the kernel (``gemm.py``, ``conv.py``) joins the parts, handing the producer and
the consumers its tile scheduler (``walk``: a ``scheduler.TileScheduler``, which also holds split-K's walk
and fix-up) and the consumers its stores (``stores``: an ``epilogue.Stores``). This module imports no
other part.

Shared memory per stage: the A tile (``bm`` x 64 elements) and the B tile (``bn`` x 64), each a stack of
128-byte-swizzled 1024-byte atoms: ``TileLayout`` values with ``TmaSwizzle("128B")`` from
``emitters/layout.py`` (``operand_layouts``), the same layouts the bank simulator scores. The stage size,
the 1024-byte base alignment and the wgmma descriptors' strides (SBO = 8 lines, LBO = one 64-element atom
column for MN-major operands) are read off those layouts, not written twice.

``pingpong``: the two consumer warpgroups take alternate whole tiles instead of halves of one, so one's
epilogue runs under the other's mainloop; turn barriers keep their mainloops in order. ``cluster`` = 2:
the pair starts and ends with a cluster barrier so neither block's barriers or shared memory are used
before they exist or after the block exits.

The PTX wrappers the kernels call (mbarrier, TMA, wgmma fences) are in ``ptx.py``.
"""

from __future__ import annotations

from typing import Any

from tracea.doctor.errors import BadInputError

from ...cstyle import CodeWriter
from ...layout import TileLayout, TmaSwizzle
from ..render import CudaRenderer
from .conv_schedule import WgmmaConvSchedule
from .ptx import desc_name
from .schedule import BK, ELEM_BYTES, SWIZZLE, WgmmaSchedule

# ---------------------------------------------------------------------------------------- layouts


def operand_kmajor(op: Any, which: str) -> bool:
    """Operand ``which`` ("a" or "b") has k contiguous in global memory."""
    return op.layout_a == "row" if which == "a" else op.layout_b == "col"


def operand_layouts(rows: int, kmajor: bool, chunk: int = BK) -> list[TileLayout]:
    """The shared-memory atoms of one operand tile (``rows`` of the m or n extent by 64 k) in one stage,
    as TMA writes them with the 128B swizzle. K-major: one ``rows x 64`` row-major layout (a line per
    m/n row, 128 bytes of k), or ``64 / chunk`` of ``rows x chunk`` one after another, each with the swizzle of
    its ``2 chunk``-byte lines (the conv's boxes of 32 or 16 channels). MN-major: ``rows / 64`` atoms of
    ``64 (k) x 64 (m/n)``, a line per k."""
    if kmajor and chunk != BK:
        size = rows * chunk * ELEM_BYTES
        return [TileLayout(rows, chunk, ELEM_BYTES, "row", swizzle=TmaSwizzle(f"{2 * chunk}B"), base_bytes=j * size)
                for j in range(BK // chunk)]
    if kmajor:
        return [TileLayout(rows, BK, ELEM_BYTES, "row", swizzle=SWIZZLE)]
    atom = BK * 64 * ELEM_BYTES
    return [TileLayout(BK, 64, ELEM_BYTES, "row", swizzle=SWIZZLE, base_bytes=i * atom) for i in range(rows // 64)]


def descriptor_strides(layouts: list[TileLayout]) -> tuple[int, int]:
    """(LBO, SBO) in bytes of the wgmma shared-memory descriptor for an operand stored as ``layouts``.
    SBO: from one group of 8 lines to the next (8 x the line pitch: one swizzle period). LBO: for an
    MN-major operand, from one atom column (a line: 64 elements at 128B, 32 at 64B, 16 at 32B) to the
    next; unused by K-major swizzled ones."""
    first = layouts[0]
    sbo = 8 * first.pitch_bytes
    if getattr(first.swizzle, "kind", None) != "tma" or sbo != first.swizzle.period_bytes:
        raise BadInputError(f"a {first.describe()} tile is not made of 8-line TMA swizzle atoms")
    lbo = layouts[1].base_bytes - first.base_bytes if len(layouts) > 1 else first.size_bytes
    return lbo, sbo


# ---------------------------------------------------------------------------------------- the ring


def kernel_head(sched: WgmmaSchedule, r: CudaRenderer, a_bytes: int, walk: Any, k_iters: str = f"(K + {BK - 1}) / {BK}",
                maps: tuple[str, ...] = ("tmA", "tmB"), full_arrivals: int = 1) -> str:
    """The kernel body up to the warpgroup split: the 1024-aligned ring base, the C staging atoms and
    the mbarriers after it, the tile walk (``walk.head``; ``k_iters`` is a C expression),
    tensor-map prefetches, barrier initialisation (``full_arrivals`` per full barrier: 1, the producer's
    ``expect_tx``, for TMA-only producers), and the block (or cluster) barrier that publishes them."""
    S, align = sched.stages, SWIZZLE.period_bytes
    prefetch = "\n        ".join(f"tr_prefetch_map(&{m});" for m in maps)
    return f"""    extern __shared__ __align__(1024) unsigned char tr_smem[];
    const uint32_t smem = (tr_smem_addr(tr_smem) + {align - 1}u) & ~{align - 1}u;
    /* stage s: A at smem + s * {sched.stage_bytes}, B {a_bytes} bytes after it; then full[S], empty[S] */
    const uint32_t cstage = smem + {S * sched.stage_bytes}u;  /* C staging atoms (TMA-store epilogue) */
    const uint32_t bars = cstage + {sched.c_staging_bytes}u;
{walk.head(k_iters)}
    const int wg = threadIdx.x / 128, tid = threadIdx.x % 128;
    if (threadIdx.x == 0) {{
        {prefetch}
        for (int s = 0; s < {S}; ++s) {{
            tr_mbar_init(bars + 8u * s, {full_arrivals}u);
            tr_mbar_init(bars + 8u * ({S} + s), {4 * (1 if sched.pingpong else sched.consumers) * sched.cluster}u);
        }}
        tr_mbar_init(bars + 8u * {2 * S}, 1u);
        tr_mbar_init(bars + 8u * {2 * S + 1}, 1u);
        {r.asm("fence.mbarrier_init")}
    }}
    {_cluster_sync(sched, r)}"""


# ---------------------------------------------------------------------------------------- producers


def tma_producer(sched: WgmmaSchedule, r: CudaRenderer, a_k: bool, b_k: bool, walk: Any) -> str:
    """The GEMM's producer warpgroup (``if (wg == 0)``): one thread walks the block's tiles and, for each
    k step, waits for a free stage and TMA-loads A and B into it (``a_k``/``b_k``: K-major operands)."""
    a_lay, b_lay = operand_layouts(sched.bm, a_k), operand_layouts(sched.bn, b_k)
    a_bytes = sum(t.size_bytes for t in a_lay)
    S = sched.stages
    w = CodeWriter()
    w.extend(f"""    if (wg == 0) {{
        {r.asm("setmaxnreg", how="dec", n=sched.register_split()[1])}
        if (tid == 0) {{
            int s = 0;
            uint32_t phase = 0;{_policy(sched, r)}
{walk.producer_loop("            ")}
                {walk.rank_fix()}
                for ({walk.k_range()}) {{
                    tr_mbar_wait(bars + 8u * ({S} + s), phase ^ 1u);
                    const uint32_t full = bars + 8u * s, sa = smem + s * {sched.stage_bytes}u, sb = sa + {a_bytes}u;
                    tr_mbar_expect_tx(full, {sched.stage_bytes}u);""")
    with w.indented(5):  # inside the k loop
        _tma_loads(w, sched, a_lay, b_lay, a_k, b_k)
    w.extend(f"""                    if (++s == {S}) {{ s = 0; phase ^= 1u; }}
                }}
            }}
        }}""")
    return w.render()


def _policy(sched: WgmmaSchedule, r: CudaRenderer) -> str:
    """The producer's L2 cache policy for the operands (``l2_hint`` "first"); nothing otherwise."""
    if sched.l2_hint == "normal":
        return ""
    return ('\n            uint64_t pol;  /* the operands stream: evict them first */'
            '\n            ' + r.asm("policy.evict_first", policy="pol"))


def _loads(sched: WgmmaSchedule) -> tuple[str, str, str]:
    """(the plain TMA load wrapper, the multicast one, the argument each call ends with): ``HINT_LIB``'s and
    the producer's cache policy under ``l2_hint`` "first"."""
    if sched.l2_hint == "normal":
        return "tr_tma_load_2d", "tr_tma_load_2d_mc", ""
    return "tr_tma_load_2d_ef", "tr_tma_load_2d_mc_ef", ", pol"


def _tma_loads(w: CodeWriter, sched: WgmmaSchedule, a_lay: list[TileLayout], b_lay: list[TileLayout],
               a_k: bool, b_k: bool) -> None:
    """One k step's copies: A (one box, or one per 64-row atom when MN-major), then B, whose halves
    are multicast to both blocks of a 2-block cluster (or A's halves, for a pair along N: ``_shared_a``);
    with the producer's cache policy under ``l2_hint`` "first" (``_loads``)."""
    ld, mc, pol = _loads(sched)
    if sched.cluster_axis == "n":
        _shared_a(w, sched, a_lay, a_k)
    elif a_k:
        w(f"{ld}(sa, &tmA, kk * {BK}, tm * {sched.bm}, full{pol});")
    else:
        for i, t in enumerate(a_lay):
            w(f"{ld}(sa + {t.base_bytes}u, &tmA, tm * {sched.bm} + {64 * i}, kk * {BK}, full{pol});")
    if (sched.cluster == 1 or sched.cluster_axis == "n") and b_k:
        w(f"{ld}(sb, &tmB, kk * {BK}, tn * {sched.bn}, full{pol});")
    elif sched.cluster == 1 or sched.cluster_axis == "n":
        for i, t in enumerate(b_lay):
            w(f"{ld}(sb + {t.base_bytes}u, &tmB, tn * {sched.bn} + {64 * i}, kk * {BK}, full{pol});")
    elif b_k:  # this block's half of the B rows, multicast to both blocks of the pair
        half = sched.bn // 2
        w(f"{mc}(sb + rank * {half * b_lay[0].pitch_bytes}u, &tmB, kk * {BK}, "
          f"tn * {sched.bn} + rank * {half}, full, 3{pol});")
    else:  # this block's half of the 64-column atoms, multicast to both blocks of the pair
        per = len(b_lay) // 2
        w(f"for (int i = rank * {per}; i < rank * {per} + {per}; ++i)")
        w(f"    {mc}(sb + i * {b_lay[1].base_bytes}u, &tmB, tn * {sched.bn} + 64 * i, kk * {BK}, full, 3{pol});")


def _shared_a(w: CodeWriter, sched: WgmmaSchedule, a_lay: list[TileLayout], a_k: bool) -> None:
    """A pair along N shares its A tile: each block loads half and multicasts it to both. K-major: half
    the rows (``bm / 2`` lines of 128 B, 1024-aligned); MN-major: half the k lines of every 64-row atom
    (32 of 64), so that any ``bm`` (one atom too) splits evenly. The A tensor map's box is that half."""
    _, mc, pol = _loads(sched)
    if a_k:
        half = sched.bm // 2
        w(f"{mc}(sa + rank * {half * a_lay[0].pitch_bytes}u, &tmA, kk * {BK}, "
          f"tm * {sched.bm} + rank * {half}, full, 3{pol});")
        return
    lines = BK // 2
    for i, t in enumerate(a_lay):
        w(f"{mc}(sa + {t.base_bytes}u + rank * {lines * t.pitch_bytes}u, &tmA, tm * {sched.bm} + {64 * i}, "
          f"kk * {BK} + rank * {lines}, full, 3{pol});")


def gather_producer(sched: WgmmaConvSchedule, r: CudaRenderer, walk: Any) -> str:
    """The implicit-GEMM conv's producer warpgroup (``if (wg == 0)``): thread 0 TMA-loads the filter
    tile of each k step; all 128 threads gather the activations' ``bm x 64`` tile with 16-byte
    ``cp.async`` copies into the 128B-swizzled layout TMA would have written (zero-filled outside the
    image, past M and past C), then publish the stage (``sched.publish``)."""
    a_lay = operand_layouts(sched.bm, True)[0]
    a_bytes, b_bytes = a_lay.size_bytes, sched.bn * BK * ELEM_BYTES
    S, lines = sched.stages, sched.lines_per_thread
    return f"""    if (wg == 0) {{
        {r.asm("setmaxnreg", how="dec", n=sched.register_split()[1])}
        /* This thread's 16-byte chunk of every line, and its first line of the tile. */
        const int chunk = tid % 8, line0 = tid / 8, PQ = P * Q;
        int s = 0;
        uint32_t phase = 0;
        long long step = 0;
{walk.producer_loop("        ")}
            int nh[{lines}], h0[{lines}], w0[{lines}];
            #pragma unroll
            for (int i = 0; i < {lines}; ++i) {{
                const int m = tm * {sched.bm} + line0 + 16 * i;
                const int n = m / PQ, pq = m - n * PQ, p = pq / Q, q = pq - p * Q;
                nh[i] = n * H;
                h0[i] = m < M ? p * stride_h - pad_h : -(1 << 30);  /* a line past M reads nothing */
                w0[i] = q * stride_w - pad_w;
            }}
            {filter_start(sched)}
            for ({walk.k_range()}) {{
                tr_mbar_wait(bars + 8u * ({S} + s), phase ^ 1u);
                const uint32_t full = bars + 8u * s, sa = smem + s * {sched.stage_bytes}u, sb = sa + {a_bytes}u;
                if (tid == 0) {{
                    tr_mbar_expect_tx(full, {b_bytes}u);
                    tr_tma_load_3d(sb, &tmB, cb * {BK}, fr * S + fs, tn * {sched.bn}, full);
                }}
                const int col = cb * {BK} + chunk * 8, dh = fr * dil_h, dw = fs * dil_w;
                #pragma unroll
                for (int i = 0; i < {lines}; ++i) {{
                    const int line = line0 + 16 * i, h = h0[i] + dh, x = w0[i] + dw;
                    const bool ok = (unsigned)h < (unsigned)H && (unsigned)x < (unsigned)W && col < Cp;
                    const uint16_t* src = ok ? X + ((int64_t)(nh[i] + h) * W + x) * Cp + col : X;
                    tr_cp_async_16(sa + {a_lay.c_offset("line", "chunk * 8")}, src, ok ? 16u : 0u);
                }}
                {_publish(sched, r)}
                ++step;
                if (++s == {S}) {{ s = 0; phase ^= 1u; }}
                if (++cb == cblk) {{ cb = 0; if (++fs == S) {{ fs = 0; ++fr; }} }}
            }}
        }}
        {_drain(sched, r)}"""


def filter_start(sched: WgmmaConvSchedule) -> str:
    """The filter row, column and channel block (``chunk`` channels; ``cblk`` a tap) of the walk's first k step
    (``kb`` under split-K: its first box is box ``kb x chunks_per_step`` of the walk)."""
    if sched.split == 1:
        return f"int fr = 0, fs = 0, cb = 0;  /* this k step's filter row, column and {sched.chunk}-channel block */"
    one = sched.chunks_per_step == 1
    first, box = ("kb", "step kb") if one else (f"kb * {sched.chunks_per_step}", "step kb's first box")
    return (f"int cb = {first} % cblk, fs = ({first} / cblk) % S, fr = {first} / cblk / S;  /* filter row, "
            f"column, {sched.chunk}-channel block of {box} */")


def _publish(sched: WgmmaConvSchedule, r: CudaRenderer) -> str:
    """After a k step's copies are issued: hand a full stage to the consumers (see ``publish``)."""
    if sched.publish == "noinc":  # one of the barrier's 128 expected arrivals, when this thread's copies land
        return r.asm("cp.async.arrive", bar="full")
    S, lag = sched.stages, sched.lag
    return f"""{r.asm("cp.async.commit")}
                if (step >= {lag}) {{  /* publish the stage filled {lag} steps ago */
                    {r.asm("cp.async.wait", n=lag)}
                    {r.asm("fence.proxy.async")}
                    tr_mbar_arrive(bars + 8u * ((s + {S - lag}) % {S}));
                }}"""


def _drain(sched: WgmmaConvSchedule, r: CudaRenderer) -> str:
    """After the last tile: every copy landed (and, for "wait", the last ``lag`` stages published)."""
    if sched.publish == "noinc":
        return r.asm("cp.async.wait_all")
    S, lag = sched.stages, sched.lag
    return f"""/* the last {lag} stages: wait for every copy, publish them */
        {r.asm("cp.async.wait_all")}
        {r.asm("fence.proxy.async")}
        for (int d = {lag}; d >= 1; --d)
            if (step >= d) tr_mbar_arrive(bars + 8u * ((s + {S} - d) % {S}));"""


# ---------------------------------------------------------------------------------------- consumers


def consumer_branch(sched: WgmmaSchedule, r: CudaRenderer, walk: Any, stores: Any,
                    a_k: bool = True, b_k: bool = True, proxy_fence: bool = False, acc: str = "float",
                    fold: Any = None) -> str:
    """The consumer warpgroups' side of the kernel, from ``} else {`` after the producer's branch to the
    kernel's closing brace: the walk's loop (``walk``), ring waits, wgmma mainloop, stage releases, the
    walk's fix-up (split-K), then ``stores``' epilogue (direct or TMA store, with the fused ops in order).
    Shared by every kernel on this machinery
    (the GEMM, the implicit-GEMM conv); it reads the locals ``kernel_head`` declares (``smem``, ``bars``,
    ``cstage``, ``tiles*``, ``k_iters``, ``rank``, ``cluster_id``, ``clusters``, ``wg``, ``tid``) and the
    parameters ``C``, ``bias``, ``residual``, ``alpha``, ``M``, ``N``, ``tmC``, ``store_tma``.
    ``a_k``/``b_k``: the operands are K-major in shared memory. ``proxy_fence``: a ``fence.proxy.async``
    after each full-barrier wait, for stages written through the generic proxy (cp.async) and
    published without a producer-side fence. ``acc``: the accumulators' C type ("int" for integer wgmma). ``fold``:
    the promoted mainloop (``promotion.Fold``) instead of one accumulation over the whole k range."""
    w = CodeWriter()
    spread = sched.split != 1 and sched.split_fix == "spread"
    epilogue = f"""            /* wgmma m64nN accumulator layout: thread (warp, lane) holds rows warp*16 + lane/4 (+8),
               columns 8*j + 2*(lane%4) (+1) in acc[4j..4j+3] = (r, c), (r, c+1), (r+8, c), (r+8, c+1). */
            const int row0 = tm * {sched.bm} + part * {sched.wm} + warp * 16 + lane / 4;
            const int col0 = tn * {sched.bn} + 2 * (lane % 4);
            {stores.tma(_store_when(sched))}"""
    w.extend(_consumer_decls(sched, r, acc, fold))
    ahead = fold is not None and fold.ahead
    if ahead:  # (promotion.py: the next tile's first step issued before the tile before is stored)
        w.extend(f"        if (k_iters >= {fold.ahead}) {{")
        w.extend(fold.overlapped(sched, r, walk, epilogue + "\n" + stores.direct(groups=spread)))
        w.extend("        } else {")
    w.extend(_tile_head(sched, r, walk, acc))
    if fold is None:
        w.extend(_consumer_mainloop(sched, a_k, b_k, proxy_fence, r, walk, acc))
    else:
        w.extend(fold.mainloop(sched, r, walk))  # (promotion.py: it reads this module's layouts and barriers)
    if fixup := walk.fixup(r):
        w.extend(fixup)
    w.extend(epilogue)
    w.extend(stores.direct(groups=spread))
    w.extend("        }")
    if ahead:
        w.extend("        }")
    w.extend(f"""        {stores.drain()}
    }}
    {_cluster_exit(sched, r)}
}}""")
    return w.render()


def _store_when(sched: WgmmaSchedule) -> str:
    """When the TMA store runs (else the direct stores): C rows TMA can address; not a spread split unit
    (it stores its share); along N, not the empty tile past N of an odd column count's last pair. (The
    tile's last unit keeps the TMA store: direct stores took it 3.5k cycles to leave against 2.2k on the
    512 x 512 x 16384 timelines, docs/device-runs/h100-splitk-tail-and-suite.)"""
    when = "store_tma" + (" && sidx < 0" if sched.split != 1 and sched.split_fix == "spread" else "")
    return when + (f" && tn * {sched.bn} < N" if sched.cluster_axis == "n" else "")


def _consumer_decls(sched: WgmmaSchedule, r: CudaRenderer, acc: str = "float", fold: Any = None) -> str:
    """Registers taken and the accumulators declared (of C type ``acc``; with the k step's products beside them
    when ``fold`` promotes: as many sets as it keeps)."""
    m_slices, n_regs = sched.m_slices, sched.bn // 2
    step = fold.declarations(m_slices, n_regs, acc) if fold is not None else ""
    return f"""    }} else {{
        {r.asm("setmaxnreg", how="inc", n=sched.register_split()[2])}
        const int cw = wg - 1, warp = tid / 32, lane = tid % 32;
        /* part: this warpgroup's slice of a shared tile (cooperative); walk: which of the block's tiles
           it takes (ping-pong: every {sched.tile_walkers}th, starting at its own index). */
        const int part = {"0" if sched.pingpong else "cw"}, walk = {"cw" if sched.pingpong else "0"};
        {acc} acc[{m_slices}][{n_regs}];{step}
        int cstep = 0;  /* TMA-store epilogue: which staging atom is next */
        (void)cstep;"""


def _tile_head(sched: WgmmaSchedule, r: CudaRenderer, walk: Any, acc: str = "float") -> str:
    """The head of the consumer's tile walk: its tile's coordinates, where the ring stands at the tile's first k
    step, the ping-pong turn, zeroed sums."""
    return f"""{walk.consumer_loop()}
            {_turn_wait(sched)}
            #pragma unroll
            for (int i = 0; i < {sched.m_slices}; ++i) {{
                #pragma unroll
                for (int j = 0; j < {sched.bn // 2}; ++j) acc[i][j] = {"0.0f" if acc == "float" else "0"};
            }}"""


def _consumer_mainloop(sched: WgmmaSchedule, a_k: bool, b_k: bool, proxy_fence: bool, r: CudaRenderer,
                       walk: Any, acc: str = "float") -> str:
    """The k loop of one tile: wait for a full stage, ``bk / 16`` wgmma per m64 slice on descriptors
    read off the operand layouts, one group kept in flight, the stage before it released; then the
    last group awaited and its stage released."""
    chunk = getattr(sched, "chunk", BK)
    a_lay, b_lay = operand_layouts(sched.bm, a_k, chunk), operand_layouts(sched.bn, b_k, chunk)
    a_lbo, a_sbo = descriptor_strides(a_lay)
    b_lbo, b_sbo = descriptor_strides(b_lay)
    a_bytes = sum(t.size_bytes for t in a_lay)
    # A k16 step moves 32 bytes along a K-major line (into the next box past its end), or 16 lines down an MN-major atom.
    a_kstep = _k16_offset(a_lay, chunk) if a_k else f"k16 * {16 * a_lay[0].pitch_bytes}u"
    b_kstep = _k16_offset(b_lay, chunk) if b_k else f"k16 * {16 * b_lay[0].pitch_bytes}u"
    desc = desc_name(2 * chunk)
    # An m64 slice starts 64 lines into a K-major tile, or one atom further along an MN-major one.
    a_mstep = 64 * a_lay[0].pitch_bytes if a_k else a_lay[1].base_bytes if len(a_lay) > 1 else 0
    S, m_slices, n_regs = sched.stages, sched.m_slices, sched.bn // 2
    fence = "\n                " + r.asm("fence.proxy.async") if proxy_fence else ""
    first, skip, step = "", "", ""
    if getattr(sched, "trim", False):  # a tap's last box: its k16 steps past C (rounded up to 16) are skipped
        first = f"\n            int cbc = {walk.k_bounds()[0]} % cblk;  /* the stage's box of its tap */"
        skip = (f"\n                const int kend = cbc == cblk - 1 ? (((Cp + 15) & ~15) - (cblk - 1) * {BK}) / 16 : "
                f"{BK // 16};\n                if (++cbc == cblk) cbc = 0;")
        step = "\n                    if (k16 >= kend) continue;"
    return f"""            int prev = -1;{first}
            for ({walk.k_range()}) {{
                tr_mbar_wait(bars + 8u * s, phase);{fence}{skip}
                const uint32_t sa = smem + s * {sched.stage_bytes}u + part * {sched.m_slices * a_mstep}u;
                const uint32_t sb = smem + s * {sched.stage_bytes}u + {a_bytes}u;
                TR_WGMMA_FENCE();
                #pragma unroll
                for (int k16 = 0; k16 < {BK // 16}; ++k16) {{{step}
                    const uint64_t db = {desc}(sb + {b_kstep}, {b_lbo}u, {b_sbo}u);
                    #pragma unroll
                    for (int i = 0; i < {m_slices}; ++i)
                        tr_wgmma(acc[i], {desc}(sa + i * {a_mstep}u + {a_kstep}, {a_lbo}u, {a_sbo}u), db);
                }}
                TR_WGMMA_COMMIT();
                TR_WGMMA_WAIT(1);
                if (prev >= 0 && lane == 0) {_release("prev", sched)}
                prev = s;
                if (++s == {S}) {{ s = 0; phase ^= 1u; }}
            }}
            {_turn_pass(sched)}
            TR_WGMMA_WAIT(0);
            if (lane == 0) {_release("prev", sched)}
            #pragma unroll
            for (int i = 0; i < {m_slices}; ++i) {{
                #pragma unroll
                for (int j = 0; j < {n_regs}; ++j) {r.asm("compiler.pin" if acc == "float" else "compiler.pin_int",
                                                           value="acc[i][j]")}
            }}"""


def _k16_offset(layouts: list[TileLayout], chunk: int) -> str:
    """The C expression of k16 step ``k16``'s byte offset in a K-major operand tile stored as ``layouts``: 32
    bytes a step along a line, and past a box's ``chunk`` elements into the next box."""
    if len(layouts) == 1:
        return f"k16 * {16 * ELEM_BYTES}u"
    per = chunk // 16
    return f"(k16 / {per}) * {layouts[1].base_bytes}u + (k16 % {per}) * {16 * ELEM_BYTES}u"


def _cluster_sync(sched: WgmmaSchedule, r: CudaRenderer) -> str:
    """Every barrier of the block (and, in a pair, of the peer) initialised before anyone uses one."""
    if sched.cluster == 1:
        return r.barrier
    return r.asm("cluster.arrive", aligned=".aligned") + "\n    " + r.asm("cluster.wait", aligned=".aligned")


def _cluster_exit(sched: WgmmaSchedule, r: CudaRenderer) -> str:
    """A pair leaves together: the peer may still arrive on this block's barriers until it is done."""
    if sched.cluster == 1:
        return ""
    return r.asm("cluster.arrive", aligned="") + "\n    " + r.asm("cluster.wait", aligned="")


def _release(stage: str, sched: WgmmaSchedule) -> str:
    """One warp's release of ring stage ``stage``: its own empty barrier, and the peer's in a pair."""
    own = f"tr_mbar_arrive(bars + 8u * ({sched.stages} + {stage}));"
    if sched.cluster == 1:
        return own
    return f"{{ {own} tr_mbar_arrive_remote(bars + 8u * ({sched.stages} + {stage}), rank ^ 1); }}"


def _turn_wait(sched: WgmmaSchedule) -> str:
    """Ping-pong: before its t-th tile a consumer waits until the other has passed every full-barrier
    wait of the tile before (its turn barrier, after ``bars + 16 S``). Without this a consumer could
    wait on a stage two ring phases ahead, and the parity wait cannot tell those phases apart."""
    if not sched.pingpong:
        return ""
    return ("{ const int t = (j - walk) / 2; if (cw == 1 || t > 0) "
            f"tr_mbar_wait(bars + 8u * ({2 * sched.stages} + cw), (uint32_t)((cw == 1 ? t : t - 1) & 1)); }}")


def _turn_pass(sched: WgmmaSchedule) -> str:
    """Ping-pong: hand the mainloop turn to the other consumer once this one's loads have all landed."""
    if not sched.pingpong:
        return ""
    return f"if (tid == 0) tr_mbar_arrive(bars + 8u * ({2 * sched.stages} + 1 - cw));"
