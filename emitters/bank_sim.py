"""Shared-memory bank-conflict simulator (NVIDIA sm_70+; the rules below were measured on an H100).

Shared memory has 32 banks of 4 bytes. A warp's instruction is served in *wavefronts*; in one wavefront
each bank delivers one 32-bit word, to any number of lanes. The simulator splits the warp's active lanes
into processing groups and, per group, counts the distinct words each bank must deliver; a group takes
as many wavefronts as its busiest bank, and the instruction takes the sum over its groups.

Rules (each measured with Nsight Compute on an H100 over 735 patterns; ``tests/fixtures/bank_patterns/``
holds the patterns and counts, ``docs/bank-sim.md`` the method):

1. ``ld``/``st`` of 1, 2 or 4 bytes: the whole warp is one group. Lanes reading or writing the same
   32-bit word share it (broadcast; byte and half-word lanes of one word too).
2. ``st`` of 8 bytes: two groups, lanes 0-15 and 16-31. ``st`` of 16 bytes: four groups of 8 lanes.
   Stores never merge groups, even when every lane writes the same address.
3. ``ld`` of 8 or 16 bytes: like the stores (half-warps, quarter-warps), except that when every lane
   pair (2k, 2k+1) reads a single address (both lanes the same, or one of them inactive), the groups
   double: 8-byte loads become one whole-warp group, 16-byte loads two half-warp groups. So a warp-wide
   broadcast costs 1 wavefront (8 B) or 2 (16 B), not 2 or 4; lanes i and i+16 sharing addresses do
   not trigger it. Not modelled: a partial warp (at most 13 active lanes were seen) with a split pair
   sometimes gets the larger groups anyway (35 of 80 such measured patterns; 0 of 101 with more active
   lanes); what selects it was not found. There the simulator's count is an upper bound, and
   ``simulate(..., merge_wide_loads=True)`` gives the count the hardware then takes.
4. ``ldmatrix``/``stmatrix`` ``.x1/.x2/.x4``: one group per 8x8 matrix (lanes 0-7, 8-15, ...; each lane
   a 16-byte row address); matrices never merge, even when identical.
5. ``cp.async`` (``.ca``, SASS LDGSTS.E) of 4, 8 or 16 bytes: whole warp / half-warps / quarter-warps,
   and lanes never share a word: each lane's write to a bank is its own access, so 32 lanes copying to
   one address take 32 wavefronts. Not modelled: 16-byte ``.cg`` copies (LDGSTS.BYPASS, which skip L1)
   fill shared memory on another path whose counts follow other rules (e.g. a warp writing one address
   takes 1 wavefront, a 144-byte stride 32); ``docs/bank-sim.md`` lists what was measured.

``ideal`` is the number of groups with an active lane, and ``conflicts = wavefronts - ideal``: on every
measured pattern that the rules cover this equals Nsight's bank-conflict counter per instruction
(``l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_{ld,st}``, and the SASS-attributed STSM/LDGSTS
counters). Inactive lanes do nothing.

A second model, ``cdna`` (AMD CDNA2/CDNA3 LDS: 32 banks x 4 B, 64-lane wavefronts, ``ld``/``st`` being
``ds_read``/``ds_write``), counts the same way over other lane groups (phases); its rules, sources and
limits are in emitters/bank_cdna.py. It is taken from AMD's and others' documentation, not measured here.
A batch's ``model`` selects it; ``wavefronts`` then counts LDS cycles.

Vectorised: each instruction's lanes become 32-bit sort keys (group, bank group, 128-byte row), one
NumPy sort per chunk finds the distinct words, and cumulative sums count them per bank.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from tracea.doctor.errors import BadInputError

from .bank_access import INACTIVE, OP_NAMES, OPS, Access, AccessBatch
from .bank_cdna import lanes_per_phase, phase_of_lane

MAX_ADDRESS = 1 << 24  # a shared-memory offset; an SM has at most 228 KiB, a CDNA CU 64 KiB of LDS
BANKS = 32
_CODE = {name: OPS[name][0] for name in OPS}
_LD, _ST, _CPA = _CODE["ld"], _CODE["st"], _CODE["cp.async"]
_SENTINEL = np.uint32(1 << 31)


@dataclass(frozen=True)
class InstructionResult:
    """One instruction's score. ``colliding_banks``: banks that must deliver more than one word."""

    index: int
    op: str
    bytes_per_lane: int
    wavefronts: int
    ideal: int
    conflict_degree: int
    colliding_banks: tuple[int, ...]
    group_lanes: int
    count: int = 1
    name: str = ""

    @property
    def conflicts(self) -> int:
        return self.wavefronts - self.ideal

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "index": self.index, "op": self.op, "bytes_per_lane": self.bytes_per_lane,
            "wavefronts": self.wavefronts, "ideal": self.ideal, "conflicts": self.conflicts,
            "conflict_degree": self.conflict_degree, "colliding_banks": list(self.colliding_banks),
            "group_lanes": self.group_lanes, "count": self.count,
        }
        if self.name:
            doc["name"] = self.name
        return doc


