"""CUDA schedules: how a kernel is tiled over thread blocks, warps and the shared-memory pipeline.

``CudaSchedule`` is one frozen value for the three kernel cores:

- ``mma``: tensor-core GEMM (and the implicit-GEMM convolution) on ``mma.sync.m16n8k16``. A block
  computes ``bm x bn`` of C, its warps ``wm x wn`` each; ``bk`` is the K step of one pipeline stage and
  ``stages`` (2..5) the depth of the cp.async pipeline; ``swizzle`` is the shared-memory swizzle of the
  operand tiles ("auto": the first conflict-free one the bank simulator finds; or a layout name such as
  ``sw<3,4,3>``); ``raster`` groups that many block rows so neighbouring blocks share L2 lines.
- ``simt``: fp32 GEMM on CUDA cores: the same block/warp tiles, an 8 x 8 thread tile (2 x 2 sub-tiles of
  4 x 4 for 16-byte shared-memory reads), a double-buffered shared stage (``stages`` = 2). ``split_k`` > 1
  (GEMM): each tile's K range split over that many blocks, whose partials the last to arrive sums in a
  fixed order (deterministic) before the epilogue; 1 (the default, left out of the JSON and the name)
  is the one-block-a-tile kernel. ``frags`` 2: the next k step's operand fragments are read from shared
  memory into a second register set while this step multiplies, across the tile's barrier too (the read
  latency hidden by a step's 64 FMAs); 1 (the default, left out of the JSON and the name): read, then use.
  ``stages`` 3 or 4 (GEMM): a cp.async pipeline fills the shared tiles without registers in between
  (``simt_async.py``). ``order`` "snake": a k step's FMAs column by column, rows down and up in turn.
  ``fill`` (the cp.async pipeline): "quads" (the default, left out of the JSON and the name) copies 4
  neighbouring elements of a global row a thread; "lanes" neighbouring elements a lane, one 4-byte copy
  each, the addresses kept from tile to tile (``simt_fill.py``); "spread" those copies spread over the
  tile's k steps instead of issued at its start.
- ``softmax``: ``threads`` per block, ``vec`` elements per vector access, ``chunks`` vectors held in
  registers by each thread (the single-pass form; 0 = stream the row twice with an online max/sum).
  ``lanes`` > 0: several rows per block, ``lanes`` (1..32, a power of two) threads per row, the row held in
  registers and reduced by warp shuffles alone (short rows). ``split`` > 1: a row split over that many
  blocks, which merge their (max, sum) through a workspace in one cooperative launch (few long rows).
  Both default to 0 (the block-per-row form) and are then left out of the JSON and the name.

``epilogue`` (mma): "smem" passes C through an fp32 tile in shared memory so that each thread stores
16 bytes and a warp whole rows (``plan.CStage``; GEMM and NHWC conv, not the persistent grid, which
keeps the direct form); "direct" stores from the accumulator fragments (4 bytes per thread, scattered).

``persist`` (mma GEMM): 0 launches one block per tile; n > 0 a grid of n blocks per SM that walk the
tiles in rasterized order, the cp.async pipeline running on into each block's next tile.

``hoist`` (convolution): where the per-k filter-tap coordinates live: "smem" (a table filled once per
block, looked up per tile), "recompute" (magic-number division per tile), "auto" (smem when the
table fits the block's shared-memory budget). Validation needs the target's limits, given as an
``Arch`` (``arch.py``).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from tracea.doctor.errors import BadInputError

from ..schedule import positive_ints

SCHEMA_VERSION = 1
CORES = ("mma", "simt", "softmax")
HOIST = ("auto", "smem", "recompute")
EPILOGUES = ("smem", "direct")
FILLS = ("quads", "lanes", "spread")
MAX_THREADS = 1024
MAX_SPLIT_K = 32
REGISTERS_PER_SM = 65536


@dataclass(frozen=True)
class CudaSchedule:
    core: str
    bm: int = 128
    bn: int = 128
    bk: int = 32
    wm: int = 64
    wn: int = 64
    stages: int = 3
    swizzle: str = "auto"
    raster: int = 8
    hoist: str = "auto"
    min_blocks: int = 1
    threads: int = 0  # softmax only (mma/simt: derived from the warp grid)
    vec: int = 4
    chunks: int = 0
    persist: int = 0  # 0: one block per row (softmax) or tile (mma); n > 0: a grid of n blocks per SM walking them
    epilogue: str = "smem"  # mma: "smem" stages C through shared memory (16-byte stores), "direct" from fragments
    lanes: int = 0  # softmax: threads per row, several rows per block (0: a block per row)
    split: int = 0  # softmax: blocks per row (0: one)
    split_k: int = 1  # simt GEMM: blocks sharing a tile's K range (1: one)
    frags: int = 1  # simt: register sets of the operand fragments (2: the next k step's read during this one)
    order: str = "rows"  # simt: the order of a k step's 64 FMAs ("rows", or "snake": columns, rows down and up)
    thread_n: int = 8  # simt: columns of a thread's tile (8; 16: 8 x 16, the cp.async pipeline only)
    form: str = "tile"  # simt GEMM: "tile" (the tiled core) or "gemv" (few rows: simt_gemv.py)
    fill: str = "quads"  # simt cp.async: "quads" (4 elements a thread), "lanes" or "spread" (simt_fill.py)

    # ------------------------------------------------------------------ derived

    @property
    def warps(self) -> int:
        if self.core == "softmax":
            return max(1, self.threads // 32)
        return (self.bm // self.wm) * (self.bn // self.wn)

    @property
    def block_threads(self) -> int:
        return self.threads if self.core == "softmax" else 32 * self.warps

    @property
    def name(self) -> str:
        if self.core == "softmax":
            return (f"sm_t{self.threads}_v{self.vec}_c{self.chunks}" + (f"_p{self.persist}" if self.persist else "")
                    + (f"_l{self.lanes}" if self.lanes else "") + (f"_s{self.split}" if self.split else ""))
        tag = f"{self.core}_{self.bm}x{self.bn}x{self.bk}_w{self.wm}x{self.wn}_s{self.stages}_r{self.raster}"
        if self.swizzle != "auto":
            tag += "_" + "".join(ch for ch in self.swizzle if ch.isalnum())
        if self.hoist != "auto":
            tag += f"_h{self.hoist[0]}"
        tag += f"_p{self.persist}" if self.persist else ""
        tag += "_ed" if self.epilogue == "direct" else ""
        tag += f"_b{self.min_blocks}" if self.min_blocks != 1 else ""
        tag += f"_f{self.frags}" if self.frags != 1 else ""
        tag += "_os" if self.order == "snake" else ""
        tag += f"_t{self.thread_n}" if self.thread_n != 8 else ""
        tag += "_gv" if self.form == "gemv" else ""
        tag += {"lanes": "_cl", "spread": "_cs"}.get(self.fill, "")
        return tag + (f"_k{self.split_k}" if self.split_k != 1 else "")

    # ------------------------------------------------------------------ validation

    def validate(self, op: Any = None, arch: Any = None) -> None:
        """Raise ``BadInputError`` naming the first field that cannot work (for ``op`` on ``arch``)."""
        if self.core not in CORES:
            raise BadInputError(f"core: expected one of {', '.join(CORES)}, got {self.core!r}")
        positive_ints(self, ("bm", "bn", "bk", "wm", "wn", "stages", "raster", "min_blocks", "vec", "split_k", "frags",
                             "thread_n"))
        for name in ("threads", "chunks", "persist", "lanes", "split"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                raise BadInputError(f"{name}: expected a non-negative integer, got {v!r}")
        if self.hoist not in HOIST:
            raise BadInputError(f"hoist: expected one of {', '.join(HOIST)}, got {self.hoist!r}")
        if self.epilogue not in EPILOGUES:
            raise BadInputError(f"epilogue: expected one of {', '.join(EPILOGUES)}, got {self.epilogue!r}")
        if (self.lanes or self.split) and self.core != "softmax":
            raise BadInputError("lanes: rows per block and split rows are softmax forms")
        if self.split_k != 1:
            self._validate_split_k(op)
        if self.frags != 1 and (self.core != "simt" or self.frags != 2):
            raise BadInputError(f"frags: {self.frags!r} fragment register sets: 1 or 2, on the simt core")
        if self.order != "rows" and (self.core != "simt" or self.order != "snake"):
            raise BadInputError(f"order: {self.order!r}: the simt core's FMA orders are rows and snake")
        if self.fill != "quads":
            self._validate_fill(op)
        if self.core == "softmax":
            self._validate_softmax(op)
        elif self.form != "tile":
            self._validate_gemv(op)
        else:
            self._validate_tiles(op)
        if arch is not None and op is not None:
            from .plan import smem_bytes

            need = smem_bytes(op, self, arch.smem_optin)
            if need > arch.smem_optin:
                raise BadInputError(f"stages: the schedule needs {need} B of shared memory per block, more than "
                                    f"the {arch.smem_optin} B {arch.name} allows", "fewer stages or smaller tiles")

    def _validate_softmax(self, op: Any) -> None:
        if self.threads % 32 or not 32 <= self.threads <= MAX_THREADS:
            raise BadInputError(f"threads: {self.threads} is not a multiple of 32 in 32..{MAX_THREADS}")
        if self.vec not in (1, 2, 4, 8):
            raise BadInputError(f"vec: {self.vec} is not 1, 2, 4 or 8 elements")
        if self.persist and (self.core != "softmax" or not self.chunks or self.persist > 8):
            raise BadInputError(f"persist: {self.persist} blocks per SM streaming rows needs the single-pass softmax "
                                "(chunks > 0) and at most 8")
        if self.lanes:
            self._validate_lanes(op)
            return
        if self.split == 1 or self.split > 1024 or (self.split and self.persist):
            raise BadInputError(f"split: {self.split} blocks per row: 2..1024, without persist (0: one block a row)")
        if self.split and (self.chunks * self.vec > 32 or self.chunks > 8):
            raise BadInputError(f"chunks: {self.chunks} vectors of {self.vec} per thread: a split row holds at most 8 "
                                "vectors and 32 elements a thread (64 registers; chunks = 0 reads the part again)")
        if self.chunks > 16 and not self.split:
            raise BadInputError(f"chunks: {self.chunks} vectors per thread is more than the 16 kept in registers")
        if op is not None:
            item = op.dtype.itemsize
            if self.vec * item > 16:
                raise BadInputError(f"vec: {self.vec} x {item} B is wider than a 16-byte access")
            if getattr(op, "kind", None) != "softmax":
                raise BadInputError(f"core: softmax computes softmax, not {getattr(op, 'kind', op)}")
            from .softmax_parts import row_vectors  # rows the vector does not divide: the slots they overlap

            per = -(-row_vectors(op.cols, self.vec) // max(1, self.split)) * self.vec  # elements of a block's part
            if self.chunks and self.threads * self.vec * self.chunks < per:
                raise BadInputError(f"chunks: {self.threads} threads x {self.vec} x {self.chunks} hold fewer than "
                                    f"the {per} elements of a block's row (chunks = 0 streams the row twice)")

    def _validate_lanes(self, op: Any) -> None:
        """Rows per block: a power-of-two group of lanes per row, the row in registers, no block barrier."""
        if self.lanes not in (1, 2, 4, 8, 16, 32) or self.split or self.persist:
            raise BadInputError(f"lanes: {self.lanes} threads per row is not a power of two up to 32 (a warp), "
                                "or is combined with split or persist")
        if not 1 <= self.chunks or self.chunks * self.vec > 32:
            raise BadInputError(f"chunks: {self.chunks} vectors of {self.vec} per lane: the rows-per-block form "
                                "holds 1..32 elements a lane in registers")
        if op is not None:
            if self.vec * op.dtype.itemsize > 16:
                raise BadInputError(f"vec: {self.vec} x {op.dtype.itemsize} B is wider than a 16-byte access")
            if getattr(op, "kind", None) != "softmax":
                raise BadInputError(f"core: softmax computes softmax, not {getattr(op, 'kind', op)}")
            from .softmax_parts import row_vectors

            if self.lanes * self.chunks < row_vectors(op.cols, self.vec):
                raise BadInputError(f"chunks: {self.lanes} lanes x {self.vec} x {self.chunks} hold fewer than the "
                                    f"{op.cols} elements of a row")

    def _validate_split_k(self, op: Any) -> None:
        if self.core != "simt" or self.split_k > MAX_SPLIT_K:
            raise BadInputError(f"split_k: {self.split_k} blocks a tile: 1..{MAX_SPLIT_K}, on the simt core")
        if op is not None and getattr(op, "kind", None) != "gemm":
            raise BadInputError("split_k: the K split is implemented for gemm only")
        if op is not None and self.split_k > -(-op.k // self.bk):
            raise BadInputError(f"split_k: {self.split_k} parts of the {-(-op.k // self.bk)} k tiles of K = {op.k}")

    def _validate_fill(self, op: Any) -> None:
        """The lane fill: the simt cp.async pipeline's, with tile extents and threads powers of two (a thread's
        elements then lie whole lines or a fixed column apart) and operands of under 2^31 elements (32-bit
        offsets)."""
        if self.fill not in FILLS or self.core != "simt" or self.form != "tile" or self.stages == 2:
            raise BadInputError(f"fill: {self.fill!r}: the simt cp.async pipeline (stages 3, 4) fills by "
                                f"{', '.join(FILLS)}")
        if any(v & (v - 1) for v in (self.bm, self.bn, self.bk, self.block_threads)):
            raise BadInputError(f"fill: {self.fill} needs bm, bn, bk and the block's threads to be powers of two")
        if op is not None and getattr(op, "kind", None) == "gemm" and max(op.m * op.k, op.k * op.n) >= 2 ** 31:
            raise BadInputError(f"fill: {self.fill} addresses an operand by 32-bit offsets: under 2^31 elements",
                                "fill quads")

    def _validate_gemv(self, op: Any) -> None:
        """The fp32 GEMM of few rows: 8 warps over K, bm rows (8..48) x 128 columns a block (wm = bm, wn 16)."""
        if self.form != "gemv" or self.core != "simt":
            raise BadInputError(f"form: {self.form!r}: the simt core's forms are tile and gemv")
        if (self.bn, self.wm, self.wn, self.stages, self.thread_n, self.frags) != (128, self.bm, 16, 2, 8, 1) \
                or self.bm % 8 or not 8 <= self.bm <= 48 or self.bk not in (8, 16, 32) or self.min_blocks != 1:
            raise BadInputError("form: gemv blocks are bm rows (8..48, a multiple of 8) x 128 columns of 8 warps over "
                                "K (bn 128, wm = bm, wn 16, stages 2, bk 8/16/32; no frags, thread_n or min_blocks)")
        if op is not None and (getattr(op, "kind", None) != "gemm" or op.dtype.value != "fp32" or op.layout_b != "row"):
            raise BadInputError("form: gemv computes an fp32 GEMM with B row-major")

    def _validate_tiles(self, op: Any) -> None:
        if self.bm % self.wm or self.bn % self.wn:
            raise BadInputError(f"wm: the warp tile {self.wm}x{self.wn} does not divide the block tile {self.bm}x{self.bn}")
        if not 1 <= self.warps <= 16:
            raise BadInputError(f"wm: {self.warps} warps per block (1..16 supported)")
        if self.core == "mma":
            if self.wm % 16 or self.wn % 16:
                raise BadInputError(f"wm: the warp tile {self.wm}x{self.wn} is not made of 16x16 mma.sync pieces")
            if self.bk not in (32, 64):
                # at least two k16 steps: the pipeline waits for the next slot in the last step and issues
                # the next copy in the first, and one step would need a deeper wait than stages - 2
                raise BadInputError(f"bk: {self.bk} is not 32 or 64 (two or four k16 steps of mma.sync)")
            if not 2 <= self.stages <= 5:
                raise BadInputError(f"stages: {self.stages} is outside the 2..5 cp.async pipeline depths")
            accum = self.wm * self.wn // 32
            if accum > 128:
                raise BadInputError(f"wm: a {self.wm}x{self.wn} warp tile keeps {accum} fp32 accumulators per thread "
                                    "(at most 128 fit beside the fragments in 255 registers)")
        else:
            tn = self.thread_n
            if tn not in (8, 16) or (tn == 16 and self.stages == 2):
                raise BadInputError(f"thread_n: {tn} columns a thread: 8, or 16 with the cp.async pipeline (stages 3, 4)")
            if self.wm * self.wn != 32 * 8 * tn:
                raise BadInputError(f"wm: a SIMT warp tile holds 32 lanes x 8x{tn} outputs (wm*wn = {256 * tn}), "
                                    f"got {self.wm}x{self.wn}")
            if self.wm % 8 or self.wn % tn or (self.wm // 8) * (self.wn // tn) != 32:
                raise BadInputError(f"wm: {self.wm}x{self.wn} does not split into 32 lanes of 8x{tn}")
            if self.bk not in (8, 16, 32):
                raise BadInputError(f"bk: {self.bk} is not 8, 16 or 32")
            if not 2 <= self.stages <= 4:
                raise BadInputError(f"stages: {self.stages}: the SIMT core double-buffers through registers (2) or "
                                    "runs a cp.async pipeline of 3 or 4 stages")
            if self.stages > 2 and op is not None and getattr(op, "kind", None) != "gemm":
                raise BadInputError("stages: the SIMT cp.async pipeline (3 or 4 stages) is implemented for gemm only")
        if self.persist and (self.core != "mma" or self.persist > self.min_blocks):
            raise BadInputError(f"persist: a persistent grid of {self.persist} blocks per SM needs the mma core and "
                                f"at most min_blocks ({self.min_blocks}) blocks per SM")
        if self.persist and op is not None and getattr(op, "kind", None) != "gemm":
            raise BadInputError("persist: the persistent grid is implemented for gemm only")
        if self.raster > 64:
            raise BadInputError(f"raster: {self.raster} block rows per group is more than 64")
        if self.min_blocks * self.block_threads > 2048:
            raise BadInputError(f"min_blocks: {self.min_blocks} blocks of {self.block_threads} threads exceed 2048 per SM")
        if op is not None:
            kind = getattr(op, "kind", None)
            if kind not in ("gemm", "conv2d"):
                raise BadInputError(f"core: {self.core} computes gemm or conv2d, not {kind}")
            dtype = op.dtype.value
            if self.core == "mma" and dtype == "fp32":
                raise BadInputError("core: mma.sync takes fp16 or bf16 inputs (fp32 runs on the simt core)")
            if self.core == "simt" and dtype != "fp32":
                raise BadInputError(f"core: the simt core computes fp32 ({dtype} runs on the mma core)")
        if self.swizzle != "auto":
            from ..layout import parse_swizzle

            parse_swizzle(self.swizzle)  # names the problem if it does not parse

    # ------------------------------------------------------------------ JSON

    def to_json(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        # written only when not the default, so schedules recorded before the field existed (the search spaces
        # under tests/fixtures/spaces, keyed by their JSON) keep their keys; they then name the staged form
        if d["epilogue"] == "smem":
            del d["epilogue"]
        for name in ("lanes", "split"):  # likewise (softmax forms added later)
            if not d[name]:
                del d[name]
        for name in ("split_k", "frags"):  # likewise (the simt K split and fragment double buffer)
            if d[name] == 1:
                del d[name]
        if d["order"] == "rows":
            del d["order"]
        if d["thread_n"] == 8:
            del d["thread_n"]
        if d["form"] == "tile":
            del d["form"]
        if d["fill"] == "quads":
            del d["fill"]
        return {"schema_version": SCHEMA_VERSION, "backend": "cuda", **d}

    @staticmethod
    def from_json(d: dict[str, Any]) -> CudaSchedule:
        from ..schedule import schedule_fields

        return CudaSchedule(**schedule_fields(d, CudaSchedule, "cuda", "CUDA", ("core",), SCHEMA_VERSION))

    def features(self, op: Any) -> dict[str, float]:
        """The block tile's (``tile_features``); none for softmax, which has no block tile."""
        if self.core == "softmax":
            return {}
        from .plan import smem_bytes

        return tile_features(op, self.warps, smem_bytes(op, self), self.bm, self.bn)


def tile_features(op: Any, warps: int, smem_bytes: int, bm: int, bn: int, swap: bool = False) -> dict[str, float]:
    """What the tuner's model sees of a block-tiled CUDA schedule beside its fields (``Schedule.features``,
    ``build.tuning_features``): warps per block, shared memory per block, the block tile's area and the
    number of block tiles over ``op``'s (implicit) GEMM extents (one where it has none). They set occupancy
    (registers and shared memory per SM), the work and reuse per block and how the grid fills the last
    wave, which the raw fields only carry jointly: a 256x128 tile of 64x64 warps and a 128x128 tile of
    64x32 warps share their warp count, not their smem. Device-independent (a recorded space replays
    without its GPU). ``swap``: the tiles are over C^T (the Hopper GEMM's swapped operands)."""
    m = getattr(op, "gemm_m", None) or getattr(op, "m", bm)
    n = getattr(op, "gemm_n", None) or getattr(op, "n", bn)
    m, n = (n, m) if swap else (m, n)
    return {"warps": warps, "smem_bytes": smem_bytes, "block_tile": bm * bn, "tiles": -(-m // bm) * -(-n // bn)}
