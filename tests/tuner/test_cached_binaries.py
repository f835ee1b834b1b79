"""A damaged cached binary is compiled again, once (issue 14): a CPU kernel's .so that is garbage, truncated
or zeroed is rebuilt by bench and then a plain hit, is not a permanent compile failure in a tune, and a
truncated NVRTC cubin is compiled again."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from tuner_db_checks import TUNE, assert_clean, tracea
from tuner_db_checks import home as home  # fixtures (pytest finds them here by name)
from tuner_db_checks import tuned as tuned
from tuner_db_checks import tuned_home as tuned_home


def _cached_so(home: Path) -> list[Path]:
    return sorted((home / "cache" / "cpu").glob("*.so"))


def _zero_body(path: Path) -> None:
    """An ELF header that passes the cheap check over a body the loader refuses."""
    data = bytearray(path.read_bytes())
    data[64:len(data) // 2] = bytes(len(data) // 2 - 64)
    path.write_bytes(bytes(data))


BENCH_48 = ("bench", "gemm", "--m", "48", "--repeat", "2")


@pytest.fixture(scope="module")
def benched(tmp_path_factory) -> Path:
    """A home after one bench: its compile cache holds the kernel's .so (each damage case copies it)."""
    home = tmp_path_factory.mktemp("benched") / "home"
    first = tracea(*BENCH_48, env={**os.environ, "TRACEA_HOME": str(home)})
    assert first.returncode == 0, first.stderr
    return home


@pytest.mark.parametrize("damage", ["garbage", "truncated", "zeroed body"])
def test_a_damaged_cached_so_is_rebuilt_once_by_bench(benched, home, damage) -> None:
    shutil.copytree(benched, home, dirs_exist_ok=True)
    (so,) = _cached_so(home)
    good = so.stat().st_size
    if damage == "garbage":
        so.write_bytes(b"not a shared object\n")
    elif damage == "truncated":
        so.write_bytes(so.read_bytes()[: good // 3])
    else:
        _zero_body(so)
    again = tracea(*BENCH_48)
    assert again.returncode == 0, again.stderr
    assert f"cached binary {so} was damaged" in again.stderr and "compiling it again" in again.stderr
    assert so.read_bytes()[:4] == b"\x7fELF" and so.stat().st_size == good
    third = tracea(*BENCH_48)
    assert third.returncode == 0 and "damaged" not in third.stderr  # rebuilt once, then a plain hit


def test_a_damaged_cached_so_is_not_a_permanent_compile_failure_in_tune(tuned_home) -> None:
    for so in _cached_so(tuned_home):
        _zero_body(so)
    done = tracea(*TUNE, "--budget", "2", "--retune", "--json")
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert doc["statuses"] == {"ok": 2}
    assert_clean(tuned_home / "tuning.sqlite")


def test_a_truncated_cached_cubin_is_compiled_again(tmp_path, monkeypatch, capsys) -> None:
    from tracea.doctor.errors import ToolchainMissingError
    from tracea.emitters import nvrtc as nv

    try:
        nv.find_nvrtc()
    except ToolchainMissingError:
        pytest.skip("NVRTC is not installed")
    monkeypatch.setenv("TRACEA_HOME", str(tmp_path))
    src = 'extern "C" __global__ void k(float* x) { x[threadIdx.x] *= 2.0f; }'
    cubin, _, _, hit, _ = nv.compile_cached(src, "twice", "k", "sm_80")
    assert not hit
    good = cubin.read_bytes()
    cubin.write_bytes(good[: len(good) // 2])
    again, _, _, hit, _ = nv.compile_cached(src, "twice", "k", "sm_80")
    assert not hit and again.read_bytes() == good
    assert "was damaged (truncated" in capsys.readouterr().err
    assert nv.compile_cached(src, "twice", "k", "sm_80")[3]  # and a hit after that
