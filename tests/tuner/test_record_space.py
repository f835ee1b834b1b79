"""benchmarks/gpu/record_space.py end to end on the CPU backend: a tiny GEMM's space (cut down by a
``--space`` file to a few candidates) compiled by parallel workers, verified and timed, written as a
recorded space that loads and replays; a dry run (``--limit``) says it is partial; bad input is exit 2."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from tracea.doctor import probe
from tracea.emitters import registry
from tracea.kernels import Gemm
from tracea.tuner.recorded import load_recorded
from tracea.tuner.run import SearchLimits, Target, TuneConfig, tune
from tracea.tuner.space import build_space, read_space_file

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "gpu" / "record_space.py"
VARIANT = "cpu-portable.gemm"  # runs on any CPU


@pytest.fixture(scope="module")
def record_space():
    spec = importlib.util.spec_from_file_location("record_space", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _space_file(tmp_path: Path) -> tuple[Path, list]:
    """A restriction to a few candidates around the hero's micro-kernel, and the space it leaves."""
    host = probe()
    variant = next(v for v in registry.all_variants("cpu") if v.id == VARIANT)
    hero = build_space(Gemm(16, 16, 16), variant, host, registry.backend("cpu"))[0]
    path = tmp_path / "space.toml"
    path.write_text(f"[restrict]\nmr = [{hero.mr}]\nnr = [{hero.nr}]\nkc = [{hero.kc}]\nthreads = [1]\n"
                    f"unroll = [1]\n")
    assert read_space_file(path)
    space = build_space(Gemm(16, 16, 16), variant, host, registry.backend("cpu"), path)
    assert 2 <= len(space) <= 8, len(space)
    return path, space


def test_records_a_complete_space_that_replays(record_space, tmp_path, capsys) -> None:
    space_file, space = _space_file(tmp_path)
    out = tmp_path / "space.json"
    rc = record_space.main(["--op", "gemm", "--m", "16", "--dtype", "fp32", "--variant", VARIANT, "--out", str(out),
                            "--space", str(space_file), "--jobs", "2", "--repeats", "3", "--warmup", "1"])
    assert rc == 0
    err = capsys.readouterr().err
    assert f"compiled {len(space)}/{len(space)}" in err and f"[{len(space)}/{len(space)}]" in err  # progress
    rec = load_recorded(out)
    assert rec.complete is True and rec.backend == "cpu" and rec.variant == VARIANT
    assert rec.schedules == [s.to_json() for s in space]  # every candidate, in the tuner's order
    assert all(t["status"] == "ok" and t["p50_ms"] > 0 and t["rel_err"] is not None for t in rec.trials)
    assert "record_space.py" in rec.command and not list(tmp_path.glob("*.tmp*"))
    replay = tune(None, None, TuneConfig(Target(simulate=str(out)),
                                         limits=SearchLimits(strategy="exhaustive", patience=None)))
    assert len(replay.trials) == len(space) and replay.best["p50_ms"] == rec.optimum_ms


def test_a_dry_run_is_partial(record_space, tmp_path) -> None:
    space_file, _ = _space_file(tmp_path)
    out = tmp_path / "dry.json"
    rc = record_space.main(["--m", "16", "--dtype", "fp32", "--variant", VARIANT, "--out", str(out),
                            "--space", str(space_file), "--limit", "1", "--jobs", "1", "--repeats", "2"])
    assert rc == 0
    rec = load_recorded(out)
    assert rec.complete is False and len(rec.trials) == 1


@pytest.mark.parametrize("args, message", [
    (["--m", "0", "--variant", VARIANT], "--m must be at least 1"),
    (["--m", "16", "--variant", "cpu-nosuch.gemm"], "no cpu variant"),
    (["--m", "16", "--variant", "rocm-x.gemm"], "no backend"),
])
def test_bad_input_is_one_line_and_exit_2(record_space, tmp_path, capsys, args, message) -> None:
    assert record_space.main([*args, "--out", str(tmp_path / "x.json")]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "x.json").exists()
