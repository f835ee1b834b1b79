"""The small-M GEMM (decode: M <= 16), memory bound: B is streamed once with 16-byte loads and fed to
``mma.sync.m16n8k16`` straight from registers, with B's outputs as the mma's 16 rows and A's <= 16 rows
as its 8 columns (one or two m-groups of 8).

A block owns 64 output columns (four 16-row mma tiles a warp); its warps split the K range (warp w takes
the k-steps w, w + W, ...), and ``splits`` blocks split K further where the column tiles alone leave SMs
idle. The order of a dot product's k inside an mma is free as long as A and B agree, which lets each
thread load whole 16-byte vectors:

- B row-major ([k, n], n contiguous), k-step 16: lane (g, q) loads rows k0 + 4q + j (j < 4), columns
  n0 + 8g .. + 7; ``__byte_perm`` pairs rows (4q, 4q+1) and (4q+2, 4q+3) of each column into the
  fragment of tile i (columns 8g + 2i, 8g + 2i + 1 as the mma's rows g and g + 8). A warp reads 4 full
  128-byte lines a load.
- B col-major ([n, k], k contiguous), k-step 32: lane (g, q) loads 8 k (k0 + 8q ..) of rows g and g + 8
  of each tile, two k16 mmas a step.

A's fragment (the mma's B operand) is 4 or 8 consecutive k of one row, read through L1 (all column
blocks share it). Partial sums meet in shared memory (summed in warp order), then, with splits, in an
fp32 workspace that the last block of a column tile sums in split order (a counter per tile, reset by that
block): deterministic. The epilogue is emitters/gpu_epilogue.py's, per output element.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from tracea.doctor.errors import BadInputError, UnsupportedError

from ..cstyle import Param
from ..gpu_epilogue import Dest, Operands, Walk, direct_store
from . import split_arrival
from .render import CudaRenderer, Rendered
from .schedule import tile_features

SCHEMA_VERSION = 1
MAX_M = 16
NB = 64  # output columns per block
WARPS = (1, 2, 4, 8)
UNROLLS = (1, 2, 4)
MAX_SPLITS = 32
CLUSTER_MAX = 8  # the portable cluster size
DTYPES = ("bf16", "fp16")


@dataclass(frozen=True)
class GemvSchedule:
    """``warps`` per block (splitting K), ``splits`` blocks along K, ``unroll`` k-steps of loads in flight."""

    core: str = "gemv"
    warps: int = 8
    splits: int = 1
    unroll: int = 2

    @property
    def bm(self) -> int:
        return MAX_M

    @property
    def bn(self) -> int:
        return NB

    @property
    def block_threads(self) -> int:
        return 32 * self.warps

    @property
    def name(self) -> str:
        return f"gemv_w{self.warps}_s{self.splits}_u{self.unroll}"

    def validate(self, op: Any = None, arch: Any = None) -> None:
        if self.core != "gemv":
            raise BadInputError(f"core: a GemvSchedule runs the gemv core, not {self.core!r}")
        for name, allowed in (("warps", WARPS), ("unroll", UNROLLS)):
            v = getattr(self, name)
            if isinstance(v, bool) or v not in allowed:
                raise BadInputError(f"{name}: expected one of {', '.join(map(str, allowed))}, got {v!r}")
        if isinstance(self.splits, bool) or not isinstance(self.splits, int) or not 1 <= self.splits <= MAX_SPLITS:
            raise BadInputError(f"splits: expected an integer in 1..{MAX_SPLITS}, got {self.splits!r}")
        if op is None:
            return
        if getattr(op, "kind", None) != "gemm":
            raise BadInputError(f"core: gemv computes gemm, not {getattr(op, 'kind', op)}")
        if op.m > MAX_M:
            raise BadInputError(f"core: gemv computes at most {MAX_M} rows of A, not {op.m}", "the tiled cores")
        if op.dtype.value not in DTYPES:
            raise UnsupportedError(f"gemv computes bf16 or fp16, not {op.dtype.value}")

    def to_json(self) -> dict[str, Any]:
        return {"schema_version": SCHEMA_VERSION, "backend": "cuda", **dataclasses.asdict(self)}

    @staticmethod
    def from_json(d: dict[str, Any]) -> GemvSchedule:
        from ..schedule import schedule_fields

        s = GemvSchedule(**schedule_fields(d, GemvSchedule, "cuda", "CUDA", ("core",), SCHEMA_VERSION))
        s.validate()
        return s

    def features(self, op: Any) -> dict[str, float]:
        """Warps and the reduction's shared memory over the nominal 16 x 64 tile (``tile_features``)."""
        return tile_features(op, self.warps, smem_bytes(op, self), self.bm, self.bn)


