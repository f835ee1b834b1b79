"""The simulator against Nsight Compute: every pattern measured on an H100 (tests/fixtures/bank_patterns/,
made by benchmarks/gpu/bank_probe/) must be reproduced exactly, wavefronts and bank conflicts per instruction.

The one measured behaviour the rules do not predict (emitters/bank_sim.py, rule 3) is pinned too: those
patterns are partial warps whose count is exactly the larger-group count, and the default is then an
upper bound. 16-byte cp.async.cg (L1 bypass) is measured but not modelled; it is kept apart.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from tracea.emitters.bank_access import Access, AccessBatch
from tracea.emitters.bank_sim import simulate

FILES = ("h100_2026-11-21.json", "h100_2026-11-21_r2.json")


def _load(fixtures):
    docs = [json.loads((fixtures / "bank_patterns" / f).read_text()) for f in FILES]
    return docs, [p for d in docs for p in d["patterns"]]


def _is_cg16(p) -> bool:
    return p["op"] == "cp.async" and p["bytes_per_lane"] == 16 and not p.get("probe_op")


def _modelled(patterns):
    return [p for p in patterns if p["wavefronts"] is not None and not _is_cg16(p)]


def _simulate(patterns, **kw):
    batch = AccessBatch.from_accesses([Access(p["op"], p["bytes_per_lane"], tuple(p["addresses"]), name=p["name"])
                                       for p in patterns])
    return simulate(batch, **kw)


def _pairs_ok(addresses) -> bool:
    return all(a is None or b is None or a == b for a, b in zip(addresses[::2], addresses[1::2], strict=True))


def test_fixtures_name_the_machine_and_method(fixtures):
    docs, patterns = _load(fixtures)
    for d in docs:
        assert "H100" in d["machine"]["gpu"] and d["machine"]["date_utc"].startswith("2026-11-21")
        assert "2025.3" in d["machine"]["ncu"][0]
        assert all(v for v in d["sass_check"].values()), "every probe kernel held its one shared instruction"
    assert len(_modelled(patterns)) >= 700


def test_every_measured_pattern_is_reproduced(fixtures):
    _, patterns = _load(fixtures)
    pats = _modelled(patterns)
    rule = _simulate(pats)
    merged = _simulate(pats, merge_wide_loads=True)
    exact, partial_merge, wrong = 0, [], []
    for i, p in enumerate(pats):
        got = (int(rule.wavefronts[i]), int(rule.conflicts[i]))
        want = (p["wavefronts"], p["bank_conflicts"] if p["bank_conflicts"] is not None else got[1])
        if got == want:
            exact += 1
            continue
        alt = (int(merged.wavefronts[i]), int(merged.conflicts[i]))
        active = sum(a is not None for a in p["addresses"])
        if (p["op"] == "ld" and p["bytes_per_lane"] >= 8 and not _pairs_ok(p["addresses"]) and active <= 13
                and alt == want and got[0] >= want[0]):
            partial_merge.append(p["name"])
        else:
            wrong.append((p["name"], got, want))
    assert not wrong, wrong[:10]
    assert exact == 700 and len(partial_merge) == 35, (exact, len(partial_merge))


def test_conflicts_match_nsight_bank_conflict_counter(fixtures):
    _, patterns = _load(fixtures)
    pats = [p for p in _modelled(patterns) if p["bank_conflicts"] is not None and p["op"] != "ld"]
    res = _simulate(pats)
    assert np.array_equal(res.conflicts, [p["bank_conflicts"] for p in pats])


@pytest.mark.parametrize(("op", "nbytes", "least"), [
    ("ld", 1, 10), ("ld", 2, 10), ("ld", 4, 30), ("ld", 8, 40), ("ld", 16, 50),
    ("st", 1, 10), ("st", 2, 10), ("st", 4, 30), ("st", 8, 40), ("st", 16, 40),
    ("ldmatrix.x1", 16, 30), ("ldmatrix.x2", 16, 40), ("ldmatrix.x4", 16, 40),
    ("stmatrix.x1", 16, 30), ("stmatrix.x2", 16, 30), ("stmatrix.x4", 16, 40),
    ("cp.async", 4, 10), ("cp.async", 8, 20), ("cp.async", 16, 16),
])
def test_coverage_by_op_and_width(fixtures, op, nbytes, least):
    _, patterns = _load(fixtures)
    n = sum(1 for p in _modelled(patterns) if p["op"] == op and p["bytes_per_lane"] == nbytes)
    assert n >= least


@pytest.mark.parametrize("needle", ["broadcast", "pad", "tma128B", "tma64B", "tma32B", "xor", "sw343", "stride",
                                    "half", "share"])
def test_coverage_of_named_cases(fixtures, needle):
    _, patterns = _load(fixtures)
    assert any(needle in p["name"] for p in _modelled(patterns))


def test_partial_warps_measured(fixtures):
    _, patterns = _load(fixtures)
    partial = [p for p in _modelled(patterns) if None in p["addresses"] and "matrix" not in p["op"]]
    assert len(partial) >= 100


def test_loads_repeated_256_times_agree_with_single_loads(fixtures):
    """The first run's loads ran once (ptxas hoisted them); the second repeats them 256 times."""
    _, patterns = _load(fixtures)
    by_name = {p["name"]: p for p in patterns}
    again = [p for p in patterns if p["name"].startswith("r2_") and p["name"][3:] in by_name and p["op"] == "ld"]
    assert len(again) == 18
    for p in again:
        first = by_name[p["name"][3:]]
        assert first["instructions"] == 1 and p["instructions"] == 256
        assert (p["wavefronts"], p["bank_conflicts"]) == (first["wavefronts"], first["bank_conflicts"])


def test_cp_async_cg_16_is_measured_and_kept_apart(fixtures):
    _, patterns = _load(fixtures)
    cg = [p for p in patterns if _is_cg16(p) and p["wavefronts"] is not None]
    assert len(cg) == 16
    assert {p["name"]: p["wavefronts"] for p in cg if "rand" not in p["name"]} == {
        "r2_cpasync128cg_contig": 4, "r2_cpasync128cg_broadcast": 1, "r2_cpasync128cg_stride128B": 32,
        "r2_cpasync128cg_quarters_same": 1, "r2_cpasync128cg_pairs_share": 16, "r2_cpasync128cg_halves_same": 2,
        "r2_cpasync128cg_padded": 32, "r2_cpasync128cg_stride32B": 32}
