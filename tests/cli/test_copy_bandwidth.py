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
    # a measured figure over the spec (the spec's clock too low) is the ceiling that holds
    raised = dataclasses.replace(ceilings["cpu", "fp32_flops"], measured=3 * ceilings["cpu", "fp32_flops"].spec)
    over = dataclasses.replace(h100, ceilings=[raised if c is ceilings["cpu", "fp32_flops"] else c for c in h100.ceilings])
    assert cb.peak_flops(over, "cpu", "fp32") == raised.measured
    ci = load_snapshot(SNAPSHOTS / "ci_vm.json")
    assert cb.peak_flops(dataclasses.replace(ci, ceilings=[]), "cpu", "fp32") is None  # no ceiling, no peak


def test_no_gpu_here_is_an_error_not_a_raise():
    """The GPU copy on a machine without one (CI): {"error": ...}, which the row shows as why it has no column."""
    from tracea.doctor.measure import measure_gpu_copy

    try:
        from cuda.bindings import driver

        gpu = driver.cuInit(0)[0] == driver.CUresult.CUDA_SUCCESS and driver.cuDeviceGetCount()[1] > 0
    except Exception:  # noqa: BLE001 - no bindings, no driver library: no GPU
        gpu = False
    if gpu:
        pytest.skip("a GPU is here: the copy would run")
    out = measure_gpu_copy(0)
    assert set(out) == {"error"} and out["error"]


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
    peak = cb.peak_flops(host, "cpu", "fp32")
    assert peak, "the CI machine's report gives its CPU's fp32 peak (doctor/ceilings.py)"
    ridge = peak / m["value"]
    assert r["decode"].memory_bound is True and r["softmax"].memory_bound is True  # 0.5 and 0.6 FLOP a byte
    assert r["square"].memory_bound is (r["square"].op.flops / r["square"].op.bytes < ridge)


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
    untimed = dataclasses.replace(r["decode"], tracea=None, copy_gbps=None, memory_bound=None)
    assert cb.attach(untimed, host) is untimed
    no_peak = dataclasses.replace(host, ceilings=[])
    bare = dataclasses.replace(r["decode"], copy_gbps=None, memory_bound=None)
    assert cb.attach(bare, no_peak) is bare  # no ridge point: nothing measured, nothing shown
    monkeypatch.setattr(cb, "_MEASURED", {"cpu": {"error": "no C compiler to build the measurement program"}})
    row = cb.attach(dataclasses.replace(r["decode"], copy_gbps=None, memory_bound=None), host)
    assert row.copy_gbps is None and row.of_copy is None and row.memory_bound is None
    assert row.copy_method == "copy bandwidth not measured: no C compiler to build the measurement program"


def test_the_suite_table_shows_memory_bound_rows_only(rows):
    from tracea_cli.suite import bandwidth_cell, copy_lines

    _, r = rows
    assert bandwidth_cell(dataclasses.replace(r["decode"], memory_bound=False)) == "-"
    assert bandwidth_cell(dataclasses.replace(r["decode"], memory_bound=None)) == "-"
    slow = dataclasses.replace(r["decode"], copy_gbps=4 * r["decode"].gbps, memory_bound=True)
    assert bandwidth_cell(slow) == f"{r['decode'].gbps:.0f} (25 %)"
    lines = copy_lines([slow, dataclasses.replace(r["square"], memory_bound=False)])
    assert len(lines) == 1 and f"{slow.copy_gbps:.1f} GB/s" in lines[0]  # once a backend, no over-100 % line
    fast = dataclasses.replace(slow, copy_gbps=r["decode"].gbps / 2)
    assert "over 100 %" in copy_lines([fast])[-1]
    missing = dataclasses.replace(slow, copy_gbps=None, copy_method="copy bandwidth not measured: TimeoutExpired")
    assert copy_lines([missing]) == ["cpu: copy bandwidth not measured: TimeoutExpired"]
