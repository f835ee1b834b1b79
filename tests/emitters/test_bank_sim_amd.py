"""The bank simulator's AMD CDNA model (emitters/bank_cdna.py): its phase table, the vectorised counts
against a plain-Python reading of the documented rules, hand-computed wavefronts, the MI300X conflict
counts nod-ai published, the CLI's ``--model cdna``, and the HIP GEMM's LDS layouts (emitters/hip/lds_banks.py).

Nothing here was measured by this project: the model and the published counts come from documentation."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from collections import defaultdict

import numpy as np
import pytest

from tracea.doctor.errors import BadInputError
from tracea.emitters.bank_access import INACTIVE, Access, AccessBatch, tile_sweep
from tracea.emitters.bank_cdna import PHASES
from tracea.emitters.bank_search import rank_swizzles, score
from tracea.emitters.bank_sim import heatmap, simulate
from tracea.emitters.layout import NoSwizzle, TileLayout, TmaSwizzle

LANES = 64


def wave(op: str, width: int, addrs) -> Access:
    return Access(op, width, tuple(None if a is None else int(a) for a in addrs), model="cdna")


def score_one(op: str, width: int, addrs) -> tuple[int, int, int]:
    r = simulate(AccessBatch.from_accesses([wave(op, width, addrs)])).instruction(0)
    return r.wavefronts, r.ideal, r.conflict_degree


# The phases as the sources list them, written out independently of emitters/bank_cdna.py.
B128_READ = [[*range(0, 4), *range(20, 24)], [*range(32, 36), *range(52, 56)], [*range(4, 8), *range(16, 20)],
             [*range(36, 40), *range(48, 52)], [*range(8, 12), *range(28, 32)], [*range(40, 44), *range(60, 64)],
             [*range(12, 16), *range(24, 28)], [*range(44, 48), *range(56, 60)]]


def reference_phase(op: str, width: int, lane: int) -> int:
    if width <= 4:
        return lane // 32
    if width == 8:
        return lane // 16
    if op == "st":
        return lane // 8
    return next(i for i, p in enumerate(B128_READ) if lane in p)


def reference(op: str, width: int, addrs) -> tuple[int, int, int, tuple[int, ...]]:
    """Per phase, the distinct dwords each bank serves (shared by lanes); cycles = sum of the busiest."""
    phases: dict[int, dict[int, set]] = defaultdict(lambda: defaultdict(set))
    for lane, a in enumerate(addrs):
        if a is None:
            continue
        for w in range(max(1, width // 4)):
            word = a // 4 + w
            phases[reference_phase(op, width, lane)][word % 32].add(word)
    cycles = sum(max(len(v) for v in banks.values()) for banks in phases.values())
    degree = max((len(v) for banks in phases.values() for v in banks.values()), default=0)
    colliding = {b for banks in phases.values() for b, v in banks.items() if len(v) > 1}
    return cycles, len(phases), degree, tuple(sorted(colliding))


def test_phase_table_partitions_the_wavefront_as_published():
    for (op, nbytes), phases in PHASES.items():
        assert sorted(lane for p in phases for lane in p) == list(range(LANES)), (op, nbytes)
        assert {len(p) for p in phases} == {128 // nbytes}  # 128 bytes a phase: the 32 banks once
    assert [list(p) for p in PHASES[("ld", 16)]] == B128_READ  # nod-ai's MI300X table, triton PR 11365
    assert [list(p) for p in PHASES[("st", 16)]] == [list(range(s, s + 8)) for s in range(0, 64, 8)]  # CK docs
    assert [list(p) for p in PHASES[("ld", 8)]] == [list(range(s, s + 16)) for s in range(0, 64, 16)]
    assert [list(p) for p in PHASES[("ld", 4)]] == [list(range(32)), list(range(32, 64))]


def test_vectorised_equals_reference_on_random_wavefronts():
    rng = np.random.default_rng(19)
    accesses = []
    for _ in range(3000):
        op, width = str(rng.choice(["ld", "st"])), int(rng.choice([1, 2, 4, 8, 16]))
        span = int(rng.choice([128, 256, 1024, 8192]))
        pool = rng.integers(0, span // width, int(rng.integers(1, 12)))
        slots = pool[rng.integers(0, len(pool), LANES)] if rng.random() < 0.4 else rng.integers(0, span // width, LANES)
        keep = rng.random(LANES) < float(rng.choice([1.0, 0.7, 0.2]))
        accesses.append(wave(op, width, [int(s) * width if k else None for s, k in zip(slots, keep, strict=True)]))
    res = simulate(AccessBatch.from_accesses(accesses), chunk=700)
    for i, a in enumerate(accesses):
        r = res.instruction(i)
        assert (r.wavefronts, r.ideal, r.conflict_degree, r.colliding_banks) == reference(
            a.op, a.bytes_per_lane, a.addresses), (i, a)


LANE = np.arange(LANES)
# b128 slots: 8 consecutive lanes cover all 32 banks, but each paired read phase ({0-3, 20-23}, ...) meets
# one 16-byte slot twice (in different rows)
PAIRED = 16 * ((LANE % 4) + 4 * (((LANE // 4) % 2) ^ ((LANE // 16) % 2))) + 128 * (LANE // 8)


@pytest.mark.parametrize("op, width, addrs, expected", [
    ("ld", 4, 4 * LANE, (2, 2, 1)),                        # stride-1 dwords: one cycle per half
    ("ld", 4, 8 * LANE, (4, 2, 2)),                        # stride-2 dwords: 2-way in each half
    ("st", 4, 8 * LANE, (4, 2, 2)),
    ("ld", 4, 128 * LANE, (64, 2, 32)),                    # one bank: 32 cycles a half
    ("ld", 4, np.zeros(LANES), (2, 2, 1)),                 # 64-lane broadcast: one dword per half
    ("ld", 8, np.zeros(LANES), (4, 4, 1)),
    ("ld", 16, np.zeros(LANES), (8, 8, 1)),
    ("st", 4, np.zeros(LANES), (2, 2, 1)),                 # one dword written by every lane: not a conflict
    ("ld", 4, 4 * (LANE % 32), (2, 2, 1)),                 # lanes i and i+32 share a dword across halves
    ("ld", 4, 128 * (LANE // 32), (2, 2, 1)),              # each half on one dword
    ("ld", 2, 2 * LANE, (2, 2, 1)),                        # half-words of one dword count as that dword
    ("ld", 1, LANE, (2, 2, 1)),
    ("ld", 8, 8 * LANE, (4, 4, 1)),                        # 16 lanes x 8 B = 128 B a phase
    ("ld", 8, 16 * LANE, (8, 4, 2)),
    ("ld", 16, 16 * LANE, (8, 8, 1)),
    ("st", 16, 16 * LANE, (8, 8, 1)),
    ("ld", 16, PAIRED, (16, 8, 2)),                        # the paired read phases conflict ...
    ("st", 16, PAIRED, (8, 8, 1)),                         # ... the consecutive write phases do not
    ("ld", 4, [0 if i == 0 else 128 if i == 31 else None if i < 32 else 128 for i in range(64)], (3, 2, 2)),
    ("ld", 4, [0 if i < 32 else None for i in range(64)], (1, 1, 1)),  # an idle half is not ideal
])
def test_hand_computed_wavefronts(op, width, addrs, expected):
    addrs = [None if a is None else int(a) for a in addrs]
    assert score_one(op, width, addrs) == expected


@pytest.mark.parametrize("op, lanes, conflict", [
    ("ld", (0, 20), True), ("ld", (0, 4), False), ("ld", (0, 32), False), ("ld", (5, 17), True),  # {0-3, 20-23} ...
    ("st", (0, 4), True), ("st", (0, 20), False), ("st", (5, 17), False),                          # {0-7}, {8-15} ...
])
def test_b128_two_lanes_on_one_bank(op, lanes, conflict):
    """Two active lanes on the same four banks in other rows conflict only in one phase."""
    addrs = [None] * LANES
    addrs[lanes[0]], addrs[lanes[1]] = 0, 128 * 5
    r = simulate(AccessBatch.from_accesses([wave(op, 16, addrs)])).instruction(0)
    assert (r.wavefronts, r.ideal, r.conflicts) == ((2, 1, 1) if conflict else (2, 2, 0))


# nod-ai/amd-shark-ai docs/empirical-lds/cdna3info.md: rocprof SQ_LDS_BANK_CONFLICT per 64-read block on an
# MI300X, lane i reading at i * stride (all 64 lanes); the model's cycles - ideal per read, times 64
PUBLISHED_MI300X = {
    4: {4: 0, 8: 128, 16: 384, 32: 896, 64: 1920, 128: 3968, 256: 3968, 512: 3968},
    8: {8: 0, 16: 256, 32: 768, 64: 1792, 128: 3840, 256: 3840, 512: 3840},
    16: {16: 0, 32: 512, 64: 1536, 128: 3584, 256: 3584, 512: 3584},
}


@pytest.mark.parametrize("width", sorted(PUBLISHED_MI300X))
def test_published_mi300x_strided_read_conflicts(width):
    for stride, per_block in PUBLISHED_MI300X[width].items():
        r = simulate(AccessBatch.from_accesses([wave("ld", width, stride * LANE)])).instruction(0)
        assert 64 * r.conflicts == per_block, (width, stride)


def test_a_wavefront_needs_64_lanes_and_ld_or_st():
    with pytest.raises(BadInputError, match="a wavefront needs 64"):
        wave("ld", 4, range(0, 128, 4))
    with pytest.raises(BadInputError, match="for the cdna model"):
        wave("cp.async", 16, [0] * 64)
    with pytest.raises(BadInputError, match="unknown bank model"):
        Access("ld", 4, (0,) * 32, model="rdna")
    with pytest.raises(BadInputError, match="one model"):
        AccessBatch.concat([AccessBatch.from_accesses([wave("ld", 4, [0] * 64)]),
                            AccessBatch.from_accesses([Access("ld", 4, (0,) * 32)])])
    with pytest.raises(BadInputError, match="NVIDIA model"):
        simulate(AccessBatch.from_accesses([wave("ld", 8, [0] * 64)]), merge_wide_loads=True)
    with pytest.raises(BadInputError, match="not an instruction of the cdna model"):
        tile_sweep(TileLayout(64, 64, 2), "ldmatrix.x4", "cdna")


def test_heatmap_has_a_row_per_lane_and_marks_each_phase():
    res = simulate(AccessBatch.from_accesses([wave("ld", 16, PAIRED)]))
    grid = heatmap(res, 0)
    assert grid.shape == (64, 32)
    assert grid.max() == 2 and (grid > 0).sum() == 64 * 4
    assert set(grid[20][grid[20] > 0]) != set(grid[0][grid[0] > 0])  # lanes 0 and 20 share a phase: one waits
    assert res.to_json()["model"] == "cdna" and "model" not in simulate(
        AccessBatch.from_accesses([Access("ld", 4, (0,) * 32)])).to_json()


def test_tile_sweeps_and_swizzles_under_cdna():
    plain = TileLayout(128, 64, 2, "row", 0, NoSwizzle())
    sweep = tile_sweep(plain, "ld.128.column", "cdna")
    assert sweep.lanes == 64 and len(sweep) == 16 and (sweep.addr != INACTIVE).all()
    assert score(plain, ["ld.128.column"], "cdna")["max_conflict_degree"] == 8
    swizzled = TileLayout(128, 64, 2, "row", 0, TmaSwizzle("128B"))
    assert score(swizzled, ["ld.128.column", "st.128.row"], "cdna")["conflicts"] == 0
    best = rank_swizzles(plain, ["ld.128.column", "st.128.row"], model="cdna")[0]
    assert best.conflict_free
    padded = TileLayout(64, 32, 2, "row", 4, NoSwizzle())   # 72-byte rows: 16 b64 lanes on distinct banks
    assert score(padded, ["ld.64.column"], "cdna")["conflicts"] == 0
    assert score(TileLayout(64, 32, 2), ["ld.64.column"], "cdna")["max_conflict_degree"] == 8
    with pytest.raises(BadInputError, match="not an instruction of the cdna model"):
        rank_swizzles(plain, ["cp.async.128.row"], model="cdna")


# --- the CLI ----------------------------------------------------------------------------------------------

def tracea(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tracea", *args], capture_output=True, text=True, timeout=120)


def test_cli_model_cdna_pattern_and_layout(tmp_path):
    path = tmp_path / "w.json"
    path.write_text(json.dumps({"instructions": [{"op": "ld", "bytes_per_lane": 4, "addresses": [8 * i for i in range(64)]},
                                                 {"op": "st", "bytes_per_lane": 16, "addresses": PAIRED.tolist()}]}))
    got = json.loads(tracea("bank-sim", "--model", "cdna", "--pattern", str(path), "--json").stdout)
    assert got["model"] == "cdna" and [i["wavefronts"] for i in got["instructions"]] == [4, 8]
    assert [i["group_lanes"] for i in got["instructions"]] == [32, 8]
    text = tracea("bank-sim", "--model", "cdna", "--layout", "64x32", "--access", "ld.64.column", "--plain")
    assert text.returncode == 0, text.stderr
    assert "cycles" in text.stdout and "256 cycles, ideal 32, 224 conflict cycles" in text.stdout
    assert "  63 " in text.stdout  # the heatmap has a row per lane of the wavefront


@pytest.mark.parametrize("args, needle", [
    (("--model", "amd", "--layout", "64x32", "--access", "ld.64.row"), "unknown bank model 'amd'"),
    (("--model", "cdna", "--layout", "64x32", "--access", "ldmatrix.x4"), "not an instruction of the cdna model"),
])
def test_cli_bad_model_input_is_one_line_exit_2(args, needle):
    out = tracea("bank-sim", *args)
    assert out.returncode == 2 and needle in out.stderr and "Traceback" not in out.stderr
    assert out.stderr.count("\n") <= 2 and out.stderr.startswith("error:")


def test_cli_cdna_pattern_of_a_warp_is_one_line(tmp_path):
    path = tmp_path / "w.json"
    path.write_text(json.dumps({"instructions": [{"op": "ld", "bytes_per_lane": 4, "addresses": list(range(0, 128, 4))}]}))
    out = tracea("bank-sim", "--model", "cdna", "--pattern", str(path))
    assert out.returncode == 2 and "a wavefront needs 64" in out.stderr


def test_cli_help_names_the_cdna_model():
    out = tracea("bank-sim", "--help")
    assert "--model" in out.stdout and "cdna" in out.stdout and "not measured" in out.stdout


# --- the HIP GEMM's LDS layouts -------------------------------------------------------------------------

def test_hip_gemm_default_fragment_reads_are_conflict_free_as_ds_read_b64():
    from tracea.emitters.hip.gemm import HipGemmSchedule
    from tracea.emitters.hip.lds_banks import gemm_lds_accesses, gemm_lds_report

    s = HipGemmSchedule()
    assert (s.bk, s.pad) == (16, 4)
    batches = gemm_lds_accesses(s)
    a = batches["A fragment read"]
    # lane 0 reads row 0 k 0, lane 1 row 1 (LD = 20 elements = 40 bytes), lane 32 row 0 k 4
    assert (a.addr[0, 0], a.addr[0, 1], a.addr[0, 32]) == (0, 40, 8) and a.lanes == 64 and int(a.width[0]) == 8
    report = gemm_lds_report(s)
    assert report["A fragment read"] == {"op": "ds_read_b64", "instructions": 16, "cycles": 64, "ideal": 64,
                                         "conflicts": 0, "conflict_degree": 1}
    assert report["B fragment read"]["conflicts"] == 0
    # the staging stores conflict 2-way: A's 8-byte stores of 4 consecutive k (ds_write_b64, 32 conflict
    # cycles a k tile) and B's transpose (one ds_write_b16 an element; it was 8-way when a thread took 8
    # consecutive n, and lanes now take consecutive n)
    assert report["A staging store"] == {"op": "ds_write_b64", "instructions": 8, "cycles": 64, "ideal": 32,
                                         "conflicts": 32, "conflict_degree": 2}
    assert (report["B staging store"]["op"], report["B staging store"]["conflict_degree"]) == ("ds_write_b16", 2)


@pytest.mark.parametrize("bk", [8, 16, 32, 64])
def test_hip_gemm_conflict_free_pads(bk):
    """ds_read_b64 fragments: 16 lanes read 16 rows at a stride of LD/2 dwords, each 2 dwords; they cover
    the 32 banks once iff LD/2 = 2 (mod 4), i.e. pad = 4 (mod 8) for bk a multiple of 8."""
    from tracea.emitters.hip.gemm import HipGemmSchedule
    from tracea.emitters.hip.lds_banks import conflict_free_pads, gemm_lds_report

    s = HipGemmSchedule(bk=bk) if bk < 64 else HipGemmSchedule(bm=64, bn=64, bk=bk)  # fits 64 KiB of LDS
    pads = conflict_free_pads(s, range(0, 33, 4))
    assert pads == [p for p in (4, 12, 20, 28) if _fits(s, p)] and 4 in pads
    for pad in (p for p in range(0, 33, 4) if _fits(s, p)):
        # rows start on multiples of g = gcd(LD/2, 32) dwords, each taking 2 banks: g/2 rows share them
        degree = max(1, math.gcd((bk + pad) // 2, 32) // 2)
        for kind in ("A fragment read", "B fragment read"):
            assert gemm_lds_report(_with_pad(s, pad))[kind]["conflict_degree"] == degree, (pad, kind)
    # read one element at a time (four ds_read_u16), a half-wavefront's 32 rows need 64 banks: always 2-way
    assert conflict_free_pads(s, range(0, 33, 4), fragment_vector=False) == []
    # the staging stores conflict whatever the pad, but for A's 8-byte stores at bk 64, where a lane's
    # 16 consecutive k fill 32 bytes and the conflict-free read pads also spread the rows over the banks
    assert conflict_free_pads(s, range(0, 33, 4), kinds=["A staging store"]) == ([4, 12, 20, 28] if bk == 64 else [])
    assert conflict_free_pads(s, range(0, 33, 4), kinds=["B staging store"]) == []


def _with_pad(s, pad):
    import dataclasses

    return dataclasses.replace(s, pad=pad)


def _fits(s, pad):
    try:
        _with_pad(s, pad).validate()
    except BadInputError:
        return False
    return True


def test_hip_gemm_fp32_fragment_reads_need_an_odd_row_length():
    """fp32: one ds_read_b32 a lane, 32 rows a half-wavefront at a stride of LD dwords: LD a multiple of 4
    leaves at most 8 banks (4-way), an odd LD covers all 32. fp32 rows need no 8-byte alignment, so its
    pads need not be multiples of 4; the heuristic takes pad 1, and B's transposing store is then
    conflict-free too."""
    from tracea.emitters.hip.gemm import HipGemmSchedule
    from tracea.emitters.hip.lds_banks import conflict_free_pads, gemm_lds_report

    report = gemm_lds_report(HipGemmSchedule(), "fp32")
    assert report["A fragment read"]["op"] == "ds_read_b32" and report["A fragment read"]["conflict_degree"] == 4
    assert conflict_free_pads(HipGemmSchedule(), range(0, 33, 4), dtype="fp32") == []
    assert conflict_free_pads(HipGemmSchedule(), range(0, 9), dtype="fp32") == [1, 3, 5, 7]
    hero = gemm_lds_report(HipGemmSchedule(pad=1), "fp32")
    assert hero["B staging store"]["conflicts"] == hero["A fragment read"]["conflicts"] == 0


def test_hip_gemm_bad_input():
    from tracea.emitters.hip.gemm import HipGemmSchedule
    from tracea.emitters.hip.lds_banks import conflict_free_pads, gemm_lds_report

    with pytest.raises(BadInputError, match="dtype"):
        gemm_lds_report(HipGemmSchedule(), "int8")
    with pytest.raises(BadInputError, match="pad"):
        gemm_lds_report(HipGemmSchedule(pad=2))
    with pytest.raises(BadInputError, match="unknown access kind"):
        conflict_free_pads(HipGemmSchedule(), kinds=["C store"])
