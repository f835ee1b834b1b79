"""AMD KFD topology decoding (a real 8x MI210 host) and Apple system_profiler parsing."""

from __future__ import annotations

import json

import pytest

from tracea.doctor.sources import amd, apple


@pytest.mark.parametrize(
    ("version", "target"),
    [(90010, "gfx90a"), (90008, "gfx908"), (90402, "gfx942"), (90400, "gfx940"), (110000, "gfx1100"),
     (100300, "gfx1030"), (90006, "gfx906"), (120001, "gfx1201")],
)
def test_gfx_target_minor_and_stepping_are_hex(version, target):
    assert amd.gfx_target(version) == target


def test_mi210_topology(fixtures):
    raw = {"kfd": amd.collect_kfd(str(fixtures / "kfd" / "mi210_8x_xgmi")),
           "amdsmi": {"status": "error", "error": "ModuleNotFound"}}
    section = amd.interpret(raw)
    assert section.reason is None
    assert len(section.devices) == 8  # nodes 0-1 are CPU agents
    for g in section.devices:
        assert g.gfx_target == "gfx90a"
        assert g.compute_units == 104
        assert g.wavefront_size == 64
        assert g.lds_bytes_per_workgroup == 64 * 1024
        assert g.max_engine_clock_mhz == 1700
        assert g.pci_device_id == "0x740f"
        assert g.name == "AMD Instinct MI210" and g.sources["name"] == "table:pci-id"
        assert g.vram_bytes is None and "no local memory banks" in g.unavailable["vram_bytes"]
    assert [g.node for g in section.devices] == list(range(2, 10))


def test_no_kfd_is_a_clean_none_found(tmp_path):
    section = amd.interpret({"kfd": amd.collect_kfd(str(tmp_path / "absent"))})
    assert section.devices == [] and "no " in section.reason


def test_apple_m1_pro(fixtures):
    spd = json.loads((fixtures / "apple" / "m1_pro_spdisplays.json").read_text())
    section = apple.interpret({"status": "ok", "spdisplays": spd}, {"hw.memsize": "34359738368"})
    assert len(section.devices) == 1
    g = section.devices[0]
    assert g.chip == "Apple M1 Pro" and g.gpu_cores == 16 and g.metal_family == "Metal 3"
    assert g.unified_memory_bytes == 34359738368


def test_apple_absent_off_macos():
    section = apple.interpret(apple.collect(), None)
    assert section.devices == [] and section.reason.startswith("not macOS")


def test_amd_gpus_without_hipcc_are_told_how_to_install_it(fixtures):
    """The 8x MI210 host's topology with and without hipcc among the toolchains; no AMD GPU, no check."""
    from tracea.doctor.checks import _hip_checks
    from tracea.doctor.report import OK, WARNING, AmdSection
    from tracea.doctor.sources import toolchains

    section = amd.interpret({"kfd": amd.collect_kfd(str(fixtures / "kfd" / "mi210_8x_xgmi"))})
    without = toolchains.interpret({"tools": {"hipcc": {"path": None}}})
    [check] = _hip_checks(section, without)
    assert check.id == "hipcc" and check.mark == WARNING
    assert "8 AMD GPU(s) (gfx90a) but no hipcc" in check.message and "apt-get install hipcc" in check.hint
    found = toolchains.interpret({"tools": {"hipcc": {"path": "/usr/bin/hipcc", "version": {
        "rc": 0, "stdout": "HIP version: 5.2.21153-0\nclang version 15.0.6\n"}}}})
    [check] = _hip_checks(section, found)
    assert check.mark == OK and "hipcc 5.2.21153-0 at /usr/bin/hipcc for gfx90a" in check.message
    assert _hip_checks(AmdSection(), without) == []
