"""The mma.sync attention core (issue 17, sm_80+): its schedule, hero, search space, checks and renderer.
The kernel itself is attention_kernel.py; the tile plan and the shared parameters attention_plan.py.

A block holds ``bq`` query rows; a warp owns ``warp_rows`` of them (one or two m16 tiles). Per thread O
takes warp_rows x head_dim / 32 registers, S warp_rows x bk / 32, and Q's fragments (held only at 16
rows a warp) head_dim / 4. The hero is 16 rows a warp, 8 warps for 128 rows: Q of head dim 128 stays in
registers (~200 registers, no spills) and each K/V tile is read from shared memory once per warp.
FlashAttention 2's split (4 warps x 32 rows, ``warp_rows=32``) reads K and V half as often per FLOP but
must re-read Q from shared memory each step and, at head dim 128, fits only 32-key tiles (248 registers);
it is in the search space, for the tuner to decide on the GPU. Head dim 256 takes 64-row blocks and
32-key tiles (O alone is 128 registers a thread) and reads Q from shared memory at each step.

Every multiple of 8 from 32 to 256 runs (``HEAD_DIMS``): multiples of 64 on XOR-swizzled rows, the others
on rows padded by 16 bytes (attention_kernel.py); an odd number of 8s is computed over the next multiple of 16,
the extra columns zeros (``attention_kernel.padded``). The register rules go by range: up to 64 as 64, up to
128 as 128 (Q in registers); past 128 Q is re-read from shared memory and key tiles take at most 64 keys,
16 rows a warp (ptxas, sm_80 and sm_90a: no spill up to 240).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import numpy as np

from tracea.doctor.errors import BadInputError, UnsupportedError

from .attention_kernel import kernel_source, padded, row_bytes, swizzled
from .attention_plan import PARAMS, mask_scalars, read_schedule, schedule_json, tile_plan
from .render import CudaRenderer, Rendered
from .schedule import tile_features

SCHEMA_VERSION = 1
CORE = "attention-mma"
BQS = (64, 128)
BKS = (32, 64, 128)
STAGES = (2, 3)
WARP_ROWS = (16, 32)
ORDERS = ("longest-first", "natural")
HEAD_DIMS = tuple(range(32, 257, 8))  # multiples of 8, computed over attention_kernel.padded (16s: the k step)
DTYPES = ("bf16", "fp16")


@dataclass(frozen=True)
class AttentionMmaSchedule:
    """``bq`` query rows a block (16 a warp), ``bk`` keys a K/V tile, ``stages`` K and V slots each in the
    cp.async ring, ``order``: q tiles longest first (the plan's order) or by index."""

    core: str = CORE
    bq: int = 128
    bk: int = 64
    stages: int = 2
    order: str = "longest-first"
    warp_rows: int = 16

    @property
    def q_in_registers(self) -> bool:
        """Q's A fragments held in registers (one m16 tile a warp, head dim <= 128), else re-read each step."""
        return self.warp_rows == 16

    @property
    def warps(self) -> int:
        return self.bq // self.warp_rows

    @property
    def threads(self) -> int:
        return 32 * self.warps

    @property
    def block_threads(self) -> int:
        return self.threads

    @property
    def bm(self) -> int:  # the tuner's block-tile features (build.tuning_features)
        return self.bq

    @property
    def bn(self) -> int:
        return self.bk

    @property
    def name(self) -> str:
        return (f"q{self.bq}_k{self.bk}_s{self.stages}" + ("" if self.warp_rows == 16 else f"_w{self.warp_rows}")
                + ("" if self.order == "longest-first" else "_nat"))

    def smem_bytes(self, head_dim: int) -> int:
        """Q's tile, then ``stages`` K and ``stages`` V tiles, 16-bit rows (padded where not swizzled)."""
        return row_bytes(head_dim) * (self.bq + 2 * self.stages * self.bk)

    def validate(self, op: Any = None, arch: Any = None) -> None:
        if self.core != CORE:
            raise BadInputError(f"core: an AttentionMmaSchedule runs the {CORE} core, not {self.core!r}")
        for name, allowed in (("bq", BQS), ("bk", BKS), ("stages", STAGES), ("order", ORDERS),
                              ("warp_rows", WARP_ROWS)):
            value = getattr(self, name)
            if isinstance(value, bool) or value not in allowed:
                raise BadInputError(f"{name}: expected one of {', '.join(map(str, allowed))}, got {value!r}")
        if op is None:
            return
        if getattr(op, "kind", None) != "attention":
            raise BadInputError(f"core: {CORE} computes attention, not {getattr(op, 'kind', op)}")
        d = op.head_dim
        if d not in HEAD_DIMS:
            raise UnsupportedError(f"head_dim: the CUDA attention kernels are built for multiples of 8 from "
                                   f"{HEAD_DIMS[0]} to {HEAD_DIMS[-1]}, not {d}", "use --backend cpu")
        dp = padded(d)  # the registers go by the head dim computed
        if dp == 256 and (self.bq, self.bk) != (64, 32):
            raise BadInputError(f"bq/bk: head dim 256 runs 64 x 32 tiles (O takes 128 registers a thread), "
                                f"got {self.bq} x {self.bk}")
        if 64 < dp <= 128 and self.bk > (64 if self.warp_rows == 16 else 32):
            raise BadInputError(f"bk: head dim {d} takes at most {64 if self.warp_rows == 16 else 32} keys a tile at "
                                f"{self.warp_rows} rows a warp (S and O beside Q spill), got {self.bk}")
        if 128 < dp < 256 and self.bk > 64:
            raise BadInputError(f"bk: head dim {d} takes at most 64 keys a tile (O takes {d // 2} registers a "
                                f"thread), got {self.bk}")
        if self.warp_rows == 32 and (self.bq != 128 or dp > 128 or self.bk == 128):
            raise BadInputError("warp_rows: 32 rows a warp run 128-row blocks of head dim up to 128, bk <= 64")
        smem = self.smem_bytes(op.head_dim)
        if arch is not None and smem > arch.smem_optin:
            raise BadInputError(f"stages: {smem} B of shared memory exceeds {arch.name}'s {arch.smem_optin} B a block")

    def to_json(self) -> dict[str, Any]:
        return schedule_json(self, SCHEMA_VERSION)

    @staticmethod
    def from_json(d: dict[str, Any]) -> AttentionMmaSchedule:
        return read_schedule(AttentionMmaSchedule, d, SCHEMA_VERSION)

    def features(self, op: Any) -> dict[str, float]:
        """Warps and shared memory at ``op``'s head dim over the bq x bk tile (``tile_features``)."""
        return tile_features(op, self.warps, self.smem_bytes(op.head_dim), self.bm, self.bn)


def _sm_count(host: Any) -> int:
    gpus = getattr(getattr(host, "nvidia", None), "devices", None) or []
    return int(getattr(gpus[0], "sm_count", 0) or 132) if gpus else 132


def hero_schedule(op: Any, host: Any) -> AttentionMmaSchedule:
    """128 x 64 tiles with 2 stages (64 x 32 at head dim 256, 128 x 128 up to 64, 128 x 32 past 192, where
    64 keys would pass an A100's shared memory); 64-row blocks where 128-row ones would leave SMs idle (fewer
    blocks than SMs)."""
    dp = padded(op.head_dim)  # the head dim computed
    if dp == 256:
        return AttentionMmaSchedule(bq=64, bk=32, stages=2)
    bk = 128 if dp <= 64 else 64 if dp <= 192 else 32
    blocks = -(-op.seq_q // 128) * op.heads * op.batch
    return AttentionMmaSchedule(bq=128 if blocks >= _sm_count(host) else 64, bk=bk, stages=2)


def search_space(op: Any, hero: Any, arch: Any) -> list[AttentionMmaSchedule]:
    """Every tile size and stage count (validate drops what does not fit), then the natural order."""
    out = [AttentionMmaSchedule(bq=bq, bk=bk, stages=st, warp_rows=w) for w in WARP_ROWS for bq in BQS for bk in BKS
           for st in STAGES if w == 16 or bq == 128]
    return out + [dataclasses.replace(hero, order="natural")]


def check(op: Any, v: Any, schedule: Any, arch: Any) -> None:
    if not isinstance(schedule, AttentionMmaSchedule):
        raise BadInputError(f"schedule: {v.id} runs AttentionMmaSchedule, got {type(schedule).__name__}")
    if op.dtype.value not in DTYPES:
        raise UnsupportedError(f"{v.id} computes bf16 or fp16, not {op.dtype.value}", "use --backend cpu for fp32")
    if arch.cc < (8, 0):
        raise UnsupportedError(f"{v.id} needs sm_80 or later (mma.sync m16n8k16, cp.async), not {arch.name}")
    schedule.validate(op, arch)


def render(op: Any, s: AttentionMmaSchedule, arch: Any) -> tuple[Rendered, dict[str, float | int]]:
    """The kernel source (prelude, tensor helpers, kernel), its launch and its scalars."""
    dt = op.dtype.value
    name = f"tracea_attn_mma_{dt}_d{op.head_dim}_{s.name}"
    r = CudaRenderer()
    source = r.prelude() + r.tensor_prelude(dt) + kernel_source(name, s.bq, s.bk, op.head_dim, s.stages, s.warp_rows,
                                                                s.q_in_registers and op.head_dim <= 128)
    q_tiles = -(-op.seq_q // s.bq)
    smem = s.smem_bytes(op.head_dim)
    meta = {"name": name, "core": CORE, "tile": {"bq": s.bq, "bk": s.bk, "stages": s.stages, "warps": s.warps,
                                                     "warp_rows": s.warp_rows},
            "fragments": {"dtype_in": dt, "dtype_acc": "fp32", "mma": "m16n8k16"},
            "launch": {"grid": [q_tiles, op.heads, op.batch], "block": [s.threads, 1, 1], "dynamic_smem": smem},
            "order": s.order, "epilogue": []}
    rendered = Rendered(name, name, source, PARAMS, (q_tiles, op.heads, op.batch), (s.threads, 1, 1), smem, meta)
    return rendered, mask_scalars(op)


def plan_arrays(op: Any, bq: int, bk: int, order: str = "longest-first") -> tuple[np.ndarray, np.ndarray, int]:
    """(tile_ptr, tile_idx, tiles computed per (batch, head)) as the kernel reads them: ``tile_ptr`` is the
    CSR pointers followed by the launch order of the q tiles (blockIdx.x -> q tile)."""
    plan = tile_plan(op, bq, bk)
    order_arr = plan.order if order == "longest-first" else np.arange(plan.q_tiles, dtype=np.int32)
    ptr = np.concatenate([plan.ptr, order_arr]).astype(np.int32)
    idx = plan.idx if plan.idx.size else np.zeros(1, np.int32)
    return np.ascontiguousarray(ptr), np.ascontiguousarray(idx.astype(np.int32)), plan.computed


def _swz(r: int, ch: int, head_dim: int) -> int:
    """The kernel's ``tr_swz`` (attention_kernel.py): chunk ch of row r at chunk ch ^ (r & 7), or at ch of a
    padded row."""
    if not swizzled(head_dim):
        return r * row_bytes(head_dim) + (ch << 4)
    return r * head_dim * 2 + ((ch ^ (r & 7)) << 4)


def bank_accesses(s: AttentionMmaSchedule, head_dim: int) -> list[Any]:
    """The shared-memory accesses of one warp as the kernel issues them (ldmatrix of Q, of K, and of V
    transposed a K/V tile; the epilogue's O stores and 16-byte reads; lane addresses from the kernel's
    formulas), for the bank-conflict simulator (emitters/bank_sim.py)."""
    from ..bank_access import Access

    wm, lanes = s.warp_rows // 16, range(32)
    k_base, v_base = s.bq * row_bytes(head_dim), (s.bq + s.stages * s.bk) * row_bytes(head_dim)
    out = []
    for kk in range(padded(head_dim) // 16):
        q = [_swz(16 + (x & 7) + ((x >> 3) & 1) * 8, kk * 2 + (x >> 4), head_dim) for x in lanes]
        out.append(Access("ldmatrix.x4", 16, tuple(q), wm if not s.q_in_registers else 1, f"Q k-step {kk}"))
        for j in range(s.bk // 16):
            k = [k_base + _swz(j * 16 + (x & 7) + (x >> 4) * 8, kk * 2 + ((x >> 3) & 1), head_dim) for x in lanes]
            out.append(Access("ldmatrix.x4", 16, tuple(k), 1, f"K k-step {kk} keys {16 * j}"))
    for kk in range(s.bk // 16):
        for t in range(padded(head_dim) // 16):
            v = [v_base + _swz(kk * 16 + (x & 7) + ((x >> 3) & 1) * 8, t * 2 + (x >> 4), head_dim) for x in lanes]
            out.append(Access("ldmatrix.x4", 16, tuple(v), 1, f"V keys {16 * kk} d {16 * t} (trans)"))
    for t in range(head_dim // 8):  # the epilogue: O into the warp's Q rows, then 16-byte rows out
        o = [_swz(16 + (x >> 2), t, head_dim) + (x & 3) * 4 for x in lanes]
        out.append(Access("st", 4, tuple(o), 2 * wm, f"O d {8 * t}"))
    chunks = head_dim // 8
    for i in range(-(-16 * chunks // 32)):
        o = [_swz(16 + (x + 32 * i) // chunks, (x + 32 * i) % chunks, head_dim) if x + 32 * i < 16 * chunks else None
             for x in lanes]  # an odd number of 16-byte chunks a row: the last step's upper lanes idle
        out.append(Access("ld", 16, tuple(o), wm, f"O out {i}"))
    return out