@dataclass(frozen=True, eq=False)
class SimResult:
    """Per-instruction arrays: wavefronts, ideal, degree (max words one bank serves in a group),
    bank_mask (bit b set: bank b collides), group_lanes; plus the batch's counts and names."""

    wavefronts: np.ndarray
    ideal: np.ndarray
    degree: np.ndarray
    bank_mask: np.ndarray
    group_lanes: np.ndarray
    batch: AccessBatch

    def __len__(self) -> int:
        return int(self.wavefronts.shape[0])

    @property
    def conflicts(self) -> np.ndarray:
        return self.wavefronts - self.ideal

    def instruction(self, i: int) -> InstructionResult:
        mask = int(self.bank_mask[i])
        return InstructionResult(
            index=i, op=self.batch.op_name(i), bytes_per_lane=int(self.batch.width[i]),
            wavefronts=int(self.wavefronts[i]), ideal=int(self.ideal[i]), conflict_degree=int(self.degree[i]),
            colliding_banks=tuple(b for b in range(BANKS) if mask >> b & 1), group_lanes=int(self.group_lanes[i]),
            count=int(self.batch.count[i]), name=self.batch.names[i] if self.batch.names else "",
        )

    def totals(self) -> dict[str, Any]:
        """Sums weighted by each instruction's ``count`` (a tile copy, or a main loop's trips)."""
        c = self.batch.count
        wf = int((self.wavefronts * c).sum())
        ideal = int((self.ideal * c).sum())
        return {
            "instructions": int(c.sum()), "wavefronts": wf, "ideal": ideal, "conflicts": wf - ideal,
            "conflicted_instructions": int(c[self.wavefronts > self.ideal].sum()),
            "max_conflict_degree": int(self.degree.max(initial=0)),
            "efficiency": round(ideal / wf, 4) if wf else 1.0,
        }

    def to_json(self, limit: int | None = None) -> dict[str, Any]:
        n = len(self) if limit is None else min(limit, len(self))
        return {"schema_version": 1, **({"model": self.batch.model} if self.batch.model != "nvidia" else {}),
                "totals": self.totals(), "instructions": [self.instruction(i).to_json() for i in range(n)],
                **({"instructions_omitted": len(self) - n} if n < len(self) else {})}


