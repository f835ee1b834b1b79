"""The bandwidth column of bench rows (emitters/copy_bandwidth.py, issue 34): the ridge-point test on hand-worked
figures, the peak from recorded snapshots' ceilings, and a real CPU bench row with the stream triad measured by the
compiled program in the same process."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from tracea.doctor import probe
from tracea.doctor.snapshot import load_snapshot
from tracea.emitters import copy_bandwidth as cb
from tracea.emitters import registry
from tracea.emitters.bench import bench
from tracea.kernels import Gemm, Softmax

SNAPSHOTS = Path(__file__).resolve().parents[1] / "fixtures" / "snapshots"


def test_the_ridge_point_by_hand():
    """gemm 1 x 4096 x 4096 fp32: 2 x 4096^2 FLOP over (4096 + 4096^2 + 4096) x 4 bytes = 0.4998 FLOP a byte;
    256^3: 2 x 256^3 over 3 x 256^2 x 4 = 42.7. Against a 166 GFLOP/s peak and 30 GB/s (ridge 5.5): the first is
    memory-bound, the second is not; with either figure unknown, neither."""
    decode, square = Gemm(m=1, n=4096, k=4096), Gemm(m=256, n=256, k=256)
    assert decode.flops / decode.bytes == pytest.approx(2 * 4096**2 / ((2 * 4096 + 4096**2) * 4))
    assert square.flops / square.bytes == pytest.approx(256 / 6)
    assert cb.memory_bound(decode, 166e9, 30e9) is True
    assert cb.memory_bound(square, 166e9, 30e9) is False
    assert cb.memory_bound(square, 166e9, 1e9) is True  # a slow enough memory makes it so
    assert cb.memory_bound(decode, None, 30e9) is None and cb.memory_bound(decode, 166e9, None) is None


def test_the_peak_is_the_ceiling_that_holds():
    """From recorded machines: an H100's bf16 rows against the tensor-core spec (its measured mma.sync figure is
    lower), fp32 against the CUDA cores; the CPU's fp32 FMA ceiling where the measured figure is below the spec;
    nothing for a backend without ceilings (HIP)."""
    h100 = load_snapshot(SNAPSHOTS / "h100_measured.json")
    ceilings = {(c.device, c.metric): c for c in h100.ceilings}
    assert cb.peak_flops(h100, "cuda", "bf16") == ceilings["cuda:0", "bf16_tensor_flops"].spec
    assert ceilings["cuda:0", "bf16_tensor_flops"].measured < ceilings["cuda:0", "bf16_tensor_flops"].spec
    assert cb.peak_flops(h100, "cuda", "fp32") == ceilings["cuda:0", "fp32_flops"].spec
    assert cb.peak_flops(h100, "cpu", "fp32") == ceilings["cpu", "fp32_flops"].spec
    assert cb.peak_flops(h100, "hip", "fp16") is None


@pytest.fixture(scope="module")
def rows():
    host = probe()
    out = {}
    for name, op in (("decode", Gemm(m=1, n=4096, k=4096)), ("square", Gemm(m=192, n=192, k=192)),
                     ("softmax", Softmax(rows=2048, cols=2048))):
        out[name] = cb.attach(bench(op, host, backend="cpu", repeats=3, warmup=1, min_seconds=0.05), host)
    return host, out


def test_a_cpu_row_is_held_against_the_triad_of_the_same_process(rows):
    host, r = rows
    m = cb.measured("cpu", host)
    assert m is not None and m.get("value"), m  # the program built and ran (cc is a CI requirement)
    assert "stream triad" in m["method"]
    for row in r.values():
        assert row.status == "ok" and row.copy_gbps == pytest.approx(m["value"] / 1e9)
        assert row.of_copy == pytest.approx(row.gbps / row.copy_gbps)
    assert r["decode"].memory_bound is True and r["softmax"].memory_bound is True
    if cb.peak_flops(host, "cpu", "fp32"):
        assert r["square"].memory_bound is False  # 32 FLOP a byte: over any CPU's ridge point


def test_the_copy_is_measured_once_a_process(rows, monkeypatch):
    host, r = rows
    calls = []
    monkeypatch.setattr(registry.backend("cpu"), "copy_bandwidth", lambda h: calls.append(h) or {"value": 1.0})
    again = cb.attach(dataclasses.replace(r["decode"], copy_gbps=None), host)
    assert not calls and again.copy_gbps == r["decode"].copy_gbps


def test_a_row_that_did_not_time_or_a_failed_measurement(rows, monkeypatch):
    host, r = rows
    failed = dataclasses.replace(r["decode"], status="wrong_result", copy_gbps=None, memory_bound=None)
    assert cb.attach(failed, host) is failed
    monkeypatch.setattr(cb, "_MEASURED", {"cpu": {"error": "no C compiler to build the measurement program"}})
    row = cb.attach(dataclasses.replace(r["decode"], copy_gbps=None, memory_bound=None), host)
    assert row.copy_gbps is None and row.of_copy is None and row.memory_bound is None
    assert row.copy_method == "copy bandwidth not measured: no C compiler to build the measurement program"


def test_the_suite_table_shows_memory_bound_rows_only(rows):
    from tracea_cli.suite import bandwidth_cell, copy_lines

    _, r = rows
    assert bandwidth_cell(r["square"]) == "-" or r["square"].memory_bound
    cell = bandwidth_cell(r["decode"])
    assert cell == f"{r['decode'].gbps:.0f} ({100 * r['decode'].of_copy:.0f} %)"
    lines = copy_lines(list(r.values()))
    assert len([x for x in lines if "copy measured in this run" in x]) == 1  # once a backend
    assert f"{r['decode'].copy_gbps:.1f} GB/s" in lines[0]
