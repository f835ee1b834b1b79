"""Hostile bundles made from a real one: a real `tracea bench --backend cpu` run, packed by `tracea
pack-repro`, unpacked, tampered with, and (as a hostile sender would) re-signed so that the manifest's
sizes and sha256 sums match the tampered files.

Every replay runs as a subprocess with TRACEA_HOME and TMPDIR inside the test's own folder, so what it
writes can be listed (``Tree``): a replay may write into its compile cache (home/cache) and nowhere else.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import subprocess
import sys
import tarfile
from dataclasses import dataclass
from pathlib import Path

import pytest

# the bundles extracted here were made by Tracea in this run; the "data" filter where this Python has it
# (3.11.4+, 3.10.12+: Debian 12's 3.11.2 has not)
SAFE_EXTRACT = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}

GEMM = ["gemm", "--m", "32", "--n", "24", "--k", "16", "--repeat", "2", "--warmup", "1"]
FAST = ["--repeat", "2", "--warmup", "1"]


def run_tracea(home: Path, *args: str, tmpdir: Path | None = None, timeout: int = 300) -> subprocess.CompletedProcess:
    env = {**os.environ, "TRACEA_HOME": str(home)}
    if tmpdir is not None:
        tmpdir.mkdir(parents=True, exist_ok=True)
        env["TMPDIR"] = str(tmpdir)
    return subprocess.run([sys.executable, "-m", "tracea", *args], capture_output=True, text=True, timeout=timeout,
                          env=env, stdin=subprocess.DEVNULL, cwd=home.parent)


@pytest.fixture(scope="session")
def real_bundle(tmp_path_factory) -> Path:
    """One real CPU bench run, packed."""
    base = tmp_path_factory.mktemp("real-bundle")
    home = base / "home"
    out = run_tracea(home, "bench", *GEMM, "--backend", "cpu")
    assert out.returncode == 0, out.stderr
    pack = run_tracea(home, "pack-repro", "-o", str(base / "bundle.tar.gz"))
    assert pack.returncode == 0, pack.stderr
    return base / "bundle.tar.gz"


@pytest.fixture(scope="session")
def own_kernel_cache(real_bundle, tmp_path_factory) -> Path:
    """The compile cache after a default replay of the real bundle: Tracea's own rendering, built with
    Tracea's flags (a test copies it into its home: its replay then finds that kernel compiled)."""
    base = tmp_path_factory.mktemp("own-cache")
    out = run_tracea(base / "home", "replay", str(real_bundle), *FAST, "--yes")
    assert out.returncode == 0, out.stdout + out.stderr
    return base / "home" / "cache"


def listing(root: Path) -> dict[str, str]:
    """Every entry under ``root`` (links not followed): path -> kind and size."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            st = p.lstat()
            kind = "link" if p.is_symlink() else "dir" if p.is_dir() else "file"
            out[str(p.relative_to(root))] = f"{kind}:{st.st_size if kind == 'file' else ''}"
    return out


@dataclass
class Hostile:
    """A test's world: ``root`` the unpacked (tampered) bundle, ``home`` TRACEA_HOME, ``marker`` the file
    the bundle's hostile code would create."""

    base: Path
    root: Path

    @property
    def home(self) -> Path:
        return self.base / "home"

    @property
    def marker(self) -> Path:
        return self.base / "PWNED"

    @property
    def manifest(self) -> dict:
        return json.loads((self.root / "manifest.json").read_text())

    def write_manifest(self, doc: dict) -> None:
        (self.root / "manifest.json").write_text(json.dumps(doc, indent=1))

    @property
    def kernel_dir(self) -> Path:
        return self.root / self.manifest["kernels"][0]["dir"]

    def resign(self) -> None:
        """Sizes and sha256 of every listed file recomputed: the manifest agrees with the tampering."""
        doc = self.manifest
        for rel, info in doc["files"].items():
            p = self.root / rel
            if p.is_file() and not p.is_symlink():
                data = p.read_bytes()
                info["size"], info["sha256"] = len(data), hashlib.sha256(data).hexdigest()
        self.write_manifest(doc)

    def pack(self) -> Path:
        """The tampered folder as a .tar.gz (plain members only, as pack-repro writes them)."""
        out = self.base / "hostile.tar.gz"
        with tarfile.open(out, "w:gz") as tar:
            for p in sorted(self.root.rglob("*")):
                rel = f"{self.root.name}/{p.relative_to(self.root).as_posix()}"
                if p.is_dir():
                    continue
                data = p.read_bytes()
                info = tarfile.TarInfo(rel)
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
        return out

    def replay(self, *args: str, source: Path | None = None, expect_marker: bool = False) -> subprocess.CompletedProcess:
        """``tracea replay`` on the folder (or ``source``), with TMPDIR under base/scratch; asserts it
        wrote nothing but its compile cache (and the marker, for an opt-in that runs the bundle's code)."""
        before = listing(self.base)
        out = run_tracea(self.home, "replay", str(source or self.root), *FAST, *args, tmpdir=self.base / "scratch")
        after = listing(self.base)
        added = sorted(set(after) - set(before))
        changed = sorted(k for k in before if k in after and before[k] != after[k])
        allowed = ("home", "home/cache", "home/cache/cpu", "scratch", *(("PWNED",) if expect_marker else ()))
        stray = [p for p in added if p not in allowed and not p.startswith("home/cache/cpu/")]
        assert not stray and not changed, f"replay wrote outside its cache: {stray} {changed}\n{out.stdout}{out.stderr}"
        assert not [p for p in added if p.startswith("scratch/")], "the unpacked scratch folder was left behind"
        if out.returncode != 0:
            assert "Traceback" not in out.stderr, out.stderr
        assert self.marker.exists() == expect_marker, out.stdout + out.stderr
        return out


@pytest.fixture
def hostile(real_bundle, tmp_path) -> Hostile:
    """The real bundle unpacked into tmp_path/bundle, ready to be tampered with."""
    with tarfile.open(real_bundle) as tar:
        tar.extractall(tmp_path / "bundle", **SAFE_EXTRACT)
    (root,) = list((tmp_path / "bundle").iterdir())
    return Hostile(tmp_path, root)
