"""GEMMs of 33-512 rows on the Hopper tiles (issue 34: the llm-gemm suite's M = 128 rows ran 0.92-1.08x cuBLAS on an
H200, where the weights' stream is most of the time: 43-72 % of the device copy). Each shape: the hero's schedule
(``gemm_hero_schedule``; before ``gemm_heroes.one_wave`` it was the heuristic's) beside fixed tile forms (64 x 64 deep rings, 64 x 128, 128 x 64 and 128 x 128 on two consumers, ping-pong,
split-K or not, the swapped form for 64 rows or fewer), each a full ``tracea bench`` (verified on fresh random
inputs, then timed beside cuBLAS with CUDA events, the L2 emptied before each call). One line a shape: each form's
ratio to cuBLAS (> 1: Tracea faster) and Tracea's own median in us, so forms compare by time as well as by ratio.

    python benchmarks/gpu/mid_m_gemm_forms.py [--set fitted|held-out|check|many-waves|many-waves-check|all] [--match TEXT] [--forms a,b]
        [--deadline S]    # --forms: names from FORMS, comma-separated (default: all of them)
    python benchmarks/gpu/mid_m_gemm_forms.py --compare [--set ...]   # the hero against the rule before it

``fitted``: the suite's five projections at M = 128 and three of them at 64 and 256; ``held-out``: other
projections (Llama 3 70B's, Mistral's, GPT-style) at other M, fp16 and ``nn.Linear``'s column-major weights among
them; ``check``: twelve more shapes (Qwen's, TinyLlama's, odd M), not looked at before the rule was written;
``many-waves``: shapes no one-wave form fits (``MANY_WAVES``), ``many-waves-check`` more of them, not looked at
before ``gemm_heroes.many_waves`` was written.
``--deadline``: seconds after which no new shape starts (a device call's limit).

Needs an sm_90 GPU and PyTorch.
"""

from __future__ import annotations

import argparse
import dataclasses
import time
from collections.abc import Iterator

from tracea.doctor import probe
from tracea.emitters.bench import bench
from tracea.emitters.cuda.hopper.gemm_heroes import gemm_hero_schedule
from tracea.emitters.cuda.hopper.schedule import WgmmaSchedule, hero_schedule
from tracea.kernels import Gemm

FITTED = [Gemm(128, n, k, "bf16") for n, k in ((4096, 4096), (11008, 4096), (4096, 11008), (14336, 4096),
                                                 (4096, 14336))] + \
         [Gemm(m, n, k, "bf16") for m in (64, 256) for n, k in ((4096, 4096), (11008, 4096), (4096, 14336))]
HELD_OUT = [Gemm(96, 8192, 3072, "fp16"), Gemm(96, 3072, 8192, "bf16", layout_b="col"),
            Gemm(192, 6144, 4096, "bf16"), Gemm(48, 28672, 8192, "bf16", layout_b="col"),
            Gemm(320, 4096, 4096, "fp16"), Gemm(160, 13824, 5120, "bf16"), Gemm(64, 1024, 4096, "bf16"),
            Gemm(128, 8192, 8192, "bf16", layout_b="col"), Gemm(200, 2560, 10240, "fp16"),
            Gemm(384, 5120, 5120, "bf16"), Gemm(40, 14336, 4096, "bf16", layout_b="col"),
            Gemm(512, 4096, 4096, "bf16"), Gemm(64, 2048, 8192, "bf16"), Gemm(48, 3072, 4096, "fp16"),
            Gemm(128, 2560, 8192, "bf16", layout_b="col")]
CHECK = [Gemm(80, 5120, 5120, "bf16"), Gemm(144, 8192, 2048, "fp16"), Gemm(224, 3584, 18944, "bf16"),
         Gemm(448, 2048, 5632, "bf16", layout_b="col"), Gemm(56, 4096, 12288, "bf16", layout_b="col"),
         Gemm(100, 7168, 2048, "fp16"), Gemm(256, 1536, 8960, "bf16"), Gemm(128, 6144, 16384, "bf16", layout_b="col"),
         Gemm(192, 12288, 4096, "fp16"), Gemm(96, 4096, 4096, "bf16"), Gemm(384, 3072, 3072, "bf16"),
         Gemm(160, 11008, 4096, "bf16", layout_b="col")]


# more tiles than one wave holds in every one-wave form (lm_head projections over a 32000- or 128256-word vocabulary,
# wide MLPs at a few hundred rows): where ``gemm_heroes.one_wave`` names none and the heuristic's tiles run
MANY_WAVES = [Gemm(160, 13824, 5120, "bf16"), Gemm(100, 20000, 4096, "bf16"), Gemm(128, 32000, 4096, "bf16"),
              Gemm(96, 32000, 4096, "fp16", layout_b="col"), Gemm(256, 14336, 4096, "bf16"),
              Gemm(128, 28672, 4096, "bf16", layout_b="col"), Gemm(320, 12288, 4096, "bf16"),
              Gemm(64, 65536, 4096, "bf16"), Gemm(128, 128256, 4096, "bf16", layout_b="col"),
              Gemm(200, 24576, 3072, "fp16")]
MANY_WAVES_CHECK = [Gemm(448, 16384, 4096, "bf16"), Gemm(80, 40960, 4096, "bf16", layout_b="col"),
                    Gemm(288, 8192, 8192, "bf16"), Gemm(176, 22016, 4096, "fp16"), Gemm(480, 11008, 4096, "bf16"),
                    Gemm(40, 65536, 4096, "bf16"), Gemm(384, 11008, 4096, "fp16"), Gemm(224, 18944, 3584, "bf16")]


