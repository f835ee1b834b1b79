"""The vectorised simulator against a plain-Python reading of its documented rules, on random warps of
every op, width and activity; plus the rules on textbook patterns, totals, heatmaps and validation."""

from __future__ import annotations

from collections import defaultdict

import numpy as np
import pytest

from tracea.doctor.errors import BadInputError
from tracea.emitters.bank_access import INACTIVE, OPS, Access, AccessBatch
from tracea.emitters.bank_sim import heatmap, simulate, simulate_accesses

LANE = list(range(32))


def reference(op: str, width: int, addrs: list[int | None], merge: bool | None = None):
    """Rules 1-5 of emitters/bank_sim.py, one lane at a time."""
    used = OPS[op][1]
    addrs = [a if i < used else None for i, a in enumerate(addrs)]
    if "matrix" in op:
        size = 8
    else:
        size = 32 if width <= 4 else 16 if width == 8 else 8
    if op == "ld" and width >= 8:
        pairs = all(a is None or b is None or a == b for a, b in zip(addrs[::2], addrs[1::2], strict=True))
        if merge if merge is not None else pairs:
            size *= 2
    wavefronts = ideal = degree = 0
    colliding = set()
    for start in range(0, 32, size):
        per_bank: dict[int, set] = defaultdict(set)
        for lane in range(start, start + size):
            a = addrs[lane]
            if a is None:
                continue
            for w in range(max(1, width // 4)):
                word = a // 4 + w
                per_bank[word % 32].add(word if op != "cp.async" else (word, lane))
        if per_bank:
            deepest = max(len(v) for v in per_bank.values())
            wavefronts += deepest
            ideal += 1
            degree = max(degree, deepest)
            colliding |= {b for b, v in per_bank.items() if len(v) > 1}
    return wavefronts, ideal, degree, tuple(sorted(colliding))


def random_accesses(n: int, seed: int) -> list[Access]:
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        op = str(rng.choice(list(OPS)))
        width = int(rng.choice(OPS[op][2]))
        span = int(rng.choice([128, 256, 1024, 8192]))
        if rng.random() < 0.4:
            pool = rng.integers(0, span // width, int(rng.integers(1, 9)))
            slots = pool[rng.integers(0, len(pool), 32)]
        else:
            slots = rng.integers(0, span // width, 32)
        addrs: list[int | None] = [int(s) * width for s in slots]
        if "matrix" not in op:
            keep = rng.random(32) < float(rng.choice([1.0, 0.7, 0.3]))
            keep[int(rng.integers(0, 32))] = True
            addrs = [a if k else None for a, k in zip(addrs, keep, strict=True)]
        out.append(Access(op, width, tuple(addrs)))
    return out


@pytest.mark.parametrize("merge", [None, True, False])
def test_vectorised_equals_reference_on_random_warps(merge):
    accesses = random_accesses(3000, seed=7)
    res = simulate(AccessBatch.from_accesses(accesses), chunk=512, merge_wide_loads=merge)
    for i, a in enumerate(accesses):
        r = res.instruction(i)
        assert (r.wavefronts, r.ideal, r.conflict_degree, r.colliding_banks) == reference(
            a.op, a.bytes_per_lane, list(a.addresses), merge), (i, a)


def test_chunking_does_not_change_results():
    batch = AccessBatch.from_accesses(random_accesses(700, seed=3))
    a, b = simulate(batch, chunk=64), simulate(batch, chunk=100000)
    assert np.array_equal(a.wavefronts, b.wavefronts) and np.array_equal(a.bank_mask, b.bank_mask)


def one(op: str, width: int, addrs) -> tuple[int, int]:
    addrs = [None if a is None else int(a) for a in addrs]
    r = simulate_accesses([Access(op, width, tuple(addrs))]).instruction(0)
    return r.wavefronts, r.ideal


@pytest.mark.parametrize(("op", "width", "addrs", "expected"), [
    ("ld", 4, [4 * i for i in LANE], (1, 1)),
    ("ld", 4, [8 * i for i in LANE], (2, 1)),                      # stride 2 words: 2-way
    ("ld", 4, [132 * i for i in LANE], (1, 1)),                    # 33-word pitch: padding works
    ("ld", 4, [128 * i for i in LANE], (32, 1)),
    ("ld", 4, [0] * 32, (1, 1)),                                   # broadcast
    ("st", 1, [i for i in LANE], (1, 1)),                          # bytes of one word share it
    ("ld", 8, [0] * 32, (1, 1)),                                   # pairs read one address: whole warp
    ("st", 8, [0] * 32, (2, 2)),                                   # stores never merge
    ("ld", 8, [8 * (i % 16) for i in LANE], (2, 2)),               # i and i+16 sharing does not merge
    ("ld", 16, [0] * 32, (2, 2)),
    ("st", 16, [0] * 32, (4, 4)),
    ("ld", 16, [16 * i for i in LANE], (4, 4)),
    ("ld", 16, [144 * i for i in LANE], (4, 4)),
    ("ldmatrix.x4", 16, [16 * (i % 8) for i in LANE], (4, 4)),     # identical matrices do not merge
    ("ldmatrix.x1", 16, [128 * i for i in LANE], (8, 1)),          # unswizzled 128 B rows: 8-way
    ("cp.async", 4, [0] * 32, (32, 1)),                            # LDGSTS: no word sharing
    ("cp.async", 16, [16 * i for i in LANE], (4, 4)),
])
def test_rules_on_textbook_patterns(op, width, addrs, expected):
    assert one(op, width, addrs) == expected


def test_inactive_lanes_do_nothing():
    assert one("ld", 16, [16 * i if i < 8 else None for i in LANE]) == (1, 1)
    assert one("st", 8, [128 * i if i % 2 else None for i in LANE]) == (16, 2)


def test_matrix_x1_x2_ignore_the_unused_lanes():
    rows = [16 * i for i in LANE]
    junk = rows[:8] + [0] * 24
    assert one("ldmatrix.x1", 16, junk) == one("ldmatrix.x1", 16, rows[:8] + [None] * 24) == (1, 1)
    assert one("ldmatrix.x2", 16, rows[:16] + [None] * 16) == (2, 2)


def test_totals_weight_by_count_and_json_shape():
    accs = [Access("ld", 4, tuple(8 * i for i in LANE), count=10, name="loop"),
            Access("st", 4, tuple(4 * i for i in LANE))]
    res = simulate_accesses(accs)
    t = res.totals()
    assert t == {"instructions": 11, "wavefronts": 21, "ideal": 11, "conflicts": 10, "conflicted_instructions": 10,
                 "max_conflict_degree": 2, "efficiency": round(11 / 21, 4)}
    doc = res.to_json()
    assert doc["instructions"][0]["colliding_banks"] == list(range(0, 32, 2)) and doc["instructions"][0]["name"] == "loop"
    assert doc["instructions"][1]["conflicts"] == 0


def test_heatmap_marks_each_lane_in_its_wavefront():
    res = simulate_accesses([Access("ld", 4, tuple(8 * i for i in LANE))])
    grid = heatmap(res, 0)
    assert grid.shape == (32, 32)
    assert grid[0, 0] == 1 and grid[16, 0] == 2 and grid[:, 1].sum() == 0
    assert grid.max() == res.instruction(0).wavefronts


def test_heatmap_groups_add_up_to_the_wavefronts():
    for a in random_accesses(200, seed=11):
        res = simulate_accesses([a])
        grid, size = heatmap(res, 0), int(res.group_lanes[0])
        assert sum(int(grid[s:s + size].max()) for s in range(0, 32, size)) == res.instruction(0).wavefronts


@pytest.mark.parametrize(("args", "needle"), [
    (("lds", 4, (0,) * 32), "unknown op"),
    (("ld", 3, (0,) * 32), "bytes_per_lane 3"),
    (("ld", 4, (0,) * 31), "31 addresses"),
    (("ld", 8, (4,) + (0,) * 31), "lane 0 address 4 is not aligned"),
    (("ld", 4, (-4,) + (0,) * 31), "lane 0 address -4"),
    (("ldmatrix.x2", 16, (0,) * 15 + (None,) * 17), "lane 15 is null"),
    (("cp.async", 2, (0,) * 32), "not valid for cp.async"),
])
def test_bad_accesses_raise_bad_input(args, needle):
    with pytest.raises(BadInputError, match=needle):
        Access(*args)


def test_address_past_shared_memory_is_refused():
    batch = AccessBatch.uniform("ld", 4, np.full((1, 32), 1 << 25))
    with pytest.raises(BadInputError, match="shared-memory offsets"):
        simulate(batch)


def test_uniform_batch_marks_unused_matrix_lanes_inactive():
    batch = AccessBatch.uniform("ldmatrix.x1", 16, np.arange(32)[None, :] * 16)
    assert (batch.addr[0, 8:] == INACTIVE).all()
