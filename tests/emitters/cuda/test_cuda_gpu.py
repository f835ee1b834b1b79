"""CUDA kernels on a real GPU (skipped cleanly without one): every variant verified on odd shapes against the
float64 reference, events timing, and `tracea bench --backend cuda` end to end."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from tracea.kernels import Conv2d, Gemm, Softmax, relative_error, tolerance
from tracea.kernels.dtypes import to_float64

pytestmark = pytest.mark.gpu


class NoReport:
    nvidia = None


CASES = [
    ("cuda-mma-sync.gemm", Gemm(129, 95, 67, "bf16", epilogue=("bias", "relu"))),
    ("cuda-mma-sync.gemm", Gemm(200, 136, 88, "fp16", layout_a="col", layout_b="col", epilogue=("residual",))),
    ("cuda-mma-sync.conv2d", Conv2d(2, 16, 13, 11, 24, 3, 3, padding=1, layout="nhwc", dtype="bf16", bias=True)),
    ("cuda-mma-sync.conv2d", Conv2d(1, 3, 15, 17, 9, 5, 5, stride=2, padding=2, dtype="fp16")),
    ("cuda-simt.gemm", Gemm(77, 129, 33, layout_b="col", epilogue=("gelu", "scale"), alpha=1.5)),
    ("cuda-simt.conv2d", Conv2d(2, 5, 11, 9, 7, 3, 3, padding=1, stride=2, bias=True)),
    ("cuda-simt.softmax", Softmax(33, 999)),
    ("cuda-simt.softmax", Softmax(8, 8200, "bf16")),
    # Hopper (sm_90 only): partial tiles in every dimension, both operand majors, fused epilogues, TMA store.
    ("cuda-wgmma.gemm", Gemm(200, 136, 88, "bf16", epilogue=("bias", "gelu"))),
    ("cuda-wgmma.gemm", Gemm(520, 264, 328, "fp16", layout_a="col", layout_b="col", epilogue=("scale", "residual"),
                             alpha=0.5)),
    ("cuda-wgmma.gemm", Gemm(1024, 1024, 1024, "bf16")),
    # the one-wave tiles of gemm_heroes.one_wave: 64 x 64 on 12 stages (64 tiles), 64 x 192 (partial last column tile)
    ("cuda-wgmma.gemm", Gemm(100, 2000, 1300, "bf16", layout_b="col", epilogue=("bias",))),
    ("cuda-wgmma.gemm", Gemm(300, 4000, 1200, "fp16")),
    ("cuda-wgmma.conv2d", Conv2d(2, 64, 30, 30, 96, 3, 3, padding=1, stride=2, layout="nhwc", dtype="fp16")),
    ("cuda-wgmma.conv2d", Conv2d(1, 24, 17, 19, 40, 3, 3, padding=1, layout="nhwc", dtype="bf16")),
]


@pytest.fixture(autouse=True)
def _cache(kernel_home, monkeypatch):
    monkeypatch.setenv("TRACEA_HOME", str(kernel_home))


@pytest.mark.parametrize("vid,op", CASES, ids=lambda x: x if isinstance(x, str) else x.signature[:40])
def test_kernel_matches_the_reference_on_odd_shapes(vid, op):
    from tracea.emitters import cuda

    if vid.startswith("cuda-wgmma"):
        from cuda.core import Device

        if Device(0).compute_capability != (9, 0):
            pytest.skip("the Hopper kernels need an sm_90 GPU")
    k = cuda.build(op, vid, cuda.hero_schedule(op, vid, NoReport()), NoReport())
    inputs = op.random_inputs(np.random.default_rng(11))
    out = np.full(op.output_shape(), np.nan if op.dtype.value != "bf16" else 0x7FC0, op.dtype.storage)
    k(inputs, out)
    err = relative_error(to_float64(out, op.dtype), op.reference(inputs))
    assert err <= tolerance(op), err
    t = k.time(inputs, warmup=1, repeats=5)
    assert 0 < t.min_ms <= t.p50_ms <= t.p95_ms and t.runs == 5
    res = k.artifact.metadata["resources"]
    log = k.artifact.metadata.get("compile_log", "")
    assert res["regs_per_thread"] > 0 and res["spills"] == 0, (res, log[-800:])


def test_tracea_bench_backend_cuda(tmp_path):
    env = {**os.environ, "TRACEA_HOME": str(tmp_path)}
    res = subprocess.run([sys.executable, "-m", "tracea", "bench", "gemm", "--m", "1000", "--dtype", "fp32",
                          "--backend", "cuda", "--json"], capture_output=True, text=True, timeout=600, env=env)
    assert res.returncode == 0, res.stderr
    row = json.loads(res.stdout.splitlines()[0])
    assert row["status"] == "ok" and row["backend"] == "cuda" and row["variant"] == "cuda-simt.gemm"
    assert row["rel_err"] <= 1e-4 and row["baseline"]
    # cuBLAS takes about 0.06 ms here; where its p95 strays from its median the ratio is withheld, and
    # the row must say why (on an H100 two runs gave p95/p50 = 1.65 and 2.14, a third a stable ratio)
    if row["ratio"] is None:
        assert "unstable" in (row["note"] or ""), row
    else:
        assert row["ratio"] > 0
    assert row["p50_ms"] > 0
