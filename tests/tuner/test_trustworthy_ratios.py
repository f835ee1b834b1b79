"""No figure Tracea prints can be wrong by accident (issue 13): the backend a command uses when none is
named is the planner's first choice on the machine (recorded H100 and CPU-only snapshots), a ratio is
made only from timings that agree with themselves, and the tuning dashboard never stores a ratio from a
noisy baseline."""

from __future__ import annotations

import asyncio
import json
import os
import random
import re
import time
from pathlib import Path

import pytest

from tracea.doctor.snapshot import read_snapshot
from tracea.emitters.registry import default_backend, runnable_backends
from tracea.emitters.stability import drift_problem, measure_stable, spread_problem
from tracea.emitters.timing import Timing
from tracea.kernels import Conv2d, Gemm, Softmax

FIXTURES = Path(__file__).parents[1] / "fixtures" / "snapshots"
TESTS = Path(__file__).resolve().parent


def host(name: str):
    return read_snapshot(FIXTURES / f"{name}.json")[0]


# ------------------------------------------------------------------------------ defaults from the planner


@pytest.mark.parametrize("op", [Gemm(m=4096, n=4096, k=4096, dtype="bf16"), Gemm(m=4096, n=4096, k=4096),
                                Softmax(rows=4096, cols=4096),
                                Conv2d(n=1, c=64, h=56, w=56, k=64, r=3, s=3, layout="nhwc", dtype="fp16")])
@pytest.mark.parametrize("machine", ["h100_live", "h200_live"])
def test_a_gpu_machine_defaults_to_the_gpu(op, machine) -> None:
    backend, why = default_backend(op, host(machine))
    assert backend == "cuda" and "on GPU 0 (NVIDIA H" in why and "cuda-" in why
    assert runnable_backends(host(machine)) == ["cpu", "cuda"]


def test_a_cpu_only_machine_defaults_to_the_cpu() -> None:
    backend, why = default_backend(Gemm(m=4096, n=4096, k=4096, dtype="bf16"), host("ci_vm"))
    assert backend == "cpu" and "cpu-" in why and "no NVIDIA GPU" in why
    assert runnable_backends(host("ci_vm")) == ["cpu"]


def _cli(args: list[str], machine: str, monkeypatch, capture: dict) -> tuple[int, str]:
    """Run the CLI in-process on a recorded machine; `tracea tune` is stopped at the TuneConfig it built."""
    from typer.testing import CliRunner

    import tracea.doctor as doctor
    import tracea.tuner.run as run
    from tracea.app import app

    monkeypatch.setattr(doctor, "probe", lambda refresh=False: host(machine))

    def fake_tune(op, host_, config, on_event=None, control=None):
        capture["config"], capture["op"] = config, op
        raise SystemExit(0)

    monkeypatch.setattr(run, "tune", fake_tune)
    result = CliRunner().invoke(app, args)
    return result.exit_code, result.output


@pytest.mark.parametrize(("machine", "backend"), [("h100_live", "cuda"), ("ci_vm", "cpu")])
def test_tune_gemm_4096_tunes_the_machines_first_backend(machine, backend, monkeypatch) -> None:
    capture: dict = {}
    code, out = _cli(["tune", "gemm", "--m", "4096", "--no-tui"], machine, monkeypatch, capture)
    assert code == 0, out
    assert capture["config"].target.backend == backend
    assert out.splitlines()[0].startswith(f"backend {backend} (the planner's first choice here is ")
    assert capture["op"].dtype.value == "fp32"  # --dtype stays explicit: the default is not changed for the GPU


def test_an_explicit_backend_wins(monkeypatch) -> None:
    capture: dict = {}
    code, out = _cli(["tune", "gemm", "--m", "4096", "--backend", "cpu", "--no-tui"], "h100_live", monkeypatch, capture)
    assert code == 0 and capture["config"].target.backend == "cpu" and "planner's first choice" not in out


def test_plan_input_plans_for_the_recorded_machine() -> None:
    from typer.testing import CliRunner

    from tracea.app import app

    out = CliRunner().invoke(app, ["plan", "gemm", "--m", "4096", "--dtype", "bf16", "--input",
                                   str(FIXTURES / "h100_live.json"), "--json"])
    assert out.exit_code == 0, out.output
    doc = json.loads(out.stdout)
    assert doc["chosen"] == "cuda-wgmma.gemm" and doc["backend"] == "cuda"


# ------------------------------------------------------------------------------ stability rules


def test_spread_and_drift_rules() -> None:
    assert spread_problem({"a": Timing(1.0, 1.3, 0.9, 10)}) is None
    why = spread_problem({"a": Timing(1.0, 1.3, 0.9, 10), "numpy": Timing(0.5, 16.0, 0.4, 10)})
    assert why is not None and why.startswith("numpy p95/p50 = 32.00 (16.000 / 0.500 ms)")  # in the ratio's order
    assert drift_problem("the baseline", 0.50, 0.55) is None
    assert "0.500 ms earlier and 15.990 ms now" in drift_problem("the baseline", 0.50, 15.99)
    assert drift_problem("x", None, 3.0) is None


