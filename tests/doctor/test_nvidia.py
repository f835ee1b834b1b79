"""NVML paths: the real library-not-found answer on this machine, and the recorded answers of a real
H200 replayed through the real collector with injected NVML errors (driver mismatch, one field not
supported); the cuda-core join; CUDA_VISIBLE_DEVICES the way the CUDA runtime reads it."""

from __future__ import annotations

import copy
import json

import pynvml
import pytest
from recorded_nvml import RecordedNvml

from tracea.doctor.checks import run_checks
from tracea.doctor.snapshot import build_report
from tracea.doctor.sources import nvidia, nvml


@pytest.fixture(scope="module")
def h200_raw(request):
    from pathlib import Path

    path = Path(__file__).parents[1] / "fixtures" / "snapshots" / "h200_live.json"
    return json.loads(path.read_text())["raw"]


def test_real_nvml_without_a_gpu_is_library_not_found():
    from conftest import _nvidia_gpu_present

    if _nvidia_gpu_present() is None:
        pytest.skip("this machine has a GPU")
    raw = nvml.collect()
    assert raw["status"] == "error"
    assert raw["error"] in ("LibraryNotFound", "DriverNotLoaded")
    section = nvidia.interpret(raw, None, {})
    assert section.devices == [] and section.reason


def test_recorded_h200_through_the_real_collector(h200_raw):
    fake = RecordedNvml(h200_raw["nvml"])
    raw = nvml.collect(fake)
    assert fake.initialised == 1 and fake.shutdowns == 1
    assert raw["devices"][0]["calls"] == h200_raw["nvml"]["devices"][0]["calls"]
    g = nvidia.interpret(raw, h200_raw["cuda"], {}).devices[0]
    assert (g.name, g.sm_count, g.compute_capability) == ("NVIDIA H200", 132, "9.0")
    assert g.sources["sm_count"] == "cuda-core"


def test_library_not_found_and_driver_mismatch_have_hints(h200_raw):
    for code, err, mark, words in (
        (pynvml.NVML_ERROR_LIBRARY_NOT_FOUND, "LibraryNotFound", "ok", "--gpus all"),
        (pynvml.NVML_ERROR_LIB_RM_VERSION_MISMATCH, "LibRmVersionMismatch", "problem", "reboot"),
        (pynvml.NVML_ERROR_DRIVER_NOT_LOADED, "DriverNotLoaded", "problem", "modprobe"),
    ):
        raw = nvml.collect(RecordedNvml(h200_raw["nvml"], init_error=code))
        assert raw["status"] == "error" and raw["error"] == err
        full = {**h200_raw, "nvml": raw, "host": {**h200_raw["host"], "dev_nvidia": []}}
        report = build_report(full)
        assert report.nvidia.devices == [] and report.nvidia.reason
        check = next(c for c in report.checks if c.id == "nvml")
        assert check.mark == mark and words in check.hint


def test_one_unsupported_field_costs_only_that_field(h200_raw):
    fake = RecordedNvml(h200_raw["nvml"], inject={(0, "power_usage_mw"): pynvml.NVML_ERROR_NOT_SUPPORTED,
                                                  (0, "clock_sm_mhz"): pynvml.NVML_ERROR_UNKNOWN})
    raw = nvml.collect(fake)
    assert raw["devices"][0]["calls"]["power_usage_mw"]["error"] == "NotSupported"
    full = {**h200_raw, "nvml": raw}
    report = build_report(full)
    g = report.nvidia.devices[0]
    assert g.power_draw_w is None and "does not support" in g.unavailable["power_draw_w"]
    assert g.sm_clock_mhz is None and "Unknown" in g.unavailable["sm_clock_mhz"]
    assert g.sm_count == 132 and g.power_limit_w == 700.0  # everything else intact
    assert any("sm_clock_mhz" in w for w in report.warnings)  # a real error is surfaced, NotSupported is not
    assert not any("power_draw_w" in w for w in report.warnings)