# Columns from which gemv's 64-column blocks fill an H100-class GPU (132 SMs) without splitting K over
# blocks. On an H100 (2026-11-25, docs/device-runs/h100-cuda-suites-splitk-im2col-stem/suite-gemv-softmax-conv1x1/): at 16 rows gemv ran
# 1.07-1.12x cuBLAS for N = 11008 and 14336 but 0.74-0.78x for N = 4096 (K split over 4 blocks), where the
# Hopper tiles gave 0.83-0.87x; at 1 row gemv won everywhere (0.89-1.08x against 0.80-0.86x).
WIDE_N = 8192
FEW_ROWS = 4


def applies(op: Any) -> bool:
    """Whether gemv can run ``op`` (and the tuner searches it): a 16-bit GEMM of at most 16 rows."""
    return getattr(op, "kind", None) == "gemm" and op.m <= MAX_M and op.dtype.value in DTYPES


def prefers(op: Any) -> bool:
    """Whether gemv is the hero for ``op`` in the families it serves: a 16-bit GEMM of at most 16 rows,
    and either a handful of rows (a 64- or 128-row tile would be nearly all padding) or enough columns
    that no K split is needed (WIDE_N). Between them the tensor-core tiles stay the hero; the tuner
    still searches gemv there."""
    return applies(op) and (op.m <= FEW_ROWS or op.n >= WIDE_N)


def k_step(op: Any) -> int:
    return 16 if op.layout_b == "row" else 32


def sm_count(host: Any) -> int:
    gpus = getattr(getattr(host, "nvidia", None), "devices", None) or []
    return int(getattr(gpus[0], "sm_count", 0) or 132) if gpus else 132


