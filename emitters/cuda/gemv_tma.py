"""The decode GEMM on Hopper (issue 34): the gemv core's arithmetic (``gemv.py``: ``mma.sync.m16n8k16`` with B's
outputs as the mma's 16 rows and A's <= 32 rows as its 8 columns, in up to four groups) fed by TMA through a ring of shared-memory
stages, so that every SM keeps tens of kilobytes of B in flight for the whole of K instead of what its warps'
registers hold between two loads.

A block owns 64 output columns and a range of K (``splits`` blocks a column tile). One producer warp's lane 0
fills the ring: a stage is ``boxes`` 64-element slices of K, each a TMA box of B (64 columns x 64 k, 8 KiB) and
one of A (``mpad`` rows x 64 k), 128B-swizzled (16-byte chunk c of row r at chunk ``c ^ (r % 8)``), landing on
the stage's ``full`` mbarrier; the ``warps`` consumer warps take its k16 steps in turn and release it on its
``empty`` mbarrier (one arrival a warp). Fragments come from shared memory by ``ldmatrix``: B stored n x k
(``nn.Linear``'s weight, "col") as it is, B stored k x n ("row") transposed by ``ldmatrix.trans``; A's rows by
``ldmatrix`` too. K and N tails need no masking: TMA reads past the tensor as zeros, and A's rows past M are
zeros the same way. The weights are read once, with an L2 evict-first policy; A (every block reads it) stays.

Partial sums meet as in ``gemv.py`` (``gemv.reduction``: the warps' in shared memory, in warp order; the
splits' in a cluster's shared memory or through the fp32 workspace, in split order): deterministic. The
ring's memory holds the warps' partials once every stage is consumed.

Needs A row-major with K a multiple of 8 and, for row-major B, N a multiple of 8 (TMA's 16-byte row
strides), and A and B at 16-byte aligned addresses (a launch over others raises; ``tracea.ops`` then runs the
vendor's call, as for the Hopper tiles, and an exported launcher refuses the view); other 16-bit GEMMs of <= 16 rows run on ``gemv.py``'s register path, of 17-32 rows on the tensor-core tiles.

It serves the 8-bit scaled GEMM too (issue 35): FP8 of at most 16 rows with per-tensor or per-row scales walks
the operands as byte pairs (``view``), the same boxes and addresses; ``gemv_tma_fp8.py`` says what changes.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from tracea.doctor.errors import BadInputError, LaunchError, UnsupportedError

from ..cstyle import Param
from . import gemv, gemv_tma_fp8
from .gemv_tma_fp8 import Io
from .hopper import fp8_out
from .hopper.ptx import DEVICE_LIB, HINT_LIB
from .render import CudaRenderer, Rendered
from .schedule import tile_features

SCHEMA_VERSION = 1
KB = 64  # k elements a box: 128 bytes of a 16-bit type, the 128B swizzle's width
B_BOX = gemv.NB * KB * 2  # bytes of one B box (64 columns x 64 k)
WARPS = (2, 4, 8)
BOXES = (1, 2, 4, 8)
STAGES = (2, 3, 4, 5, 6, 8)
SMEM_LIMIT = 227 * 1024  # an sm_90 block's opt-in shared memory
MAX_M = 32  # rows of A: up to four 8-row mma groups
SPLIT_BYTES = 8192  # bytes of K a column from which an FP8 GEMV splits K in two (hero_schedule)


def view(op: Any) -> Any:
    """The 16-bit GEMM whose geometry the kernel walks: ``op`` itself, or an 8-bit scaled GEMM's operands as byte
    pairs (``scaled_gemm.byte_view``: K/2 columns; a box's 128 bytes are 64 pairs, 128 8-bit values)."""
    if op.kind == "scaled_gemm":
        from .hopper.scaled_gemm import byte_view

        return byte_view(op)
    return op


def mpad(op: Any) -> int:
    """A's rows as the kernel holds them: 8, 16 or 32 (its TMA box; rows past M read as zeros)."""
    return 8 if op.m <= 8 else 16 if op.m <= 16 else 32


@dataclass(frozen=True)
class GemvTmaSchedule:
    """``warps`` consumer warps (one producer warp beside them), a ring of ``stages`` stages of ``boxes``
    64-wide slices of K, ``splits`` blocks along K."""

    core: str = "gemv_tma"
    warps: int = 4
    stages: int = 4
    boxes: int = 4
    splits: int = 1

    @property
    def bm(self) -> int:
        return MAX_M

    @property
    def bn(self) -> int:
        return gemv.NB

    @property
    def block_threads(self) -> int:
        return 32 * (self.warps + 1)

    @property
    def name(self) -> str:
        return f"gemvtma_w{self.warps}_s{self.stages}_b{self.boxes}_k{self.splits}"

    def validate(self, op: Any = None, arch: Any = None) -> None:
        if self.core != "gemv_tma":
            raise BadInputError(f"core: a GemvTmaSchedule runs the gemv_tma core, not {self.core!r}")
        for name, allowed in (("warps", WARPS), ("stages", STAGES), ("boxes", BOXES)):
            v = getattr(self, name)
            if isinstance(v, bool) or v not in allowed:
                raise BadInputError(f"{name}: expected one of {', '.join(map(str, allowed))}, got {v!r}")
        if (4 * self.boxes) % self.warps:
            raise BadInputError(f"warps: {self.warps} consumer warps do not share the {4 * self.boxes} k16 steps "
                                f"of a stage of {self.boxes} boxes evenly")
        s = self.splits
        if isinstance(s, bool) or not isinstance(s, int) or not 1 <= s <= gemv.MAX_SPLITS:
            raise BadInputError(f"splits: expected an integer in 1..{gemv.MAX_SPLITS}, got {s!r}")
        if op is None:
            return
        why = refusal(op)
        if why:
            raise UnsupportedError(f"gemv_tma: {why}", "the gemv core (registers) runs it")
        if _spills(op, self.warps):
            raise BadInputError("warps: 8 consumer warps spill with 16 rows of FP8 A (its unpacked fragments); "
                                "take 4")
        need = smem_bytes(op, self)
        if need > SMEM_LIMIT:
            raise BadInputError(f"stages: {self.stages} stages of {self.boxes} boxes take {need} bytes of shared "
                                f"memory, over the {SMEM_LIMIT} a block may have")

    def to_json(self) -> dict[str, Any]:
        return {"schema_version": SCHEMA_VERSION, "backend": "cuda", **dataclasses.asdict(self)}

    @staticmethod
    def from_json(d: dict[str, Any]) -> GemvTmaSchedule:
        from ..schedule import schedule_fields

        s = GemvTmaSchedule(**schedule_fields(d, GemvTmaSchedule, "cuda", "CUDA", ("core",), SCHEMA_VERSION))
        s.validate()
        return s

    def features(self, op: Any) -> dict[str, float]:
        """Warps and the ring's shared memory over the nominal 32 x 64 tile (``tile_features``)."""
        return tile_features(op, self.warps + 1, smem_bytes(op, self), self.bm, self.bn)


def _spills(op: Any, warps: int) -> bool:
    """8 consumer warps with 16 rows of FP8 A: 96 registers a thread (two blocks an SM) hold too few of the unpacked
    fragments (NVRTC 13.0: spills)."""
    return op.kind == "scaled_gemm" and warps == 8 and mpad(op) == 16


def refusal(op: Any) -> str | None:
    """Why TMA cannot feed ``op`` (None: it can)."""
    if getattr(op, "kind", None) not in ("gemm", "scaled_gemm"):
        return f"computes gemm and scaled_gemm, not {getattr(op, 'kind', op)}"
    if op.kind == "scaled_gemm":
        return gemv_tma_fp8.refusal(op)
    if op.m > MAX_M:
        return f"computes at most {MAX_M} rows of A, not {op.m}"
    if op.dtype.value not in gemv.DTYPES:
        return f"computes bf16 or fp16, not {op.dtype.value}"
    if op.layout_a != "row":
        return "A must be row-major (its rows are TMA boxes)"
    if op.k % 8:
        return f"K = {op.k} is no multiple of 8 (TMA's rows of A are 16-byte multiples)"
    if op.layout_b == "row" and op.n % 8:
        return f"N = {op.n} is no multiple of 8 (TMA's rows of a row-major B are 16-byte multiples)"
    return None


def applies(op: Any) -> bool:
    """Whether gemv_tma can run ``op`` (a 16-bit GEMM of <= 32 rows, or an FP8 one of <= 16 with tensor or row
    scales, that TMA can address; the tuner searches it)."""
    return refusal(op) is None


def prefers(op: Any) -> bool:
    """The hero of the Hopper family for every GEMM it ``applies`` to. On an H200 (2026-11-30,
    docs/device-runs/h200-decode-gemm-tma/, call 2) it ran 1.09-1.17x cuBLAS at 16 rows where the register gemv ran
    0.73-1.05x (the tensor-core tiles, call 1: 0.85-1.03x), 1.12-1.20x at one row (register gemv 0.81-1.05x), and
    0.90-1.12x at 24 and 32 rows (call 4) where the tiles ran 0.80-0.95x (call 3); FP8 decode (tensor or row
    scales) 0.95-1.21x and 1.23-2.09x ``torch._scaled_mm`` (docs/device-runs/h200-fp8-int8-gemm/call27)."""
    return applies(op)


def stage_bytes(op: Any, s: GemvTmaSchedule) -> int:
    return s.boxes * (B_BOX + mpad(op) * KB * 2)


def smem_bytes(op: Any, s: GemvTmaSchedule) -> int:
    """The ring (its memory later holds the warps' partials) and 1 KiB to align it to the swizzle's period."""
    return max(s.stages * stage_bytes(op, s), s.warps * mpad(op) * gemv.NB * 4) + 1024


def k_stages(op: Any, s: GemvTmaSchedule) -> int:
    return -(-view(op).k // (KB * s.boxes))


def hero_schedule(op: Any, host: Any) -> GemvTmaSchedule:
    """4 consumer warps, a ring of 4 stages of 2 boxes (128 of K; 64 KiB of B in flight a block); K split so
    that the column tiles' blocks fill the SMs once, one block an SM (a memory-bound kernel's blocks share DRAM,
    so equal blocks resident together finish together), each split >= 4 stages. On an H200 (2026-11-30,
    docs/device-runs/h200-decode-gemm-tma/call1/decode_suite_sweep.txt): N = 4096 (64 tiles) ran 1.10-1.21x cuBLAS
    split 2 ways, 0.92-1.16x 4 ways (two blocks an SM), 0.85-1.02x 8 ways; 2 stages of 4 boxes matched 4 of 2, and 6
    of 2 or 4 of 4 lost 3-10 %; wider N (172+ tiles) ran best unsplit (call 5: unsplit within 3 % of any split, up
    to 42 % faster than 8 splits)."""
    boxes = 2 if view(op).k > KB else 1
    base = GemvTmaSchedule(warps=4, stages=4, boxes=boxes)
    tiles = -(-op.n // gemv.NB)
    total = k_stages(op, base)
    splits = max(1, min(gemv.sm_count(host) // tiles, total // 4, gemv.MAX_SPLITS))
    if op.kind == "scaled_gemm" and splits == 2 and op.k < SPLIT_BYTES:
        # FP8 with under 8 KiB of K a column where the tiles fill a third to a half of the SMs: unsplit, 4 boxes a
        # stage (128 KiB of B in flight a block): on an H200 (docs/device-runs/h200-fp8-int8-gemm/call26) 1 and 16
        # x 4096 x 4096 ran 0.0111 and 0.0123 ms so (4 stages of 2 boxes: 0.0113, 0.0126) against 0.0114 and 0.0126
        # split 2; from 11008 of K split 2 won. Fewer tiles keep their splits (not measured unsplit)
        deep = GemvTmaSchedule(warps=4, stages=4, boxes=4)
        return dataclasses.replace(deep, stages=max(2, min(4, k_stages(op, deep))))
    per_split = -(-total // splits)  # a ring deeper than a split's stages holds nothing more
    return dataclasses.replace(base, stages=max(2, min(base.stages, per_split)), splits=splits)


def search_space(op: Any, hero: Any, arch: Any) -> list[GemvTmaSchedule]:
    """4 or 8 consumer warps, 2 or 4 boxes a stage, 2-6 stages within the shared memory, K splits 1..16
    (each split >= 1 stage, none left empty by the rounding): at most 32 rows only."""
    if not prefers(op):
        return []
    out = []
    for warps in (4, 8):
        for boxes in (2, 4):
            if (4 * boxes) % warps:
                continue
            for stages in (2, 3, 4, 6):
                for splits in (1, 2, 3, 4, 6, 8, 12, 16):
                    s = GemvTmaSchedule(warps=warps, stages=stages, boxes=boxes, splits=splits)
                    total = k_stages(op, s)
                    # every split gets stages: no block of the grid left idle by the rounding
                    if smem_bytes(op, s) <= SMEM_LIMIT and -(-total // -(-total // splits)) == splits and not \
                            _spills(op, warps):
                        out.append(s)
    return out


def check(op: Any, v: Any, schedule: Any, arch: Any) -> None:
    """A GemvTmaSchedule for a GEMM it ``applies`` to, on sm_90 or later."""
    if not isinstance(schedule, GemvTmaSchedule):
        raise BadInputError(f"schedule: the gemv_tma core takes a GemvTmaSchedule, got {type(schedule).__name__}")
    if op.dtype.value not in v.precisions:
        raise UnsupportedError(f"{v.id} computes {', '.join(v.precisions)}, not {op.dtype.value}")
    if arch.cc < (9, 0):
        raise UnsupportedError(f"{v.id} with the gemv_tma core needs TMA (sm_90), not {arch.name}")
    schedule.validate(op, arch)


def render(op: Any, schedule: Any, arch: Any) -> tuple[Rendered, dict[str, float | int]]:
    return render_gemv_tma(op, schedule, arch), {"alpha": op.alpha}


# ------------------------------------------------------------------------------------------ device code
LDM2 = r"""static __device__ __forceinline__ void tr_ldm2(uint32_t* r, uint32_t addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];\n" : "=r"(r[0]), "=r"(r[1]) : "r"(addr));
}
/* Byte offset of row r, 16-byte chunk c in a 128B-swizzled box of 128-byte rows. */
#define TR_SW(r, c) ((r) * 128 + ((((c) ^ (r)) & 7) << 4))
"""


def _producer(op: Any, s: GemvTmaSchedule) -> list[str]:
    """Warp ``warps``' lane 0: each stage of the block's K range into its slot once the consumers freed it."""
    coords = "k, n0" if op.layout_b == "col" else "n0, k"
    return [
        "    if (warp == CW) {",
        "        if (lane == 0) {",
        "            uint64_t pol;",
        '            asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;\\n" : "=l"(pol));',
        "            for (int j = s0; j < s1; ++j) {",
        "                const int i = j - s0, slot = i % STAGES;",
        "                tr_mbar_wait(empty + 8u * slot, ((i / STAGES) & 1) ^ 1);",
        "                const uint32_t dst = base + slot * STAGE_BYTES, bar = full + 8u * slot;",
        "                tr_mbar_expect_tx(bar, STAGE_BYTES);",
        "                #pragma unroll",
        "                for (int b = 0; b < BOXES; ++b) {",
        "                    const int k = (j * BOXES + b) * 64;",
        f"                    tr_tma_load_2d_ef(dst + b * {B_BOX}, &tmB, {coords}, bar, pol);",
        f"                    tr_tma_load_2d(dst + BOXES * {B_BOX} + b * (MP * 128), &tmA, k, 0, bar);",
        "                }",
        "            }",
        "        }",
        "        __syncwarp();  /* lane 0 back beside the others before the block's barriers */",
        "    }"]


# Where each lane points ldmatrix (row, 16-byte chunk of a swizzled box) for k16 step ``st`` of a box and
# 16-column tile ``t``; C expressions that are Python too (tests/emitters/cuda/test_cuda_gemv_tma.py runs them).
# B stored n x k ("col"): rows are n, non-transposed x4 of rows 16t + (l & 15), chunk 2st + l / 16. B stored k x n
# ("row"): rows are k, transposed x4 of k rows 16st + 8 (j / 2) + (l & 7), n chunk 2t + (j & 1), j = l / 8. A's
# rows: x4 of rows 8 (j / 2) + (l & 7), chunk 2st + (j & 1) for two 8-row groups, x2 (lanes 0-15) for one.
B_LANES = {"col": ("16 * t + (lane & 15)", "2 * st + (lane >> 4)", False),
           "row": ("16 * st + ((lane >> 4) << 3) + (lane & 7)", "2 * t + ((lane >> 3) & 1)", True)}
A_LANES = ("((lane >> 4) << 3) + (lane & 7)", "2 * st + ((lane >> 3) & 1)")


def _consumer(op: Any, s: GemvTmaSchedule) -> list[str]:
    """The consumer warps: each k16 step of a stage (warp w takes steps w, w + warps, ...): A's fragments of
    every 8-row group, then for each of the four 16-column tiles B's fragment and the mmas."""
    mg = mpad(op) // 8
    b_row, b_chunk, trans = B_LANES[op.layout_b]
    ldb = "tr_ldm4t" if trans else "tr_ldm4"
    a_row, a_chunk = A_LANES
    if mg >= 2:  # an x4 a 16-row pair of groups
        lda = []
        for h in range(mg // 2):
            lda += [f"            uint32_t xa{h}[4];",
                    f"            tr_ldm4(xa{h}, sa + TR_SW({16 * h} + {a_row}, {a_chunk}));",
                    f"            const uint32_t x{2 * h}[2] = {{xa{h}[0], xa{h}[1]}}, "
                    f"x{2 * h + 1}[2] = {{xa{h}[2], xa{h}[3]}};"]
    else:
        lda = ["            uint32_t x0[2];",
               f"            tr_ldm2(x0, sa + TR_SW({a_row}, {a_chunk}));"]
    per = 4 * s.boxes // s.warps
    return [
        "    else {",
        "        for (int j = s0; j < s1; ++j) {",
        "            const int i = j - s0, slot = i % STAGES;",
        "            tr_mbar_wait(full + 8u * slot, (i / STAGES) & 1);",
        "            const uint32_t sb = base + slot * STAGE_BYTES;",
        "            #pragma unroll",
        f"            for (int u = 0; u < {per}; ++u) {{",
        "            const int kk = warp + u * CW, bx = kk >> 2, st = kk & 3;",
        f"            const uint32_t sa = sb + BOXES * {B_BOX} + bx * (MP * 128), sw = sb + bx * {B_BOX};",
        *lda,
        "            #pragma unroll",
        "            for (int t = 0; t < 4; ++t) {",
        "                uint32_t a[4];",
        f"                {ldb}(a, sw + TR_SW({b_row}, {b_chunk}));",
        *(f"                tr_mma(acc[t][{m}], a, x{m});" for m in range(mg)),
        "            }",
        "            }",
        "            __syncwarp();",
        "            if (lane == 0) tr_mbar_arrive(empty + 8u * slot);  /* this warp is done with the slot */",
        "        }",
        "    }"]


def _fragment_stores(op: Any) -> list[str]:
    """Each consumer's accumulators into red[warp][m][column]: ldmatrix gives both B layouts the mma's rows
    16t + g (+ 8), the register gemv's column-major stores (``gemv.fragment_stores``)."""
    stores = gemv.fragment_stores(op, b_rows=False, groups=mpad(op) // 8)
    return ["    if (warp < CW) {", *("    " + line for line in stores), "    }"]


def _io(op: Any, r: CudaRenderer, stores_end: str = "") -> Io:
    """The 16-bit GEMM's element type, parameters, tensor-core helpers and store (an FP8 one's: ``gemv_tma_fp8``)."""
    if op.kind == "scaled_gemm":
        return gemv_tma_fp8.io(op, r, stores_end)
    dtype = op.dtype.value
    to_f, from_f = r.converters(dtype)
    return Io(dtype, (Param("Cout", dtype, True, False, True), Param("bias", dtype, True, True, True),
                      Param("resid", dtype, True, True, True), Param("ws", "fp32", True, False, True),
                      Param("alpha", "float")),
              ("out", "bias", "residual", "workspace", "alpha"), r.tensor_prelude(dtype), gemv._store(op, from_f, to_f))


def render_gemv_tma(op: Any, schedule: GemvTmaSchedule, arch: Any, renderer: CudaRenderer | None = None) -> Rendered:
    r = renderer or CudaRenderer()
    s = schedule
    cluster = gemv.clustered(s, arch)
    # the blocks that reach the kernel's end: a workspace split's last block of each column tile, else every one
    io = _io(op, r, "gridDim.x" if s.splits > 1 and not cluster else "gridDim.x * gridDim.y")
    mp, mg = mpad(op), mpad(op) // 8
    total = k_stages(op, s)
    per_split = -(-total // s.splits)
    tiles = -(-op.n // gemv.NB)
    threads = s.block_threads
    name = f"tr_gemv_tma_{io.tag}_{op.layout_b[0]}_{s.name}" + ("_cl" if cluster else "")
    params = list(io.params)
    signature = r.render_kernel_signature(name, params, launch_bounds=(threads, 2))
    maps = "const __grid_constant__ TrTensorMap tmA, const __grid_constant__ TrTensorMap tmB, "  # A first: the
    # exported launcher takes its views in the kernel's order, (a, b, ...) as every GEMM package
    signature = signature.replace(f"{name}(", f"{name}({maps}", 1)
    if cluster:
        signature = signature.replace("__launch_bounds__", f"__cluster_dims__(1, {s.splits}, 1) __launch_bounds__")
    defines = (f"#define M {op.m}\n#define N {op.n}\n#define K {op.k}\n#define MP {mp}\n#define CW {s.warps}\n"
               f"#define STAGES {s.stages}\n#define BOXES {s.boxes}\n#define STAGE_BYTES {stage_bytes(op, s)}u")
    src = [r.prelude(1), io.prelude, DEVICE_LIB, HINT_LIB, *([gemv.CLUSTER_LIB] if cluster else []),
           LDM2, defines, signature + " {",
           "    extern __shared__ unsigned char tr_dyn[];",
           "    __shared__ __align__(8) uint64_t bars[2 * STAGES];",
           "    const uint32_t raw = tr_smem_addr(tr_dyn), base = (raw + 1023u) & ~1023u;",
           f"    float (*red)[{mp}][{gemv.NB}] = reinterpret_cast<float (*)[{mp}][{gemv.NB}]>(tr_dyn + (base - raw));",
           "    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, q = lane & 3;",
           f"    const int n0 = blockIdx.x * {gemv.NB};",
           f"    const int s0 = blockIdx.y * {per_split}, s1 = min(s0 + {per_split}, {total});",
           "    const uint32_t full = tr_smem_addr(bars), empty = full + 8u * STAGES;",
           "    if (threadIdx.x == 0) {",
           "        for (int i = 0; i < STAGES; ++i) { tr_mbar_init(full + 8u * i, 1u); tr_mbar_init(empty + 8u * i, CW); }",
           '        asm volatile("fence.mbarrier_init.release.cluster;\\n" ::: "memory");',
           "    }",
           "    " + r.barrier,
           f"    float acc[4][{mg}][4];",
           f"    #pragma unroll\n    for (int t = 0; t < 4; ++t)\n    #pragma unroll\n    for (int m = 0; m < {mg}; ++m)\n"
           "    #pragma unroll\n    for (int e = 0; e < 4; ++e) acc[t][m][e] = 0.0f;",
           *_producer(op, s), *_consumer(op, s),
           "    " + r.barrier + "  /* every stage consumed: the ring's memory holds the partials now */",
           *_fragment_stores(op), *io.head, *gemv.reduction(op, s, io.store, cluster, r, threads), *io.tail, "}"]
    grid = (tiles, s.splits, 1)
    smem = smem_bytes(op, s)
    meta = {"name": name, "tile": {"columns_per_block": gemv.NB, "rows": op.m, "rows_padded": mp, "warps": s.warps,
                                   "producer_warps": 1, "splits": s.splits, "stages": s.stages, "boxes": s.boxes,
                                   "k_per_stage": KB * s.boxes},
            "fragments": {"dtype_in": op.dtype.value, "dtype_acc": "fp32",
                          "mma": ("m16n8k32" if op.kind == "scaled_gemm" else "m16n8k16") + " (B as the 16 rows)",
                          "loads": "TMA 64 x 64 boxes, 128B swizzle; ldmatrix"},
            "launch": {"grid": list(grid), "block": [threads, 1, 1], "dynamic_smem": smem},
            "workspace_bytes": gemv.workspace_bytes(op, s, arch),  # the register gemv's split partials
            "reduction": "cluster" if cluster else "workspace" if s.splits > 1 else "block", "epilogue": list(op.epilogue)}
    return Rendered(name, name, "\n".join(src) + "\n",
                    ("tmA", "tmB", *io.names), grid, (threads, 1, 1), smem, meta)


# ----------------------------------------------------------------------------------------- host side
def map_geometry(op: Any) -> dict[str, tuple[int, int, int, int]]:
    """The kernel's two maps as (inner, outer, box inner, box outer) of a row-major 16-bit matrix: B in 64 x 64
    boxes (n x k: k inner; k x n: n inner), A in boxes of 64 k x ``mpad`` rows (rows past M read as zeros).
    ``maps`` encodes them for Tracea's runs, an exported package's launcher (export_maps.py) for its own."""
    g = view(op)
    b = (g.k, g.n, KB, gemv.NB) if g.layout_b == "col" else (g.n, g.k, gemv.NB, KB)
    return {"tmA": (g.k, g.m, KB, mpad(op)), "tmB": b}


def maps(op: Any, a_ptr: int, b_ptr: int) -> tuple[Any, Any]:
    """The kernel's tensor maps over A and B, its first two parameters (``map_geometry``)."""
    from .tma import encode_2d

    g = map_geometry(op)
    out = []
    for name, ptr in (("tmA", a_ptr), ("tmB", b_ptr)):
        inner, outer, b0, b1 = g[name]
        out.append(encode_2d(ptr, view(op).dtype.value, inner, outer, inner, (b0, b1)))
    return out[0], out[1]


_KERNEL_CLASS: list[type] = []
FP8_C = ("scale_out", "amax", "amax_ws")  # an FP8 C's buffers (gemv_tma_fp8._fp8_c)


def gemv_tma_kernel(op: Any, artifact: Any, rendered: Rendered, scalars: dict[str, Any]) -> Any:
    """The runtime's kernel object: the split workspace (zeroed once by ``CudaKernel``) and the two tensor
    maps, encoded over the buffers of each launch (cached by address in ``tma.py``)."""
    if not _KERNEL_CLASS:
        _KERNEL_CLASS.append(_make_class())
    return _KERNEL_CLASS[0](op, artifact, rendered, scalars)


def _make_class() -> type:
    from .runtime import BUFFERS, FLOAT_SCALARS, CudaKernel, pack_args

    class GemvTmaKernel(CudaKernel):
        _maps: tuple[Any, Any] | None = None

        def upload(self, inputs: dict[str, Any]) -> None:
            super().upload(inputs)
            if getattr(self.op, "fp8_out", False):  # the launch amax's two words, left zero by every launch
                self._zeroed("amax_ws", fp8_out.SCRATCH_BYTES)
            self._maps = maps(self.op, int(self._dbuf["a"].ptr), int(self._dbuf["b"].ptr))

        def _args(self) -> list[Any]:
            if self._maps is None:
                raise LaunchError("gemv_tma: launch before upload (no tensor maps yet)")
            rest = pack_args(self.rendered.params[2:], (*BUFFERS, "workspace", *FP8_C), FLOAT_SCALARS, self._dbuf,
                             self._scalars)
            return [*self._maps, *rest]

    return GemvTmaKernel