def _ts(**kw: object) -> WgmmaSchedule:
    return WgmmaSchedule(store="tma", **kw)


FORMS = {
    "64x64 s12": _ts(bm=64, bn=64, stages=12, consumers=1, l2_hint="first"),
    "64x64 s12 split": _ts(bm=64, bn=64, stages=12, consumers=1, l2_hint="first", split=0),
    "64x128 s8": _ts(bm=64, bn=128, stages=8, consumers=1, l2_hint="first"),
    "64x128 s5 split": _ts(bm=64, bn=128, stages=5, consumers=1, l2_hint="first", split=0),
    "pp64x128 s8": _ts(bm=64, bn=128, stages=8, consumers=2, pingpong=True, l2_hint="first"),
    "128x64 s8": _ts(bm=128, bn=64, stages=8, consumers=2, l2_hint="first"),
    "128x64 s5 split": _ts(bm=128, bn=64, stages=5, consumers=2, l2_hint="first", split=0),
    "128x128 s6": _ts(bm=128, bn=128, stages=6, consumers=2, l2_hint="first"),
    "128x128 s5 split": _ts(bm=128, bn=128, stages=5, consumers=2, l2_hint="first", split=0),
    "128x256 s4": _ts(bm=128, bn=256, stages=4, consumers=2),
    "64x192 s6": _ts(bm=64, bn=192, stages=6, consumers=1, l2_hint="first"),
    "64x256 s5": _ts(bm=64, bn=256, stages=5, consumers=1, l2_hint="first"),
    "128x192 s4": _ts(bm=128, bn=192, stages=4, consumers=2, l2_hint="first"),
    "swap 128x64 s8 split": _ts(bm=128, bn=64, stages=8, consumers=2, swap=True, l2_hint="first", split=0),
    "swap 64x64 s12 split": _ts(bm=64, bn=64, stages=12, consumers=1, swap=True, l2_hint="first", split=0),
}


def measure(op: Gemm, host: object, s: WgmmaSchedule | None) -> tuple[str, float | None]:
    """(cell, Tracea's median in ms): the ratio to cuBLAS and Tracea's time, or why there is none."""
    kw = {} if s is None else {"tuned": lambda _o, _v: s.to_json(), "variant": "cuda-wgmma.gemm"}
    r = bench(op, host, backend="cuda", repeats=30, **kw)
    if r.status != "ok" or r.tracea is None:
        return r.status, None
    us = r.tracea.p50_ms * 1000
    return (f"{r.ratio:.3f}" if r.ratio is not None else "unstable") + f"/{us:.1f}", r.tracea.p50_ms


def in_time(ops: list[Gemm], match: str, end: float) -> Iterator[Gemm]:
    """The ops whose signature holds ``match``, each started before ``end`` (``time.monotonic``); a line says where
    the deadline stopped them."""
    for op in ops:
        if match not in op.signature:
            continue
        if time.monotonic() > end:
            print(f"deadline: {op.signature[:60]} and later shapes not run", flush=True)
            return
        yield op


def line(op: Gemm, cols: list[str]) -> str:
    return f"{op.m}x{op.n}x{op.k} {op.dtype.value} {op.layout_b} | " + " | ".join(cols)


def cells(op: Gemm, host: object, forms: list[WgmmaSchedule | None]) -> list[str]:
    """One cell a form on ``op``: its ratio and time (``measure``), "refused" where the op refuses the form, "-"
    where the form does not apply (None)."""
    out = []
    for s in forms:
        if s is None:
            out.append("-")
            continue
        try:
            s.validate(op)
        except Exception:  # noqa: BLE001 - a form this op refuses prints as such
            out.append("refused")
            continue
        out.append(measure(op, host, s)[0])
    return out


def before(op: Gemm) -> WgmmaSchedule:
    """The heuristic before ``gemm_heroes.one_wave``: ``schedule.hero_schedule``."""
    return hero_schedule(op)


def _forms(op: Gemm, names: list[str]) -> list[tuple[str, WgmmaSchedule | None]]:
    out: list[tuple[str, WgmmaSchedule | None]] = []
    for name in names:
        s = FORMS[name]
        if s.swap and (op.m > 64 or op.layout_b != "col"):
            s = None  # the swapped tiles hold C's rows in wgmma's n (<= 64) and need B column-major
        elif s.swap:
            s = dataclasses.replace(s, bn=-(-op.m // 8) * 8)
        out.append((name, s))
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--set", choices=("fitted", "held-out", "check", "many-waves", "many-waves-check", "all"),
                    default="fitted")
    ap.add_argument("--match", default="")
    ap.add_argument("--forms", default=",".join(FORMS))
    ap.add_argument("--compare", action="store_true")
    ap.add_argument("--deadline", type=float, default=1e9)
    a = ap.parse_args()
    start = time.monotonic()
    host = probe()
    ops = {"fitted": FITTED, "held-out": HELD_OUT, "check": CHECK, "many-waves": MANY_WAVES,
           "many-waves-check": MANY_WAVES_CHECK, "all": FITTED + HELD_OUT + CHECK}[a.set]
    names = [] if a.compare else [f for f in a.forms.split(",") if f]
    print("op | hero (name) | " + " | ".join(names or ["before (name)"]) + "   [cells: ratio/us]", flush=True)
    for op in in_time(ops, a.match, start + a.deadline):
        hero = gemm_hero_schedule(op)
        cols = [f"{measure(op, host, None)[0]} ({hero.name})"]
        if a.compare:
            old = before(op)
            cols.append(f"{'same' if old == hero else measure(op, host, old)[0]} ({old.name})")
        cols += cells(op, host, [s for _name, s in _forms(op, names)])
        print(line(op, cols), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
