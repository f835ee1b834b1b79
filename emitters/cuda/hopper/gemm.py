"""The Hopper GEMM (``cuda-wgmma.gemm``, sm_90a): TMA loads into 128B-swizzled shared memory,
``wgmma.mma_async`` on warpgroups, producer/consumer warp specialisation over an mbarrier ring,
``setmaxnreg`` register reallocation, a persistent grid walking an L2-friendly tile order, the IR's
fused epilogues and any M, N, K. A thin kernel over the parts: the TMA producer and the consumers
(``mainloop.py``), the tile order and grid (``scheduler.py``), the epilogue (``epilogue.py``).

An operand whose global layout has k contiguous is "K-major" (one TMA box ``{64, rows}``); otherwise
"MN-major" (``rows / 64`` boxes of ``{64, 64}``) and the wgmma transposes it (``imm-trans`` = 1; bf16
and fp16 only, which is all this variant computes). Out-of-bounds boxes are zero-filled by TMA, so
any M, N, K is right; the epilogue clips (TMA store) or predicates (direct stores). TMA needs each
global row to start on a 16-byte boundary: a row stride that is not a multiple of 8 elements (K = 4097
row-major A) cannot be described, and ``tma_unsupported`` says so (the host, ``tma.py``, then copies
the operand into a padded-stride buffer at every launch, inside the timed region).

``store="tma"`` (the hero): the epilogue stages C through two 64 x 64 shared-memory atoms per consumer
laid out as the 128B swizzle (``TileLayout.c_offset``) and writes them with bulk tensor stores, instead
of 4-byte register stores that keep the tensor cores waiting (H200: 0.89x -> 0.96x cuBLAS at 4096^3).

``cluster`` = 2: the blocks run in pairs (``__cluster_dims__(2, 1, 1)``) over pairs of tiles that share
their B panel (tile rows 2i and 2i+1 of one tile column). Each block loads its own A and one half of B,
multicast by TMA into both blocks' shared memory; a stage is free again only when the consumers of both
blocks have released it (each consumer warp arrives on its own and on the peer's ``empty[s]``).
``cluster_axis`` = "n" pairs neighbouring tile columns instead (tile columns 2j and 2j+1 of one tile row),
sharing the A panel: each block loads half of A (half its rows, or half of each atom's k lines when
column-major) multicast to both, and its own whole B; each block's full barrier still expects the whole
stage. With an odd number of tile columns the last pair's second block lies past N: it still loads its
half of A for its peer and keeps the ring's barriers in step, computes on TMA's zero fill, and stores
nothing (the direct stores are predicated on N; the TMA store is skipped for that tile).

``swap`` (the schedule's): the kernel computes C^T = B^T A^T over ``kernel_op(op, sched)`` (M and N exchanged, and
the operands' roles: its A map is over op's B, its B map over op's A), and its epilogue writes C^T's tile back
into C transposed (``epilogue.py``); the host passes the kernel op's M and N, and the maps in that order.
"""

from __future__ import annotations

from typing import Any

from ...cstyle import CodeWriter
from ..render import CudaRenderer, Rendered
from . import scheduler
from .epilogue import Stores
from .mainloop import consumer_branch, kernel_head, operand_kmajor, operand_layouts, tma_producer
from .ptx import DEVICE_LIB, HINT_LIB, PTX_TYPE, wgmma_instruction
from .schedule import BK, ELEM_BYTES, SWIZZLE, WgmmaSchedule

KERNEL_NAME = "tr_wgmma_gemm"
PARAMS = ("tmA", "tmB", "tmC", "out", "bias", "residual", "alpha", "M", "N", "K", "store_tma")


def kernel_op(op: Any, sched: WgmmaSchedule) -> Any:
    """The GEMM the kernel computes: ``op``, or with ``swap`` C^T = B^T A^T (n x m; B^T row-major and A^T
    column-major are op's operands as they lie, both K-major)."""
    if not sched.swap:
        return op
    from tracea.kernels import Gemm

    return Gemm(m=op.n, n=op.m, k=op.k, dtype=op.dtype.value, layout_a="row", layout_b="col",
                epilogue=tuple(op.epilogue), alpha=op.alpha)


