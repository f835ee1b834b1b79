"""1x1 convolutions as a plain GEMM on an H100 (cuda-wgmma.conv2d, path "gemm"; skipped without an sm_90
GPU): ResNet-50's stride-1 1x1 convs at N = 1 and N = 2 (M = 49 at 7x7: one partial tile), fp16 and
bf16, with and without bias, each verified against the float64 reference on fresh random inputs; a
sample of the GEMM path's space (clusters, ping-pong, direct stores, odd C, K and M); the stride-2
downsamples, which keep the gather; CUDA-events timing, without speed asserts (the figures are printed
beside the gather's on the same inputs)."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from tracea.kernels import Conv2d, relative_error, tolerance
from tracea.kernels.dtypes import to_float64

pytestmark = pytest.mark.gpu

VID = "cuda-wgmma.conv2d"
# ResNet-50's 1x1 convs (torchvision, stride on the 3x3): (C, K, H = W) at stride 1, and the stride-2 downsamples
RESNET_1X1 = [(64, 64, 56), (64, 256, 56), (256, 64, 56), (256, 128, 56), (128, 512, 28), (512, 128, 28),
              (512, 256, 28), (256, 1024, 14), (1024, 256, 14), (1024, 512, 14), (512, 2048, 7), (2048, 512, 7)]
RESNET_1X1_S2 = [(256, 512, 56), (512, 1024, 28), (1024, 2048, 14)]


class NoReport:
    nvidia = None


@pytest.fixture(autouse=True)
def _cache(kernel_home, monkeypatch):
    monkeypatch.setenv("TRACEA_HOME", str(kernel_home))


@pytest.fixture(autouse=True, scope="module")
def _sm90():
    pytest.importorskip("cuda.core")
    from cuda.core import Device

    if Device(0).compute_capability != (9, 0):
        pytest.skip("the Hopper kernels need an sm_90 GPU")


def one(n, c, h, k, dtype="fp16", bias=False, stride=1) -> Conv2d:
    return Conv2d(n=n, c=c, h=h, w=h, k=k, r=1, s=1, stride=stride, layout="nhwc", dtype=dtype, bias=bias)


def verified(op: Conv2d, schedule=None, seed: int = 0):
    """The built kernel (hero schedule unless given) after one call checked against the reference."""
    from tracea.emitters import cuda

    k = cuda.build(op, VID, schedule or cuda.hero_schedule(op, VID, NoReport()), NoReport())
    inputs = op.random_inputs(np.random.default_rng(seed))
    out = np.full(op.output_shape(), np.nan if op.dtype.value != "bf16" else 0x7FC0, op.dtype.storage)
    k(inputs, out)
    err = relative_error(to_float64(out, op.dtype), op.reference(inputs))
    assert err <= tolerance(op), (op.signature, k.artifact.schedule, err)
    res = k.artifact.metadata["resources"]
    assert res["spills"] == 0, res
    return k, inputs


@pytest.mark.parametrize("bias", [False, True], ids=["nobias", "bias"])
@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
@pytest.mark.parametrize("n", [1, 2])
@pytest.mark.parametrize("c,k,h", RESNET_1X1, ids=lambda x: str(x))
def test_resnet50_1x1_runs_the_gemm_and_matches_the_reference(c, k, h, n, dtype, bias):
    op = one(n, c, h, k, dtype, bias)
    kern, _ = verified(op, seed=c * 7 + k + h + n)
    assert kern.artifact.schedule["path"] == "gemm" and kern.rendered.entry == "tr_wgmma_gemm"
    assert kern.artifact.metadata["conv_as_gemm"]["M"] == n * h * h


def test_a_sample_of_the_gemm_path_space():
    """Odd C (200: a k tail), K (136: a partial bn tile) and M (2 x 9 x 9 = 162) over schedules the tuner
    may pick: clusters with multicast, ping-pong, direct stores, raster n, a 2-stage ring."""
    from tracea.emitters import cuda

    for dtype, bias in (("bf16", True), ("fp16", False)):
        op = one(2, 200, 9, 136, dtype, bias)
        space = [s for s in cuda.search_space(op, VID, NoReport()) if s.path == "gemm"]
        picks = [space[0],
                 next(s for s in space if s.cluster == 2 and s.store == "tma"),
                 next(s for s in space if s.pingpong and s.store == "tma"),
                 next(s for s in space if s.store == "direct" and s.raster == "n" and s.consumers == 1),
                 next(s for s in space if s.stages == 3 and s.bm == 256)]
        for i, s in enumerate(picks):
            verified(op, s, seed=i)


@pytest.mark.parametrize("c,k,h", RESNET_1X1_S2, ids=lambda x: str(x))
def test_stride2_downsamples_keep_the_gather_and_match(c, k, h):
    """A stride-2 1x1 conv is no plain GEMM over x: the hero reads it through the conv kernel (gathered, or
    TMA im2col where that can walk it), never the GEMM path."""
    op = one(1, c, h, k, "fp16", True, stride=2)
    kern, _ = verified(op, seed=5)
    assert kern.artifact.schedule.get("path", "gather") in ("gather", "im2col")
    assert kern.rendered.entry == "tr_wgmma_conv"


@pytest.mark.parametrize("c,k,h,n", [(256, 64, 56, 2), (1024, 256, 14, 2), (64, 256, 56, 1)])
def test_events_timing_of_the_gemm_path(c, k, h, n):
    """Timing sanity only; the gather's figure on the same inputs is printed beside it (-s to see it)."""
    from tracea.emitters import cuda
    from tracea.emitters.cuda.hopper.conv_heroes import conv_hero_schedule

    op = one(n, c, h, k)
    kern, inputs = verified(op)
    t = kern.time(inputs, warmup=2, repeats=10)
    assert 0 < t.min_ms <= t.p50_ms <= t.p95_ms and t.runs == 10
    gather = dataclasses.replace(conv_hero_schedule(dataclasses.replace(op, layout="nchw")), path="gather")
    assert gather.path == "gather"  # the conv kernel's gathering producer, for comparison
    g = cuda.build(op, VID, gather, NoReport()).time(inputs, warmup=2, repeats=10)
    tflops = op.flops / (t.p50_ms * 1e9)
    print(f"\n{op.signature}: gemm path {t.p50_ms:.4f} ms ({tflops:.0f} TFLOP/s), gather {g.p50_ms:.4f} ms "
          f"({g.p50_ms / t.p50_ms:.2f}x)")


def test_tracea_bench_picks_the_gemm_path(tmp_path):
    env = {**os.environ, "TRACEA_HOME": str(tmp_path)}
    cmd = [sys.executable, "-m", "tracea", "bench", "conv2d", "--n", "2", "--c", "256", "--h", "56", "--w", "56",
           "--k", "64", "--r", "1", "--s", "1", "--layout", "nhwc", "--dtype", "fp16", "--bias", "--backend", "cuda",
           "--json"]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env)
    assert res.returncode == 0, res.stderr
    row = json.loads(res.stdout.splitlines()[0])
    assert row["status"] == "ok" and row["variant"] == VID, row
    assert row["rel_err"] <= 1e-2 and row["p50_ms"] > 0
    print(f"\ntracea bench 1x1 N2 C256 56x56 K64: {row['p50_ms']} ms, ratio {row['ratio']} ({row.get('note')})")
