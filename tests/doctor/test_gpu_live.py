"""Live doctor on a real NVIDIA GPU (skipped without one). Run on the H100 before calling GPU work done."""

from __future__ import annotations

import json

import pytest

from tracea.doctor.snapshot import (
    build_report,
    collect_raw,
    load_snapshot,
    snapshot_document,
    write_json_atomic,
)

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def live():
    raw = collect_raw(use_cache=False)
    return raw, build_report(raw)


def test_cached_attributes_equal_live_ones(live, tmp_path, monkeypatch):
    """The static-attribute cache: a miss reads live and stores; a hit gives the same values."""
    monkeypatch.setenv("TRACEA_HOME", str(tmp_path))
    raw_live, report_live = live
    first = collect_raw()  # miss: reads live, stores
    assert "cache" not in first["cuda"] and (tmp_path / "cache").is_dir()
    second = collect_raw()  # hit
    assert second["cuda"]["cache"]["hit"] is True
    for a, b in zip(report_live.nvidia.devices, build_report(second).nvidia.devices, strict=True):
        assert (a.sm_count, a.shared_memory_per_block_optin_bytes, a.l2_cache_bytes, a.tma) == (
            b.sm_count, b.shared_memory_per_block_optin_bytes, b.l2_cache_bytes, b.tma)
        assert b.sources["sm_count"].startswith("cuda-core (cached")


def test_live_report_has_devices_with_attributes(live):
    raw, report = live
    assert report.nvidia.devices, report.nvidia.reason
    for g in report.nvidia.devices:
        assert g.sm_count and g.sm_count > 0
        assert g.compute_capability and "." in g.compute_capability
        assert g.memory_total_bytes and g.memory_total_bytes > 2**30
        assert g.shared_memory_per_block_optin_bytes >= g.shared_memory_per_block_bytes > 0
        assert g.uuid and g.uuid.startswith(("GPU-", "MIG-"))
        if raw["cuda"].get("status") == "ok":
            assert g.sources["sm_count"].startswith("cuda-core")


def test_h100_facts(live):
    _, report = live
    h100 = [g for g in report.nvidia.devices if "H100" in (g.name or "") and "PCIe" not in (g.name or "")]
    if not h100:
        pytest.skip("not an H100 SXM")
    g = h100[0]
    assert g.sm_count == 132
    assert g.compute_capability == "9.0"
    assert g.shared_memory_per_block_optin_bytes == 232448
    assert {"bf16", "fp8"} <= set(g.precisions)
    assert g.tma and g.cluster_launch


def test_snapshot_replays_to_the_same_report(live, tmp_path):
    raw, report = live
    path = tmp_path / "snap.json"
    write_json_atomic(path, snapshot_document(raw, report))
    replayed = load_snapshot(path)
    a, b = report.to_json(), replayed.to_json()
    a.pop("origin"), b.pop("origin")
    assert json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


def test_measured_gpu_ceilings_are_verified_and_plausible(live):
    from tracea.doctor.measure import measure_gpu

    _, report = live
    g = report.nvidia.devices[0]
    m = measure_gpu(g.cuda_index, g.uuid)  # found by UUID
    assert "error" not in m["memory_bandwidth"], m["memory_bandwidth"]
    assert "error" not in m["bf16_tensor_flops"], m["bf16_tensor_flops"]
    spec_bw = next(c.spec for c in report.ceilings if c.device == "cuda:0" and c.metric == "memory_bandwidth")
    # A copy reaches a large fraction of the bus, never more than the bus.
    assert 0.3 * spec_bw < m["memory_bandwidth"]["value"] < 1.05 * spec_bw


def test_tui_live_telemetry_from_real_nvml(live):
    """The TUI in live mode with the real NVML Telemetry: the GPU sparklines fill from the device."""
    pytest.importorskip("textual")
    import asyncio
    import time as _time

    from tracea.tui.doctor_app import DoctorApp
    from tracea.tui.telemetry_panel import TelemetryPanel

    raw, report = live
    app = DoctorApp(report, raw, live=True, poll_interval_s=0.05)

    async def scenario() -> None:
        async with app.run_test(size=(160, 45)) as pilot:
            deadline = _time.monotonic() + 20
            while app.polls < 4 and _time.monotonic() < deadline:
                await pilot.pause(0.05)
            assert app.polls >= 4
            panel = pilot.app.query_one(TelemetryPanel)
            g = report.nvidia.devices[0]
            widget = panel.gpus[g.nvml_index]
            assert len(widget.cells["clock_sm"].sparkline.data) >= 3
            assert 0 < widget.last["clock_sm"].value <= g.sm_clock_max_mhz
            assert 0 < widget.last["power"].value <= g.power_limit_w * 1.1
            await pilot.press("q")

    asyncio.run(scenario())
    assert app.telemetry_worker is not None