def test_without_cuda_core_the_table_fills_in_and_says_so(h200_raw):
    section = nvidia.interpret(h200_raw["nvml"], {"status": "error", "message": "cuda-core is not installed"}, {})
    g = section.devices[0]
    assert g.sm_count == 132 and g.sources["sm_count"].startswith("nvml cores / table:cc9.0")
    assert g.shared_memory_per_block_optin_bytes == 232448 and g.sources["shared_memory_per_block_optin_bytes"] == "table:cc9.0"
    assert g.l2_cache_bytes == 60 * 2**20 and g.sources["l2_cache_bytes"] == "table:NVIDIA H200"
    report = build_report({**h200_raw, "cuda": {"status": "error", "message": "cuda-core is not installed"}})
    assert any(c.id == "cuda-core" and c.mark == "warning" for c in report.checks)


def _two_gpus(h200_raw):
    a = copy.deepcopy(h200_raw["nvml"])
    second = copy.deepcopy(a["devices"][0])
    second["index"] = 1
    second["calls"]["uuid"] = "GPU-99999999-0000-1111-2222-333333333333"
    a["devices"].append(second)
    return a["devices"]


@pytest.mark.parametrize(
    ("cvd", "expected"),
    [
        (None, ["GPU-1810", "GPU-9999"]),
        ("", []),
        ("1", ["GPU-9999"]),
        ("1,0", ["GPU-9999", "GPU-1810"]),
        ("GPU-9999", ["GPU-9999"]),
        ("GPU-1810b632-72b1-4671-6c6c-b9e202a7fdea", ["GPU-1810"]),
        ("0,7,1", ["GPU-1810"]),  # CUDA stops at the first entry that names no device
        ("0,0", ["GPU-1810"]),  # a repeat also ends the list
        ("GPU-", []),  # an ambiguous prefix names no device
        ("99999999-0000-1111", []),  # CUDA takes a UUID only with its GPU- prefix
    ],
)
def test_cuda_visible_devices(h200_raw, cvd, expected):
    visible = nvidia.resolve_visible(_two_gpus(h200_raw), cvd)
    assert [d["calls"]["uuid"][:8] for d, _ in visible] == expected


def test_mig_uuid_in_cuda_visible_devices(h200_raw):
    devices = _two_gpus(h200_raw)
    devices[1]["mig_devices"] = [{"index": 0, "uuid": "MIG-aaaa-bbbb", "name": "NVIDIA H200 MIG 1g.18gb"}]
    visible = nvidia.resolve_visible(devices, "MIG-aaaa-bbbb")
    assert len(visible) == 1 and visible[0][1] == "MIG-aaaa-bbbb" and visible[0][0]["index"] == 1


def test_checks_for_mig_throttle_persistence(h200_raw):
    raw = copy.deepcopy(h200_raw)
    calls = raw["nvml"]["devices"][0]["calls"]
    calls["mig_mode"] = [1, 1]
    calls["clocks_event_reasons"] = 0x4 | 0x40  # sw power cap + hw thermal slowdown
    calls["persistence_mode"] = 0
    report = build_report(raw)
    by_id = {c.id: c for c in report.checks}
    assert by_id["mig:0"].mark == "warning"
    assert "sw_power_cap" in by_id["throttle:0"].message and "hw_thermal_slowdown" in by_id["throttle:0"].message
    assert "-pm 1" in by_id["persistence:0"].hint
    assert "gpu:0" not in by_id  # the ok line is only for a GPU with nothing to say


def test_toolkit_newer_than_driver(h200_raw):
    raw = copy.deepcopy(h200_raw)
    raw["toolchains"]["tools"]["nvrtc"] = {"version": [13, 5]}
    report = build_report(raw)
    check = next(c for c in report.checks if c.id == "nvrtc-newer-than-driver")
    assert check.mark == "warning" and "13.5" in check.message and "13.0" in check.message


