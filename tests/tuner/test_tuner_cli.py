"""``tracea tune`` and ``tracea cache`` end to end (real worker processes, real gcc, real SQLite), the
stored best reused by a second call and by ``tracea bench``, and bad input as exit 2."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

SPACES = sorted((Path(__file__).parents[1] / "fixtures" / "spaces").glob("cpu_*.json"))


@pytest.fixture
def home(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("TRACEA_HOME", str(tmp_path))
    return tmp_path


def tracea(*args: str, timeout: float = 180) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tracea", *args], capture_output=True, text=True, timeout=timeout,
                          env=os.environ.copy())


def timed(baseline: dict) -> bool:
    """A baseline has a time, or (its timing never settled on a busy machine) no time and the reason: never
    a time that the stability check rejected (emitters/stability.py)."""
    if baseline.get("unstable"):
        assert "unstable" in baseline["reason"] and "p50_ms" not in baseline
        return False
    assert baseline["p50_ms"] > 0
    return True


def test_tune_stores_every_trial_and_a_second_call_reuses_the_best(home) -> None:
    args = ["tune", "gemm", "--m", "96", "--backend", "cpu", "--budget", "4", "--no-tui", "--repeat", "3",
            "--jsonl", str(home / "m.jsonl"), "--csv", str(home / "m.csv")]
    first = tracea(*args, "--json", "--dump-ir", str(home / "ir"))
    assert first.returncode == 0, first.stderr
    doc = json.loads(first.stdout)
    dumps = sorted((home / "ir").iterdir())
    assert len(dumps) == 4 and all((d / "03_source.c").exists() and (d / "02_schedule.json").exists() for d in dumps)
    assert doc["evaluated"] == 4 and not doc["reused"] and doc["best"]["p50_ms"] > 0
    if timed(doc["baseline"]):
        assert doc["baseline"]["interleaved"]  # timed beside the best
        assert doc["ratio_to_baseline"] == pytest.approx(doc["baseline"]["p50_ms"] / doc["baseline"]["tracea_p50_ms"])
    else:
        assert doc["ratio_to_baseline"] is None
    assert all(t["status"] == "ok" and t["rel_err"] < 1e-4 for t in doc["trials"])
    from tracea.reports.metrics import read_metrics

    for f in ("m.jsonl", "m.csv"):
        rows = read_metrics(home / f)
        assert len(rows) == 4 and {r["status"] for r in rows} == {"ok"}
        assert (rows[0]["baseline_p50_ms"] or 0) > 0 or "unstable" in (rows[0]["note"] or "")
    run_dir = Path(doc["run_dir"])
    assert (run_dir / "result.json").exists() and len((run_dir / "trials.jsonl").read_text().splitlines()) == 4

    second = tracea(*args[:-4], "--json")
    assert second.returncode == 0, second.stderr
    again = json.loads(second.stdout)
    assert again["reused"] and again["evaluated"] == 0 and again["best"] == doc["best"]

    listed = json.loads(tracea("cache", "list", "--json").stdout)["keys"]
    assert len(listed) == 1 and listed[0]["trials"] == 4 and listed[0]["key"] == doc["key"]
    shown = json.loads(tracea("cache", "show", doc["key"][:8], "--json").stdout)
    assert len(shown["trials"]) == 4
    timed(shown["runs"][0]["baseline"])
    text = tracea("cache", "show", doc["key"][:8]).stdout
    assert doc["best"]["name"] in text
    exported = tracea("cache", "export", "--out", str(home / "x.json"))
    assert exported.returncode == 0 and len(json.loads((home / "x.json").read_text())["trials"]) == 4

    # tracea bench picks the stored best (schedule_source "tuned")
    bench = tracea("bench", "gemm", "--m", "96", "--json")
    assert bench.returncode == 0, bench.stderr
    row = json.loads(bench.stdout.splitlines()[0])
    assert row["schedule"] == doc["best"]["schedule"]  # a nested object in JSON output

    assert tracea("cache", "clear", "--all").stdout.strip() == "cleared 4 trials"
    assert json.loads(tracea("cache", "list", "--json").stdout)["keys"] == []


@pytest.mark.skipif(not SPACES, reason="no recorded CPU space")
def test_simulate_replays_a_recorded_space_and_writes_nothing(home) -> None:
    rec = json.loads(SPACES[0].read_text())
    out = tracea("tune", "gemm", "--m", str(rec["op"]["m"]), "--simulate", str(SPACES[0]), "--budget", "12",
                 "--strategy", "bayes", "--no-tui", "--seed", "3", "--jsonl", str(home / "s.jsonl"))
    assert out.returncode == 0, out.stderr
    assert "12 evaluated" in out.stdout and "simulated" in out.stdout
    assert len((home / "s.jsonl").read_text().splitlines()) == 12
    assert not (home / "tuning.sqlite").exists()  # a replay never touches this machine's database


@pytest.mark.parametrize("args, message", [
    (["--strategy", "annealing"], "unknown strategy"),
    (["--budget", "0"], "--budget"),
    (["--simulate", "/nonexistent.json"], "no such file"),
    (["--space", "/nonexistent.toml"], "no such file"),
    (["--resume", "--retune"], "mutually exclusive"),
    (["--jsonl", "x.csv"], ".jsonl"),
])
def test_bad_input_is_one_line_and_exit_2(home, args, message) -> None:
    out = tracea("tune", "gemm", "--m", "64", "--no-tui", *args)
    assert out.returncode == 2 and message in out.stderr and "Traceback" not in out.stderr


def test_cache_bad_keys_are_exit_2(home) -> None:
    assert tracea("cache", "show", "zzzz").returncode == 2
    out = tracea("cache", "clear")
    assert out.returncode == 2 and "--all" in out.stderr