def hero_schedule(op: Any, host: Any) -> GemvSchedule:
    """8 warps, 128 or 256 bytes of B a thread in flight; K split over blocks up to two blocks an
    SM (N / 64 column tiles alone leave SMs idle below N = 2 * 64 * SMs), >= 2 rounds of steps a warp."""
    # 4 KiB of B a warp in flight, 8 KiB where A's <= 8 rows leave registers for it (NVRTC 12, sm_90a:
    # <= 113 registers, no spills; 16 rows at 8 KiB reach the 128 of two blocks an SM, col-major spills)
    unroll = (2 if op.layout_b == "row" else 1) * (2 if op.m <= 8 else 1)
    steps = -(-op.k // k_step(op))
    warps = next(w for w in (8, 4, 2, 1) if w == 1 or steps >= w * unroll)
    tiles = -(-op.n // NB)
    slots = 2 * sm_count(host)  # two blocks of 8 warps an SM (launch bounds: <= 128 registers a thread)
    cap = max(1, min(steps // (2 * warps * unroll), MAX_SPLITS))
    # one wave, every block resident from the start (equal work, so they finish together: a memory-bound
    # kernel's blocks share DRAM, not SMs), with as many splits as fit to keep the most bytes in flight
    splits = max(1, min(slots // tiles, cap))
    return GemvSchedule(warps=warps, splits=splits, unroll=unroll)


def search_space(op: Any, hero: Any, arch: Any) -> list[GemvSchedule]:
    """4 or 8 warps, unroll 1..4, K splits 1..16 (at least one step a warp): small M only."""
    if not prefers(op):
        return []
    steps = -(-op.k // k_step(op))
    out = []
    for warps in (4, 8):
        for unroll in UNROLLS:
            for splits in (1, 2, 3, 4, 6, 8, 12, 16):
                if splits == 1 or steps >= splits * warps:
                    out.append(GemvSchedule(warps=warps, splits=splits, unroll=unroll))
    return out


def check(op: Any, v: Any, schedule: Any, arch: Any) -> None:
    """A GemvSchedule for a 16-bit GEMM of <= 16 rows, on the variant's targets (sm_80+: mma.sync)."""
    if not isinstance(schedule, GemvSchedule):
        raise BadInputError(f"schedule: the gemv core takes a GemvSchedule, got {type(schedule).__name__}")
    if op.dtype.value not in v.precisions:
        raise UnsupportedError(f"{v.id} computes {', '.join(v.precisions)}, not {op.dtype.value}")
    lo, hi = v.requirements.min_compute_capability, v.requirements.max_compute_capability
    if arch.cc < max(lo, (8, 0)) or (hi is not None and arch.cc > hi):
        raise UnsupportedError(f"{v.id} with the gemv core does not run on {arch.name}")
    schedule.validate(op, arch)


def smem_bytes(op: Any, schedule: Any) -> int:
    return schedule.warps * mpad(op) * NB * 4 + 16


def mpad(op: Any) -> int:
    return 8 if op.m <= 8 else 16


def clustered(schedule: Any, arch: Any) -> bool:
    """Whether the splits of a column tile meet in a thread-block cluster (sm_90: distributed shared
    memory, no global round trip) rather than in the global workspace."""
    return arch is not None and arch.cc >= (9, 0) and 2 <= schedule.splits <= CLUSTER_MAX


def workspace_bytes(op: Any, schedule: Any, arch: Any = None) -> int:
    """fp32 partials of every split, then one counter per column tile (zeroed once); none in a cluster."""
    if schedule.splits == 1 or clustered(schedule, arch):
        return 0
    return 4 * (schedule.splits * op.m * op.n + -(-op.n // NB))


def render(op: Any, schedule: Any, arch: Any) -> tuple[Rendered, dict[str, float | int]]:
    return render_gemv(op, schedule, arch), {"alpha": op.alpha}


# ------------------------------------------------------------------------------------------ device code
def _loaders(op: Any) -> str:
    """ldB (8 elements of B along its contiguous dimension) and ldX4/ldX8 (k-consecutive elements of A's
    row m), each a 16- or 8-byte load where aligned and in range, else guarded scalars (zero outside)."""
    M, N, K = op.m, op.n, op.k
    inl = "static __device__ __forceinline__ "
    pk = f"{inl}uint32_t tr_pk(uint16_t lo, uint16_t hi) {{ return (uint32_t)lo | ((uint32_t)hi << 16); }}"
    if op.layout_b == "row":  # 8 columns n.. of row k
        inside, vec, at, ok = "k < K && n + 8 <= N", N % 8 == 0, "(size_t)k * N + n", "k < K && n + i < N"
    else:  # 8 k.. of row n
        inside, vec, at, ok = "n < N && k + 8 <= K", K % 8 == 0, "(size_t)n * K + k", "n < N && k + i < K"
    ldb = [f"{inl}uint4 ldB(const uint16_t* __restrict__ B, int k, int n) {{"]
    if vec:
        ldb.append(f"    if ({inside}) return __ldcs((const uint4*)(B + {at}));")
    ldb += ["    uint16_t e[8];", "    #pragma unroll",
            f"    for (int i = 0; i < 8; ++i) e[i] = ({ok}) ? B[{at} + i] : (uint16_t)0;",
            "    return make_uint4(tr_pk(e[0], e[1]), tr_pk(e[2], e[3]), tr_pk(e[4], e[5]), tr_pk(e[6], e[7]));", "}"]
    x_at = "(size_t)m * K + k + i" if op.layout_a == "row" else "(size_t)(k + i) * M + m"
    ldx = [f"{inl}uint2 ldX4(const uint16_t* __restrict__ A, int m, int k) {{"]
    if op.layout_a == "row" and K % 4 == 0:
        ldx.append("    if (m < M && k + 4 <= K) return __ldg((const uint2*)(A + (size_t)m * K + k));")
    ldx += ["    uint16_t e[4];", "    #pragma unroll",
            f"    for (int i = 0; i < 4; ++i) e[i] = (m < M && k + i < K) ? A[{x_at}] : (uint16_t)0;",
            "    return make_uint2(tr_pk(e[0], e[1]), tr_pk(e[2], e[3]));", "}",
            f"{inl}uint4 ldX8(const uint16_t* __restrict__ A, int m, int k) {{"]
    if op.layout_a == "row" and K % 8 == 0:
        ldx.append("    if (m < M && k + 8 <= K) return __ldg((const uint4*)(A + (size_t)m * K + k));")
    ldx += ["    const uint2 lo = ldX4(A, m, k), hi = ldX4(A, m, k + 4);",
            "    return make_uint4(lo.x, lo.y, hi.x, hi.y);", "}"]
    return "\n".join([f"#define M {M}\n#define N {N}\n#define K {K}", pk, *ldb, *ldx])


W = ("x", "y", "z", "w")


def _row_step(u: int, mg: int) -> tuple[list[str], list[str]]:
    """Loads and mmas of one k16 step of row-major B (tiles: columns 8g + 2i, + 1 of the 64)."""
    loads = [f"        b{u}_{j} = on ? ldB(B, k + {j}, n0 + 8 * g) : z4;" for j in range(4)]
    loads += [f"        x{u}_{m} = on ? ldX4(A, {8 * m} + g, k) : z2;" for m in range(mg)]
    mmas = []
    for i in range(4):
        c = W[i]
        mmas.append(f"    {{ const uint32_t a[4] = {{__byte_perm(b{u}_0.{c}, b{u}_1.{c}, 0x5410), "
                    f"__byte_perm(b{u}_0.{c}, b{u}_1.{c}, 0x7632), __byte_perm(b{u}_2.{c}, b{u}_3.{c}, 0x5410), "
                    f"__byte_perm(b{u}_2.{c}, b{u}_3.{c}, 0x7632)}};")
        for m in range(mg):
            end = " }" if m == mg - 1 else ""
            mmas.append(f"      {{ const uint32_t x[2] = {{x{u}_{m}.x, x{u}_{m}.y}}; tr_mma(acc[{i}][{m}], a, x); }}{end}")
    return loads, mmas


def _col_step(u: int, mg: int) -> tuple[list[str], list[str]]:
    """Loads and mmas of one k32 step of col-major B (tile t: rows 16t + g and 16t + g + 8)."""
    loads = []
    for t in range(4):
        loads.append(f"        b{u}_{2 * t} = on ? ldB(B, k, n0 + {16 * t} + g) : z4;")
        loads.append(f"        b{u}_{2 * t + 1} = on ? ldB(B, k, n0 + {16 * t + 8} + g) : z4;")
    loads += [f"        x{u}_{m} = on ? ldX8(A, {8 * m} + g, k) : z4;" for m in range(mg)]
    mmas = []
    for h in range(2):
        lo, hi = W[2 * h], W[2 * h + 1]
        for t in range(4):
            r0, r1 = f"b{u}_{2 * t}", f"b{u}_{2 * t + 1}"
            mmas.append(f"    {{ const uint32_t a[4] = {{{r0}.{lo}, {r1}.{lo}, {r0}.{hi}, {r1}.{hi}}};")
            for m in range(mg):
                end = " }" if m == mg - 1 else ""
                mmas.append(f"      {{ const uint32_t x[2] = {{x{u}_{m}.{lo}, x{u}_{m}.{hi}}}; "
                            f"tr_mma(acc[{t}][{m}], a, x); }}{end}")
    return loads, mmas


def _main_loop(op: Any, s: GemvSchedule) -> list[str]:
    mg = mpad(op) // 8
    row = op.layout_b == "row"
    ks = k_step(op)
    xt = "uint2" if row else "uint4"
    src = ["    const uint4 z4 = make_uint4(0u, 0u, 0u, 0u);", "    const uint2 z2 = make_uint2(0u, 0u);",
           f"    for (int c = c0 + warp; c < c1; c += {s.warps * s.unroll}) {{"]
    mmas: list[str] = []
    for u in range(s.unroll):
        nb = 4 if row else 8
        src.append(f"    uint4 {', '.join(f'b{u}_{j}' for j in range(nb))};")
        src.append(f"    {xt} {', '.join(f'x{u}_{m}' for m in range(mg))};")
        src.append(f"    {{ const int cc = c + {u * s.warps}; const bool on = cc < c1;")
        src.append(f"        const int k = cc * {ks} + {4 if row else 8} * q;")
        ld, mm = (_row_step if row else _col_step)(u, mg)
        src += ld
        src.append("    }")
        mmas += mm
    return [*src, *mmas, "    }"]


def fragment_stores(op: Any, b_rows: bool | None = None, groups: int | None = None) -> list[str]:
    """Each accumulator into red[warp][m][column] (the mma's rows are B's columns, its columns A's rows): the
    columns as the row-major B's fragments hold them (``b_rows``; default: B's layout is "row"), else 16t + g
    (+ 8); ``groups`` 8-row groups of A (default ``mpad(op) // 8``)."""
    mg = groups or mpad(op) // 8
    row = op.layout_b == "row" if b_rows is None else b_rows
    out = []
    for t in range(4):
        for m in range(mg):
            for e in range(4):
                mm = f"{8 * m} + 2 * q + {e & 1}"
                col = f"8 * g + {2 * t + (e >> 1)}" if row else f"{16 * t + 8 * (e >> 1)} + g"
                out.append(f"    red[warp][{mm}][{col}] = acc[{t}][{m}][{e}];")
    return out


def _store(op: Any, from_f: str, to_f: str) -> str:
    """Output (m, n) to C, one line (``gpu_epilogue.direct_store`` of one element)."""
    ops = Operands(f"{to_f}(bias[n])", f"{to_f}(resid[(size_t)m * N + n])", preload=False)
    return " ".join(direct_store(Walk(()), op.epilogue, ops, Dest("Cout[(size_t)m * N + n]", from_f)))


CLUSTER_LIB = r"""static __device__ __forceinline__ void tr_cluster_sync() {
    asm volatile("barrier.cluster.arrive.release.aligned;\n" "barrier.cluster.wait.acquire.aligned;\n" ::: "memory");
}
static __device__ __forceinline__ float tr_dsmem_ld(const float* p, uint32_t rank) {
    uint32_t remote;
    float v;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(tr_smem_addr(p)), "r"(rank));
    asm volatile("ld.shared::cluster.f32 %0, [%1];" : "=f"(v) : "r"(remote) : "memory");
    return v;
}
"""


def _cluster_reduction(op: Any, s: Any, store: str, r: CudaRenderer, T: int) -> list[str]:
    """Each block sums its warps into red[0]; the cluster's blocks (its splits, rank = blockIdx.y) then
    each finish a share of the outputs, reading every rank's red[0] in rank order (``T`` threads a block)."""
    return ["    " + r.barrier,
            f"    for (int e = threadIdx.x; e < M * {NB}; e += {T}) {{",
            f"        const int m = e / {NB}, c = e % {NB};",
            f"        float v = 0.0f;\n        #pragma unroll\n        for (int w = 0; w < {s.warps}; ++w) v += red[w][m][c];",
            "        red[0][m][c] = v;  /* only this thread reads (m, c) */",
            "    }",
            "    tr_cluster_sync();",
            f"    for (int e = threadIdx.x + blockIdx.y * {T}; e < M * {NB}; e += {s.splits * T}) {{",
            f"        const int m = e / {NB}, n = n0 + e % {NB};",
            "        if (n >= N) continue;",
            f"        float v = 0.0f;\n        for (int r = 0; r < {s.splits}; ++r) v += tr_dsmem_ld(&red[0][m][e % {NB}], r);",
            f"        {store}", "    }",
            "    tr_cluster_sync();  /* the other blocks read this block's red until here */"]


def reduction(op: Any, s: Any, store: str, cluster: bool, r: CudaRenderer, threads: int | None = None) -> list[str]:
    """Warps' partials (``red[w]``, w < ``s.warps``) summed in warp order; with splits, the split partials in
    split order: across a cluster's shared memory, or by the last block of the column tile from the global
    workspace (``split_arrival.last_block``: the counter reset by thread 0 once the sum is stored). Every one
    of the block's ``threads`` (default: ``s.warps`` warps) takes part; ``store`` stores the sum ``v`` of (m, n)
    (``_store``: the epilogue into ``Cout``)."""
    T = threads or 32 * s.warps
    if cluster:
        return _cluster_reduction(op, s, store, r, T)
    src = ["    " + r.barrier,
           f"    for (int e = threadIdx.x; e < M * {NB}; e += {T}) {{",
           f"        const int m = e / {NB}, n = n0 + e % {NB};",
           "        if (n >= N) continue;",
           f"        float v = 0.0f;\n        #pragma unroll\n        for (int w = 0; w < {s.warps}; ++w) "
           f"v += red[w][m][e % {NB}];"]
    if s.splits == 1:
        return [*src, f"        {store}", "    }"]
    summed = [f"    for (int e = threadIdx.x; e < M * {NB}; e += {T}) {{",
              f"        const int m = e / {NB}, n = n0 + e % {NB};",
              "        if (n >= N) continue;",
              f"        float v = 0.0f;\n        for (int sp = 0; sp < {s.splits}; ++sp) "
              "v += __ldcg(ws + ((size_t)sp * M + m) * N + n);",
              f"        {store}", "    }"]
    src += ["        ws[((size_t)blockIdx.y * M + m) * N + n] = v;", "    }"]  # parked in the warps' loop
    return src + split_arrival.last_block(r, f"(ws + (size_t){s.splits} * M * N)", "blockIdx.x", s.splits,
                                          "threadIdx.x == 0", [], summed, word="int", reset_after_sum=True,
                                          indent="    ")


def render_gemv(op: Any, schedule: GemvSchedule, arch: Any, renderer: CudaRenderer | None = None) -> Rendered:
    r = renderer or CudaRenderer()
    s = schedule
    dtype = op.dtype.value
    to_f, from_f = r.converters(dtype)
    mp, mg = mpad(op), mpad(op) // 8
    steps = -(-op.k // k_step(op))
    per_split = -(-steps // s.splits)
    tiles = -(-op.n // NB)
    cluster = clustered(s, arch)
    name = f"tr_gemv_{dtype}_{op.layout_a[0]}{op.layout_b[0]}_{s.name}" + ("_cl" if cluster else "")
    params = [Param("A", dtype, True, True, True), Param("B", dtype, True, True, True),
              Param("Cout", dtype, True, False, True), Param("bias", dtype, True, True, True),
              Param("resid", dtype, True, True, True), Param("ws", "fp32", True, False, True), Param("alpha", "float")]
    signature = r.render_kernel_signature(name, params, launch_bounds=(32 * s.warps, 2))
    if cluster:  # compile-time cluster: the splits of one column tile
        signature = signature.replace("__launch_bounds__", f"__cluster_dims__(1, {s.splits}, 1) __launch_bounds__")
    src = [r.prelude(1), r.tensor_prelude(dtype), *([CLUSTER_LIB] if cluster else []), _loaders(op),
           signature + " {",
           f"    __shared__ float red[{s.warps}][{mp}][{NB}];",
           "    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, q = lane & 3;",
           f"    const int n0 = blockIdx.x * {NB};",
           f"    const int c0 = blockIdx.y * {per_split}, c1 = min(c0 + {per_split}, {steps});",
           f"    float acc[4][{mg}][4];",
           f"    #pragma unroll\n    for (int t = 0; t < 4; ++t)\n    #pragma unroll\n    for (int m = 0; m < {mg}; ++m)\n"
           "    #pragma unroll\n    for (int e = 0; e < 4; ++e) acc[t][m][e] = 0.0f;",
           *_main_loop(op, s), *fragment_stores(op), *reduction(op, s, _store(op, from_f, to_f), cluster, r), "}"]
    grid = (tiles, s.splits, 1)
    meta = {"name": name, "tile": {"columns_per_block": NB, "rows": op.m, "rows_padded": mp, "warps": s.warps,
                                   "splits": s.splits, "unroll": s.unroll, "k_step": k_step(op)},
            "fragments": {"dtype_in": dtype, "dtype_acc": "fp32", "mma": "m16n8k16 (B as the 16 rows)"},
            "launch": {"grid": list(grid), "block": [32 * s.warps, 1, 1], "dynamic_smem": 0},
            "workspace_bytes": workspace_bytes(op, s, arch),
            "reduction": "cluster" if cluster else "workspace" if s.splits > 1 else "block", "epilogue": list(op.epilogue)}
    return Rendered(name, name, "\n".join(src) + "\n", ("a", "b", "out", "bias", "residual", "workspace", "alpha"),
                    grid, (32 * s.warps, 1, 1), 0, meta)


# ----------------------------------------------------------------------------------------- host side
_KERNEL_CLASS: list[type] = []


def gemv_kernel(op: Any, artifact: Any, rendered: Rendered, scalars: dict[str, Any]) -> Any:
    """The runtime's kernel object with the split workspace (partials and zeroed counters) it owns."""
    if not _KERNEL_CLASS:
        _KERNEL_CLASS.append(_make_class())
    return _KERNEL_CLASS[0](op, artifact, rendered, scalars)


def _make_class() -> type:
    import numpy as np

    from .runtime import CudaKernel, DeviceArray, _check

    class GemvKernel(CudaKernel):
        def __init__(self, op: Any, artifact: Any, rendered: Rendered, scalars: dict[str, Any]) -> None:
            super().__init__(op, artifact, rendered, scalars)
            nbytes = int(rendered.metadata.get("workspace_bytes", 0))
            if nbytes:
                buf = self._dbuf["workspace"] = DeviceArray(self._dev, nbytes)
                _check(self._dev.driver.cuMemsetD8(buf.ptr, 0, nbytes), "cuMemsetD8")

        def _args(self) -> list[Any]:
            ws = self._dbuf.get("workspace")
            ptr = np.uint64(int(ws.ptr) if ws is not None else 0)
            return [ptr if p == "workspace" else a for p, a in zip(self.rendered.params, super()._args(), strict=True)]

    return GemvKernel
