"""Write benchmarks/gpu/bank_probe/patterns.json: the per-lane address patterns the probe measures on
the GPU.

Named patterns are the textbook cases (strides, broadcast, shared words, partial warps, padded and
swizzled tile sweeps from tracea.emitters.layout) plus patterns built to tell candidate hardware
rules apart (e.g. a 64-bit access whose half-warps conflict but whose whole warp would not). Random
patterns (fixed seed) cover the rest. Deterministic: re-running gives the same file.

    python benchmarks/gpu/bank_probe/make_patterns.py            # patterns.json, the first run
    python benchmarks/gpu/bank_probe/make_patterns.py --round2   # patterns_r2.json, the follow-ups
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from tracea.emitters.bank_access import MATRIX_OPS, OPS, matrix_sweep, vector_sweep
from tracea.emitters.layout import Swizzle, TileLayout, TmaSwizzle, XorSwizzle

HERE = Path(__file__).parent
LANE = np.arange(32)
PATTERNS: list[dict] = []


def add(name: str, op: str, nbytes: int, addr, active=None) -> None:
    a = [int(x) for x in np.broadcast_to(np.asarray(addr, dtype=np.int64), (32,))]
    if active is not None:
        mask = np.broadcast_to(np.asarray(active, dtype=bool), (32,))
        a = [x if m else None for x, m in zip(a, mask, strict=True)]
    used = OPS[op][1]
    a = [x if i < used else None for i, x in enumerate(a)]
    PATTERNS.append({"name": name, "op": op, "bytes_per_lane": nbytes, "addresses": a})


def add_batch(name: str, batch, take: int = 2) -> None:
    """The first ``take`` instructions of a tile sweep (they repeat the same bank picture)."""
    for i in range(min(take, len(batch))):
        acc = batch.access(i)
        PATTERNS.append({"name": f"{name}#{i}", "op": acc.op, "bytes_per_lane": acc.bytes_per_lane,
                         "addresses": list(acc.addresses)})


def named() -> None:
    """The textbook cases and the rule-telling ones, for each access kind, then the layout algebra's tile
    sweeps."""
    for op in ("ld", "st"):
        _words32(op)
        _narrow(op)
        _halfwarps64(op)
        _quarterwarps128(op)
    _cp_async()
    _matrix_phases()
    _bf16_tile_sweeps()
    _f32_tile_sweeps()


def _words32(op: str) -> None:
    """32-bit: the whole warp at once."""
    for s in (1, 2, 3, 4, 8, 16, 32, 33):
        add(f"{op}32_stride{s}w", op, 4, LANE * s * 4)
    add(f"{op}32_broadcast", op, 4, 0)
    add(f"{op}32_pairs_share_word", op, 4, (LANE // 2) * 4)
    add(f"{op}32_quads_share_bank0_8words", op, 4, (LANE // 4) * 128)
    add(f"{op}32_even_lanes_stride32w", op, 4, LANE * 128, LANE % 2 == 0)
    add(f"{op}32_lane0_only", op, 4, 0, LANE == 0)
    add(f"{op}32_halfwarp_stride2w", op, 4, LANE * 8, LANE < 16)
    add(f"{op}32_halves_bank_clash", op, 4, (LANE % 16) * 4 + (LANE // 16) * 128)
    add(f"{op}32_permutation", op, 4, np.random.default_rng(1).permutation(32) * 4)


def _narrow(op: str) -> None:
    """8- and 16-bit: words are what count."""
    for s in (1, 2, 32, 64):
        add(f"{op}8_stride{s}B", op, 1, LANE * s)
        add(f"{op}16_stride{s * 2}B", op, 2, LANE * s * 2)
    add(f"{op}8_quads_share_word_bank0", op, 1, (LANE % 4) + (LANE // 4) * 128)
    add(f"{op}16_broadcast", op, 2, 6)


def _halfwarps64(op: str) -> None:
    """64-bit: half-warps."""
    for s in (8, 16, 32, 128, 136):
        add(f"{op}64_stride{s}B", op, 8, LANE * s)
    add(f"{op}64_broadcast", op, 8, 0)
    add(f"{op}64_halves_same", op, 8, (LANE % 16) * 8)
    add(f"{op}64_pairs_share", op, 8, (LANE // 2) * 8)
    add(f"{op}64_quads_share", op, 8, (LANE // 4) * 8)
    add(f"{op}64_halfwarp0_only", op, 8, LANE * 8, LANE < 16)
    add(f"{op}64_halfwarp1_only", op, 8, LANE * 8, LANE >= 16)
    add(f"{op}64_even_lanes", op, 8, LANE * 8, LANE % 2 == 0)
    add(f"{op}64_halves_swapped", op, 8, ((LANE + 16) % 32) * 8)
    add(f"{op}64_halves_same_banks", op, 8, (LANE % 16) * 8 + (LANE // 16) * 256)
    add(f"{op}64_halves_conflict_warp_not", op, 8, (LANE % 2) * 128 + (LANE // 2) * 8)
    add(f"{op}64_one_lane_each_half", op, 8, LANE * 8, (LANE == 3) | (LANE == 20))


def _quarterwarps128(op: str) -> None:
    """128-bit: quarter-warps."""
    for s in (16, 32, 64, 128, 144):
        add(f"{op}128_stride{s}B", op, 16, LANE * s)
    add(f"{op}128_broadcast", op, 16, 0)
    add(f"{op}128_quarters_same", op, 16, (LANE % 8) * 16)
    add(f"{op}128_halves_same", op, 16, (LANE % 16) * 16)
    add(f"{op}128_quads_share", op, 16, (LANE // 4) * 16)
    add(f"{op}128_pairs_share", op, 16, (LANE // 2) * 16)
    add(f"{op}128_quarter0_only", op, 16, LANE * 16, LANE < 8)
    add(f"{op}128_quarters_0_3_only", op, 16, LANE * 16, (LANE < 8) | (LANE >= 24))
    add(f"{op}128_one_lane_per_quarter", op, 16, LANE * 16, LANE % 8 == 5)
    add(f"{op}128_quarters_conflict_warp_not", op, 16, (LANE % 2) * 256 + (LANE // 2) * 16)
    add(f"{op}128_quarter_pairs_same", op, 16, (LANE % 8) * 16 + (LANE // 16) * 128)
    add(f"{op}128_quarters_same_banks", op, 16, (LANE % 8) * 16 + (LANE // 8) * 128)


def _cp_async() -> None:
    """cp.async: the shared-memory write of LDGSTS."""
    for nbytes in (4, 8, 16):
        add(f"cpasync{nbytes * 8}_contig", "cp.async", nbytes, LANE * nbytes)
        add(f"cpasync{nbytes * 8}_stride128B", "cp.async", nbytes, LANE * 128)
        add(f"cpasync{nbytes * 8}_broadcast", "cp.async", nbytes, 0)
        add(f"cpasync{nbytes * 8}_padded", "cp.async", nbytes, LANE * (128 + nbytes))
        add(f"cpasync{nbytes * 8}_half_active", "cp.async", nbytes, LANE * nbytes, LANE < 16)
    add("cpasync128_quarters_same", "cp.async", 16, (LANE % 8) * 16)
    add("cpasync64_halves_same", "cp.async", 8, (LANE % 16) * 8)


def _matrix_phases() -> None:
    """ldmatrix / stmatrix: 8-row phases."""
    for op in sorted(MATRIX_OPS):
        n = int(op[-1])
        short = op.replace("matrix.", "m")
        add(f"{short}_rows_contig", op, 16, LANE * 16)
        for s in (32, 64, 128, 144, 256):
            add(f"{short}_rows_stride{s}B", op, 16, LANE * s)
        add(f"{short}_rows_same", op, 16, 0)
        add(f"{short}_rows_pairs_same", op, 16, (LANE // 2) * 16)
        if n >= 2:
            add(f"{short}_matrices_same", op, 16, (LANE % 8) * 16)
            add(f"{short}_matrix_conflict_warp_not", op, 16, (LANE % 2) * 128 + (LANE // 2) * 16)
            add(f"{short}_matrices_same_banks", op, 16, (LANE % 8) * 16 + (LANE // 8) * 128)
        if n == 4:
            add(f"{short}_matrix_pairs_same", op, 16, (LANE % 16) * 16)


def _bf16_tile_sweeps() -> None:
    """Tile sweeps from the layout algebra, bf16 tiles: what a kernel actually issues."""
    tiles = {
        "bf16_128x64_row": TileLayout(128, 64, 2),
        "bf16_128x64_pad8": TileLayout(128, 64, 2, pad_elems=8),
        "bf16_128x64_tma128B": TileLayout(128, 64, 2, swizzle=TmaSwizzle("128B")),
        "bf16_64x32_tma64B": TileLayout(64, 32, 2, swizzle=TmaSwizzle("64B")),
        "bf16_64x16_tma32B": TileLayout(64, 16, 2, swizzle=TmaSwizzle("32B")),
        "bf16_64x32_row": TileLayout(64, 32, 2),
        "bf16_128x64_xor4": TileLayout(128, 64, 2, swizzle=XorSwizzle(4)),
        "bf16_128x64_sw243": TileLayout(128, 64, 2, swizzle=Swizzle(2, 4, 3)),
        "bf16_64x128_sw343": TileLayout(64, 128, 2, swizzle=Swizzle(3, 4, 3)),
    }
    for tname, lay in tiles.items():
        for op in ("ldmatrix.x4", "ldmatrix.x2", "stmatrix.x4"):
            if lay.lines % 16 == 0:
                add_batch(f"{op}_{tname}", matrix_sweep(lay, op), take=1)
        add_batch(f"ld128col_{tname}", vector_sweep(lay, "ld", 16, "column"), take=1)
        add_batch(f"cpasync128row_{tname}", vector_sweep(lay, "cp.async", 16, "row"), take=1)


def _f32_tile_sweeps() -> None:
    """Tile sweeps of f32 tiles: column reads and writes, padded and swizzled."""
    f32 = {
        "f32_32x32_row": TileLayout(32, 32, 4),
        "f32_32x32_pad1": TileLayout(32, 32, 4, pad_elems=1),
        "f32_32x32_pad4": TileLayout(32, 32, 4, pad_elems=4),
        "f32_32x32_xor8": TileLayout(32, 32, 4, swizzle=XorSwizzle(8)),
        "f32_32x32_sw525": TileLayout(32, 32, 4, swizzle=Swizzle(5, 2, 5)),
    }
    for tname, lay in f32.items():
        for op in ("ld", "st"):
            add_batch(f"{op}32col_{tname}", vector_sweep(lay, op, 4, "column"), take=1)
        if lay.pitch_bytes % 16 == 0 and lay.swizzle.keeps_bytes_together >= 16:
            add_batch(f"ld128col_{tname}", vector_sweep(lay, "ld", 16, "column"), take=1)
        if lay.pitch_bytes % 8 == 0 and lay.swizzle.keeps_bytes_together >= 8:
            add_batch(f"st64col_{tname}", vector_sweep(lay, "st", 8, "column"), take=1)


def random_patterns(rng: np.random.Generator) -> None:
    per_op = {("ld", 1): 8, ("ld", 2): 8, ("st", 1): 8, ("st", 2): 8, ("ld", 4): 16, ("st", 4): 16,
              ("cp.async", 4): 12, ("ld", 8): 30, ("st", 8): 30, ("ld", 16): 30, ("st", 16): 30,
              ("cp.async", 8): 16, ("cp.async", 16): 24}
    per_op.update({(op, 16): 24 for op in MATRIX_OPS})
    for (op, nbytes), count in sorted(per_op.items()):
        for i in range(count):
            span = int(rng.choice([128, 256, 512, 1024, 4096]))
            slots = span // nbytes
            if rng.random() < 0.5:
                lanes = rng.integers(0, slots, 32)
            else:
                pool = rng.choice(slots, size=min(slots, int(rng.choice([1, 2, 4, 8, 16, 24]))), replace=False)
                lanes = pool[rng.integers(0, len(pool), 32)]
            active = None
            if op not in MATRIX_OPS:
                frac = float(rng.choice([1.0, 1.0, 0.75, 0.5, 0.25]))
                active = rng.random(32) < frac
                active[rng.integers(0, 32)] = True
            short = op.replace("matrix.", "m").replace("cp.async", "cpasync")
            add(f"rand_{short}{nbytes * 8}_{i:02d}", op, nbytes, lanes * nbytes, active)


def round2(rng: np.random.Generator) -> None:
    """Follow-ups to the first run (2026-11-21): what lets rand_ld128_00, a 16-byte load with split lane
    pairs, run in half-warp groups; cp.async of 16 bytes (.cg and .ca) under LDGSTS's own counters;
    loads repeated 256 times now that ptxas can no longer hoist them; stmatrix under STSM's counters."""
    first = {p["name"]: p for p in json.loads((HERE / "patterns.json").read_text())["patterns"]}
    _rand00_variants(first, rng)
    _duplicates_made_unique(first)
    _sparse_unique_loads(rng)
    _cp_async_ldgsts(first, rng)
    # Loads again, repeated 256 times, and stmatrix under STSM's own counters.
    for name in ("ld32_stride2w", "ld8_stride32B", "ld16_stride4B", "ld64_broadcast", "ld64_halves_same",
                 "ld64_pairs_share", "ld64_halves_conflict_warp_not", "ld128_broadcast", "ld128_quarters_same",
                 "ld128_pairs_share", "ld128_stride32B", "rand_ld64_06", "rand_ld64_08", "rand_ld128_01",
                 "rand_ld128_02", "rand_ld128_17", "ld128col_bf16_128x64_tma128B#0", "rand_ld32_03",
                 "stmx4_rows_stride128B", "stmx2_matrices_same", "stmx1_rows_same", "rand_stmx4128_08",
                 "stmatrix.x4_bf16_128x64_tma128B#0", "ldmatrix.x4_bf16_128x64_row#0"):
        again(first, name, f"r2_{name}")


