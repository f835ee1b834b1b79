"""The decode attention core's search space on a GPU: for a few decode rows, every schedule of
``attention_decode.search_space`` (warps, keys a warp, stages, slices) built, verified against the float64
reference on the row's random inputs (computed once a row), then timed as ``tracea bench`` times a kernel
(CUDA events, L2 flushed, median and p95). Prints a table a row: the hero first, then the five fastest, with
the K/V bandwidth each reaches. What the hero heuristic and the tuner's space are chosen from.

    python benchmarks/gpu/attention_decode_space.py [--repeats 20] [--all] [--rows 0,1]

``--all`` prints every timed schedule (fastest first), not the five fastest; ``--rows`` picks rows by index;
``--match`` keeps the schedules whose name has one of its comma-separated parts (and the hero); ``--splits 2,33``
adds each of them (the hero too) with those fixed key slices; ``--in-order`` deals a paged row's pages to its entries in
pool order (the table of each entry counts up) instead of shuffled, to tell what the pages' scatter costs;
``--slice-keys K`` sets the keys a slice of an uneven launch keeps at least (the run-time rule's constant);
``--grid-cap`` sizes an uneven launch's grid for the slices an entry can take at that rule. K/V TB/s
counts the keys the entries hold (their lengths on the ragged rows).

Needs a GPU.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys

import numpy as np

from tracea.emitters import cuda
from tracea.emitters.cuda import attention_decode as D
from tracea.emitters.cuda.arch import parse_arch
from tracea.kernels import relative_error, tolerance
from tracea.kernels.dtypes import to_float64
from tracea.kernels.ops.attention import Attention

RAGGED = tuple(int(x) for x in np.random.default_rng(33).integers(1024, 16385, 16))  # attention_paged.py's lengths
ONE_LONG = (32768,) + (1024,) * 15  # one long entry among short ones
SHORT = tuple(int(x) for x in np.random.default_rng(34).integers(128, 4097, 32))  # many short entries

ROWS = [
    ("b8 h32/8 q1 k8192 d128", Attention(8, 32, 1, 128, seq_k=8192, kv_heads=8, dtype="bf16")),
    ("b1 h32/8 q1 k131072 d128", Attention(1, 32, 1, 128, seq_k=131072, kv_heads=8, dtype="bf16")),
    ("b16 h32/8 q1 k1024 d128", Attention(16, 32, 1, 128, seq_k=1024, kv_heads=8, dtype="bf16")),
    ("b16 h16 q1 k4096 d64 (MHA)", Attention(16, 16, 1, 64, seq_k=4096, kv_heads=16, dtype="bf16")),
    ("b4 h32 q1 k16384 d128 (MHA)", Attention(4, 32, 1, 128, seq_k=16384, dtype="bf16")),
    ("b8 h32/8 q1 k65536 d64", Attention(8, 32, 1, 64, seq_k=65536, kv_heads=8, dtype="bf16")),
    ("b8 h32/8 q1 k8192 d128 paged 16", Attention(8, 32, 1, 128, seq_k=8192, kv_heads=8, dtype="bf16", page_size=16)),
    ("b4 h16/4 q1 k8192 d256", Attention(4, 16, 1, 256, seq_k=8192, kv_heads=4, dtype="bf16")),
    # row 4 with a pair for each of an H200's 132 SMs: how K/V's rate moves with the SMs that read them
    ("b4 h33 q1 k16384 d128 (MHA, 132 pairs)", Attention(4, 33, 1, 128, seq_k=16384, dtype="bf16")),
    # attention_paged.py's ragged row (16 entries of 4.9k-15.3k keys), contiguous and paged by 16
    ("b16 h32/8 q1 d128 ragged", Attention(16, 32, 1, 128, seq_k=max(RAGGED), kv_heads=8, dtype="bf16",
                                           seq_lens=RAGGED)),
    ("b16 h32/8 q1 d128 ragged paged 16", Attention(16, 32, 1, 128, seq_k=max(RAGGED), kv_heads=8, dtype="bf16",
                                                   seq_lens=RAGGED, page_size=16)),
    ("b16 h32/8 q1 d128 ragged paged 64", Attention(16, 32, 1, 128, seq_k=max(RAGGED), kv_heads=8, dtype="bf16",
                                                   seq_lens=RAGGED, page_size=64)),
    ("b16 h32/8 q1 d128 one 32768 + 15 x 1024", Attention(16, 32, 1, 128, seq_k=32768, kv_heads=8, dtype="bf16",
                                                          seq_lens=ONE_LONG)),
    ("b16 h32/8 q1 d128 one 32768 + 15 x 1024 paged 16", Attention(16, 32, 1, 128, seq_k=32768, kv_heads=8,
                                                                   dtype="bf16", seq_lens=ONE_LONG, page_size=16)),
    ("b32 h32/8 q1 d128 ragged 128-4096", Attention(32, 32, 1, 128, seq_k=max(SHORT), kv_heads=8, dtype="bf16",
                                                    seq_lens=SHORT)),
    ("b32 h32/8 q1 d128 ragged 128-4096 paged 16", Attention(32, 32, 1, 128, seq_k=max(SHORT), kv_heads=8,
                                                             dtype="bf16", seq_lens=SHORT, page_size=16)),
    ("b16 h16 q1 d64 ragged (MHA) paged 16", Attention(16, 16, 1, 64, seq_k=max(RAGGED), dtype="bf16",
                                                       seq_lens=RAGGED, page_size=16)),
    ("b16 h16 q1 d64 ragged (MHA)", Attention(16, 16, 1, 64, seq_k=max(RAGGED), dtype="bf16", seq_lens=RAGGED)),
]


def kv_bytes(op: Attention) -> int:
    """K and V bytes of the keys the entries hold (their lengths where given, else the capacity each)."""
    keys = sum(op.seq_lens) if op.seq_lens is not None else op.batch * op.seq_k
    return 2 * op.kv_heads * keys * op.head_dim * op.dtype.itemsize


def in_order(table: np.ndarray, pages: int) -> np.ndarray:
    """The same table with its used entries renumbered in pool order: entry 0's pages first, then entry 1's
    (round the pool again where it holds fewer pages than the entries use, as the shuffled deal does)."""
    out = np.full_like(table, -1)
    used = table >= 0
    out[used] = np.arange(int(used.sum()), dtype=table.dtype) % pages
    return out


def capped(mod) -> None:
    """In this process: ``split_rule`` sizes an uneven launch's grid for the slices an entry of the capacity can
    take (its tiles over SLICE_TILES) where that is fewer, the dead blocks that read the lengths and exit gone."""
    rule = mod.split_rule

    def split_rule(op, s, sm_count):
        n, adapt = rule(op, s, sm_count)
        if adapt is None:
            return n, adapt
        t0, t1 = mod.key_tiles(op, s.bk)
        return max(adapt[0], min(n, max(1, (t1 - t0) // adapt[2]))), adapt

    mod.split_rule = split_rule


def timed_schedules(op: Attention, arch: object, inputs: dict, ref: np.ndarray, schedules: list, repeats: int) -> list:
    """(schedule, timing or None, note) of each schedule the op and GPU take: built, verified, then timed."""
    results = []
    for s in schedules:
        try:
            s.validate(op, arch)
        except Exception:  # noqa: BLE001 - outside what this op and GPU take
            continue
        try:
            k = cuda.build(op, "cuda-mma-sync.attention", s, None)
            err = relative_error(to_float64(k(inputs), op.dtype), ref)
            if not err <= tolerance(op):
                results.append((s, None, f"NOT VERIFIED ({err:.2g})"))
                continue
            t = k.time(inputs, warmup=3, repeats=repeats)
            results.append((s, t, f"{k.rendered.metadata['key_slices']['splits']} slices"))
        except Exception as exc:  # noqa: BLE001
            results.append((s, None, f"FAILED: {type(exc).__name__}: {str(exc)[:100]}"))
    return results


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--all", action="store_true", help="every timed schedule, not the five fastest")
    ap.add_argument("--rows", default="", help="row indices, comma-separated (default: all)")
    ap.add_argument("--match", default="", help="schedule name parts, comma-separated (default: every schedule)")
    ap.add_argument("--splits", default="", help="key slices, comma-separated: each matched schedule also with each")
    ap.add_argument("--ragged-waves", type=int, default=0,
                    help="blocks an SM an uneven launch's grid makes room for, twice over (default: the product's)")
    ap.add_argument("--in-order", action="store_true", help="paged rows: pages dealt in pool order, not shuffled")
    ap.add_argument("--slice-keys", type=int, default=-1,
                    help="uneven lengths: keys a slice keeps at least (default: the product's RAGGED_SLICE_KEYS)")
    ap.add_argument("--grid-cap", action="store_true",
                    help="uneven lengths: size the grid for the slices an entry can take (capacity tiles over "
                         "SLICE_TILES), not for slices of MIN_TILES")
    args = ap.parse_args(argv)
    if args.grid_cap:
        capped(D)
        print("uneven lengths: the grid capped at the capacity's tiles over SLICE_TILES")
    if args.slice_keys >= 0:  # the rule's constant, explored (attention_decode.split_rule reads it at each render)
        D.RAGGED_SLICE_KEYS = args.slice_keys
    picked = [ROWS[int(i)] for i in args.rows.split(",")] if args.rows else ROWS
    if args.ragged_waves:  # the rule's constant, explored (attention_decode.split_rule reads it at each render)
        D.RAGGED_WAVES = args.ragged_waves
    from tracea.doctor import probe
    from tracea.emitters.cuda.runtime import _Device

    host = probe()  # the hero this GPU gets (TMA loads on sm_90)

    dev = _Device.get()
    sms = int(getattr(dev.dev.properties, "multiprocessor_count", 0) or 132)
    arch = parse_arch(f"sm_{dev.dev.compute_capability.major}{dev.dev.compute_capability.minor}")
    for label, op in picked:
        inputs = op.random_inputs(np.random.default_rng())
        if args.in_order and op.page_size:
            inputs["block_table"] = in_order(inputs["block_table"], op.pages)
            label += " (pages in order)"
        ref = op.reference(inputs)
        hero = D.hero_schedule(op, host)
        parts = [p for p in args.match.split(",") if p]
        picked = [s for s in D.search_space(op, hero, arch) if s != hero and (not parts or any(p in s.name for p in parts))]
        fixed = [int(n) for n in args.splits.split(",") if n]
        picked += [dataclasses.replace(s, split=n) for s in [hero, *picked] if not s.split for n in fixed]
        results = timed_schedules(op, arch, inputs, ref, [hero] + list(dict.fromkeys(picked)), args.repeats)
        timed = sorted((r for r in results if r[1] is not None), key=lambda r: r[1].p50_ms)
        print(f"\n{label} ({sms} SMs): {len(timed)} of {len(results)} schedules verified and timed")
        print("| schedule | slices | ms median / p95 | K/V TB/s |\n|---|---|---|---|")
        for s, t, note in [r for r in results if r[0] == hero] + (timed if args.all else timed[:5]):
            if t is None:
                print(f"| {s.name} (hero) | {note} | | |")
                continue
            tag = " (hero)" if s == hero else ""
            print(f"| {s.name}{tag} | {note} | {t.p50_ms:.4f} / {t.p95_ms:.4f} | "
                  f"{kv_bytes(op) / (t.p50_ms * 1e-3) / 1e12:.2f} |")
        for s, _t, note in results:
            if _t is None:
                print(f"| {s.name} | {note} | | |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
