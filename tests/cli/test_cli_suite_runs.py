"""A suite run (`tracea bench` with no op, `tracea tune --suite`) makes one run folder per case, and its last
line names them all: the folder that holds them and each one's id. The folders named are real and hold the
cases' metrics. Real runs on the CPU (gcc-compiled kernels, verified and timed), in-process."""

from __future__ import annotations

import json
from pathlib import Path

from tracea.__main__ import main
from tracea.emitters import registry

FAST = ["--repeat", "1", "--warmup", "0"]


def named_runs(text: str) -> list[Path]:
    """The run folders of the `run folders (N, one per ...) in PARENT: ID ID ... (bundle ...)` line."""
    (line,) = [ln for ln in text.splitlines() if ln.startswith("run folders (")]
    head, _, rest = line.partition(": ")
    parent = Path(head.partition(") in ")[2])
    ids = rest.partition(" (bundle one:")[0].split()
    assert len(ids) == int(head.removeprefix("run folders (").split(",")[0]), line
    return [parent / i for i in ids]


def metrics(run: Path) -> list[dict]:
    return [json.loads(ln) for ln in (run / "metrics.jsonl").read_text().splitlines() if ln.strip()]


def test_a_bench_suite_names_the_run_folder_of_every_case(capsys, home, monkeypatch) -> None:
    import tracea.emitters.bench as bench_module

    # one measurement a case, settled or not (the timings are not what this test is about; a loaded test
    # machine would otherwise take each case up to three times)
    monkeypatch.setattr(bench_module, "measure_stable", lambda measure, problem, **kw: (measure(), None))
    code = main(["bench", "--backend", "cpu", "--quick", "--suite", "softmax", *FAST])
    out, err = capsys.readouterr()
    assert code == 0, err
    runs = named_runs(out)
    assert out.rstrip().splitlines()[-1].startswith("run folders (")  # the last line
    cases = registry.backend("cpu").suites(quick=True)["softmax"]
    assert len(runs) == len(cases) and all(r.parent == home / "runs" and r.is_dir() for r in runs)
    shapes = []
    for run in runs:
        (row,) = metrics(run)
        assert row["op"] == "softmax" and row["status"] == "ok" and row["backend"] == "cpu"
        shapes.append((row["shape"]["rows"], row["shape"]["cols"]))
    assert shapes == [(op.rows, op.cols) for op in cases]  # one folder per case, in the table's order


def test_a_tune_suite_names_the_run_folder_of_every_problem_tuned(capsys, home, tmp_path) -> None:
    problems = tmp_path / "problems.json"
    problems.write_text(json.dumps([{"op": "gemm", "m": 16, "n": 8, "k": 8}]))
    args = ["tune", "--suite", str(problems), "--backend", "cpu", "--budget", "1", *FAST]
    code = main(args)
    out, err = capsys.readouterr()
    assert code == 0, err
    (run,) = named_runs(out)
    assert run.parent == home / "runs" and (run / "trials.jsonl").is_file()
    rows = metrics(run)
    assert rows and {(r["op"], r["shape"]["m"], r["shape"]["n"]) for r in rows} == {("gemm", 16, 8)}
    code = main([*args, "--json"])  # stored now: reused, no new run; the rows say where each run is
    out, err = capsys.readouterr()
    assert code == 0, err
    (row,) = json.loads(out)
    assert row["reused"] and row["run"] is None and "run folders" not in err
    assert sorted((home / "runs").iterdir()) == [run]