def test_measure_stable_repeats_then_gives_up() -> None:
    calls = []
    values = iter([5.0, 1.0])  # unstable once, then settled
    result, why = measure_stable(lambda: calls.append(1) or next(values), lambda v: "noisy" if v > 2 else None,
                                 pause_s=0)
    assert (result, why, len(calls)) == (1.0, None, 2)
    calls.clear()
    result, why = measure_stable(lambda: calls.append(1) or 9.0, lambda v: "noisy", attempts=3, pause_s=0)
    assert len(calls) == 3 and why == "unstable in 3 measurements: noisy"


def test_a_bench_with_a_noisy_baseline_prints_no_ratio(monkeypatch, tmp_path) -> None:
    """`tracea bench` on the CPU with a baseline that takes 2.5 ms or 30 ms a call at random: no ratio."""
    import numpy as np

    import tracea.emitters.bench as bench_mod
    from tracea.doctor import probe
    from tracea.emitters.baselines import Baseline

    monkeypatch.setenv("TRACEA_HOME", str(tmp_path))
    from tracea.emitters import registry
    from tracea.reports.metrics import bench_row

    # every call of the baseline 2.5 or 30 ms at random, even odds (a seeded draw): each block of five samples has
    # either median, so the rounds disagree on the ratio too, and pairing settles nothing (a slow call every fourth,
    # noisy_baseline_backend's, is hidden by every block's median: the rounds would agree on the fast calls' ratio)
    draw = random.Random(0)

    def coin_baseline(op, inputs):
        a, b = inputs["a"].astype(np.float32), inputs["b"].astype(np.float32)

        def run():
            time.sleep(0.030 if draw.random() < 0.5 else 0.0025)
            return a @ b

        return Baseline("noisy matmul (test)", run)

    monkeypatch.setattr(registry.backend("cpu"), "baseline_for", coin_baseline)
    result = bench_mod.bench(Gemm(m=64, n=64, k=64), probe(), backend="cpu", repeats=12, warmup=1, min_seconds=0.0)
    assert result.status == "ok" and result.baseline is not None
    # three attempts at least, more while pooled rounds might settle it (stability.measure_stable's extend)
    assert result.ratio is None and re.match(r"unstable in ([3-9]|1[0-2]) measurements:", result.unstable)
    row = bench_row(result)
    assert row.ratio is None and "noisy matmul (test) p95/p50" in row.note


# ------------------------------------------------------------------------------ the dashboard


def test_the_dashboard_stores_no_ratio_from_a_noisy_baseline(tmp_path, monkeypatch) -> None:
    pytest.importorskip("textual")
    from tracea.doctor import probe
    from tracea.tui.tune_app import TuneApp
    from tracea.tuner.db import TuningDB
    from tracea.tuner.run import Evaluation, Outputs, SearchLimits, Target, TuneConfig

    monkeypatch.setenv("TRACEA_HOME", str(tmp_path))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")]))
    config = TuneConfig(Target(module="noisy_baseline_backend"),
                        Evaluation(timeout_s=30.0, repeats=12, warmup=1, min_seconds=0.0),
                        SearchLimits(strategy="exhaustive", patience=None),
                        Outputs(metrics_files=[str(tmp_path / "m.jsonl")]))
    app = TuneApp(Gemm(m=32, n=32, k=32), probe(), config, save_dir=tmp_path)
    assert app.quiet_timing and app.config.evaluation.quiet_timing  # a CPU kernel: the dashboard pauses while timing

    async def main() -> None:
        async with app.run_test(size=(160, 45)) as pilot:
            for _ in range(3000):
                if app.result is not None or app.error is not None:
                    break
                await pilot.pause(0.02)
            await pilot.pause()
            assert app.error is None and app.result is not None
            assert "no ratio" in str(app.query_one("#best").render())
            await pilot.press("q")

    asyncio.run(main())
    result = app.result
    assert result.best is not None and result.ratio is None
    assert result.baseline.get("unstable") and "p50_ms" not in result.baseline
    # timings ran only while the dashboard was quiet: two candidates, the baseline, 3 final attempts
    assert app.hush_count >= 6
    db = TuningDB()
    stored = json.loads(db.run(result.run_id)["baseline"])
    assert "p50_ms" not in stored and stored["unstable"] and "unstable in 3 measurements" in stored["reason"]
    rows = [json.loads(line) for line in (tmp_path / "m.jsonl").read_text().splitlines()]
    assert len(rows) == 2 and all(r["ratio"] is None and "unstable" in r["note"] for r in rows)
