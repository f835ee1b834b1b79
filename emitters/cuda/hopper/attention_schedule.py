"""The Hopper attention kernel's schedule (issue 17): the key tile, the K/V ring depth, how many consumer
warpgroups share a query tile (1-3; 3 is FlashAttention-3's 192-row tile at head dim 64, not in the search
space until it has run on a GPU), and the two overlaps FlashAttention-3 uses (ping-pong between the
consumers, and issuing the next tile's Q K^T before this tile's softmax).

A consumer warpgroup owns 64 query rows (one m64 wgmma slice), so the query tile is ``64 x consumers``.
``persistent``: one block per SM walks the (q tile, head, batch) work items (attention.py's ``walk_plan``),
so the prologue (barrier init, the ring's fill) and the tail of short items are paid once a block, not
once an item; ``q_buffers`` 2 loads the next item's Q into a second buffer while this one's is read. Its registers hold S (``bk / 2`` fp32), P (``bk / 4`` packed 16-bit) and O (``head_dim / 2`` fp32) per
thread; ``validate`` keeps that within the setmaxnreg budget of the block's split.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from tracea.doctor.errors import BadInputError

from ...schedule import booleans, positive_ints
from ..schedule import tile_features
from .attention_device import line_bytes, padded_dim
from .ptx import PTX_TYPE
from .schedule import PRODUCER_REGS, REGISTERS_PER_SM, SMEM_OPTIN_SM90, SWIZZLE

SMEM_PER_SM_SM90 = 233472  # an sm_90 SM's shared memory (228 KiB), of which each resident block reserves 1 KiB
SMEM_RESERVED = 1024

SCHEMA_VERSION = 1
HEAD_DIMS = tuple(range(32, 257, 8))  # multiples of 8; computed over padded_dim (16s: the wgmma k step)
PRODUCER_REGS_3 = 24  # the producer's registers beside 3 consumers (register_split)
# A consumer's registers beside S, P and O (addresses, m, l, loop state). 32 admits 80-key tiles at head dim
# 256, 176-key tiles at 128 and three consumers of 128-key tiles at 64 (160 registers each), all of which
# ptxas compiles (sm_90a, NVRTC 2026-11-25) without a spill, with and without the intra-warpgroup overlap.
CONSUMER_SPARE_REGS = 32


@dataclass(frozen=True)
class AttnWgmmaSchedule:
    """``bk``: keys per tile (the S wgmma's n); ``stages``: K/V ring depth; ``consumers``: warpgroups of
    64 query rows each; ``pingpong``: the consumers take turns issuing their matrix products (named
    barriers) so one's softmax runs under the other's wgmma; ``intra``: the next tile's S is issued
    before this tile's softmax, and P V after it, within each warpgroup; ``persistent``: a grid of
    min(work items, SMs) blocks, each walking items with Q reloaded per item and the K/V ring running on;
    ``q_buffers``: Q tiles in shared memory (2: persistent only, item i's Q in buffer i % 2); ``split_kv``:
    a stage's K is released once the consumers' S wgmmas have read it and its V once P V has, each on its
    own barrier, so the next K loads during this tile's softmax and P V: with one stage, a 128-key tile at
    head dim 256 fits (Q, K and V 64 KiB each; the plain loop, one block per item); ``ctas``: blocks an SM holds
    at once (2: each gets half the registers and at most half the shared memory, and one block's prologue, first
    S and store run beside the other's loop: short work items)."""

    bk: int = 128
    stages: int = 2
    consumers: int = 2
    pingpong: bool = True
    intra: bool = True
    persistent: bool = False
    q_buffers: int = 1
    split_kv: bool = False
    ctas: int = 1

    @property
    def core(self) -> str:
        return "wgmma-attention"

    @property
    def bq(self) -> int:
        return 64 * self.consumers

    @property
    def threads(self) -> int:
        return 128 * (1 + self.consumers)

    @property
    def bm(self) -> int:  # the tuner's block-tile features (build.tuning_features), as the mma.sync schedule's
        return self.bq

    @property
    def bn(self) -> int:
        return self.bk

    @property
    def name(self) -> str:
        return (f"wgmma_attn_{self.bq}x{self.bk}_s{self.stages}_c{self.consumers}"
                + ("_pp" if self.pingpong else "") + ("_ia" if self.intra else "") + ("_pe" if self.persistent else "")
                + (f"_q{self.q_buffers}" if self.q_buffers != 1 else "") + ("_kv" if self.split_kv else "")
                + (f"_b{self.ctas}" if self.ctas != 1 else ""))

    def register_split(self) -> tuple[int, int, int]:
        """(registers at entry, producer after setmaxnreg.dec, consumers after .inc), as the GEMM's; with 3
        consumers the producer (a TMA issuer, no multicast) keeps 24, as FlashAttention-3's does, so that
        each consumer gets 160; and so with 2 blocks an SM, which share its registers."""
        producer = PRODUCER_REGS_3 if self.consumers == 3 or self.ctas > 1 else PRODUCER_REGS
        entry = min(255, REGISTERS_PER_SM // (self.threads * self.ctas)) // 8 * 8
        consumer = min(256, (entry * self.threads - 128 * producer) // (128 * self.consumers) // 8 * 8)
        return entry, producer, consumer

    def consumer_registers(self, head_dim: int) -> int:
        """fp32 S, packed P and fp32 O registers per consumer thread, plus the spare. Without the
        intra-warpgroup overlap P is packed from S as S dies, so the two share registers; with it the next
        tile's S is live beside this tile's P."""
        return self.bk // 2 + (self.bk // 4 if self.intra else 0) + padded_dim(head_dim) // 2 + CONSUMER_SPARE_REGS

    def smem_bytes(self, head_dim: int) -> int:
        """``q_buffers`` Q tiles, ``stages`` K and V tiles (16-bit), 3 mbarriers a stage and Q's (full; and
        empty when persistent) a Q buffer, 1024 B of alignment slack."""
        q_bars = 2 * self.q_buffers if self.persistent else 1
        return (2 * padded_dim(head_dim) * (self.q_buffers * self.bq + 2 * self.stages * self.bk)
                + 8 * (self.barriers_per_stage * self.stages + q_bars) + 1024)

    @property
    def barriers_per_stage(self) -> int:
        """full K, full V and empty; with ``split_kv`` an empty barrier for K and one for V."""
        return 4 if self.split_kv else 3

    def validate(self, op: Any = None, smem_optin: int = SMEM_OPTIN_SM90) -> None:
        """Raise ``BadInputError`` naming the first field that cannot work (for ``op``'s head dim if given)."""
        positive_ints(self, ("bk", "stages", "consumers", "q_buffers", "ctas"))
        booleans(self, ("pingpong", "intra", "persistent", "split_kv"))
        if self.bk % 16 or not 16 <= self.bk <= 256:
            raise BadInputError(f"bk: {self.bk} keys is not a multiple of 16 in 16..256 (the wgmma's n and k)")
        if self.consumers not in (1, 2, 3):
            raise BadInputError(f"consumers: {self.consumers} consumer warpgroups (1, 2 or 3 supported)")
        if self.pingpong and self.consumers < 2:
            raise BadInputError("pingpong: takes turns between 2 or 3 consumer warpgroups", "consumers 2 or 3")
        low = 1 if self.split_kv else 2
        if not low <= self.stages <= 8:
            raise BadInputError(f"stages: {self.stages} is outside {low}..8")
        if self.split_kv and (self.intra or self.persistent):
            raise BadInputError("split_kv: K and V are released apart in the plain loop, one block per item",
                                "intra: false, persistent: false")
        if self.ctas not in (1, 2):
            raise BadInputError(f"ctas: {self.ctas} blocks an SM (1 or 2)")
        if self.q_buffers not in (1, 2) or (self.q_buffers == 2 and not self.persistent):
            raise BadInputError(f"q_buffers: {self.q_buffers} Q buffers (1, or 2 with persistent: true)")
        if op is None:
            return
        if getattr(op, "kind", None) != "attention":
            raise BadInputError(f"cuda-wgmma attention computes attention, not {getattr(op, 'kind', None)}")
        if op.dtype.value not in PTX_TYPE:
            raise BadInputError(f"dtype: cuda-wgmma attention takes bf16 or fp16, not {op.dtype.value}")
        d = op.head_dim
        if d not in HEAD_DIMS:
            raise BadInputError(f"head_dim: the wgmma attention kernel is built for multiples of 8 from "
                                f"{HEAD_DIMS[0]} to {HEAD_DIMS[-1]}, not {d}")
        if getattr(op, "packed", False) and self.persistent:
            raise BadInputError("persistent: packed entries launch one block a q-tile slot (their tiles are known "
                                "only on the device)", "persistent: false")
        if self.split_kv and self.bk > 64 and 192 < padded_dim(d) < 256:
            raise BadInputError(f"bk: a split_kv tile of {self.bk} keys at head dim {d} spills or serialises the "
                                "wgmmas (ptxas, sm_90a)", "bk 64")
        need, have = self.consumer_registers(d), self.register_split()[2]
        if need > have:
            raise BadInputError(f"bk: S, P and O of a {self.bk}-key tile at head dim {d} need ~{need} registers a "
                                f"consumer thread, more than its {have}", "a smaller bk or one consumer")
        if self.smem_bytes(d) > smem_optin:
            raise BadInputError(f"stages: Q and {self.stages} K/V stages need {self.smem_bytes(d)} B of shared "
                                f"memory, more than the {smem_optin} B allowed", "fewer stages or a smaller bk")
        if self.ctas > 1 and self.ctas * (self.smem_bytes(d) + SMEM_RESERVED) > SMEM_PER_SM_SM90:
            raise BadInputError(f"ctas: {self.ctas} blocks of {self.smem_bytes(d)} B of shared memory do not fit an "
                                f"SM's {SMEM_PER_SM_SM90} B", "fewer stages, a smaller bk or ctas 1")

    def to_json(self) -> dict[str, Any]:
        """The fields; ``persistent`` and ``q_buffers`` only when not their defaults, so that earlier
        schedules' JSON stays as it was."""
        d = dataclasses.asdict(self)
        if not self.persistent:
            del d["persistent"]
        if self.q_buffers == 1:
            del d["q_buffers"]
        if not self.split_kv:
            del d["split_kv"]
        if self.ctas == 1:
            del d["ctas"]
        return {"schema_version": SCHEMA_VERSION, "backend": "cuda", "core": self.core, **d}

    @staticmethod
    def from_json(d: dict[str, Any]) -> AttnWgmmaSchedule:
        if not isinstance(d, dict):
            raise BadInputError(f"schedule: expected an object, got {type(d).__name__}")
        from ...schedule import schedule_fields

        d = dict(d)
        if d.pop("core", "wgmma-attention") != "wgmma-attention":
            raise BadInputError("schedule: not a cuda-wgmma attention schedule")
        return AttnWgmmaSchedule(**schedule_fields(d, AttnWgmmaSchedule, "cuda", "CUDA", (), SCHEMA_VERSION))

    def features(self, op: Any) -> dict[str, float]:
        """The block's warps (producer's included) and shared memory at ``op``'s head dim over the bq x bk
        tile (``tile_features``), and the blocks an SM holds."""
        return {**tile_features(op, self.threads // 32, self.smem_bytes(op.head_dim), self.bm, self.bn),
                "ctas": float(self.ctas) if type(self.ctas) is int else 1.0}  # a recorded schedule may not validate


def smem_plan(sched: AttnWgmmaSchedule, d: int) -> dict[str, int]:
    """Byte offsets from the 1024-aligned base: Q, then K stages, then V stages, then the mbarriers
    (full K[S], full V[S], empty[S], Q's). Every tile is whole swizzle atoms (8 lines: 1024 bytes at 128B,
    512 at 64B, 256 at 32B; attention_device.head_chunk)."""
    q = sched.q_buffers * sched.bq * d * 2
    kv = sched.bk * d * 2
    plan = {"q": 0, "k": q, "v": q + sched.stages * kv, "stage": kv, "bars": q + 2 * sched.stages * kv}
    period = SWIZZLE.period_bytes if d % 64 == 0 else 8 * line_bytes(d)
    assert all(plan[x] % period == 0 for x in ("k", "v", "stage", "bars"))
    return plan



def hero_schedule(op: Any = None) -> AttnWgmmaSchedule:
    """128-row query tiles over 2 ping-ponging consumers; 128-key tiles (64 past head dim 192, where O alone
    is 104-128 registers a thread, without the intra-warpgroup overlap as at 256); the ring as deep as shared
    memory allows up to 4, and at least 3 deep with 96-key tiles where 128 keys fit only 2 stages (head dims
    144 and 160; 176 and 192 fit neither and keep 2 stages of 128 and 96 keys). An H100 (2026-11-25, bf16
    D128 B4 H32 S4096, CUDA events, L2 flushed): 3 stages with both overlaps 661 / 553 TFLOP/s non-causal /
    causal against cuDNN's 685 / 602 in the same run; 2 stages 529 / 452 (593 / 496 with neither overlap).
    An H200 (2026-11-29, D160 B4 H32 S4096, docs/device-runs/h200-attention-head-dims/): 96 keys, 3 stages
    1.10x / 1.04x SDPA (cuDNN) non-causal / causal; 80 keys, 3 stages 1.02x / 0.99x; 128 keys, 2 stages 0.90x /
    0.85x (1.01x / 0.96x without the intra-warpgroup overlap).
    At head dim 256 without the intra-warpgroup overlap (a second S tile live beside 128 registers of O):
    D256 B16 H32 S512, 427 TFLOP/s against 357 with it (0.80x / 0.67x cuDNN;
    docs/device-runs/h100-splitk-simt-attention/attention-schedule-sweep/)."""
    d = 128 if op is None else op.head_dim
    tiles = ((128, (4, 3)), (96, (3,)), (128, (2,)), (96, (2,))) if d <= 192 else ((64, (4, 3, 2)),)
    for bk, depths in tiles:
        for stages in depths:
            s = AttnWgmmaSchedule(bk=bk, stages=stages, intra=d <= 192)
            if s.smem_bytes(d) <= SMEM_OPTIN_SM90:
                return _head_dim_64(s, op)
    return _head_dim_64(AttnWgmmaSchedule(bk=64, intra=d <= 192), op)


def _head_dim_64(s: AttnWgmmaSchedule, op: Any) -> AttnWgmmaSchedule:
    """Head dim 64 (not packed entries): two blocks an SM, each two consumers of 64-key tiles with neither
    overlap, 3 stages, persistent over 2 x SMs blocks. One block's prologue, first S and store then run beside
    the other's loop, which the short items of short sequences and narrow windows are made of. An H200
    (2026-11-29, bf16, CUDA events, the baseline in the same run; docs/device-runs/h200-attention-two-blocks/):
    window 256,0 B1 H32 S8192 0.118 ms against 0.182 for the hero before (FlexAttention 0.121); B16 H32 S512
    0.108 against 0.119 (cuDNN 0.097), causal 0.090 against 0.123 (cuDNN 0.073); B4 H32 S2048 0.338 against
    0.348; B1 H32 S16384 causal 2.451 against 2.495 (cuDNN 2.372). At head dim 128 one consumer a block, two
    blocks an SM, lost (B16 S512 0.196 ms against 0.182). It replaces one block an SM walking items persistently
    up to 2048 keys (an H100: B16 S512 0.117 ms against 0.133 one block an item;
    docs/device-runs/h100-attention-persistent-and-ops/)."""
    if op is None or op.head_dim != 64 or getattr(op, "packed", False):
        return s
    return AttnWgmmaSchedule(bk=64, stages=3, consumers=2, pingpong=False, intra=False, persistent=True, ctas=2)


def search_space(op: Any, smem_optin: int = SMEM_OPTIN_SM90) -> list[AttnWgmmaSchedule]:
    """Valid schedules for ``op``: key tiles, ring depths, consumers and the two overlaps, each one block
    per work item, then the persistent forms of the 2-consumer ones (with and without ping-pong), with one Q
    buffer and with two where they fit, so that the first entries are as before; then K and V released
    apart, then every form that fits two blocks an SM as such (not for packed entries: not measured)."""

    def valid(candidates: Any) -> list[AttnWgmmaSchedule]:
        kept = []
        for s in candidates:
            try:
                s.validate(op, smem_optin)
            except BadInputError:
                continue
            kept.append(s)
        return kept

    out = valid(AttnWgmmaSchedule(bk, stages, consumers, pingpong, intra)
                for bk in (64, 80, 96, 128, 176) for stages in (2, 3, 4) for consumers in (1, 2)
                for pingpong in ((False, True) if consumers == 2 else (False,)) for intra in (False, True))
    persistent = valid(dataclasses.replace(s, persistent=True, q_buffers=q)
                       for s in out if s.consumers == 2 for q in (1, 2))
    split = valid(AttnWgmmaSchedule(bk, stages, 2, True, False, split_kv=True)  # the plain loop, 1-3 stages
                  for bk in (64, 128) for stages in (1, 2, 3))
    two = [] if getattr(op, "packed", False) else valid(dataclasses.replace(s, ctas=2) for s in out + persistent)
    return out + persistent + split + two


# ------------------------------------------------------------------------------ the core's hooks (cores.py)


def check(op: Any, v: Any, schedule: Any, arch: Any) -> None:
    """What ``build._check`` asks of the kernel: an attention op, this schedule type, the sm_90a target."""
    from ..tma import require_sm90a

    if not isinstance(schedule, AttnWgmmaSchedule):
        raise BadInputError(f"schedule: {v.id} takes a wgmma attention schedule, got {type(schedule).__name__}")
    require_sm90a(op, v, arch, "fp32 attention runs on the CPU backend")
    schedule.validate(op, arch.smem_optin)
