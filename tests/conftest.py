"""Shared fixtures. GPU tests carry the `gpu` marker and are skipped cleanly where NVML finds no GPU.

The run makes its own world (``pytest_configure``, in the process that starts the run, before any pytest-xdist
worker exists, so that every worker and every process a test starts inherits it): ``TMPDIR`` (so gcc's,
hipcc's, Ray's and every ``tempfile`` scratch lands there), ``TRACEA_HOME`` and Python's bytecode cache
all point into one short folder of the run's own, removed when the run ends. A run that is killed cannot
remove it: the next run removes the folders of runs whose process is gone. Nothing is written to the
user's own Tracea folders, /tmp/ray or site-packages, and a ``TRACEA_HOME`` or ``RAY_ADDRESS`` set in the
user's environment is not used.
"""

from __future__ import annotations

import functools
import os
import shutil
import sys
import tempfile
from pathlib import Path

import pytest

FIXTURES = Path(__file__).parent / "fixtures"
# The tests sit in a folder per layer (tests/<layer>/, tests/emitters/<backend>/), and pytest puts each
# test's own folder on the path (their names are unique). A helper that one folder imports sits in that
# folder; the few that tests of several folders import are in tests/helpers/, put on the path here.
sys.path.insert(0, str(Path(__file__).parent / "helpers"))
RUN_PREFIX = "tt-"  # short: Ray's socket paths under it must stay under 108 bytes (test_tune_ray.py)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def _sweep(base: Path) -> None:
    """Remove the run folders of earlier runs whose process is gone (killed before they could)."""
    for old in base.glob(f"{RUN_PREFIX}*"):
        try:
            pid = int(old.name[len(RUN_PREFIX):].split("-")[0])
        except ValueError:
            continue
        if pid != os.getpid() and not _alive(pid) and old.is_dir() and old.stat().st_uid == os.getuid():
            shutil.rmtree(old, ignore_errors=True)


@pytest.hookimpl(trylast=True)
def pytest_configure(config):
    if hasattr(config, "workerinput"):  # a pytest-xdist worker: it inherited the run's world
        return
    config._tmp_path_factory.getbasetemp()  # pytest's own folders stay where pytest keeps them
    base = Path(tempfile.gettempdir())
    _sweep(base)
    run = Path(tempfile.mkdtemp(prefix=f"{RUN_PREFIX}{os.getpid()}-", dir=base))
    config._tracea_run_dir = run
    for sub in ("t", "home", "pycache"):
        (run / sub).mkdir()
    os.environ["TMPDIR"] = str(run / "t")
    tempfile.tempdir = None  # tempfile reads TMPDIR again
    os.environ["TRACEA_HOME"] = str(run / "home")
    # compiled once per run and shared by every process (a fresh machine may set PYTHONDONTWRITEBYTECODE,
    # and then each of the hundreds of `tracea` processes the tests start compiles its modules again)
    os.environ["PYTHONPYCACHEPREFIX"] = str(run / "pycache")
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    os.environ.pop("RAY_ADDRESS", None)
    os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
    # bench times each contender 0.05 s instead of 0.5 (every repeat still runs, every output is still
    # verified; no test asserts a speed), and waits as little before measuring an unstable pair again: about
    # a tenth of the suite's time on the 2-core CI machine. A test of the timing itself sets its own.
    os.environ["TRACEA_MIN_TIME"] = "0.05"


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_auto_num_workers(config):
    """``-n auto`` on a machine of few cores: one worker more than the cores this process may use. Many
    tests wait on a process they started (a compiler, ``tracea``, a tuner worker) and leave their core idle
    meanwhile; on the 2-core CI machine 3 workers finished the suite sooner than 2 (7:19 against 7:45)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return cores + 1 if cores <= 4 else None


def pytest_unconfigure(config):
    run = getattr(config, "_tracea_run_dir", None)
    if run is not None:
        shutil.rmtree(run, ignore_errors=True)


@functools.lru_cache(maxsize=1)
def _nvidia_gpu_present() -> str | None:
    """None when a GPU answers through NVML, else the reason to skip."""
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            return None if pynvml.nvmlDeviceGetCount() > 0 else "NVML sees no NVIDIA GPU"
        finally:
            pynvml.nvmlShutdown()
    except Exception as exc:  # noqa: BLE001
        return f"no NVIDIA GPU here ({type(exc).__name__})"


def pytest_collection_modifyitems(config, items):
    for item in items:
        if "gpu" in item.keywords:
            reason = _nvidia_gpu_present()
            if reason:
                item.add_marker(pytest.mark.skip(reason=reason))


@pytest.fixture
def fixtures() -> Path:
    return FIXTURES


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node):
    """A pytest-xdist worker is told the run's folder (``kernel_home``)."""
    node.workerinput["tracea_run_dir"] = str(node.config._tracea_run_dir)


