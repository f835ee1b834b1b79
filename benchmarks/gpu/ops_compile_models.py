"""``torch.compile(model, backend="tracea")`` against Inductor's default on two models as users have them:
torchvision's ResNet-50 (fp16, channels_last, batch 32) and a Llama-style transformer block (bf16, batch 4,
1024 tokens, width 2048, grouped-query attention with 16 query and 4 key/value heads, causal, a GELU MLP of
width 8192). Each model is compiled by both backends, in the default mode and in ``mode="reduce-overhead"``
(Inductor's CUDA graph trees); the first call's wall time (the compile, Tracea's per-shape measurements
included) is reported for each, then every compiled form's output is checked against eager PyTorch and the
two compiled forms are timed in alternating blocks of five forwards (CUDA events around each forward,
median and p95 of ``--repeats`` each, after warm-up), so that a drift of the machine reaches both; each pair
of blocks is a round, and the median of the rounds' ratios is printed with the sign test's exact 95 %
interval (``stability.paired_ratio``): two graphs that are nearly the same differ by less than the machine's
spread, and the interval says so. The report of
every graph the tracea backend compiled is printed: which nodes became Tracea kernels, and why the others
did not.

    python benchmarks/gpu/ops_compile_models.py [--models resnet50 block] [--modes default reduce-overhead]

Needs a GPU, PyTorch and torchvision.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import statistics
import sys
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F
from ops_resnet50 import forward_ms, kernel_table, median_p95, timed
from torch import nn

import tracea
from tracea.ops import compile_backend as cb

UNSTABLE = 1.5


class Block(nn.Module):
    """Pre-norm attention (grouped-query, causal) and a GELU MLP, each added to the residual stream."""

    def __init__(self, d: int = 2048, heads: int = 16, kv_heads: int = 4, hidden: int = 8192) -> None:
        super().__init__()
        self.h, self.kv, self.hd = heads, kv_heads, d // heads
        self.n1, self.n2 = nn.RMSNorm(d), nn.RMSNorm(d)
        self.q = nn.Linear(d, d, bias=False)
        self.k = nn.Linear(d, kv_heads * self.hd, bias=False)
        self.v = nn.Linear(d, kv_heads * self.hd, bias=False)
        self.o = nn.Linear(d, d, bias=False)
        self.up, self.down = nn.Linear(d, hidden, bias=False), nn.Linear(hidden, d, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, d = x.shape
        h = self.n1(x)
        q = self.q(h).view(b, s, self.h, self.hd).transpose(1, 2)
        k = self.k(h).view(b, s, self.kv, self.hd).transpose(1, 2)
        v = self.v(h).view(b, s, self.kv, self.hd).transpose(1, 2)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        x = x + self.o(a.transpose(1, 2).reshape(b, s, d))
        return x + self.down(F.gelu(self.up(self.n2(x))))


def models(names: list[str]) -> list[tuple[str, nn.Module, torch.Tensor]]:
    out = []
    torch.manual_seed(0)
    if "resnet50" in names:
        import torchvision

        m = torchvision.models.resnet50(weights=None).cuda().half().eval().to(memory_format=torch.channels_last)
        x = torch.randn(32, 3, 224, 224, device="cuda", dtype=torch.float16).contiguous(
            memory_format=torch.channels_last)
        out.append(("torchvision resnet50, fp16, channels_last, batch 32", m, x))
    if "block" in names:
        m = Block().cuda().to(torch.bfloat16).eval()
        x = torch.randn(4, 1024, 2048, device="cuda", dtype=torch.bfloat16)
        out.append(("transformer block, bf16, b4 s1024 d2048, GQA 16/4, GELU MLP 8192", m, x))
    return out


def interleaved(fns: dict[str, Callable[[], object]], repeats: int,
                block: int = 5) -> tuple[dict[str, tuple[float, float]], list[dict[str, float]]]:
    """(median, p95) ms of each function's forwards, timed in alternating blocks, and the rounds: each round's
    block median of every function (a round's ratio is one paired sample, ``stability.paired_ratio``)."""
    ms: dict[str, list[float]] = {name: [] for name in fns}
    rounds: list[dict[str, float]] = []
    for fn in fns.values():
        for _ in range(5):
            fn()
    torch.cuda.synchronize()
    while min(len(v) for v in ms.values()) < repeats:
        rounds.append({})
        order = list(fns.items())
        for name, fn in order if len(rounds) % 2 else order[::-1]:  # each first in every other round
            got = [forward_ms(fn) for _ in range(block)]
            ms[name] += got
            rounds[-1][name] = statistics.median(got)
    return {name: median_p95(v) for name, v in ms.items()}, rounds


def paired(rounds: list[dict[str, float]]) -> str:
    """The per-round ratio Inductor / tracea: its median and the sign test's exact 95 % interval."""
    from tracea.emitters.stability import paired_ratio

    got = paired_ratio(rounds, "inductor", "tracea")
    if got is None:
        return f"{len(rounds)} rounds: too few for an interval"
    mid, lo, hi, n = got
    return f"{mid:.3f} [{lo:.3f}, {hi:.3f}] over {n} rounds"


def first_call(fn: Callable[[torch.Tensor], object], x: torch.Tensor, profile: bool) -> tuple[float, str]:
    """Seconds of ``fn``'s first call (the compile) and, with ``profile``, its cProfile by cumulative time."""
    prof = cProfile.Profile() if profile else None
    t0 = time.perf_counter()
    if prof is not None:
        prof.enable()
    fn(x)
    torch.cuda.synchronize()
    seconds = time.perf_counter() - t0
    if prof is None:
        return seconds, ""
    prof.disable()
    text = io.StringIO()
    pstats.Stats(prof, stream=text).sort_stats("cumulative").print_stats(40)
    return seconds, text.getvalue()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="+", default=["resnet50", "block"])
    ap.add_argument("--modes", nargs="+", default=["default", "reduce-overhead"])
    ap.add_argument("--repeats", type=int, default=30)
    ap.add_argument("--kernels", action="store_true", help="each compiled form's kernels under torch.profiler")
    ap.add_argument("--profile", action="store_true",
                    help="cProfile each tracea first call (the compile), its functions by cumulative time")
    args = ap.parse_args(argv)
    tracea.ops.register_compile_backend()
    rows: list = []
    reports: list[str] = []
    with torch.inference_mode():
        for label, model, x in models(args.models):
            want = model(x).float()
            eager = timed(lambda model=model, x=x: model(x), args.repeats)
            rows.append(f"| {label} | eager | | {eager[0]:.3f} / {eager[1]:.3f} | | | |")
            for mode in args.modes:
                fns: dict[str, Callable[[], object]] = {}
                for backend in ("inductor", "tracea"):
                    if backend == "inductor":
                        torch._dynamo.reset()
                    tracea.ops.clear_cache()
                    cb.REPORTS.clear()
                    fn = torch.compile(model, backend=backend, mode=None if mode == "default" else mode)
                    first, profiled = first_call(fn, x, args.profile and backend == "tracea")
                    if profiled:
                        reports.append(f"--- cProfile of the first call, {label}, mode {mode}:\n{profiled}")
                    y = fn(x).float()  # (graph trees record on later calls)
                    err = float((y - want).norm() / want.norm())
                    fns[backend] = lambda fn=fn, x=x: fn(x)
                    rows.append((label, f"{backend}, {mode}", first, err))
                    if backend == "tracea":
                        for n, rep in enumerate(cb.REPORTS):
                            reports.append(f"--- {label}, mode {mode}, graph {n}:\n{cb.format_report(rep)}")
                times, rounds = interleaved(fns, args.repeats)
                if args.kernels:
                    for name, fn in fns.items():
                        reports.append(kernel_table(f"{label}, {name}, {mode}", fn, top=16))
                i, t = times["inductor"], times["tracea"]
                stable = t[1] <= UNSTABLE * t[0] and i[1] <= UNSTABLE * i[0]
                ratio = f"{i[0] / t[0]:.2f}x" if stable else "unstable"
                for idx, name in ((-2, "inductor"), (-1, "tracea")):  # the two rows this mode appended
                    label_, form, first, err = rows[idx]
                    rows[idx] = (f"| {label_} | {form} | {first:.1f} | {times[name][0]:.3f} / {times[name][1]:.3f} | "
                                 f"{ratio if name == 'tracea' else ''} | {paired(rounds) if name == 'tracea' else ''} "
                                 f"| {err:.1e} |")
    print(f"GPU: {torch.cuda.get_device_name()}, torch {torch.__version__}; ms per forward, median / p95 of "
          f"{args.repeats}\n")
    print("| model | backend, mode | first call s (compile) | forward ms | Inductor / tracea | per-round ratio [95 %] "
          "| rel. err vs eager |")
    print("|---|---|---|---|---|---|---|")
    print("\n".join(rows))
    print()
    print("\n".join(reports))
    return 0


if __name__ == "__main__":
    sys.exit(main())
