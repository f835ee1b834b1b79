"""The tuning dashboard driven headlessly (``App.run_test``) on a simulated run: progress, phases, the
trials table and its sorting, best-so-far, pause / resume / stop / save keys."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

pytest.importorskip("textual")  # an optional install (the GPU machine runs without it): skip, not a collection error

from textual.widgets import DataTable, Label, Static

from tracea.tui.best_chart import BestChart
from tracea.tui.tune_app import TuneApp
from tracea.tui.tune_messages import PhaseChanged, TrialFinished, TuneFinished, TuneStarted
from tracea.tuner.run import Evaluation, SearchLimits, Target, TuneConfig

SPACES = sorted((Path(__file__).parents[1] / "fixtures" / "spaces").glob("*.json"))
pytestmark = pytest.mark.skipif(not SPACES, reason="no recorded space")


async def _until(pilot, cond, timeout: float = 20.0) -> None:
    for _ in range(int(timeout / 0.02)):
        if cond():
            return
        await pilot.pause(0.02)
    raise AssertionError("condition not reached")


def test_dashboard_shows_a_simulated_run_to_the_end(tmp_path) -> None:
    config = TuneConfig(Target(simulate=str(SPACES[0])), limits=SearchLimits(strategy="bayes", budget=10, seed=1))
    app = TuneApp(None, None, config, save_dir=tmp_path)
    posted = []

    async def main() -> None:
        async with app.run_test(size=(160, 45), message_hook=posted.append) as pilot:
            await _until(pilot, lambda: app.result is not None)
            await pilot.pause()
            table = app.query_one("#trials", DataTable)
            assert table.row_count == 10
            assert "finished" in str(app.query_one("#phase", Label).render())
            best = str(app.query_one("#best", Static).render())
            assert app.result.best["name"] in best and "TFLOP/s" in best
            if app.result.baseline and app.result.baseline.get("p50_ms"):
                assert "x vs" in best
            chart = app.query_one("#chart", BestChart)
            assert len(chart.values) == 10 and chart.values == sorted(chart.values)  # best-so-far never drops
            await pilot.press("o")  # sort by p50
            first = table.get_row_at(0)
            assert float(first[3]) == pytest.approx(app.result.best["p50_ms"], rel=1e-3)
            await pilot.press("w")
            await pilot.pause()
            assert app.saved is not None and json.loads(app.saved.read_text())["evaluated"] == 10
            await pilot.press("q")

    asyncio.run(main())
    kinds = {type(m) for m in posted}
    assert {TuneStarted, PhaseChanged, TrialFinished, TuneFinished} <= kinds
    assert {m.phase for m in posted if isinstance(m, PhaseChanged)} >= {"compile", "verify", "run"}


def test_pause_resume_and_stop_early_keep_the_results(tmp_path) -> None:
    config = TuneConfig(Target(simulate=str(SPACES[0])), Evaluation(simulate_delay_s=0.03),
                        SearchLimits(strategy="random", budget=200, seed=2, patience=None))
    app = TuneApp(None, None, config, save_dir=tmp_path)

    async def main() -> None:
        async with app.run_test(size=(160, 45)) as pilot:
            await _until(pilot, lambda: len(app.trials) >= 2)
            await pilot.press("p")
            await pilot.pause(0.2)
            held = len(app.trials)
            await pilot.pause(0.3)
            assert len(app.trials) <= held + 1 and app.control.paused  # at most the one in flight
            await pilot.press("r")
            await _until(pilot, lambda: len(app.trials) >= held + 3)
            await pilot.press("x")
            await _until(pilot, lambda: app.result is not None)
            assert app.result.stop_reason == "stopped by the user"
            assert len(app.result.trials) == len(app.trials) < 200
            await pilot.press("q")

    asyncio.run(main())


def test_a_pool_gets_one_lane_a_worker(tmp_path) -> None:
    """--workers 3 on a replayed space: each worker's line shows its phase and the trials it finished."""
    config = TuneConfig(Target(simulate=str(SPACES[0])), Evaluation(simulate_delay_s=0.02, workers=3),
                        SearchLimits(strategy="random", budget=18, seed=4, patience=None))
    app = TuneApp(None, None, config, save_dir=tmp_path)

    async def main() -> None:
        async with app.run_test(size=(160, 45)) as pilot:
            await _until(pilot, lambda: app.result is not None)
            await pilot.pause()
            lanes = str(app.query_one("#lanes", Static).render())
            assert [ln.split(":")[0] for ln in lanes.splitlines()] == ["worker 0", "worker 1", "worker 2"]
            done = [int(ln.rsplit("·", 1)[1].split()[0]) for ln in lanes.splitlines()]
            assert sum(done) == 18 and all(done), lanes
            assert app.query_one("#trials", DataTable).row_count == 18
            await pilot.press("q")

    asyncio.run(main())
