"""Every ``--json`` output is JSON all the way down: nested objects, never an object or a list serialised
as a string inside the document (``jq .schedule.mc`` must work), and each command's top-level keys are
the documented ones. One test per command, on real runs (CPU kernels compiled and timed, a recorded
snapshot, a recorded space)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

FIXTURES = Path(__file__).parents[1] / "fixtures"
SNAPSHOT = FIXTURES / "snapshots" / "h100_live.json"
SPACE = FIXTURES / "spaces" / "cpu_gemm_512_avx512.json"


@pytest.fixture(scope="module")
def home(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("json-home")


def tracea_json(home: Path, *args: str, lines: bool = False):
    env = {**os.environ, "TRACEA_HOME": str(home)}
    out = subprocess.run([sys.executable, "-m", "tracea", *args], capture_output=True, text=True, timeout=300,
                         env=env, stdin=subprocess.DEVNULL, cwd=home)
    assert out.returncode == 0, out.stderr
    if lines:
        docs = [json.loads(line) for line in out.stdout.splitlines() if line.strip()]
        for d in docs:
            assert_nested(d)
        return docs
    doc = json.loads(out.stdout)  # stdout is the document alone (notes go to stderr)
    assert_nested(doc)
    return doc


def assert_nested(value, path: str = "$") -> None:
    """No string in the document is itself a JSON object or list."""
    if isinstance(value, dict):
        for k, v in value.items():
            assert_nested(v, f"{path}.{k}")
    elif isinstance(value, list):
        for i, v in enumerate(value):
            assert_nested(v, f"{path}[{i}]")
    elif isinstance(value, str) and value[:1] in "[{":
        try:
            parsed = json.loads(value)
        except ValueError:
            return
        assert not isinstance(parsed, (dict, list)), f"{path} is JSON text inside JSON: {value[:60]}"


def test_the_checker_catches_json_in_a_string() -> None:
    with pytest.raises(AssertionError, match=r"\$\.row\.schedule is JSON text"):
        assert_nested({"row": {"schedule": json.dumps({"mc": 64})}})
    assert_nested({"name": "[1] numpy", "ok": "{not json"})


def test_doctor_json(home) -> None:
    doc = tracea_json(home, "doctor", "--input", str(SNAPSHOT), "--json")
    assert {"schema_version", "cpu", "nvidia", "toolchains", "checks"} <= set(doc)


def test_plan_json(home) -> None:
    doc = tracea_json(home, "plan", "gemm", "--m", "4096", "--dtype", "bf16", "--input", str(SNAPSHOT), "--json")
    assert {"schema_version", "op", "chosen", "backend", "candidates"} <= set(doc)
    assert doc["op"]["m"] == 4096 and isinstance(doc["candidates"][0]["reasons"], list)


def test_emit_json(home) -> None:
    doc = tracea_json(home, "emit", "gemm", "--m", "48", "--backend", "cpu", "--out", str(home / "emit"), "--json")
    assert set(doc) == {"variant", "schedule", "files"} and doc["schedule"]["mc"] > 0


@pytest.fixture(scope="module")
def bench_row(home) -> dict:
    """One real bench row, for the tests of bench and of report (which must not depend on another test
    having run first: pytest-xdist runs them anywhere, in any order)."""
    (row,) = tracea_json(home, "bench", "gemm", "--m", "64", "--backend", "cpu", "--json", "--repeat", "3", lines=True)
    return row


def test_bench_json(bench_row) -> None:
    row = bench_row
    assert row["schedule"]["mc"] > 0 and row["shape"] == {"m": 64, "n": 64, "k": 64, "layout_a": "row",
                                                           "layout_b": "row", "epilogue": [], "alpha": 1.0}
    assert row["schema_version"] == 2 and "note" in row


def test_bench_suite_json(home) -> None:
    """The CPU suites' quick subset, as CI runs it: every row verified (status ok), nested JSON, the
    geometric mean and the rows under 0.8x overall and per suite (no speed is asserted: a test machine's
    timings prove nothing)."""
    from tracea.emitters.cpu import suites

    doc = tracea_json(home, "bench", "--backend", "cpu", "--quick", "--json", "--repeat", "3")
    assert set(doc) == {"schema_version", "suite", "quick", "rows", "geomean_ratio", "rows_with_ratio",
                        "rows_below_0.8", "worst", "suites"}
    assert doc["quick"] is True and doc["suite"] == "all" and set(doc["suites"]) == set(suites(quick=True))
    assert [r["suite"] for r in doc["rows"]] == [n for n, ops in suites(quick=True).items() for _ in ops]
    assert all(r["status"] == "ok" and isinstance(r["schedule"], dict) for r in doc["rows"])
    # the bandwidth column's fields (emitters/copy_bandwidth.py): the copy measured once for every row
    assert all({"memory_bound", "copy_gbps", "of_copy"} <= set(r) for r in doc["rows"])
    copies = {r["copy_gbps"] for r in doc["rows"]}
    assert len(copies) == 1 and (None in copies or all(r["of_copy"] > 0 for r in doc["rows"]))
    runs = [Path(r["run"]) for r in doc["rows"]]  # each case's run folder, holding its metrics row
    assert len(set(runs)) == len(runs) and all((run / "metrics.jsonl").is_file() for run in runs)
    with_ratio = [r for r in doc["rows"] if r["ratio"]]
    assert doc["rows_with_ratio"] == len(with_ratio) == sum(s["rows_with_ratio"] for s in doc["suites"].values())
    assert doc["rows_below_0.8"] == sum(1 for r in with_ratio if r["ratio"] < 0.8)
    one = tracea_json(home, "bench", "--backend", "cpu", "--quick", "--suite", "softmax", "--json", "--repeat", "3")
    assert {r["op"] for r in one["rows"]} == {"softmax"} and one["suite"] == "softmax"


def test_report_json(home, bench_row) -> None:
    (home / "m.jsonl").write_text(json.dumps(bench_row) + "\n")
    doc = tracea_json(home, "report", str(home / "m.jsonl"), "--json")
    assert_nested(doc)


def test_tune_and_cache_json(home) -> None:
    doc = tracea_json(home, "tune", "gemm", "--m", "512", "--simulate", str(SPACE), "--budget", "5", "--json")
    assert {"schema_version", "op", "best", "baseline", "trials", "ratio_to_baseline"} <= set(doc)
    assert isinstance(doc["best"]["schedule"], dict) and isinstance(doc["trials"][0]["schedule"], dict)
    real = tracea_json(home, "tune", "gemm", "--m", "32", "--backend", "cpu", "--budget", "2", "--no-tui",
                       "--repeat", "3", "--json")
    listed = tracea_json(home, "cache", "list", "--json")
    assert any(k["key"] == real["key"] for k in listed["keys"])
    shown = tracea_json(home, "cache", "show", real["key"][:8], "--json")
    assert isinstance(shown["trials"][0]["schedule"], dict)


def test_bank_sim_json(home) -> None:
    doc = tracea_json(home, "bank-sim", "--layout", "64x64", "--dtype", "bf16", "--swizzle", "xor8",
                      "--access", "ldmatrix.x4", "--json")
    assert_nested(doc)