def render(op: Any, sched: WgmmaSchedule) -> str:
    """CUDA C++ (no headers; NVRTC, ``-arch=sm_90a``) of ``extern "C" tr_wgmma_gemm`` for ``op``.

    Parameters: ``(const __grid_constant__ TrTensorMap tmA, tmB, tmC, uint16_t* C, const uint16_t* bias,
    const uint16_t* residual, float alpha, int M, int N, int K, int store_tma)``; ``tmC`` and ``store_tma``
    matter only to ``store="tma"`` schedules (0: the direct stores, for C rows TMA cannot address); launch
    ``sched.threads`` threads, ``sched.smem_bytes`` dynamic shared memory, a grid of ``min(tiles, SMs)``
    (persistent) or ``tiles``.
    """
    sched.validate(op)
    op = kernel_op(op, sched)
    dtype = op.dtype.value
    a_k, b_k = operand_kmajor(op, "a"), operand_kmajor(op, "b")
    r = CudaRenderer()
    # No shape in the source: one binary serves every M, N, K of its kind (the cache key is the text).
    title = (f"cuda-wgmma.gemm {sched.name}: {dtype}, A {op.layout_a}, B {op.layout_b}, "
             f"epilogue {','.join(op.epilogue) or 'none'}{', C^T stored transposed' if sched.swap else ''}")
    signature = ("    uint16_t* __restrict__ C, const uint16_t* __restrict__ bias, const uint16_t* __restrict__ residual,\n"
                 "    float alpha, int M, int N, int K, int store_tma")
    return compose(op, sched, title, wgmma_instruction(sched.bn, PTX_TYPE[dtype], 0 if a_k else 1, 0 if b_k else 1),
                   signature, Stores(sched, r, dtype, tuple(op.epilogue)))


def compose(kop: Any, sched: WgmmaSchedule, title: str, instruction: str, signature: str, stores: Any,
            acc: str = "float", fold: Any = None, prologue: str = "") -> str:
    """A Hopper GEMM kernel over the kernel op ``kop`` (its operands' layouts): the device library, ``instruction``
    (``tr_wgmma``), the walk's functions, ``extern "C" tr_wgmma_gemm(tmA, tmB, tmC, <signature>, <walk's>)``, then
    ``prologue`` (lines at the kernel's top), the kernel head, the TMA producer and the consumers with ``stores``
    (``acc``: the accumulators' C type; ``fold``: the promoted mainloop, ``promotion.Fold``). The scaled 8-bit GEMM
    (``scaled_gemm.py``) composes its own over the same parts."""
    r = CudaRenderer()
    a_k, b_k = operand_kmajor(kop, "a"), operand_kmajor(kop, "b")
    a_bytes = sum(t.size_bytes for t in operand_layouts(sched.bm, a_k))
    b_bytes = sum(t.size_bytes for t in operand_layouts(sched.bn, b_k))
    assert a_bytes % SWIZZLE.period_bytes == 0 and b_bytes % SWIZZLE.period_bytes == 0
    w = CodeWriter()
    w(f"/* {title} */")
    w.extend(r.prelude(1))
    w.extend(DEVICE_LIB)
    if sched.l2_hint != "normal":
        w.extend(HINT_LIB)
    w.extend(instruction)
    walk = scheduler.TileScheduler(sched)
    for fn in walk.functions():
        w.extend(fn)
    cluster_attr = f"__cluster_dims__({sched.cluster}, 1, 1) " if sched.cluster > 1 else ""
    w(f'extern "C" __global__ void {cluster_attr}__launch_bounds__({sched.threads}, 1) {KERNEL_NAME}(')
    w("    const __grid_constant__ TrTensorMap tmA, const __grid_constant__ TrTensorMap tmB,")
    w("    const __grid_constant__ TrTensorMap tmC,")
    w(f"{signature}{walk.signature()}) {{")
    if prologue:
        w.extend(prologue)
    # the kernel joins its parts: the mainloop's producer and consumers walk the scheduler's tiles, and the
    # consumers end each tile with the epilogue's stores
    w.extend(kernel_head(sched, r, a_bytes, walk))
    w.extend(tma_producer(sched, r, a_k, b_k, walk))
    w.extend(consumer_branch(sched, r, walk, stores, a_k, b_k, acc=acc, fold=fold))
    return w.render()


def launch_geometry(op: Any, sched: WgmmaSchedule, sm_count: int,
                    max_clusters: int | None = None) -> tuple[int, int, int]:
    """(grid blocks, threads per block, dynamic shared memory bytes) over ``op``'s M x N tiles
    (``scheduler.launch_geometry``), or its split-K work units (``split_plan``)."""
    kop = kernel_op(op, sched)
    return scheduler.launch_geometry(sched, kop.m, kop.n, sm_count, max_clusters, split_plan(op, sched, sm_count))


