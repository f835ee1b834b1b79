"""The Apple GPU family as a hardware fact (doctor/sources/apple.py) and the planner's requirement on it
(``Requirements.apple_families``), on the recorded M1 Pro answer of system_profiler."""

from __future__ import annotations

import dataclasses
import json

import pytest

from tracea.doctor.report import AppleGpu, AppleSection, HostReport
from tracea.doctor.sources import apple
from tracea.doctor.variants import Requirements

METAL = Requirements(apple_families=("apple7", "apple8", "apple9"))


@pytest.mark.parametrize(("chip", "family"), [
    ("Apple M1", "apple7"), ("Apple M1 Pro", "apple7"), ("Apple M1 Max", "apple7"), ("Apple M1 Ultra", "apple7"),
    ("kHW_AppleM1Item", "apple7"),  # system_profiler's _name on macOS 11
    ("Apple M2", "apple8"), ("Apple M2 Ultra", "apple8"), ("Apple M3 Max", "apple9"), ("Apple M4", "apple9"),
    ("Apple M4 Pro", "apple9"), ("Apple M5", "apple10")])
def test_the_family_of_each_m_series_chip_is_apples_table(chip, family):
    assert apple.gpu_family(chip)[0] == family


@pytest.mark.parametrize("chip", ["Apple M12", "Intel Iris Plus Graphics", "", None])
def test_a_chip_outside_the_table_has_no_family_and_says_why(chip):
    family, why = apple.gpu_family(chip)
    assert family is None and ("not in Apple's Metal feature set tables" in why or "not an Apple M-series" in why)


def _section(**gpu):
    base = {"sppci_model": "Apple M2 Pro", "spdisplays_vendor": "sppci_vendor_Apple", "sppci_cores": "19"}
    return apple.interpret({"status": "ok", "spdisplays": {"SPDisplaysDataType": [{**base, **gpu}]}}, None)


def test_the_family_system_profiler_reports_wins_over_the_chip_name():
    g = _section(spdisplays_metalfamily="spdisplays_mtlgpufamilyapple7").devices[0]
    assert g.gpu_family == "apple7" and g.sources["gpu_family"] == "system_profiler"
    g = _section().devices[0]
    assert g.gpu_family == "apple8" and g.sources["gpu_family"] == "table:M2"


def test_an_unknown_chip_is_recorded_unavailable_with_its_reason():
    g = _section(sppci_model="Apple M12").devices[0]
    assert g.gpu_family is None and "M12" in g.unavailable["gpu_family"]
    assert g.unified_memory_bytes is None and "hw.memsize" in g.unavailable["unified_memory_bytes"]


def test_the_recorded_m1_pro_is_apple7(fixtures):
    spd = json.loads((fixtures / "apple" / "m1_pro_spdisplays.json").read_text())
    g = apple.interpret({"status": "ok", "spdisplays": spd}, {"hw.memsize": "34359738368"}).devices[0]
    assert (g.chip, g.gpu_cores, g.metal_family, g.gpu_family) == ("Apple M1 Pro", 16, "Metal 3", "apple7")


def test_the_apple_snapshot_replays_one_section_only(fixtures):
    from tracea.doctor.snapshot import read_snapshot

    report, raw = read_snapshot(fixtures / "snapshots" / "m1_pro_spdisplays.json")
    assert set(raw) == {"tracea_version", "created_at", "recording", "apple"}
    assert json.loads((fixtures / "apple" / "m1_pro_spdisplays.json").read_text()) == raw["apple"]["spdisplays"]
    [g] = report.apple.devices
    assert g.chip == "Apple M1 Pro" and g.gpu_family == "apple7" and g.unified_memory_bytes is None
    assert report.nvidia.devices == [] and report.amd.devices == [] and report.toolchains == []


def _host(*gpus, reason=None):
    return dataclasses.replace(HostReport(), apple=AppleSection(devices=list(gpus), reason=reason))


def test_requirements_ask_for_an_apple_gpu_of_a_listed_family():
    assert METAL.unmet(_host(AppleGpu(chip="Apple M2", gpu_family="apple8"))) == []
    assert METAL.unmet(_host(reason="not macOS (Linux)")) == ["no Apple GPU (not macOS (Linux))"]
    [why] = METAL.unmet(_host(AppleGpu(chip="Apple M5", gpu_family="apple10")))
    assert why == "needs an Apple GPU of family apple7 or apple8 or apple9 (Apple GPU 0, Apple M5, is apple10)"
    [why] = METAL.unmet(_host(AppleGpu(chip="Apple M12", unavailable={"gpu_family": "M12 is not in the table"})))
    assert why.endswith("is of unknown family: M12 is not in the table)")
    assert Requirements().unmet(_host()) == []  # asking nothing asks no Apple GPU
