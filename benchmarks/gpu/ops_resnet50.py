"""torchvision's ResNet-50 as users have it (fp16, channels_last, eval, inference mode), run by PyTorch (cuDNN)
and after ``tracea.ops.patch_conv2d(model)``: eager, and each captured in a CUDA graph and replayed. The
outputs are compared first (relative error of the logits against PyTorch's), then each form is timed with
CUDA events around each forward (median and p95 of ``--repeats``, after warm-up), which counts the GPU time
the host leaves idle. The counts say how many convolutions ran a Tracea kernel and how many fell back.

    python benchmarks/gpu/ops_resnet50.py [--batch 32 1] [--repeats 30]

Needs a GPU, PyTorch and torchvision.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections.abc import Callable

import torch
import torchvision

import tracea

UNSTABLE = 1.5


def forward_ms(fn: Callable[[], object]) -> float:
    """One call of ``fn`` between two CUDA events, ms (the GPU time the host leaves idle counted)."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end)


def median_p95(ms: list[float]) -> tuple[float, float]:
    ms = sorted(ms)
    return statistics.median(ms), ms[min(len(ms) - 1, round(0.95 * (len(ms) - 1)))]


def timed(fn: Callable[[], object], repeats: int) -> tuple[float, float]:
    """(median, p95) ms of ``repeats`` calls after five of warm-up."""
    for _ in range(5):
        fn()
    torch.cuda.synchronize()
    return median_p95([forward_ms(fn) for _ in range(repeats)])


def graphed(fn: Callable[[], torch.Tensor]) -> tuple[Callable[[], None], torch.Tensor]:
    for _ in range(3):  # kernels built and launches prepared outside the capture
        fn()
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        y = fn()
    return g.replay, y


def ratio(theirs: tuple[float, float], mine: tuple[float, float]) -> str:
    if theirs[1] > UNSTABLE * theirs[0] or mine[1] > UNSTABLE * mine[0]:
        return "unstable"
    return f"{theirs[0] / mine[0]:.2f}x"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, nargs="+", default=[32, 1])
    ap.add_argument("--repeats", type=int, default=30)
    args = ap.parse_args(argv)
    torch.manual_seed(0)
    model = torchvision.models.resnet50(weights=None).cuda().half().eval().to(memory_format=torch.channels_last)
    rows = []
    with torch.inference_mode():
        for batch in args.batch:
            x = torch.randn(batch, 3, 224, 224, device="cuda", dtype=torch.float16).contiguous(
                memory_format=torch.channels_last)
            tracea.ops.unpatch_conv2d(model)
            want = model(x).float()
            eager_t = timed(lambda x=x: model(x), args.repeats)
            replay_t_fn, y_t = graphed(lambda x=x: model(x))
            graph_t = timed(replay_t_fn, args.repeats)
            tracea.ops.patch_conv2d(model)
            tracea.ops.clear_cache()
            got = model(x).float()
            stats = tracea.ops.stats()
            err = float((got - want).norm() / want.norm())
            eager_m = timed(lambda x=x: model(x), args.repeats)
            replay_m_fn, y_m = graphed(lambda x=x: model(x))
            graph_m = timed(replay_m_fn, args.repeats)
            torch.cuda.synchronize()
            gerr = float((y_m.float() - y_t.float()).norm() / y_t.float().norm())
            rows.append(f"| {batch} | eager | {eager_t[0]:.3f} / {eager_t[1]:.3f} | {eager_m[0]:.3f} / {eager_m[1]:.3f} "
                        f"| {ratio(eager_t, eager_m)} | {err:.1e} | {stats.get('tracea', 0)} Tracea, "
                        f"{stats.get('fallbacks', 0)} fallbacks (first forward) |")
            rows.append(f"| {batch} | CUDA graph | {graph_t[0]:.3f} / {graph_t[1]:.3f} | {graph_m[0]:.3f} / "
                        f"{graph_m[1]:.3f} | {ratio(graph_t, graph_m)} | {gerr:.1e} | |")
            tracea.ops.unpatch_conv2d(model)
    print(f"GPU: {torch.cuda.get_device_name()}, torch {torch.__version__}, torchvision {torchvision.__version__}")
    print(f"torchvision resnet50, fp16, channels_last, inference; ms per forward, median / p95 of {args.repeats}\n")
    print("| batch | form | PyTorch (cuDNN) | patch_conv2d | PyTorch / Tracea | rel. err of the logits | convs |")
    print("|---|---|---|---|---|---|---|")
    print("\n".join(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
