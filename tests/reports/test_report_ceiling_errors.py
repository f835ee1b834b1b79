"""`tracea report` flags a row faster than the spec ceiling of the snapshot as a ceiling error: the
ceiling is wrong, not the kernel. The issue-13 case: 0.44 TFLOP/s on a machine whose doctor said
0.166."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tracea.doctor.snapshot import load_snapshot
from tracea.reports.metrics import MetricsRow, MetricsWriter, read_metrics
from tracea.reports.summary import ceiling_errors, summarise


def _write(path: Path, rows: list[tuple[int, str, float]], fingerprint: str = "f") -> None:
    w = MetricsWriter(path)
    for i, (m, dtype, tflops) in enumerate(rows):
        p50 = 2 * m**3 / (tflops * 1e12) * 1e3
        w.write(MetricsRow(timestamp=f"t{i}", op="gemm", shape=json.dumps({"m": m, "n": m, "k": m}), dtype=dtype,
                           backend="cpu", variant="cpu-avx512.gemm", schedule=json.dumps({"i": i}), status="ok",
                           p50_ms=p50, p95_ms=p50 * 1.05, tflops=tflops, gbps=1.0, rel_err=1e-7,
                           baseline="numpy.matmul (openblas)", baseline_p50_ms=p50 * 2, ratio=2.0,
                           env_fingerprint=fingerprint))


def tracea(*args: str, home: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "HOME": str(home), "XDG_CACHE_HOME": str(home / "cache"),
           "XDG_DATA_HOME": str(home / "data"), "XDG_CONFIG_HOME": str(home / "config")}
    return subprocess.run([sys.executable, "-m", "tracea", *args], capture_output=True, text=True, timeout=120,
                          env=env)


def test_a_row_above_the_spec_is_a_ceiling_error(fixtures, tmp_path):
    host = load_snapshot(fixtures / "snapshots" / "ci_vm.json")  # spec 2 x 2.60 GHz x 32 = 0.166 TFLOP/s
    _write(tmp_path / "m.jsonl", [(2048, "fp32", 0.44), (2048, "fp32", 0.12), (512, "fp32", 0.10),
                                  (2048, "bf16", 0.50)])
    groups = summarise(read_metrics(tmp_path / "m.jsonl"))
    errors = ceiling_errors(host, groups)
    assert list(errors) == [0]  # 512 is under it; bf16 dot products are not bounded by the fp32 FMA figure
    err = errors[0]
    assert err["rows_above"] == 1 and err["achieved_flops"] == 0.44e12
    assert abs(err["spec_flops"] - 2 * 2.596132e9 * 32) < 1e3 and abs(err["ratio"] - 2.648) < 0.01
    assert err["message"].startswith("ceiling error: 0.44 TFLOP/s is 2.65x the spec cpu fp32_flops ceiling of "
                                     "0.1662 TFLOP/s (2 cores x 2.60 GHz (current;")
    assert "the ceiling is wrong, not the kernel" in err["message"]


def test_rows_from_another_machine_are_not_judged(fixtures, tmp_path):
    host = load_snapshot(fixtures / "snapshots" / "ci_vm.json")
    _write(tmp_path / "m.jsonl", [(2048, "fp32", 0.44)], fingerprint="elsewhere")
    groups = summarise(read_metrics(tmp_path / "m.jsonl"))
    assert ceiling_errors(host, groups, fingerprints={"here"}) == {}
    assert list(ceiling_errors(host, groups, fingerprints={"elsewhere"})) == [0]


def test_report_cli_with_snapshot(fixtures, tmp_path):
    _write(tmp_path / "m.csv", [(2048, "fp32", 0.44), (512, "fp32", 0.10)])
    snap = str(fixtures / "snapshots" / "ci_vm.json")
    out = tracea("report", str(tmp_path / "m.csv"), "--snapshot", snap, home=tmp_path / "home")
    assert out.returncode == 0, out.stderr
    flagged = [ln for ln in out.stdout.splitlines() if "ceiling error" in ln]
    assert len(flagged) == 1 and flagged[0].startswith("gemm 2048x2048x2048 fp32 cpu cpu-avx512.gemm: ceiling error")
    js = tracea("report", str(tmp_path / "m.csv"), "--snapshot", snap, "--json", home=tmp_path / "home")
    groups = json.loads(js.stdout)
    assert groups[0]["ceiling_error"]["rows_above"] == 1 and groups[1]["ceiling_error"] is None


def test_report_cli_without_snapshot_judges_only_this_machines_rows(tmp_path):
    _write(tmp_path / "m.jsonl", [(2048, "fp32", 1e6)], fingerprint="not-this-machine")
    out = tracea("report", str(tmp_path / "m.jsonl"), "--json", home=tmp_path / "home")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)[0]["ceiling_error"] is None


def test_report_cli_without_snapshot_judges_rows_measured_here(tmp_path):
    from tracea.doctor import probe
    from tracea.emitters.registry import fingerprint

    _write(tmp_path / "m.jsonl", [(2048, "fp32", 1e6)], fingerprint=fingerprint(probe(), "cpu"))
    out = tracea("report", str(tmp_path / "m.jsonl"), "--json", home=tmp_path / "home")
    assert out.returncode == 0, out.stderr
    err = json.loads(out.stdout)[0]["ceiling_error"]
    assert err is not None and err["ceiling"] == "cpu fp32_flops" and err["rows_above"] == 1
