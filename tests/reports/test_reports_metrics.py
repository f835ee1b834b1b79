"""The metrics schema and its one writer: CSV and JSONL files load with the csv module, json and pandas
without cleanup, appends from concurrent processes neither tear nor interleave, the header is written
once, and bad files are one clear line."""

from __future__ import annotations

import csv
import json
import multiprocessing
import os
import subprocess
import sys

import pytest

from tracea.doctor.errors import BadInputError
from tracea.reports.metrics import FIELDS, MetricsRow, MetricsWriter, read_metrics

SCHEMA = ["timestamp", "op", "shape", "dtype", "backend", "variant", "schedule", "status", "p50_ms", "p95_ms",
          "tflops", "gbps", "rel_err", "baseline", "baseline_p50_ms", "ratio", "env_fingerprint", "note", "schema_version"]
V1 = [f for f in SCHEMA if f != "note"]


def row(i: int = 0, status: str = "ok") -> MetricsRow:
    ok = status == "ok"
    return MetricsRow(
        timestamp=f"2026-11-23T08:00:{i % 60:02d}+00:00", op="gemm", shape=json.dumps({"m": 64 + i, "n": 64, "k": 64}),
        dtype="fp32", backend="cpu", variant="cpu-avx2-fma.gemm", schedule=json.dumps({"mr": 6, "nr": 16, "note": 'a,"b"'}),
        status=status, p50_ms=0.5 + i if ok else None, p95_ms=0.6 + i if ok else None, tflops=0.1 if ok else None,
        gbps=2.0 if ok else None, rel_err=1e-7 if ok else None, baseline="numpy.matmul (openblas, x=1)",
        baseline_p50_ms=0.7 if ok else None, ratio=1.4 if ok else None, env_fingerprint="abc123")


def test_schema_is_the_documented_one():
    assert FIELDS == SCHEMA  # DESIGN.md's metrics contract; a change here is a schema_version bump


@pytest.mark.parametrize("ext", ["csv", "jsonl"])
def test_writer_round_trip_and_header_once(tmp_path, ext):
    path = tmp_path / f"m.{ext}"
    w = MetricsWriter(path)
    w.write(row(0))
    MetricsWriter(path).write_many([row(1), row(2, "wrong_result")])
    text = path.read_text()
    if ext == "csv":
        assert text.count("timestamp,op,shape") == 1
        with open(path, newline="") as f:
            got = list(csv.DictReader(f))
        assert list(got[0]) == SCHEMA and got[2]["p50_ms"] == "" and got[0]["schedule"] == json.dumps(
            {"mr": 6, "nr": 16, "note": 'a,"b"'})
    else:
        got = [json.loads(line) for line in text.splitlines()]
        assert list(got[0]) == SCHEMA and got[2]["p50_ms"] is None
        # JSON holds objects, not JSON text: `jq .schedule.mr` works
        assert got[0]["schedule"] == {"mr": 6, "nr": 16, "note": 'a,"b"'} and got[1]["shape"]["m"] == 65
    assert len(got) == 3
    rows = read_metrics(path)
    assert [r["status"] for r in rows] == ["ok", "ok", "wrong_result"]
    assert rows[1]["p50_ms"] == 1.5 and rows[2]["tflops"] is None and rows[0]["schema_version"] == 2
    assert json.loads(rows[0]["schedule"]) == {"mr": 6, "nr": 16, "note": 'a,"b"'}  # read back as JSON text


@pytest.mark.parametrize("ext", ["csv", "jsonl"])
def test_version_1_files_still_read(tmp_path, ext):
    """Files written before the note field (schema 1: shape and schedule as JSON text in JSONL too)."""
    old = {**{k: v for k, v in row(3).flat().items() if k != "note"}, "schema_version": 1}
    path = tmp_path / f"old.{ext}"
    if ext == "csv":
        with open(path, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=V1)
            w.writeheader()
            w.writerow({k: "" if v is None else v for k, v in old.items()})
    else:
        path.write_text(json.dumps(old) + "\n")
    (got,) = read_metrics(path)
    assert got["schema_version"] == 1 and got["note"] is None and json.loads(got["shape"])["m"] == 67
    if ext == "csv":  # a new row is never mixed into an old-schema CSV
        with pytest.raises(BadInputError, match="another header"):
            MetricsWriter(path).write(row(4))


def _append(path: str, worker: int, n: int) -> None:
    w = MetricsWriter(path)
    for i in range(n):
        w.write(row(worker * 1000 + i))


@pytest.mark.parametrize("ext", ["csv", "jsonl"])
def test_concurrent_appends_do_not_tear(tmp_path, ext):
    path = str(tmp_path / f"m.{ext}")
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=_append, args=(path, w, 40)) for w in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    rows = read_metrics(path)
    assert len(rows) == 160
    assert sorted(json.loads(r["shape"])["m"] for r in rows) == sorted(64 + w * 1000 + i for w in range(4) for i in range(40))
    if ext == "csv":
        assert open(path).read().count("timestamp,op") == 1


