"""A BLAS pinned below this CPU by the environment: the pure function bench and tune call, and the
doctor's check, live and replayed from a snapshot's recorded environment."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tracea.doctor.blas_pin import pinned_below, unset_command
from tracea.doctor.snapshot import build_report
from tracea.doctor.sources.cpu import interpret


@pytest.fixture
def avx512_cpu(fixtures):  # this project's CI VM: Zen 4, 2 cores, AVX-512
    text = (fixtures / "cpuinfo" / "amd_epyc_ci_vm.txt").read_text()
    return interpret({"platform": {"system": "Linux", "machine": "x86_64"}, "proc_cpuinfo": text})


@pytest.fixture
def avx2_cpu(fixtures):  # Ryzen 9 5950X, one block recorded per core: 4 cores here
    text = (fixtures / "cpuinfo" / "zen3_ryzen9_5950x.txt").read_text()
    return interpret({"platform": {"system": "Linux", "machine": "x86_64"}, "proc_cpuinfo": text})


def test_nothing_set_is_nothing_pinned(avx512_cpu):
    assert pinned_below(avx512_cpu, {}) == []
    assert pinned_below(avx512_cpu, {"OPENBLAS_VERBOSE": "2", "OMP_NUM_THREADS": "2"}) == []


@pytest.mark.parametrize("core", ["Haswell", "HASWELL", "zen", "Sandybridge", "Prescott"])
def test_a_core_type_below_avx512_is_pinned(avx512_cpu, core):
    reasons = pinned_below(avx512_cpu, {"OPENBLAS_CORETYPE": core})
    assert len(reasons) == 1 and reasons[0].startswith(f"OPENBLAS_CORETYPE={core} selects ")
    assert reasons[0].endswith("this CPU runs avx512")


@pytest.mark.parametrize("core", ["SkylakeX", "CooperLake", "SapphireRapids", "NoSuchCore"])
def test_a_core_type_at_the_cpus_level_or_unknown_is_not(avx512_cpu, core):
    assert pinned_below(avx512_cpu, {"OPENBLAS_CORETYPE": core}) == []


def test_haswell_on_an_avx2_cpu_is_its_own_level(avx2_cpu):
    assert pinned_below(avx2_cpu, {"OPENBLAS_CORETYPE": "Haswell"}) == []
    assert pinned_below(avx2_cpu, {"OPENBLAS_CORETYPE": "Nehalem"}) == [
        "OPENBLAS_CORETYPE=Nehalem selects sse kernels; this CPU runs avx2"]


def test_thread_counts_below_the_cores(avx2_cpu):
    assert avx2_cpu.physical_cores == 4
    assert pinned_below(avx2_cpu, {"OPENBLAS_NUM_THREADS": "1"}) == [
        "OPENBLAS_NUM_THREADS=1 runs 1 thread; this CPU has 4 cores"]
    assert pinned_below(avx2_cpu, {"OMP_NUM_THREADS": "2,1"}) == [
        "OMP_NUM_THREADS=2,1 runs 2 threads; this CPU has 4 cores"]  # said once, for every library
    # OpenBLAS reads OPENBLAS_NUM_THREADS before OMP_NUM_THREADS: a full count there wins for it
    assert pinned_below(avx2_cpu, {"OPENBLAS_NUM_THREADS": "4", "OMP_NUM_THREADS": "1"}, "scipy-openblas 0.3.27") == []
    assert pinned_below(avx2_cpu, {"MKL_NUM_THREADS": "1"}, "scipy-openblas 0.3.27") == []
    assert pinned_below(avx2_cpu, {"MKL_NUM_THREADS": "1"}, "mkl 2024.1") == [
        "MKL_NUM_THREADS=1 runs 1 thread; this CPU has 4 cores"]
    assert pinned_below(avx2_cpu, {"OMP_NUM_THREADS": "8"}) == []
    assert pinned_below(avx2_cpu, {"OMP_NUM_THREADS": "lots"}) == []


def test_mkl_code_path_caps(avx512_cpu):
    assert pinned_below(avx512_cpu, {"MKL_ENABLE_INSTRUCTIONS": "AVX2"}) == [
        "MKL_ENABLE_INSTRUCTIONS=AVX2 caps MKL at avx2 code; this CPU runs avx512"]
    assert pinned_below(avx512_cpu, {"MKL_CBWR": "AVX,STRICT"}) == [
        "MKL_CBWR=AVX,STRICT caps MKL at avx code; this CPU runs avx512"]
    assert pinned_below(avx512_cpu, {"MKL_CBWR": "AUTO"}) == []
    assert pinned_below(avx512_cpu, {"MKL_ENABLE_INSTRUCTIONS": "AVX512"}) == []
    assert pinned_below(avx512_cpu, {"MKL_CBWR": "AVX2"}, "scipy-openblas 0.3.27") == []  # not MKL


def test_the_fix_names_the_variables(avx512_cpu):
    env = {"OPENBLAS_CORETYPE": "Haswell", "OPENBLAS_L2_SIZE": "1048576", "OMP_NUM_THREADS": "1"}
    reasons = pinned_below(avx512_cpu, env)
    assert unset_command(env, reasons) == "env -u OPENBLAS_CORETYPE -u OMP_NUM_THREADS -u OPENBLAS_L2_SIZE"


def _ci_raw(fixtures) -> dict:
    return json.loads((fixtures / "snapshots" / "ci_vm.json").read_text())["raw"]


def test_doctor_warns_from_the_recorded_environment(fixtures):
    raw = _ci_raw(fixtures)
    assert not [c for c in build_report(raw).checks if c.id == "blas-pinned"]
    raw["env"] = {**raw.get("env", {}), "OPENBLAS_CORETYPE": "Haswell", "OPENBLAS_L2_SIZE": "1048576"}
    check = next(c for c in build_report(raw).checks if c.id == "blas-pinned")
    assert check.mark == "warning"
    assert "OPENBLAS_CORETYPE=Haswell selects avx2 kernels; this CPU runs avx512" in check.message
    assert check.hint.startswith("env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE tracea bench")
    assert "numpy.show_config()" in check.hint and "wrong results" in check.hint


def test_the_live_doctor_records_and_replays_the_pin(tmp_path):
    env = {**os.environ, "OPENBLAS_CORETYPE": "Prescott"}
    env.pop("OPENBLAS_NUM_THREADS", None)
    snap = tmp_path / "snap.json"
    live = subprocess.run([sys.executable, "-m", "tracea", "doctor", "--save", str(snap), "--plain"],
                          capture_output=True, text=True, timeout=120, env=env)
    assert live.returncode == 0, live.stderr
    assert json.loads(snap.read_text())["raw"]["env"]["OPENBLAS_CORETYPE"] == "Prescott"
    clean = {k: v for k, v in os.environ.items() if k != "OPENBLAS_CORETYPE"}
    replay = subprocess.run([sys.executable, "-m", "tracea", "doctor", "--input", str(snap), "--json"],
                            capture_output=True, text=True, timeout=120, env=clean)
    doc = json.loads(replay.stdout)
    if "avx" not in (doc["cpu"]["isa"] or []):
        pytest.skip("Prescott's SSE kernels are not below this CPU")
    checks = {c["id"]: c for c in doc["checks"]}
    assert "OPENBLAS_CORETYPE=Prescott selects sse kernels" in checks["blas-pinned"]["message"]
