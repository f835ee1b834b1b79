"""`tracea export --arch`: the backend comes from the backend protocol (``target_host``), never from its name.
Without --backend the first registered backend whose targets include the arch is used (sm_90a: CUDA, no GPU
needed); a named backend that lacks the target, or an arch no backend has, is one line and exit 2."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from tracea.doctor.errors import BadInputError
from tracea.emitters import registry

ROOT = Path(__file__).parents[2]
GEMM = ["gemm", "--m", "256", "--n", "128", "--k", "64", "--dtype", "bf16"]


def tracea(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tracea", *args], capture_output=True, text=True, timeout=300)


def _nvrtc() -> bool:
    try:
        from tracea.emitters import nvrtc as nv

        nv.find_nvrtc()
        return True
    except Exception:  # noqa: BLE001 - no NVRTC: the CUDA package cannot be compiled here
        return False


def _one_error_line(r: subprocess.CompletedProcess[str], pattern: str) -> str:
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    assert "Traceback" not in r.stderr, r.stderr
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    errors = [ln for ln in lines if ln.startswith("error:")]
    assert len(errors) == 1 and lines[0] == errors[0] and pattern in errors[0], r.stderr
    assert all(ln.startswith(("error:", "hint:")) for ln in lines), r.stderr
    return errors[0]


@pytest.mark.skipif(not _nvrtc(), reason="NVRTC (cuda-bindings) is not installed")
def test_arch_sm_90a_without_backend_picks_cuda(tmp_path):
    out = tmp_path / "pkg"
    r = tracea("export", *GEMM, "--arch", "sm_90a", "--out", str(out))
    assert r.returncode == 0, r.stderr
    m = json.loads((out / "manifest.json").read_text())
    assert m["backend"] == "cuda" and m["target"] == {"arch": "sm_90a"}, m
    assert m["variant"].startswith("cuda-")


def test_backend_cpu_with_a_cuda_arch_is_one_line_exit_2(tmp_path):
    out = tmp_path / "pkg"
    line = _one_error_line(tracea("export", *GEMM, "--backend", "cpu", "--arch", "sm_90a", "--out", str(out)),
                           "--arch sm_90a")
    assert "CPU" in line
    assert not out.exists()


def test_unknown_arch_is_one_line_exit_2_naming_the_backends_tried(tmp_path):
    out = tmp_path / "pkg"
    line = _one_error_line(tracea("export", *GEMM, "--arch", "bogus", "--out", str(out)), "--arch bogus")
    assert f"tried {', '.join(registry.BACKENDS)}" in line
    assert not out.exists()


def _fake_backends(monkeypatch, accepts: set[str]) -> list[str]:
    """Three registered backends ``a``, ``b``, ``c``; those in ``accepts`` take any arch. Returns the call log."""
    calls: list[str] = []

    def target_host(name: str):
        def f(host, arch):
            calls.append(name)
            if name not in accepts:
                raise BadInputError(f"--arch {arch}: {name} refuses it")
            return (host, name, arch)
        return f

    fakes = {n: SimpleNamespace(target_host=target_host(n)) for n in "abc"}
    monkeypatch.setattr(registry, "BACKENDS", dict.fromkeys(fakes, "unused"))
    monkeypatch.setattr(registry, "backend", lambda name: fakes[name])
    return calls


def test_auto_pick_asks_each_backend_in_registry_order(monkeypatch):
    from tracea.cmd_kernels import targeted as _targeted

    calls = _fake_backends(monkeypatch, accepts={"b", "c"})
    assert _targeted("host", None, "x9") == ("b", ("host", "b", "x9"))
    assert calls == ["a", "b"]
    calls.clear()
    assert _targeted("host", "c", "x9") == ("c", ("host", "c", "x9")) and calls == ["c"]  # named: only its own
    with pytest.raises(BadInputError, match="a refuses it"):
        _targeted("host", "a", "x9")
    calls = _fake_backends(monkeypatch, accepts=set())
    with pytest.raises(BadInputError, match=r"--arch x9: .*\(tried a, b, c\)") as exc:
        _targeted("host", None, "x9")
    assert exc.value.hint == "a: a refuses it; b: b refuses it; c: c refuses it"


@pytest.mark.parametrize("command", ["cmd_export.py", "cmd_kernels.py"])
def test_export_imports_no_backend_module(command):
    """export and emit (cmd_kernels: plan, emit, bench) reach backends through the protocol alone."""
    tree = ast.parse((ROOT / "tracea_cli" / command).read_text())
    imported = [n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)]
    imported += [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
    backends = tuple(f"tracea.emitters.{name}" for name in registry.BACKENDS)
    assert not [m for m in imported if m.startswith(backends)], imported
    names = {c.value for c in ast.walk(tree) if isinstance(c, ast.Constant) and isinstance(c.value, str)}
    assert not names & set(registry.BACKENDS), names & set(registry.BACKENDS)  # no branch on a backend's name