def _params(batch: AccessBatch, merge_wide_loads: bool | None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per instruction: bytes per bank-group unit, lanes per processing group, words shared or not."""
    op, width = batch.op, batch.width.astype(np.int32)
    unit = np.maximum(width, 4)
    if batch.model == "cdna":
        return unit, lanes_per_phase(width), np.ones(len(batch), dtype=bool)
    group = np.where(width <= 4, batch.lanes, np.where(width == 8, 16, 8)).astype(np.int32)
    group[op >= _CODE["ldmatrix.x1"]] = 8
    wide_loads = (op == _LD) & (width >= 8)
    if merge_wide_loads is None:
        # Rule 3: wide loads whose lane pairs each read one address are served in groups twice as large.
        pairs = batch.addr[wide_loads].reshape(-1, 16, 2)
        lo, hi = pairs[:, :, 0], pairs[:, :, 1]
        pair_ok = ((lo == hi) | (lo == INACTIVE) | (hi == INACTIVE)).all(axis=1)
        widen = np.zeros_like(wide_loads)
        widen[wide_loads] = pair_ok
    else:
        widen = wide_loads & merge_wide_loads
    group[widen] *= 2
    shares = op != _CPA
    return unit, group, shares


def _scan(x: np.ndarray, op: np.ufunc) -> np.ndarray:
    """Inclusive scan down axis 0, a row at a time: for 32 rows of many columns this is 20-50x faster
    than ``op.accumulate(axis=0)``, which walks each column separately."""
    y = np.array(x, copy=True)
    for i in range(1, y.shape[0]):
        op(y[i], y[i - 1], out=y[i])
    return y


def _lane_groups(batch: AccessBatch, group: np.ndarray, rows: slice) -> np.ndarray:
    """The processing group of each lane of instructions ``rows``, (n, lanes) uint32: runs of ``group``
    consecutive lanes (NVIDIA), or the phase table of emitters/bank_cdna.py."""
    if batch.model == "cdna":
        return phase_of_lane(batch.op[rows], batch.width[rows])
    lane = np.arange(batch.lanes, dtype=np.uint32)
    return lane[None, :] >> np.log2(group[rows]).astype(np.uint32)[:, None]


def _simulate_chunk(addr: np.ndarray, unit: np.ndarray, gid: np.ndarray, shares: np.ndarray):
    a = addr.astype(np.uint32)  # offsets are < 2^24 and INACTIVE (-1) becomes 0xFFFFFFFF
    log_unit = np.log2(unit).astype(np.uint32)[:, None]
    # key bits: 0-16 the 128-byte row, 20-24 the bank group of the access unit, 25-28 the lane's group,
    # 31 inactive (so inactive lanes sort last)
    key = a >> np.uint32(7)
    slot = a >> log_unit
    slot &= (np.uint32(128) >> log_unit) - np.uint32(1)
    slot <<= np.uint32(20)
    key |= slot
    key |= gid << np.uint32(25)
    key |= (a >> np.uint32(31)) << np.uint32(31)
    key.sort(axis=1)
    # From here on lanes run down axis 0: NumPy's scans (cumsum, maximum.accumulate) are fast along it.
    key = np.ascontiguousarray(key.T)
    valid = key < _SENTINEL
    head = np.ones_like(valid)
    head[1:] = key[1:] != key[:-1]
    # A word counts once where lanes share it; for cp.async every lane's write counts.
    counted = (valid & (head | ~shares[None, :])).astype(np.int16)
    seg = key >> np.uint32(20)  # (group, slot)
    seg_start = np.ones_like(valid)
    seg_start[1:] = seg[1:] != seg[:-1]
    cs = _scan(counted, np.add)
    base = _scan((cs - counted) * seg_start, np.maximum)
    per_bank = (cs - base) * valid  # distinct words so far in this (group, bank group)
    # Per group, the busiest bank: a running max that restarts at each group (groups ascend in the sort,
    # so adding 128 * group makes the running max reset; a group counts at most 64 words), read at each
    # group's last element.
    g = (key >> np.uint32(25)).astype(np.int16) << 7
    running = _scan(per_bank + g, np.maximum) - g
    tail = np.ones_like(valid)
    tail[:-1] = g[1:] != g[:-1]
    tail &= valid
    wavefronts = (running * tail).sum(axis=0, dtype=np.int64)
    ideal = tail.sum(axis=0, dtype=np.int64)
    degree = per_bank.max(axis=0).astype(np.int64)
    # Colliding banks: bank groups whose count reaches 2, widened to the unit's banks.
    banks_per_unit = (unit // 4).astype(np.uint32)[None, :]
    unit_bits = (np.uint32(1) << banks_per_unit) - np.uint32(1)
    bits = (unit_bits << ((seg & np.uint32(0x1F)) * banks_per_unit)) * (per_bank >= 2)
    mask = np.bitwise_or.reduce(bits, axis=0)
    return wavefronts, ideal, degree, mask


def simulate(batch: AccessBatch, chunk: int = 8192, merge_wide_loads: bool | None = None) -> SimResult:
    """Score every instruction of ``batch`` under its model; see the module docstring for the rules.

    ``merge_wide_loads`` overrides rule 3 for 8/16-byte loads: True always uses the larger groups (the
    fewest wavefronts the hardware was seen to take, see rule 3's note), False never; None applies it.
    It is an NVIDIA rule: the cdna model has no such override.
    """
    n = len(batch)
    if batch.model != "nvidia" and merge_wide_loads is not None:
        raise BadInputError(f"merge_wide_loads is a rule of the NVIDIA model, not of {batch.model}")
    if n and (batch.addr.max() >= MAX_ADDRESS):
        raise BadInputError(f"an address is past {MAX_ADDRESS} bytes: shared-memory offsets are smaller "
                            + ("(a CDNA CU has 64 KiB of LDS)" if batch.model == "cdna" else "(an SM has at most 228 KiB)"))
    unit, group, shares = _params(batch, merge_wide_loads)
    out = [np.zeros(n, dtype=np.int64) for _ in range(3)] + [np.zeros(n, dtype=np.uint32)]
    for s in range(0, n, chunk):
        e = min(n, s + chunk)
        gid = _lane_groups(batch, group, slice(s, e))
        for arr, part in zip(out, _simulate_chunk(batch.addr[s:e], unit[s:e], gid, shares[s:e]), strict=True):
            arr[s:e] = part
    return SimResult(wavefronts=out[0], ideal=out[1], degree=out[2], bank_mask=out[3],
                     group_lanes=group.astype(np.int64), batch=batch)


def simulate_accesses(accesses: Sequence[Access]) -> SimResult:
    return simulate(AccessBatch.from_accesses(accesses))


def heatmap(result: SimResult, i: int) -> np.ndarray:
    """lanes x 32 banks for instruction ``i``: 0 where the lane does not touch the bank, else the
    wavefront (1, 2, ...) of its group in which that bank serves the lane's word."""
    b = result.batch
    addr, width = b.addr[i], int(b.width[i])
    groups = _lane_groups(b, result.group_lanes, slice(i, i + 1))[0]
    shares = OP_NAMES[int(b.op[i])] != "cp.async"
    grid = np.zeros((b.lanes, BANKS), dtype=np.int64)
    order: dict[tuple[int, int], list[tuple[int, int]]] = {}
    for lane in range(b.lanes):
        a = int(addr[lane])
        if a == INACTIVE:
            continue
        for w in range(max(1, width // 4)):
            word = a // 4 + w
            key = (int(groups[lane]), word % BANKS)
            seen = order.setdefault(key, [])
            ident = (word, -1) if shares else (word, lane)
            if ident not in seen:
                seen.append(ident)
            grid[lane, word % BANKS] = seen.index(ident) + 1
    return grid


def op_names() -> tuple[str, ...]:
    return OP_NAMES
