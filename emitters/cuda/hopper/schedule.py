"""The Hopper kernels' schedules: what the tuner searches and the checks that keep a schedule to what the
sm_90a hardware can run (wgmma shapes, setmaxnreg's register split, the shared-memory ring), with the
constants the other parts read (``BK``, ``SWIZZLE``, the element size).

``WgmmaSchedule`` is the GEMM's (the conv's ``WgmmaConvSchedule``, which adds its paths, is in
``conv_schedule.py``). The GEMM's hero (hand-picked from the H200 runs) is here; the search spaces are in
``space.py``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, ClassVar

from tracea.doctor.errors import BadInputError

from ...layout import TmaSwizzle
from ...schedule import booleans, positive_ints
from ..schedule import tile_features
from .ptx import PTX_TYPE

SCHEMA_VERSION = 1
BK = 64  # one 128-byte swizzle span of 16-bit elements: the k extent of every TMA box
SWIZZLE = TmaSwizzle("128B")
RASTERS = ("m", "n")
STORES = ("direct", "tma")
SPLIT_FIXES = ("last", "spread")
MAX_SPLIT = 64  # k slices a tile: a 256 x 256 output over 16384 of k fills 128 SMs with 32 slices of 128 x 128
L2_HINTS = ("normal", "first")
CLUSTER_AXES = ("m", "n")
C_ATOM_BYTES = 64 * 64 * 2  # one 64 x 64 16-bit tile of C staged for a TMA store
REGISTERS_PER_SM = 65536
PRODUCER_REGS = 40
ADDRESS_REGS = 26  # registers a consumer needs beside its accumulators (ptxas, 128x256 c2: 154 for 128)
SMEM_OPTIN_SM90 = 232448
ELEM_BYTES = 2  # bf16 / fp16


@dataclass(frozen=True)
class WgmmaSchedule:
    """How the Hopper GEMM tiles C and pipelines its operands (all fields searchable by the tuner).

    ``bm`` x ``bn``: C tile per block (per persistent iteration); ``consumers`` warpgroups split the
    ``bm`` rows, each issuing m64 wgmma of width ``bn``. ``stages``: depth of the TMA ring.
    ``raster``/``group``: the persistent tile order walks ``group`` tile rows ("m") or tile columns
    ("n") at a time so that blocks running together share A or B panels in L2. ``cluster``: 1, or 2
    blocks sharing an operand tile through TMA multicast; ``cluster_axis``: the pair are neighbouring tile
    rows sharing B ("m"), or neighbouring tile columns sharing A ("n", cuBLAS's split-K form on 512 x 512 x
    16384: each block loads half of A for both and its own B). ``split``: k slices per tile (split-K,
    ``splitk.py``): 1 none, 0 as many as fill the SMs, 2..``MAX_SPLIT`` that many; ``split_tail``: split only the
    tiles of the last, partial wave; ``split_fix``: who sums the slices, "last" (the tile's last block,
    alone) or "spread" (every slice's block a share of the tile, once all have arrived; persistent only).
    ``l2_hint``: the operands' TMA loads as they come ("normal"), or marked evict-first in L2 ("first"):
    streamed operand lines give way before other lines, such as the dirty lines an earlier kernel left,
    so fewer of those are written back while the kernel reads (512 x 512 x 16384 on an H100: 0.81x ->
    0.91-0.93x cuBLAS at 5 stages; bimodal at 6 and slower at 8, where the deeper ring's lines are
    evicted before their last reader: docs/device-runs/h100-splitk-tail-and-suite/evict-first-variants).
    ``swap``: the kernel computes C^T = B^T A^T (``gemm.kernel_op``): ``bm`` tiles C's columns, ``bn`` (8-64) its
    rows, so a few rows of C (a batch-1 1x1 conv's pixels) fill an n8-n64 wgmma, not part of an m64 one. Both
    operands K-major (B column-major: ``nn.Linear``'s weight, a 1x1 conv's filter); C written back transposed."""

    bm: int = 128
    bn: int = 256
    stages: int = 4
    consumers: int = 2
    raster: str = "m"
    group: int = 8
    cluster: int = 1
    persistent: bool = True
    pingpong: bool = False
    store: str = "direct"
    split: int = 1
    split_tail: bool = False
    split_fix: str = "last"
    cluster_axis: str = "m"
    l2_hint: str = "normal"
    swap: bool = False
    producer_regs: ClassVar[int] = PRODUCER_REGS  # registers the producer warpgroup keeps (setmaxnreg.dec)

    @property
    def core(self) -> str:
        """The kernel core, as ``CudaSchedule.core`` names its own (the CUDA emitter dispatches on it)."""
        return "wgmma"

    @property
    def bk(self) -> int:
        return BK

    @property
    def threads(self) -> int:
        return 128 * (1 + self.consumers)

    @property
    def wm(self) -> int:
        """Rows of C each consumer warpgroup owns: its share of the tile (cooperative), or the whole tile
        (ping-pong: the consumers take turns on whole tiles, one's epilogue under the other's mainloop)."""
        return self.bm if self.pingpong else self.bm // self.consumers

    @property
    def tile_walkers(self) -> int:
        """Consumer warpgroups that take separate tiles (ping-pong) rather than sharing one."""
        return self.consumers if self.pingpong else 1

    @property
    def m_slices(self) -> int:
        return self.wm // 64

    @property
    def accumulators(self) -> int:
        """fp32 accumulator registers per consumer thread."""
        return self.m_slices * self.bn // 2

    @property
    def stage_bytes(self) -> int:
        return (self.bm + self.bn) * BK * ELEM_BYTES

    @property
    def c_staging_bytes(self) -> int:
        """TMA-store epilogue: two 64 x 64 staging atoms of C per consumer warpgroup (double-buffered)."""
        return self.consumers * 2 * C_ATOM_BYTES if self.store == "tma" else 0

    @property
    def smem_bytes(self) -> int:
        """Dynamic shared memory: the ring, the C staging atoms, the mbarriers (full and empty per stage,
        two ping-pong turns), slack to align the base to 1024."""
        flags = 16 if self.split != 1 else 0  # split-K: the consumers' "last slice" word(s)
        return self.stages * self.stage_bytes + self.c_staging_bytes + 16 * self.stages + 16 + flags + 1024

    @property
    def name(self) -> str:
        tag = f"wgmma_{self.bm}x{self.bn}x{BK}_s{self.stages}_c{self.consumers}_r{self.raster}{self.group}"
        tag += "" if self.cluster == 1 else f"_cl{self.cluster}" + ("n" if self.cluster_axis == "n" else "")
        tag += "_pp" if self.pingpong else ""
        tag += "_ts" if self.store == "tma" else ""
        tag += "" if self.split == 1 else f"_sk{self.split or 'a'}" + ("t" if self.split_tail else "")
        tag += "s" if self.split_fix == "spread" else ""
        tag += "_ef" if self.l2_hint == "first" else ""
        tag += "_sw" if self.swap else ""
        return tag + ("" if self.persistent else "_np")

    def register_split(self) -> tuple[int, int, int]:
        """(registers per thread at entry, producer after dec, consumers after inc): setmaxnreg takes
        multiples of 8 in 24..256, and the block's pool (threads x entry) must cover the new split."""
        entry = min(255, REGISTERS_PER_SM // self.threads) // 8 * 8
        pool = entry * self.threads
        consumer = min(256, (pool - 128 * self.producer_regs) // (128 * self.consumers) // 8 * 8)
        return entry, self.producer_regs, consumer

    def validate(self, op: Any = None, smem_optin: int = SMEM_OPTIN_SM90) -> None:
        """Raise ``BadInputError`` naming the first field that cannot work."""
        self._validate_fields()
        self._validate_tile()
        self._validate_split_and_cluster()
        self._validate_resources(smem_optin)
        if op is not None:
            if getattr(op, "kind", None) != "gemm":
                raise BadInputError(f"cuda-wgmma computes gemm, not {getattr(op, 'kind', None)}")
            if op.dtype.value not in PTX_TYPE:
                raise BadInputError(f"dtype: cuda-wgmma takes bf16 or fp16 inputs, not {op.dtype.value}")
            if self.swap and (op.layout_a, op.layout_b) != ("row", "col"):
                raise BadInputError(f"swap: C^T = B^T A^T needs both operands K-major (A row-major, B column-major), "
                                    f"not A {op.layout_a}, B {op.layout_b}", "swap: false")

    def _validate_fields(self) -> None:
        """Each field's type and, for the named choices, its value."""
        positive_ints(self, ("bm", "bn", "stages", "consumers", "group", "cluster"))
        if isinstance(self.split, bool) or not isinstance(self.split, int) or not 0 <= self.split <= MAX_SPLIT:
            raise BadInputError(f"split: expected 0 (fill the SMs), 1 (none) or 2..{MAX_SPLIT} k slices, "
                                f"got {self.split!r}")
        booleans(self, ("persistent", "pingpong", "split_tail", "swap"))
        if self.store not in STORES:
            raise BadInputError(f"store: expected 'direct' or 'tma', got {self.store!r}")
        if self.raster not in RASTERS:
            raise BadInputError(f"raster: expected 'm' or 'n', got {self.raster!r}")

    def _validate_tile(self) -> None:
        """The tile, the consumer warpgroups that share it, the ring's depth, the raster group, the cluster."""
        if self.consumers not in (1, 2, 3):
            raise BadInputError(f"consumers: {self.consumers} consumer warpgroups (1, 2 or 3 supported)")
        if self.bm % (64 * (1 if self.pingpong else self.consumers)) or self.bm > 256:
            raise BadInputError(f"bm: {self.bm} is not a multiple of 64 x {self.consumers} consumer warpgroups "
                                "up to 256 (each consumer issues m64 wgmma)")
        if self.pingpong and self.consumers != 2:
            raise BadInputError("pingpong: the ping-pong schedule alternates exactly 2 consumer warpgroups")
        if self.swap and (self.bn % 8 or self.bn > 64):
            raise BadInputError(f"bn: {self.bn} rows of C a swapped tile is not a multiple of 8 up to 64 (wgmma n, "
                                "one 64-column staging atom of C^T)")
        if self.swap and (self.cluster != 1 or self.pingpong or self.split_fix == "spread"):
            raise BadInputError("swap: runs without clusters, ping-pong or the spread split fix-up",
                                "cluster 1, pingpong false, split_fix 'last'")
        if not self.swap:
            self._validate_width()
        if not 2 <= self.stages <= 12:
            raise BadInputError(f"stages: {self.stages} is outside 2..12")
        if self.group > 64:
            raise BadInputError(f"group: {self.group} tile rows per group is more than 64")
        if self.cluster not in (1, 2):
            raise BadInputError(f"cluster: {self.cluster} blocks per cluster (1 or 2 supported)")

    def _validate_width(self) -> None:
        """``bn`` of a tile that is not swapped: 64, 128, 192 or 256 (B's MN-major atoms and C's staging atoms are
        64 columns wide)."""
        if self.bn % 64 or not 64 <= self.bn <= 256:
            raise BadInputError(f"bn: {self.bn} is not 64, 128, 192 or 256 (wgmma n <= 256, 64-element TMA atoms)")

    def _validate_split_and_cluster(self) -> None:
        """Split-K's fix-up and tail, the L2 hint, and the axis a 2-block cluster pairs its blocks along."""
        if self.split_fix not in SPLIT_FIXES:
            raise BadInputError(f"split_fix: expected 'last' or 'spread', got {self.split_fix!r}")
        if self.split_fix == "spread" and (self.split == 1 or not self.persistent):
            raise BadInputError("split_fix: 'spread' shares a split tile's sum among its slices' blocks, which "
                                "must all be resident: it needs split-K and a persistent schedule")
        if self.l2_hint not in L2_HINTS:
            raise BadInputError(f"l2_hint: expected 'normal' or 'first', got {self.l2_hint!r}")
        if self.consumers > 2 and self.split != 1 and (self.split_fix == "spread" or self.split_tail):
            raise BadInputError("split_fix: split-K over three consumers has run on a GPU with the last block's "
                                "fix-up over whole splits only (docs/device-runs/h200-three-consumer-split-forms/); "
                                "the spread fix-up and split_tail there have not", "split_fix 'last', split_tail off")
        if self.split_tail and self.split == 1:
            raise BadInputError("split_tail: splits the last wave's tiles, but split is 1 (none)", "split 0")
        if self.cluster_axis not in CLUSTER_AXES:
            raise BadInputError(f"cluster_axis: expected 'm' or 'n', got {self.cluster_axis!r}")
        if self.cluster_axis == "n" and self.cluster == 1:
            raise BadInputError("cluster_axis: 'n' pairs blocks along N, but cluster is 1", "cluster 2")
        if self.cluster == 2 and self.cluster_axis == "m" and self.bn % 128:
            raise BadInputError(f"bn: {self.bn} does not split into two 64-column halves for the cluster's multicast")

    def _validate_resources(self, smem_optin: int) -> None:
        """The accumulators beside their addresses in the registers ptxas may give, the ring in shared memory."""
        if self.accumulators > 192:
            raise BadInputError(f"bn: {self.accumulators} fp32 accumulators per consumer thread do not fit "
                                f"beside addresses in {self.register_split()[2]} registers")
        if self.accumulators + ADDRESS_REGS > self.register_split()[0]:
            # setmaxnreg raises the consumers' budget at run time, but ptxas compiles the whole kernel under
            # the entry cap (65536 / threads): 4 warpgroups cap every thread at 128 registers (H200, NVRTC
            # 13.0 and 13.5: "C7602 Insufficient registers (128) ... register target of 154" for 192x256 c3)
            raise BadInputError(f"consumers: {self.accumulators} accumulators + ~{ADDRESS_REGS} registers of "
                                f"addresses exceed the {self.register_split()[0]} registers ptxas may give a "
                                f"thread of a {self.threads}-thread block", "fewer consumers or a narrower bn")
        if self.smem_bytes > smem_optin:
            raise BadInputError(f"stages: the ring needs {self.smem_bytes} B of shared memory per block, more "
                                f"than the {smem_optin} B allowed", "fewer stages or smaller tiles")

    def to_json(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        if self.split == 1:  # the JSON of every schedule without split-K stays as it was before it
            del d["split"], d["split_tail"]
        if self.split_fix == "last":  # and of every split-K schedule before the spread fix-up
            del d["split_fix"]
        if self.cluster_axis == "m":  # and of every schedule before clusters along N
            del d["cluster_axis"]
        if self.l2_hint == "normal":  # and of every schedule before L2 hints
            del d["l2_hint"]
        if not self.swap:  # and of every schedule before swapped operands
            del d["swap"]
        return {"schema_version": SCHEMA_VERSION, "backend": "cuda", "core": "wgmma", **d}

    @staticmethod
    def from_json(d: dict[str, Any]) -> WgmmaSchedule:
        from ...schedule import schedule_fields

        d = dict(d)
        if d.pop("core", "wgmma") != "wgmma":
            raise BadInputError("schedule: not a cuda-wgmma schedule")
        return WgmmaSchedule(**schedule_fields(d, WgmmaSchedule, "cuda", "CUDA", (), SCHEMA_VERSION))

    def features(self, op: Any) -> dict[str, float]:
        """The block's warps (producer's included) and dynamic shared memory over its tile (``tile_features``)."""
        return tile_features(op, self.threads // 32, self.smem_bytes, self.bm, self.bn, self.swap is True)


# Picked from the H200 runs (docs/device-runs/h200-cuda-kernels-and-tuner/wgmma/tma-store-epilogue, docs/hopper.md): the TMA-store epilogue took bf16
# 4096^3 from 0.89x to 0.96x cuBLAS; a 2-block cluster measured within noise of it (0.963x) and is left
# to the tuner, as is ping-pong (best at 8192^3, 1.02-1.03x).
HERO = WgmmaSchedule(store="tma")


def hero_schedule(op: Any = None, sm_count: int = 132) -> WgmmaSchedule:
    """The hand-picked schedule: 128 x 256 tiles, 4 stages, 2 cooperative consumers, TMA-store
    epilogue; narrow tiles when M or N is small (decode shapes), so that more blocks stream B. Where
    the tiles leave SMs idle, split-K (``with_split``)."""
    if op is not None and op.m > 64 and -(-op.k // BK) <= 16:
        return short_k_schedule(op, sm_count)
    if op is not None and op.m <= 64:
        base = WgmmaSchedule(bm=64, bn=64, stages=8, consumers=1, store="tma")
    elif op is not None and op.n <= 128:
        base = WgmmaSchedule(bm=128, bn=128, stages=6, consumers=2)
    else:
        base = HERO
    if op is None:
        return base
    narrow = WgmmaSchedule(bm=64, bn=128, stages=6, consumers=1, store="tma")
    return streamed(with_split(base, narrow, op.m, op.n, -(-op.k // BK), sm_count), base)


def streamed(s: WgmmaSchedule, base: WgmmaSchedule) -> WgmmaSchedule:
    """Evict-first operand loads (``l2_hint``) where ``with_split`` left ``base`` for fewer, longer tiles
    (split-K, or the narrow tiles): their operand lines are read by a few blocks at once and then dead, so
    they give way first; split forms at most 5 stages deep (deeper rings made the hint bimodal). From the
    H100 probe (docs/device-runs/h100-splitk-tail-and-suite/l2-hint-schedule-field), against the same tiles without it: M = 128
    projections 0.88 -> 0.99, 0.98 -> 1.11, 1.05 -> 1.13x; 512 x 512 x 16384 0.80 -> 0.91x; 64 x 4096 x
    4096 0.89 -> 1.00x; 256 x 4096 x 8192 (narrow, whole) 0.92 -> 1.15x; 384 x 768 x 30000 0.84 -> 0.86x.
    Wide tiles keep the plain loads: short-K 3000 x 5000 x 700 lost with it (1.73 -> 1.53x), 4096^3 and
    2048 x 11008 x 4096 moved by 1 %."""
    if s == base:
        return s
    if s.split != 1:
        return dataclasses.replace(s, stages=min(s.stages, 5), l2_hint="first")
    return dataclasses.replace(s, l2_hint="first")


def short_k_schedule(op: Any, sm_count: int) -> WgmmaSchedule:
    """K of 1024 or less (16 k steps; a 1x1 conv's channels): writing C is most of the work, so the tiles
    that keep most stores in flight. 128 x 128 (128 x 64 for 64 columns) with the TMA-store epilogue,
    or 64 x 64 where those leave half the SMs idle, or 192 x 128 on three consumers where those fill the waves
    clearly better (``wave_fill``). From the H100 probe of ResNet-50's 1x1 convs
    (docs/device-runs/h100-cuda-suites-splitk-im2col-stem/conv1x1-short-k-probe): 1.03-1.20x cuDNN at batch 1 with 64 x 64 tiles, against
    0.57-0.91x with the long-K heroes; 0.90-1.14x at batch 32 with 128 x 128 TMA-store tiles, against
    0.57-0.88x (128 x 256, or direct stores)."""
    wide = WgmmaSchedule(bm=128, bn=64 if op.n <= 64 else 128, stages=6, consumers=2, store="tma")
    if 2 * tile_count(wide, op.m, op.n) < sm_count:
        return WgmmaSchedule(bm=64, bn=64, stages=8, consumers=1, store="tma")
    three = WgmmaSchedule(bm=192, bn=128, stages=4, consumers=3, store="tma")
    t_wide, t_three = tile_count(wide, op.m, op.n), tile_count(three, op.m, op.n)
    if op.n > 64 and t_three >= 0.9 * sm_count and wave_fill(t_three, sm_count) >= wave_fill(t_wide, sm_count) + 0.15:
        return three
    return wide


def tile_count(s: WgmmaSchedule, m: int, n: int) -> int:
    return -(-m // s.bm) * -(-n // s.bn)


def wave_fill(tiles: int, sm_count: int) -> float:
    """The share of the SMs' turns the tiles use: ``tiles`` over whole waves of ``sm_count`` (1: whole waves).
    ``short_k_schedule`` takes 192 x 128 tiles on three consumers where they fill waves clearly better than 128 x
    128: on an H200 (docs/device-runs/h200-three-consumer-split-forms/short-k-forms/) every such shape tried gained,
    n32 c1024 14x14 k512 0.83 -> 0.94x cuDNN (196 tiles against 132 on 132 SMs), 4096 x 768 x 768 0.77 -> 0.92x
    cuBLAS, 8192 x 384 x 1024 0.84 -> 0.92x, n16 c512 28x28 k256 0.78 -> 0.85x, n32 c512 28x28 k128 0.96 -> 0.99x;
    3000 x 1100 x 640, whose 192-row tiles fill fewer waves, lost with them (1.24 -> 0.97x)."""
    return tiles / (sm_count * -(-tiles // sm_count))


def with_split(base: Any, narrow: Any, m: int, n: int, k_iters: int, sm_count: int) -> Any:
    """``base``, or what fills the SMs better where its tiles leave them idle (the split itself is
    chosen again at launch by ``splitk.plan`` from the device's own SM count). From the H100 probe
    (docs/device-runs/h100-cuda-suites-splitk-im2col-stem/splitk-m128-probe): with 18 or more k steps of 64, split-K over
    ``narrow`` tiles (64 x 128, one consumer: the smallest fix-up) when they still leave half the
    SMs idle; ``narrow`` tiles without split-K when they fill most SMs and ``base``'s do not (ResNet-50's
    3x3 512-channel conv at batch 32: 0.70x, against 0.58x split over 128 x 128); else split-K over
    ``base``'s. Splitting only a second wave's tiles (``split_tail``) is left to the tuner: it lost
    where it was tried (a 3x3 conv at batch 32, 196 tiles: 0.89x against 1.02x). Fewer k steps do not
    pay for a fix-up (1x1 convs over 1024 channels: 0.86x without, 0.74x with), and keep ``base``."""
    if k_iters < 18:
        return base
    smaller = narrow.bm * narrow.bn < base.bm * base.bn
    tiles, narrow_tiles = tile_count(base, m, n), tile_count(narrow, m, n)
    if smaller and 2 * narrow_tiles <= sm_count:
        return dataclasses.replace(narrow, split=0)
    if smaller and tiles < 0.7 * sm_count <= narrow_tiles:
        return narrow
    if 2 * tiles <= sm_count:
        return dataclasses.replace(base, split=0)
    return base
