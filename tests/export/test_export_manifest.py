"""What an exported package says about itself: its manifest names the op, variant, schedule (a tuned one when
the database holds it), ABI version, prefix and CMake target, and every file's digest; the kernel is Tracea's
rendering byte for byte and the headers declare the prefixed entry point."""

from __future__ import annotations

import hashlib
import json

import pytest
from export_packages import export
from test_export_cpu import CPU_CASES

from tracea.emitters.export_abi import ABI_VERSION, default_prefix


def test_manifest_names_what_was_exported(tmp_path):
    pkg = export(tmp_path, *CPU_CASES["conv2d-odd"])
    m = json.loads((pkg / "manifest.json").read_text())
    assert m["op"]["op"] == "conv2d" and m["op"]["h"] == 13 and m["backend"] == "cpu"
    assert m["variant"].endswith(".conv2d") and m["schedule"] == json.loads((pkg / "schedule.json").read_text())
    assert m["schedule_source"].startswith("heuristic") or m["schedule_source"].startswith("tuned")
    assert m["abi_version"] == ABI_VERSION and m["tracea_version"]
    for rel, digest in m["files"].items():
        assert hashlib.sha256((pkg / rel).read_bytes()).hexdigest() == digest, rel
    kernel = (pkg / m["kernel"]["source"]).read_text()
    assert hashlib.sha256(kernel.encode()).hexdigest() == m["kernel"]["source_sha256"]
    # the source is Tracea's rendering byte for byte
    from tracea.doctor import probe
    from tracea.emitters import registry
    from tracea.kernels import Conv2d

    b = registry.backend("cpu")
    op = Conv2d(n=2, c=3, h=13, w=11, k=5, r=3, s=3, stride=2, padding=1, bias=True)
    host = probe()
    sched = b.schedule_from_json(m["schedule"])
    assert b.rendering(op, registry.variant(m["variant"]), sched, host).sha256 == m["kernel"]["source_sha256"]
    p = m["prefix"]
    assert p == default_prefix(op, "cpu") and p.startswith("conv2d_fp32_2x3x13x11k5_")
    assert m["cmake"] == {"package": p, "target": f"{p}::{p}"} and m["tensors"]["out"] == [2, 5, 7, 6]
    h = (pkg / "include" / p / "tracea.h").read_text()
    assert f"TraceaStatus {p}_conv2d(const TraceaConstTensorView* x, const TraceaConstTensorView* weight, " \
           "const TraceaConstTensorView* bias, TraceaTensorView* out, void* stream);" in h
    assert f"#define {p.upper()}_OUT_SHAPE {{2, 5, 7, 6}}" in h and f"#define {p.upper()}_ABI_VERSION {ABI_VERSION}" in h
    assert f"namespace {p} {{" in (pkg / "include" / p / "tracea.hpp").read_text()


def test_a_tuned_schedule_is_used_when_stored(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from tracea.doctor import probe
    from tracea.emitters import registry
    from tracea.kernels import Softmax
    from tracea.tuner import lookup
    from tracea_cli.app import app

    b = registry.backend("cpu")
    op = Softmax(rows=7, cols=333)
    from tracea.doctor.plan import plan

    variant = registry.variant(plan(op, probe(), registry.all_variants("cpu"), backend="cpu").require())
    space = b.search_space(op, variant, probe())
    hero = b.hero_schedule(op, variant, probe())
    tuned = next((s for s in space if s != hero), None)
    if tuned is None:
        pytest.skip("one candidate only: a tuned schedule cannot differ from the heuristic one")
    seen = []
    monkeypatch.setattr(lookup, "stored_schedule", lambda o, v, h, be, db=None: seen.append(v) or tuned.to_json())
    out = tmp_path / "pkg"
    r = CliRunner().invoke(app, ["export", "softmax", "--rows", "7", "--cols", "333", "--backend", "cpu",
                                 "--out", str(out), "--json"])
    assert r.exit_code == 0, r.output
    m = json.loads((out / "manifest.json").read_text())
    assert seen == [variant.id] and m["schedule_source"].startswith("tuned")
    assert m["schedule"] == tuned.to_json() != hero.to_json()
    doc = json.loads(r.output)  # --json: what was written, machine-readable
    assert doc["schedule"] == m["schedule"] and doc["variant"] == m["variant"]
    assert sorted(doc["files"]) == sorted(str(out / rel) for rel in [*m["files"], "manifest.json"])