@pytest.fixture(scope="session")
def kernel_home(pytestconfig, tmp_path_factory) -> Path:
    """The binary cache (a TRACEA_HOME) of the tests that compile kernels: one folder for the whole run, which
    every worker shares, so a kernel that several modules build is compiled once in the run, on whichever
    worker needs it first (it was one folder per worker: the same kernels compiled again on each). Nothing
    from an earlier run is in it. The cache is keyed by content and written atomically (host_compiler.py,
    nvrtc.py), so workers that compile one kernel at once never read half a file."""
    run = getattr(pytestconfig, "workerinput", {}).get("tracea_run_dir") or getattr(pytestconfig, "_tracea_run_dir",
                                                                                    None)
    home = Path(run) / "kernels" if run else tmp_path_factory.getbasetemp() / "tracea-home"
    home.mkdir(exist_ok=True)
    return home


@pytest.fixture(scope="module")
def kernel_cache(kernel_home):
    """The run's binary cache (``kernel_home``) as TRACEA_HOME for a module: every kernel is really compiled
    in this run. Modules that compile take it with ``pytestmark = pytest.mark.usefixtures("kernel_cache")``."""
    import os

    old = os.environ.get("TRACEA_HOME")
    os.environ["TRACEA_HOME"] = str(kernel_home)
    yield
    if old is None:
        os.environ.pop("TRACEA_HOME", None)
    else:
        os.environ["TRACEA_HOME"] = old


@pytest.fixture
def hopper_gpu():
    """Skip unless GPU 0 is an sm_90 (Hopper) GPU: the wgmma/TMA kernels' GPU tests take it with
    ``pytest.mark.usefixtures("hopper_gpu")`` beside their ``gpu`` mark."""
    from cuda.core import Device

    if Device(0).compute_capability != (9, 0):
        pytest.skip("the Hopper kernels need an sm_90 GPU")


@pytest.fixture
def home(tmp_path, monkeypatch) -> Path:
    """A fresh ``TRACEA_HOME`` for a test that runs commands (a test module may define its own)."""
    monkeypatch.setenv("TRACEA_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


EMULATOR_CXX = ("-std=c++20", "-O1", "-pthread", "-w")
EMULATOR_HEADERS = ("algorithm", "atomic", "barrier", "cmath", "cstdint", "cstdio", "cstdlib", "cstring", "thread",
                    "vector")


@pytest.fixture(scope="session")
def emulator_cxx(tmp_path_factory) -> list[str]:
    """The compiler command (without sources) for the CPU emulators of CUDA kernels (a std::thread per CUDA
    thread): g++ with EMULATOR_CXX and a precompiled header of the standard library they include, built
    once per process. Parsing those headers was half of each emulator's compile. Where the header cannot
    be precompiled, the same command without it (g++ reads the text)."""
    import shutil
    import subprocess

    cxx = shutil.which("g++")
    if cxx is None:
        pytest.skip("g++ is not installed")
    folder = tmp_path_factory.mktemp("emulator-pch")
    header = folder / "emulator_std.h"
    header.write_text("".join(f"#include <{h}>\n" for h in EMULATOR_HEADERS))
    built = subprocess.run([cxx, *EMULATOR_CXX, "-x", "c++-header", str(header), "-o", f"{header}.gch"],
                           capture_output=True, text=True, timeout=300)
    return [cxx, *EMULATOR_CXX, *(["-include", str(header)] if built.returncode == 0 else [])]
