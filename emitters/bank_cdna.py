"""The AMD CDNA LDS model of the bank-conflict simulator (``model="cdna"``): which lanes of a 64-lane
wavefront's ``ds_read``/``ds_write`` meet in one LDS cycle. ``bank_sim.simulate`` counts them with the
same rules as its NVIDIA model: 32 banks of 4 bytes; in one cycle each bank serves one dword, to any number
of lanes; a phase (lane group) takes as many cycles as its busiest bank has distinct dwords; the instruction
takes the sum over its phases; ``ideal`` is the number of phases with an active lane.

**From documentation, not measured by this project** (it has no AMD GPU). The phases are those published
for CDNA3 (MI300X, gfx942), which has 32 banks x 4 B and 64 KiB of LDS per CU:

- ``ds_read_b32``/``ds_write_b32`` (and the 1- and 2-byte forms): lanes 0-31, then 32-63. nod-ai
  (amd-shark-ai) ``docs/empirical-lds/cdna3info.md`` measured this on an MI300X (latency and rocprof's
  ``SQ_LDS_BANK_CONFLICT``); AMD's OpenCL optimisation guide says the same of GCN ("threads 0 through 31
  are checked for conflicts as are threads 32 through 63"); a ROCm hipBLASLt maintainer (ROCm/hipBLASLt
  PR 1180): "ds_store_b32 operations are issued by 32 threads at the same cycle".
- ``ds_read_b64``: four phases of 16 consecutive lanes (the same nod-ai MI300X measurements, and its
  AMDGPU kernel optimisation guide ``docs/amdgpu_kernel_optimization_guide.md``). ``ds_write_b64``: no
  CDNA3 source was found; HipKittens measured 16-lane consecutive phases for it on a CDNA4 MI355X
  (``analysis/paper_experiments/phases/ds_write_b64``), whose writes still behave as 32 banks (ROCm
  rocRoller ``LDSBankModel.cpp``); assumed the same here.
- ``ds_read_b128``: eight phases of 8 lanes taken as two runs of four, {0-3, 20-23}, {32-35, 52-55},
  {4-7, 16-19}, ... (table below). Three sources agree: nod-ai's MI300X measurements, AMD's Triton
  change for it (triton-lang/triton PR 11365, "DS_READ_B128 instruction has swizzled thread grouping"),
  and the lane groups of a pyhip MI300 probe. Sources that give eight runs of 8 consecutive lanes for
  reads generalise the write rule; they are not used.
- ``ds_write_b128``: eight phases of 8 consecutive lanes (AMD Composable Kernel docs,
  ``conceptual/ck_tile/hardware/lds_bank_conflicts``; the nod-ai guide).

Sharing: lanes reading the same dword in a phase take it once (broadcast: ROCm Compute Profiler's LDS
model, after the GCN crash course slide 41). Writes of one dword by several lanes are counted once too: AMD
defines a bank conflict as lanes touching *different* addresses of one bank (same source; the last writer
wins). Bytes and half-words of one dword count as that dword (the model is dword-granular); no source
covers sub-dword accesses, and that choice is an assumption. CDNA2 (MI200, gfx90a) has the same LDS (32
banks x 4 B, 128 B/clock, 64 KiB); its wide phases are not published and are assumed to be CDNA3's. Not
modelled: CDNA4 (MI350, gfx950: 64 banks and other read phases), ``ds_read_b96``, ``ds_read2``/``ds_write2``
(two addresses per lane), the transposing ``ds_read_*_tr``, the port bandwidth (16 lanes a clock per
SIMD pair; a cycle model such as rocRoller's adds it), atomics.

The phase counts reproduce nod-ai's published MI300X conflict counts for strided ``ds_read_b32/b64/b128``
(``tests/emitters/test_bank_sim_amd.py``): rocprof's ``SQ_LDS_BANK_CONFLICT`` is this model's ``cycles - ideal``.
"""

from __future__ import annotations

import numpy as np

from .bank_access import OPS, WAVEFRONT


def _runs(*starts_and_lengths: tuple[int, int]) -> tuple[int, ...]:
    return tuple(lane for start, n in starts_and_lengths for lane in range(start, start + n))


def _consecutive(size: int) -> tuple[tuple[int, ...], ...]:
    return tuple(_runs((s, size)) for s in range(0, WAVEFRONT, size))


# (op, bytes per lane) -> the lanes of each phase, in the order the LDS serves them. The one place the CDNA
# lane grouping lives; 1- and 2-byte accesses are served as 4-byte ones.
PHASES: dict[tuple[str, int], tuple[tuple[int, ...], ...]] = {
    ("ld", 4): _consecutive(32),
    ("st", 4): _consecutive(32),
    ("ld", 8): _consecutive(16),
    ("st", 8): _consecutive(16),  # assumed: measured on CDNA4 only (see above)
    ("ld", 16): (_runs((0, 4), (20, 4)), _runs((32, 4), (52, 4)), _runs((4, 4), (16, 4)), _runs((36, 4), (48, 4)),
                 _runs((8, 4), (28, 4)), _runs((40, 4), (60, 4)), _runs((12, 4), (24, 4)), _runs((44, 4), (56, 4))),
    ("st", 16): _consecutive(8),
}
WIDTHS = (1, 2, 4, 8, 16)


def _table() -> np.ndarray:
    """[op code (ld 0, st 1), log2(bytes)] -> the phase of each of the 64 lanes."""
    out = np.zeros((2, len(WIDTHS), WAVEFRONT), dtype=np.uint32)
    for (op, nbytes), phases in PHASES.items():
        for i, lanes in enumerate(phases):
            out[OPS[op][0], int(np.log2(nbytes)), list(lanes)] = i
    for w in (1, 2):  # sub-dword accesses go as dwords
        out[:, int(np.log2(w))] = out[:, 2]
    return out


_PHASE_OF_LANE = _table()


def phase_of_lane(op: np.ndarray, width: np.ndarray) -> np.ndarray:
    """Per instruction (op codes of ``ld``/``st``, bytes per lane): the phase of each lane, (n, 64) uint32."""
    return _PHASE_OF_LANE[op.astype(np.int64), np.log2(width.astype(np.int32)).astype(np.int64)]


def lanes_per_phase(width: np.ndarray) -> np.ndarray:
    return np.where(width <= 4, 32, np.where(width == 8, 16, 8)).astype(np.int32)