def test_wsl_library_path_hint(h200_raw):
    raw = {**h200_raw, "nvml": {"status": "error", "error": "LibraryNotFound", "message": "x"},
           "host": {**h200_raw["host"], "wsl": True}}
    report = build_report(raw)
    checks = {c.id: c for c in report.checks}
    assert "/usr/lib/wsl/lib" in checks["nvml"].hint and checks["wsl"].mark == "warning"


def test_container_without_gpus(h200_raw):
    raw = {**h200_raw, "nvml": {"status": "error", "error": "LibraryNotFound", "message": "x"},
           "host": {**h200_raw["host"], "dev_nvidia": ["/dev/nvidia0"]}}
    check = next(c for c in build_report(raw).checks if c.id == "nvml")
    assert check.mark == "problem" and "--gpus all" in check.hint


def test_checks_use_only_interpreted_values(h200_raw):
    report = build_report(h200_raw)
    assert run_checks(h200_raw, report.cpu, report.nvidia, report.toolchains, report.python) == report.checks


def test_attribute_cache_hits_only_for_the_same_driver_and_gpus(h200_raw, tmp_path):
    from tracea.doctor.sources import cuda

    path = str(tmp_path / "cache.json")
    nv, cu = h200_raw["nvml"], h200_raw["cuda"]
    assert cuda.cache_lookup(nv, path) is None  # nothing stored yet
    cuda.cache_store(nv, cu, path)
    hit = cuda.cache_lookup(nv, path)
    assert hit["cache"]["hit"] is True
    assert [dict(d, ordinal=None) for d in cu["devices"]] == hit["devices"]  # ordinals depend on the env: dropped
    g = nvidia.interpret(nv, hit, {}).devices[0]
    assert g.sm_count == 132 and g.sources["sm_count"].startswith("cuda-core (cached ")

    upgraded = {**nv, "driver_version": "590.10"}
    assert cuda.cache_lookup(upgraded, path) is None  # a new driver is a miss, never a stale hit
    swapped = copy.deepcopy(nv)
    swapped["devices"][0]["calls"]["uuid"] = "GPU-00000000-1111-2222-3333-444444444444"
    assert cuda.cache_lookup(swapped, path) is None  # another GPU is a miss
    assert cuda.cache_lookup({"status": "error", "error": "LibraryNotFound"}, path) is None

    for corrupt in ("{ truncated", '{"schema": 1}', "[]", '{"schema": 1, "entries": []}', '{"schema": 1, "entries": {"x": 5}}'):
        (tmp_path / "cache.json").write_text(corrupt)
        assert cuda.cache_lookup(nv, path) is None  # a corrupt cache is a miss, not a crash
        cuda.cache_store(nv, cu, path)  # and is rewritten whole
        assert cuda.cache_lookup(nv, path) is not None


def test_attribute_cache_misses_on_a_new_mig_layout(h200_raw, tmp_path):
    from tracea.doctor.sources import cuda

    path = str(tmp_path / "cache.json")
    nv, cu = h200_raw["nvml"], h200_raw["cuda"]
    cuda.cache_store(nv, cu, path)
    mig = copy.deepcopy(nv)
    mig["devices"][0]["calls"]["mig_mode"] = [1, 1]
    mig["devices"][0]["mig_devices"] = [{"index": 0, "uuid": "MIG-aaaa-bbbb", "name": "NVIDIA H200 MIG 1g.18gb",
                                         "memory_info": {"total": 18 * 2**30, "used": 0, "free": 18 * 2**30}}]
    assert cuda.cache_lookup(mig, path) is None


def test_a_corrupt_cache_file_never_breaks_the_probe(h200_raw, tmp_path, monkeypatch):
    """The cache is read inside the cuda source's guard: whatever is in the file, the report stands."""
    from tracea.doctor import snapshot
    from tracea.doctor.sources import cuda

    monkeypatch.setenv("TRACEA_HOME", str(tmp_path))
    (tmp_path / "cache").mkdir()
    (tmp_path / "cache" / "doctor-cuda-attributes.json").write_text('{"schema": 1}')
    assert cuda.cache_lookup(h200_raw["nvml"], cuda.cache_path()) is None
    raw = snapshot.collect_raw()
    assert snapshot.build_report(raw).cpu.model  # a full report, whatever the machine has