def again(first: dict[str, dict], name: str, new: str, **changes) -> None:
    """The first run's pattern ``name`` once more as ``new``, with ``changes``."""
    p = dict(first[name], name=new, addresses=list(first[name]["addresses"]))
    p.update(changes)
    PATTERNS.append(p)


def _rand00_variants(first: dict[str, dict], rng: np.random.Generator) -> None:
    """rand_ld128_00 and its variations: each lane dropped, each half alone, an address shared across
    quarters, more lanes on fresh rows, all on one row, folded into 1 KiB."""
    base = first["rand_ld128_00"]["addresses"]
    act = [i for i, a in enumerate(base) if a is not None]
    again(first, "rand_ld128_00", "r2_ld128_rand00")
    for lane in act:
        again(first, "rand_ld128_00", f"r2_ld128_rand00_drop{lane}",
              addresses=[None if i == lane else a for i, a in enumerate(base)])
    again(first, "rand_ld128_00", "r2_ld128_rand00_half0", addresses=[a if i < 16 else None for i, a in enumerate(base)])
    again(first, "rand_ld128_00", "r2_ld128_rand00_half1", addresses=[a if i >= 16 else None for i, a in enumerate(base)])
    for i, (dst, src) in enumerate(((10, 26), (6, 16), (27, 14))):  # one address shared across quarters
        addrs = list(base)
        addrs[dst] = base[src]
        again(first, "rand_ld128_00", f"r2_ld128_rand00_dup{i}", addresses=addrs)
    used_rows = {a // 128 for a in base if a is not None}
    free_rows = [r for r in range(64) if r not in used_rows]
    addrs = list(base)
    for k, lane in enumerate((0, 3, 20, 29, 12, 22)):  # more lanes, each a fresh row
        addrs[lane] = free_rows[k] * 128 + 16 * int(rng.integers(0, 8))
        again(first, "rand_ld128_00", f"r2_ld128_rand00_plus{k + 1}", addresses=list(addrs))
    again(first, "rand_ld128_00", "r2_ld128_rand00_one_row",
          addresses=[None if a is None else a % 128 + 128 * (i % 2) for i, a in enumerate(base)])
    again(first, "rand_ld128_00", "r2_ld128_rand00_mod1024",
          addresses=[None if a is None else a % 1024 for i, a in enumerate(base)])


def _duplicates_made_unique(first: dict[str, dict]) -> None:
    """rand_ld128_02 and rand_ld128_23 on the same lanes, each duplicate address moved to a row of its own."""
    for name in ("rand_ld128_02", "rand_ld128_23"):
        addrs, seen = list(first[name]["addresses"]), set()
        for i, a in enumerate(addrs):
            if a is not None:
                if a in seen:
                    a = a % 128 + 128 * (40 + i)
                seen.add(a)
                addrs[i] = a
        again(first, name, f"r2_{name}_unique", addresses=addrs)


def _sparse_unique_loads(rng: np.random.Generator) -> None:
    """Sparse loads with unique addresses and at least one split pair, 16 and 8 bytes; then broadcasts and
    shared pairs with one lane split off."""
    for nbytes, count in ((16, 40), (8, 24)):
        for i in range(count):
            k = int(rng.integers(3, 17))
            lanes = rng.choice(32, size=k, replace=False)
            pair = int(rng.integers(0, 16))
            lanes = np.unique(np.concatenate([lanes, [2 * pair, 2 * pair + 1]]))
            slots = rng.choice(4096 // nbytes, size=len(lanes), replace=False) * nbytes
            active = np.zeros(32, dtype=bool)
            active[lanes] = True
            addr = np.zeros(32, dtype=np.int64)
            addr[lanes] = slots
            add(f"r2_ld{nbytes * 8}_sparse_unique_{i:02d}", "ld", nbytes, addr, active)
    add("r2_ld128_broadcast_one_split", "ld", 16, np.where(LANE == 1, 16, 0))
    add("r2_ld64_broadcast_one_split", "ld", 8, np.where(LANE == 1, 8, 0))
    add("r2_ld128_pairs_share_one_split", "ld", 16, np.where(LANE == 31, 0, (LANE // 2) * 16))
    add("r2_ld64_pairs_share_one_split", "ld", 8, np.where(LANE == 31, 0, (LANE // 2) * 8))


def _cp_async_ldgsts(first: dict[str, dict], rng: np.random.Generator) -> None:
    """cp.async 16 bytes, .cg (LDGSTS.BYPASS) and .ca (LDGSTS.E.128), plus 4/8 bytes under LDGSTS counters."""
    shapes = {"contig": LANE * 16, "broadcast": 0 * LANE, "stride128B": LANE * 128, "quarters_same": (LANE % 8) * 16,
              "pairs_share": (LANE // 2) * 16, "halves_same": (LANE % 16) * 16, "padded": LANE * 144,
              "stride32B": LANE * 32}
    for variant in ("cg", "ca"):
        extra = {"probe_op": "cpa16ca"} if variant == "ca" else {}
        for sname, addr in shapes.items():
            add(f"r2_cpasync128{variant}_{sname}", "cp.async", 16, addr)
            PATTERNS[-1].update(extra)
        for i in range(8):
            pool = rng.choice(256, size=int(rng.choice([2, 4, 8, 16, 32])), replace=False)
            add(f"r2_cpasync128{variant}_rand{i}", "cp.async", 16, pool[rng.integers(0, len(pool), 32)] * 16,
                rng.random(32) < 0.8)
            PATTERNS[-1].update(extra)
    for name in ("cpasync32_broadcast", "cpasync64_contig", "rand_cpasync64_05", "rand_cpasync32_08"):
        again(first, name, f"r2_{name}")


def main() -> int:
    import sys

    second = "--round2" in sys.argv[1:]
    if second:
        round2(np.random.default_rng(20261122))
    else:
        named()
        random_patterns(np.random.default_rng(20261121))
    names = [p["name"] for p in PATTERNS]
    assert len(names) == len(set(names)), "pattern names must be unique"
    out = HERE / ("patterns_r2.json" if second else "patterns.json")
    out.write_text(json.dumps({"schema_version": 1, "patterns": PATTERNS}, separators=(",", ":")) + "\n")
    print(f"wrote {out} ({len(PATTERNS)} patterns)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
