"""The HIP MFMA GEMM's LDS accesses (emitters/hip/gemm.py), scored by the bank simulator's CDNA model
(emitters/bank_cdna.py: 32 banks x 4 B, 64-lane wavefronts; rules from AMD's documentation, not measured).

Per workgroup and k tile the kernel issues, in each wavefront (``wm = wave / waves_n``, ``wn = wave %
waves_n``, ``lane`` 0-63, ``tid = 64 wave + lane``), with ``LD = bk + pad`` and elements of ``E`` bytes:

- **fragment reads**, for each k step ``ks`` of the MFMA and each of the wavefront's 32-row tiles ``i`` (A)
  or ``j`` (B): lane ``lane`` reads its ``per_lane`` consecutive k of row ``a_row(lane)`` at k ``ks +
  a_k(lane, 0)`` (emitters/hip/mfma.py's placements, the same expressions the kernel pastes in), from
  ``As[(wm * 32 tm + 32 i + row) * LD + k]`` and ``Bs[(wn * 32 tn + 32 j + row) * LD + k]``. The kernel
  reads a lane's whole fragment at once (one ``ds_read_b64`` in 16 bits, ``ds_read_b32`` in fp32);
  ``fragment_vector=False`` scores the element-by-element reads a compiler might issue instead.
- **staging stores**, for each of the thread's ``a_per`` (``b_per``) elements ``e`` (A: each 8-byte run of
  them, where gemm.a_staging says the kernel stores 8 bytes at a time): ``f = tid * a_per + e``,
  ``As[(f / bk) * LD + f % bk]``; ``f = e * threads + tid``, ``Bs[(f % bn) * LD + f / bn]`` (B transposed),
  one ``ds_write`` of ``E`` bytes each, as written.

The array bases and the second buffer shift every lane's address alike by a multiple of 4 bytes, which
moves no lane to another bank relative to the others, so each array is scored from offset 0.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np

from tracea.doctor.errors import BadInputError
from tracea.kernels import DType

from ..bank_access import WAVEFRONT, AccessBatch
from ..bank_sim import simulate

KINDS = ("A fragment read", "B fragment read", "A staging store", "B staging store")
READS = KINDS[:2]


def _place(expr: str, **names: Any) -> np.ndarray:
    """A placement expression of mfma.py (``//``, ``%``, ``*``, ``+`` on non-negative ints) over arrays."""
    return np.asarray(eval(expr, {"__builtins__": {}}, names), dtype=np.int64)  # noqa: S307 (our own expressions)


def _batch(rows: list[np.ndarray], nbytes: int, name: str) -> AccessBatch:
    return AccessBatch.uniform("st" if "store" in name else "ld", nbytes, np.array(rows), names=[name] * len(rows),
                               model="cdna")


def _fragment_reads(s: Any, mf: Any, elem: int, vector: bool) -> dict[str, AccessBatch]:
    lane = np.arange(WAVEFRONT)
    row = _place(mf.a_row("lane"), lane=lane)
    per_element = [_place(mf.a_k("lane", "e"), lane=lane, e=e) for e in range(mf.per_lane)]
    ks_of = per_element[:1] if vector else per_element
    ld = s.bk + s.pad
    tm, tn = s.bm // s.waves_m // 32, s.bn // s.waves_n // 32
    out = {}
    for name, tiles, rows_per_wave, wave_index in (("A fragment read", tm, 32 * tm, lambda w: w // s.waves_n),
                                                   ("B fragment read", tn, 32 * tn, lambda w: w % s.waves_n)):
        rows = [elem * ((wave_index(w) * rows_per_wave + 32 * t + row) * ld + ks + k)
                for w in range(s.waves) for t in range(tiles) for ks in range(0, s.bk, mf.k) for k in ks_of]
        out[name] = _batch(rows, elem * (mf.per_lane if vector else 1), name)
    return out


def _staging_stores(s: Any, elem: int) -> dict[str, AccessBatch]:
    from .gemm import a_staging

    ld = s.bk + s.pad
    a_per, b_per = s.bm * s.bk // s.threads, s.bn * s.bk // s.threads
    a_bytes = a_staging(s, elem)[1]  # 8-byte stores of a thread's consecutive k where the kernel issues them
    tids = [WAVEFRONT * w + np.arange(WAVEFRONT) for w in range(s.waves)]
    a = [elem * ((f // s.bk) * ld + f % s.bk) for tid in tids
         for f in (tid * a_per + e for e in range(0, a_per, a_bytes // elem))]
    b = [elem * ((f % s.bn) * ld + f // s.bn) for tid in tids for f in (e * s.threads + tid for e in range(b_per))]
    return {"A staging store": _batch(a, a_bytes, "A staging store"),
            "B staging store": _batch(b, elem, "B staging store")}


def gemm_lds_accesses(s: Any, dtype: str = "bf16", fragment_vector: bool = True) -> dict[str, AccessBatch]:
    """One k tile's LDS instructions of one workgroup of ``s`` (a HipGemmSchedule), by kind (``KINDS``), as
    CDNA wavefront instructions."""
    from .gemm import DTYPES, instruction

    if dtype not in DTYPES:
        raise BadInputError(f"dtype: the HIP MFMA GEMM takes {', '.join(DTYPES)}, not {dtype}")
    s.validate_dtype(dtype)
    elem = DType(dtype).itemsize
    return {**_fragment_reads(s, instruction(dtype), elem, fragment_vector), **_staging_stores(s, elem)}


def gemm_lds_report(s: Any, dtype: str = "bf16", fragment_vector: bool = True) -> dict[str, dict[str, Any]]:
    """Per kind: ``op`` (ds_read_bN / ds_write_bN), ``instructions`` per k tile, the CDNA model's ``cycles``,
    ``ideal``, ``conflicts`` (cycles - ideal) and ``conflict_degree`` (the worst bank's words in a phase)."""
    out = {}
    for kind, batch in gemm_lds_accesses(s, dtype, fragment_vector).items():
        t = simulate(batch).totals()
        op = f"ds_{'write' if 'store' in kind else 'read'}_b{8 * int(batch.width[0])}"
        out[kind] = {"op": op, "instructions": t["instructions"], "cycles": t["wavefronts"], "ideal": t["ideal"],
                     "conflicts": t["conflicts"], "conflict_degree": t["max_conflict_degree"]}
    return out


def conflict_free_pads(s: Any, pads: Iterable[int] = range(0, 65, 4), dtype: str = "bf16",
                       kinds: Iterable[str] = READS, fragment_vector: bool = True) -> list[int]:
    """The ``pads`` (that the schedule accepts) with which ``s``'s accesses of ``kinds`` do not conflict."""
    from ..bank_search import conflict_free_pads as free

    kinds = tuple(kinds)
    unknown = set(kinds) - set(KINDS)
    if unknown:
        raise BadInputError(f"unknown access kind(s) {', '.join(sorted(unknown))}", f"use {', '.join(KINDS)}")

    def conflicts(t: Any) -> int:  # a pad the schedule refuses (not a multiple of 4, past 64 KiB of LDS) raises
        report = gemm_lds_report(t, dtype, fragment_vector)
        return sum(report[k]["conflicts"] for k in kinds)

    return free(s, pads, conflicts)