def test_failed_readings_are_not_cached(h200_raw, tmp_path):
    from tracea.doctor.sources import cuda

    path = str(tmp_path / "cache.json")
    cuda.cache_store(h200_raw["nvml"], {"status": "error", "message": "no cuda-core"}, path)
    assert not (tmp_path / "cache.json").exists()
    partial = copy.deepcopy(h200_raw["cuda"])
    partial["devices"][0]["attributes"]["l2_cache_size"] = {"error": "CUDAError", "message": "x"}
    cuda.cache_store(h200_raw["nvml"], partial, path)
    assert not (tmp_path / "cache.json").exists()


def test_lost_gpu_is_a_problem(h200_raw):
    raw = copy.deepcopy(h200_raw)
    raw["nvml"]["devices"].append({"index": 1, "handle_error": {"error": "GpuIsLost", "code": 15, "message": "GPU is lost"}})
    raw["cuda"] = {"status": "error", "message": "x"}
    report = build_report(raw)
    lost = report.nvidia.devices[1]
    assert lost.name is None and lost.sm_count is None and "GpuIsLost" in lost.unavailable["sm_count"]
    check = next(c for c in report.checks if c.id == "gpu-lost:1")
    assert check.mark == "problem" and "xid" in check.hint.lower()


def test_mig_instance_gets_no_whole_gpu_figures(h200_raw):
    raw = copy.deepcopy(h200_raw)
    d = raw["nvml"]["devices"][0]
    d["calls"]["mig_mode"] = [1, 1]
    d["mig_devices"] = [{"index": 0, "uuid": "MIG-aaaa-bbbb", "name": "NVIDIA H200 MIG 1g.18gb",
                         "memory_info": {"total": 18 * 2**30, "used": 1, "free": 18 * 2**30 - 1}}]
    raw["cuda"] = {"status": "error", "message": "cuda-core is not installed"}
    raw["env"] = {"CUDA_VISIBLE_DEVICES": "MIG-aaaa-bbbb"}
    report = build_report(raw)
    g = report.nvidia.devices[0]
    assert g.uuid == "MIG-aaaa-bbbb" and g.name == "NVIDIA H200 MIG 1g.18gb"
    assert g.memory_total_bytes == 18 * 2**30  # the slice's memory, not the GPU's
    assert g.sm_count is None and "MIG" in g.unavailable["sm_count"]
    assert g.l2_cache_bytes is None
    assert all(c.spec is None for c in report.ceilings if c.device == "cuda:0")


def test_cuda_order_follows_cuda_enumeration(h200_raw):
    nv = copy.deepcopy(h200_raw["nvml"])
    devices = _two_gpus(h200_raw)
    devices[1]["calls"]["name"] = "NVIDIA H100 PCIe"
    nv["devices"] = devices
    # CUDA (fastest first) enumerates the second NVML device first
    cu = {"status": "ok", "devices": [
        {"ordinal": 0, "uuid": "99999999-0000-1111-2222-333333333333", "attributes": {}},
        {"ordinal": 1, "uuid": "1810b632-72b1-4671-6c6c-b9e202a7fdea", "attributes": {}},
    ]}
    section = nvidia.interpret(nv, cu, {})
    assert [(g.cuda_index, g.nvml_index) for g in section.devices] == [(0, 1), (1, 0)]
    assert section.devices[0].sources["cuda_index"] == "cuda-core enumeration"
    unsure = nvidia.interpret(nv, {"status": "error", "message": "x"}, {})
    assert "assuming PCI order" in unsure.devices[0].sources["cuda_index"]
    sure = nvidia.interpret(nv, {"status": "error", "message": "x"}, {"CUDA_DEVICE_ORDER": "PCI_BUS_ID"})
    assert sure.devices[0].sources["cuda_index"] == "CUDA_VISIBLE_DEVICES order (PCI order)"
