"""The Metal GEMM's threadgroup-memory accesses (emitters/metal/gemm.py), scored by Tracea's bank simulator
(emitters/bank_sim.py) under an ASSUMED Apple model.

**The model is an assumption.** Apple publishes no bank structure for threadgroup memory, and no public
measurement was found: Philip Turner's metal-benchmarks, the most detailed public study of the M1/M2 GPU,
lists the Apple 7 and 8 families' shared-memory bank size and bank count as "TBD" (README.md, "On-Chip
Memory", github.com/philipturner/metal-benchmarks at dc2adc6, 2024-09) and notes that Apple keeps
threadgroup-memory bandwidth low. So the simulator's ``nvidia`` model stands in: 32 banks of 4 bytes, a
32-lane simdgroup served as an NVIDIA warp is (accesses of up to 4 bytes a lane in one group, the whole
simdgroup; 8-byte accesses in half-simdgroups; lanes reading one word share it). A Mac's profiler (Xcode's
threadgroup-memory counters) is what would confirm or replace it.

**How ``simdgroup_load`` touches threadgroup memory is undocumented too.** It is modelled from the
fragment's element placement (gemm.py's docstring: MLX's ``thread_elements`` layout): lane ``l`` loads its
two elements, row ``(q & 4) + (l / 2) % 4`` and columns ``(q & 2) * 2 + (l % 2) * 2`` and ``+ 1`` (``q = l /
4``), as one access of both (8 bytes in float, 4 in half: a lane's pair is adjacent and aligned, since rows
are padded by an even count). Per workgroup and k tile the kernel issues, in simdgroup ``g`` (``sm = g /
wn``, ``sn = g % wn``), with ``E`` the staged element's bytes and ``tm x tn`` its fragments:

- **A fragment loads**, for each 8-wide k step ``kk`` and fragment row ``i``: ``As[(8 tm sm + 8 i + row) *
  lda + kk + col]``; **B fragment loads**, for each ``kk`` and fragment column ``j``: ``Bs[(kk + row) * ldb +
  8 tn sn + 8 j + col]``.
- **staging stores**, one element a lane: element ``f = e * threads + tid`` (``f`` below the tile's size) of
  the tile's walk at ``(f / cols, f % cols)``, or ``(f % rows, f / rows)`` where consecutive threads go down
  the rows (A column-major, B column-major, the conv's KRSC filter), into ``As[r * lda + c]`` or
  ``Bs[r * ldb + c]``.

Both arrays are scored from offset 0: a base that is a multiple of 4 bytes moves every lane alike.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np

from tracea.doctor.errors import BadInputError

from ..bank_access import WARP, AccessBatch
from ..bank_sim import simulate
from . import gemm as g

KINDS = ("A fragment load", "B fragment load", "A staging store", "B staging store")
READS = KINDS[:2]
MODEL = "nvidia"  # the assumed Apple model (the docstring says why)


def fragment_place(lane: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Row and first column of each lane's element pair in an 8x8 fragment (MLX's placement)."""
    q = lane // 4
    return (q & 4) + (lane // 2) % 4, (q & 2) * 2 + (lane % 2) * 2


def _batch(rows: list[np.ndarray], nbytes: int, name: str) -> AccessBatch:
    return AccessBatch.uniform("st" if "store" in name else "ld", nbytes, np.array(rows), names=[name] * len(rows),
                               model=MODEL)


def _fragment_loads(s: g.MetalGemmSchedule, elem: int) -> dict[str, AccessBatch]:
    row, col = fragment_place(np.arange(WARP))
    tm, tn = s.fragments
    a, b = [], []
    for sg in range(s.simdgroups):
        sm, sn = sg // s.wn, sg % s.wn
        for kk in range(0, s.bk, 8):
            a += [elem * ((8 * tm * sm + 8 * i + row) * s.lda + kk + col) for i in range(tm)]
            b += [elem * ((kk + row) * s.ldb + 8 * tn * sn + 8 * j + col) for j in range(tn)]
    return {"A fragment load": _batch(a, 2 * elem, "A fragment load"),
            "B fragment load": _batch(b, 2 * elem, "B fragment load")}


def _stores(s: g.MetalGemmSchedule, rows: int, cols: int, ld: int, down: bool, elem: int) -> list[np.ndarray]:
    out = []
    for sg in range(s.simdgroups):
        tid = WARP * sg + np.arange(WARP)
        for e in range(-(-rows * cols // s.threads)):
            f = e * s.threads + tid
            r, c = (f % rows, f // rows) if down else (f // cols, f % cols)
            addr = np.where(f < rows * cols, elem * (r * ld + c), -1)
            if (addr >= 0).any():
                out.append(addr)
    return out


def tg_accesses(s: g.MetalGemmSchedule, dtype: str = "fp16", a_down: bool = False,
                b_down: bool = False) -> dict[str, AccessBatch]:
    """One k tile's threadgroup-memory instructions of one threadgroup of ``s``, by kind (``KINDS``), as
    simdgroup instructions. ``a_down``/``b_down``: the operand's staging walk goes down its tile's rows
    (``staging_walks``)."""
    if dtype not in g.DTYPES:
        raise BadInputError(f"dtype: the Metal simdgroup GEMM takes {', '.join(g.DTYPES)}, not {dtype}")
    s.validate_dtype(dtype)
    elem = g.staged_bytes(dtype)
    return {**_fragment_loads(s, elem),
            "A staging store": _batch(_stores(s, s.bm, s.bk, s.lda, a_down, elem), elem, "A staging store"),
            "B staging store": _batch(_stores(s, s.bk, s.bn, s.ldb, b_down, elem), elem, "B staging store")}


def staging_walks(op: Any) -> tuple[bool, bool]:
    """Whether A's and B's staging walks go down their tiles' rows for ``op`` (gemm.py's ``Problem``)."""
    if op.kind == "conv2d":
        return False, True  # NHWC rows of channels (k); the KRSC filter's k contiguous per output channel
    return op.layout_a == "col", op.layout_b == "col"


def tg_report(s: g.MetalGemmSchedule, dtype: str = "fp16", a_down: bool = False,
              b_down: bool = False) -> dict[str, dict[str, Any]]:
    """Per kind: ``bytes`` a lane, ``instructions`` per k tile, the model's ``cycles`` (wavefronts),
    ``ideal``, ``conflicts`` (cycles - ideal) and ``conflict_degree`` (the worst bank's words in a group)."""
    out = {}
    for kind, batch in tg_accesses(s, dtype, a_down, b_down).items():
        t = simulate(batch).totals()
        out[kind] = {"bytes": int(batch.width[0]), "instructions": t["instructions"], "cycles": t["wavefronts"],
                     "ideal": t["ideal"], "conflicts": t["conflicts"], "conflict_degree": t["max_conflict_degree"]}
    return out


def conflict_free_pads(s: g.MetalGemmSchedule, pads: Iterable[int] = g.PADS, dtype: str = "fp16",
                       kinds: Iterable[str] = READS, a_down: bool = False, b_down: bool = False) -> list[int]:
    """The ``pads`` (that the schedule accepts) with which ``s``'s accesses of ``kinds`` do not conflict."""
    from ..bank_search import conflict_free_pads as free

    kinds = tuple(kinds)
    unknown = set(kinds) - set(KINDS)
    if unknown:
        raise BadInputError(f"unknown access kind(s) {', '.join(sorted(unknown))}", f"use {', '.join(KINDS)}")

    def conflicts(t: g.MetalGemmSchedule) -> int:  # a pad the schedule refuses (odd, past 32 KiB) raises
        report = tg_report(t, dtype, a_down, b_down)
        return sum(report[k]["conflicts"] for k in kinds)

    return free(s, pads, conflicts)


def bank_conflict_drop(op: Any, variant: Any, schedule: Any) -> str | None:
    """The tuner's pruning rule (tuner/space.py): drop a GEMM or conv schedule whose fragment loads conflict
    under the assumed Apple bank model when another pad of the search space makes the same tile
    conflict-free; None to keep it."""
    if not isinstance(schedule, g.MetalGemmSchedule):
        return None
    from ..bank_search import pad_drop

    dtype = op.dtype.value

    def conflicts(t: g.MetalGemmSchedule) -> int:
        report = tg_report(t, dtype)
        return sum(report[k]["conflicts"] for k in READS)

    return pad_drop(op, schedule, g.PADS, conflicts, "its fragment loads (assumed Apple bank model)")
