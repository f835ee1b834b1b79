"""What the ``tracea export`` tests share (tests/export/test_export_*.py): running ``tracea export``, building a
package with CMake and running its CTest, the skips where cmake or NVRTC is missing, the check that a refusal
is one line and an exit code, and the global symbols a library defines."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

CMAKE = shutil.which("cmake")
needs_cmake = pytest.mark.skipif(CMAKE is None or shutil.which("cc") is None and shutil.which("gcc") is None,
                                 reason="cmake or a C compiler is missing")


def tracea(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tracea", *args], capture_output=True, text=True, timeout=300,
                          cwd=cwd)


def export(tmp_path: Path, *args: str, name: str = "pkg") -> Path:
    out = tmp_path / name
    r = tracea("export", *args, "--out", str(out))
    assert r.returncode == 0, r.stderr
    return out


def build(pkg: Path, *defines: str) -> None:
    for cmd in (["cmake", "-S", str(pkg), "-B", str(pkg / "build"), *defines],
                ["cmake", "--build", str(pkg / "build"), "-j2"]):
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]


def ctest(pkg: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ctest", "--test-dir", str(pkg / "build"), "--output-on-failure"], capture_output=True,
                          text=True, timeout=600)


def one_line_exit(r: subprocess.CompletedProcess[str], code: int, pattern: str) -> None:
    assert r.returncode == code, (r.returncode, r.stdout, r.stderr)
    assert "Traceback" not in r.stderr
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert lines and lines[0].startswith("error:") and re.search(pattern, lines[0]), r.stderr
    assert all(ln.startswith(("error:", "hint:")) for ln in lines), r.stderr


def defined_symbols(files: list[Path]) -> list[str]:
    """The global symbols ``files`` (objects or archives) define."""
    nm = subprocess.run(["nm", "-g", "--defined-only", *map(str, files)], capture_output=True, text=True, check=True)
    return [ln.split()[-1] for ln in nm.stdout.splitlines() if re.fullmatch(r"[0-9a-f]+ [A-Z] \S+", ln.strip())]


def cuda_include() -> Path | None:
    """The folder that holds cuda.h, or None."""
    for base in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda", "/usr/local/cuda-13.0"):
        if base and (Path(base) / "include" / "cuda.h").is_file():
            return Path(base) / "include"
    return None


def has_nvrtc() -> bool:
    """Whether NVRTC can be loaded here (the CUDA exports need it)."""
    try:
        from tracea.emitters import nvrtc as nv

        nv.find_nvrtc()
        return True
    except Exception:  # noqa: BLE001 - no NVRTC: the CUDA tests skip
        return False


needs_nvrtc = pytest.mark.skipif(not has_nvrtc(), reason="NVRTC (cuda-bindings) is not installed")