def split_plan(op: Any, sched: WgmmaSchedule, sm_count: int) -> scheduler.Plan:
    kop = kernel_op(op, sched)
    return scheduler.TileScheduler(sched).plan(kop.m, kop.n, scheduler.k_steps(kop.k), sm_count)


def tma_unsupported(op: Any) -> str | None:
    """Why TMA cannot describe ``op``'s operands as they are (None: it can)."""
    if op.dtype.value not in PTX_TYPE:
        return f"cuda-wgmma takes bf16 or fp16 inputs, not {op.dtype.value}"
    for which, (_rows, inner) in (("A", op.shapes()["a"]), ("B", op.shapes()["b"])):
        if (inner * ELEM_BYTES) % 16:
            return (f"{which}'s rows are {inner} elements ({inner * ELEM_BYTES} B) apart; TMA needs a multiple of "
                    "16 B (pad the row stride to a multiple of 8 elements)")
    return None


def tma_boxes(op: Any, sched: WgmmaSchedule) -> dict[str, dict[str, Any]]:
    """What the host encodes into each tensor map: global dims (inner first), box dims, 128B swizzle; of the
    kernel's A and B (``kernel_op``: with ``swap``, "a" is over op's B and "b" over op's A)."""
    op = kernel_op(op, sched)
    out = {}
    for which, rows in (("a", sched.bm), ("b", sched.bn)):
        outer, inner = op.shapes()[which]
        kmajor = operand_kmajor(op, which)
        box = (BK, rows) if kmajor else (64, BK)
        if sched.cluster > 1 and which == ("a" if sched.cluster_axis == "n" else "b"):
            # each block of a pair loads half the shared operand: half its rows (K-major); half the k
            # lines of each atom along N (mainloop._shared_a), or half the atoms along M (same box)
            box = (BK, rows // sched.cluster) if kmajor else (64, BK // sched.cluster) if which == "a" else box
        out[which] = {"dims": (inner, outer), "box": box, "kmajor": kmajor}
    return out


def rendered(op: Any, sched: WgmmaSchedule, sm_count: int) -> Any:
    """The CUDA emitter's ``Rendered`` for ``op`` (source, launch geometry, metadata). ``params`` names the
    kernel's arguments in order; the tensor maps ``tmA``/``tmB`` are built on the host (``tma.py``)."""
    src = render(op, sched)
    grid, threads, smem = launch_geometry(op, sched, sm_count)
    kop = kernel_op(op, sched)
    a_k, b_k = operand_kmajor(kop, "a"), operand_kmajor(kop, "b")
    meta = {
        "name": f"tr_{sched.name}",
        "tile": {"M": sched.bm, "N": sched.bn, "K": BK, "stages": sched.stages, "consumers": sched.consumers,
                 "pingpong": sched.pingpong, "cluster": sched.cluster,
                 **({"cluster_axis": "n"} if sched.cluster_axis == "n" else {})},
        "fragments": {"mma": f"wgmma.mma_async m64n{sched.bn}k16", "dtype_in": op.dtype.value, "dtype_acc": "fp32",
                      "load": "TMA cp.async.bulk.tensor.2d, 128B swizzle" + ("" if a_k else " (A MN-major)")
                              + ("" if b_k else " (B MN-major)")},
        "smem": {"a": [t.describe() for t in operand_layouts(sched.bm, a_k)],
                 "b": [t.describe() for t in operand_layouts(sched.bn, b_k)], "stage_bytes": sched.stage_bytes},
        "registers": dict(zip(("entry", "producer", "consumer"), sched.register_split(), strict=True)),
        "launch": {"grid": [grid, 1, 1], "block": [threads, 1, 1], "dynamic_smem": smem,
                   "persistent": sched.persistent},
        "epilogue": list(op.epilogue),
        "tma_padding": tma_unsupported(op),
    }
    if sched.swap:
        meta["swapped"] = {"computes": f"C^T ({kop.m} x {kop.n}) = B^T A^T", "stores": "C transposed"}
    params = PARAMS
    if sched.split != 1:
        meta["split_k"] = split_plan(op, sched, sm_count).to_json()
        params += scheduler.TileScheduler(sched).params()
    return Rendered(f"tr_{sched.name}", KERNEL_NAME, src, params, (grid, 1, 1), (threads, 1, 1), smem, meta)
