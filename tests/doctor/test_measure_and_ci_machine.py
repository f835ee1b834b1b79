"""What runs for real on this machine: the CPU ceiling program (built with the host compiler, its
triad verified), NVRTC compiling the matrix-unit loop for sm_80 and sm_90a, and the live report of the
CI machine checked against /proc/cpuinfo itself."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tracea.doctor.sources import cpu as cpu_source


@pytest.mark.skipif(not (shutil.which("cc") or shutil.which("gcc")), reason="no C compiler")
def test_cpu_ceilings_measured():
    from tracea.doctor.measure import measure_cpu

    m = measure_cpu(cpu_source.collect(), fma_iters=2_000_000, triad_floats=4 * 1024 * 1024)
    assert "error" not in m["fp32_flops"], m
    assert "error" not in m["memory_bandwidth"], m
    assert 1e9 < m["fp32_flops"]["value"] < 1e14
    assert 1e9 < m["memory_bandwidth"]["value"] < 1e13
    assert "FMA loop" in m["fp32_flops"]["method"] and "triad" in m["memory_bandwidth"]["method"]


def _nvrtc_available() -> bool:
    try:
        from cuda.bindings import nvrtc

        return int(nvrtc.nvrtcVersion()[0]) == 0
    except Exception:  # noqa: BLE001
        return False


@pytest.mark.skipif(not _nvrtc_available(), reason="NVRTC not installed (pip install 'tracea[cuda]')")
@pytest.mark.parametrize("cc", [(8, 0), (9, 0)])
def test_matrix_unit_loop_compiles_with_nvrtc(cc):
    from tracea.doctor.measure import compile_mma_cubin

    cubin = compile_mma_cubin(*cc)
    assert cubin[:4] == b"\x7fELF" and len(cubin) > 1000


def test_mma_loop_refuses_pre_ampere():
    from tracea.doctor.measure import compile_mma_cubin

    with pytest.raises(RuntimeError, match="sm_80"):
        compile_mma_cubin(7, 5)


@pytest.mark.skipif(not Path("/proc/cpuinfo").exists(), reason="Linux only")
def test_live_json_on_this_machine_matches_proc_cpuinfo():
    out = subprocess.run([sys.executable, "-m", "tracea", "doctor", "--json"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    cpu = doc["cpu"]
    flags = set()
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith(("flags", "Features")):
            flags = set(line.split(":", 1)[1].split())
            break
    for flag, isa in (("avx2", "avx2"), ("fma", "fma"), ("avx512f", "avx512f"), ("asimd", "neon")):
        assert (isa in cpu["isa"]) == (flag in flags), isa
    assert cpu["logical_cores"] == os.cpu_count()
    assert cpu["l1d_bytes_per_core"] and cpu["l2_bytes_per_core"]
    assert cpu["memory_total_bytes"] > 2**30 and cpu["memory_available_bytes"] > 0
    gcc = next(t for t in doc["toolchains"] if t["name"] == "gcc")
    if gcc["found"]:
        assert gcc["details"]["march_native"] == "works"
        assert set(gcc["details"]["march_native_enables"]) & set(cpu["isa"])
    if not doc["nvidia"]["devices"]:
        assert doc["nvidia"]["reason"]
    if not doc["amd"]["devices"]:
        assert doc["amd"]["reason"]
    assert doc["errors"] == []


def test_no_c_compiler_is_a_problem(fixtures):
    from tracea.doctor.snapshot import build_report

    raw = json.loads((fixtures / "snapshots" / "ci_vm.json").read_text())["raw"]
    raw["toolchains"]["cc"] = {name: {"path": None} for name in ("cc", "gcc", "clang")}
    check = next(c for c in build_report(raw).checks if c.id == "c-compiler")
    assert check.mark == "problem" and "apt-get install gcc" in check.hint


def test_compiler_older_than_the_cpu(fixtures):
    from tracea.doctor.snapshot import build_report

    raw = json.loads((fixtures / "snapshots" / "ci_vm.json").read_text())["raw"]
    macros = raw["toolchains"]["cc"]["cc"]["march_native_macros"]
    macros["stdout"] = "\n".join(ln for ln in macros["stdout"].splitlines() if "AVX512" not in ln)
    check = next(c for c in build_report(raw).checks if c.id == "march-native")
    assert check.mark == "warning" and "avx512f" in check.message


# File lists of the real wheels (pip download --no-deps pynvml==11.5.0 / 12.0.0, unzip -l).
PYNVML_11_5_0 = ["pynvml/__init__.py", "pynvml/_version.py", "pynvml/nvml.py", "pynvml/smi.py"]
PYNVML_12_0_0 = ["pynvml_utils/__init__.py", "pynvml_utils/smi.py", "pynvml_utils/tests/test_nvml.py",
                 "pynvml_utils/tests/test_smi.py"]


@pytest.mark.parametrize(
    ("version", "files", "origin", "expected"),
    [
        ("11.5.0", PYNVML_11_5_0, "/site/pynvml/__init__.py", "shadowing"),
        ("12.0.0", PYNVML_12_0_0, "/site/pynvml.py", "deprecated"),
    ],
)
def test_pynvml_shadow(fixtures, version, files, origin, expected):
    from tracea.doctor.snapshot import build_report

    raw = json.loads((fixtures / "snapshots" / "ci_vm.json").read_text())["raw"]
    raw["python"]["packages"]["pynvml"] = version
    raw["python"]["pynvml_dist_files"] = files
    raw["python"]["pynvml_origin"] = origin
    report = build_report(raw)
    check = next(c for c in report.checks if c.id == "pynvml-shadow")
    assert report.python.pynvml_shadow.startswith(expected)
    assert check.mark == ("problem" if expected == "shadowing" else "warning")
    assert "pip uninstall" in check.hint