def test_torn_last_line_does_not_swallow_the_next_row(tmp_path):
    path = tmp_path / "m.jsonl"
    MetricsWriter(path).write(row(0))
    with open(path, "a") as f:
        f.write('{"timestamp": "half a row')  # a writer killed mid-line
    MetricsWriter(path).write(row(1))
    lines = path.read_text().splitlines()
    assert json.loads(lines[-1])["shape"] == {"m": 65, "n": 64, "k": 64}
    with pytest.raises(BadInputError, match=r"m.jsonl:2: not a JSON line"):
        read_metrics(path)


def test_bad_files_are_bad_input(tmp_path):
    with pytest.raises(BadInputError, match="extension must be .csv or .jsonl"):
        MetricsWriter(tmp_path / "m.txt")
    other = tmp_path / "other.csv"
    other.write_text("a,b,c\n1,2,3\n")
    with pytest.raises(BadInputError, match="another header"):
        MetricsWriter(other).write(row())
    assert other.read_text() == "a,b,c\n1,2,3\n"  # never mixed
    with pytest.raises(BadInputError, match="missing columns"):
        read_metrics(other)
    with pytest.raises(BadInputError, match="not found"):
        read_metrics(tmp_path / "absent.csv")
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"op": "gemm"}) + "\n")
    with pytest.raises(BadInputError, match="bad.jsonl:1: not a Tracea metrics row"):
        read_metrics(bad)


def test_bench_metrics_files_load_with_csv_json_and_pandas(tmp_path):
    """`tracea bench --metrics` on both formats, twice each: plain loaders read them as they are."""
    env = {**os.environ, "TRACEA_HOME": str(tmp_path / "home")}
    for ext in ("csv", "jsonl"):
        for m in ("32", "40"):
            out = subprocess.run([sys.executable, "-m", "tracea", "bench", "softmax", "--rows", m, "--cols", "24",
                                  "--repeat", "2", "--warmup", "1", "--metrics", str(tmp_path / f"b.{ext}")],
                                 capture_output=True, text=True, timeout=300, env=env)
            assert out.returncode == 0, out.stderr
    with open(tmp_path / "b.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert [list(r) for r in rows] == [SCHEMA, SCHEMA] and all(r["status"] == "ok" for r in rows)
    assert all(float(r["p50_ms"]) > 0 and float(r["rel_err"]) < 1e-4 for r in rows)
    jrows = [json.loads(line) for line in (tmp_path / "b.jsonl").read_text().splitlines()]
    assert [list(r) for r in jrows] == [SCHEMA, SCHEMA]
    pd = pytest.importorskip("pandas")
    for ext, frame in (("csv", pd.read_csv(tmp_path / "b.csv")), ("jsonl", pd.read_json(tmp_path / "b.jsonl", lines=True))):
        assert list(frame.columns) == SCHEMA, ext
        assert len(frame) == 2 and frame["p50_ms"].dtype.kind == "f" and (frame["status"] == "ok").all()
        assert frame["schema_version"].tolist() == [1, 1]


def test_bench_metrics_bad_extension_is_exit_2(tmp_path):
    out = subprocess.run([sys.executable, "-m", "tracea", "bench", "softmax", "--rows", "8", "--cols", "8",
                          "--metrics", str(tmp_path / "m.xlsx")], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "TRACEA_HOME": str(tmp_path / "home")})
    assert out.returncode == 2 and out.stderr.splitlines()[0].endswith("the extension must be .csv or .jsonl (it picks the format)")
    assert not (tmp_path / "home" / "runs").exists()  # refused before a run folder was made


def test_tune_metrics_files_load_with_csv_json_and_pandas(tmp_path):
    """`tracea tune --csv/--jsonl` (one row per trial, through MetricsWriter): the same schema, loadable as is."""
    env = {**os.environ, "TRACEA_HOME": str(tmp_path / "home")}
    out = subprocess.run([sys.executable, "-m", "tracea", "tune", "softmax", "--rows", "64", "--cols", "48",
                          "--budget", "3", "--no-tui", "--repeat", "2", "--warmup", "1", "--strategy", "random",
                          "--csv", str(tmp_path / "t.csv"), "--jsonl", str(tmp_path / "t.jsonl")],
                         capture_output=True, text=True, timeout=300, env=env)
    if out.returncode != 0 and "No such command" in out.stderr:
        pytest.skip("tracea tune is not registered in this checkout")
    assert out.returncode == 0, out.stderr
    with open(tmp_path / "t.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    jrows = [json.loads(line) for line in (tmp_path / "t.jsonl").read_text().splitlines()]
    assert rows and len(rows) == len(jrows)
    assert all(list(r) == SCHEMA for r in rows) and all(list(r) == SCHEMA for r in jrows)
    assert [r["status"] for r in rows] == [r["status"] for r in jrows]
    assert len(read_metrics(tmp_path / "t.csv")) == len(rows)
    pd = pytest.importorskip("pandas")
    for frame in (pd.read_csv(tmp_path / "t.csv"), pd.read_json(tmp_path / "t.jsonl", lines=True)):
        assert list(frame.columns) == SCHEMA and len(frame) == len(rows)
        assert frame["schema_version"].eq(1).all() and frame["op"].eq("softmax").all()
