"""The tuning database: every trial kept, keyed by op x variant x environment fingerprint (a change in
any part is a miss), shared safely by several processes, and the best-schedule lookup bench uses."""

from __future__ import annotations

import dataclasses
import multiprocessing
import sqlite3

import pytest

from tracea.doctor import probe
from tracea.doctor.errors import BadInputError
from tracea.emitters.registry import environment, fingerprint
from tracea.kernels import Gemm
from tracea.tuner.db import TuningDB, default_path, tuning_key
from tracea.tuner.lookup import stored_schedule
from tracea.tuner.trial import Measurement, Trial

OP = Gemm(m=64, n=64, k=64)


def _trial(i: int, status: str = "ok", ms: float | None = 1.0) -> Trial:
    sched = {"schema_version": 1, "backend": "cpu", "mr": 4, "nr": 4, "mc": 8 * (i + 1), "kc": 64, "nc": 64,
             "threads": 1, "unroll": 1, "prefetch": 0, "pack_a": True, "pack_b": True}
    m = Measurement(status, p50_ms=ms if status == "ok" else None, p95_ms=ms, error=None if status == "ok" else "x")
    return Trial(i, sched, f"cand{i}", m, 0.1)


def _start(db: TuningDB, key: str) -> int:
    return db.start_run(key=key, op=OP, variant="cpu-portable.gemm", backend="cpu", fingerprint="f", environment={},
                        strategy="random", seed=0, budget=10, space_size=10, options={})


def test_location_follows_tracea_home(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("TRACEA_HOME", str(tmp_path))
    assert default_path() == tmp_path / "tuning.sqlite"
    db = TuningDB()
    # a rollback journal (tuner/db.py says why not WAL): between writes the database is the one file
    assert db.conn.execute("PRAGMA journal_mode").fetchone()[0] == "delete"
    _start(db, "k")
    assert (tmp_path / "tuning.sqlite").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tuning.sqlite"]


def test_every_trial_is_kept_and_the_best_is_the_fastest_verified(tmp_path) -> None:
    db = TuningDB(tmp_path / "t.sqlite")
    run = _start(db, "k1")
    for i, (status, ms) in enumerate([("ok", 3.0), ("wrong_result", None), ("ok", 2.0), ("timeout", None)]):
        db.add_trial(run, "k1", _trial(i, status, ms))
    rows = db.trials("k1")
    assert [r["status"] for r in rows] == ["ok", "wrong_result", "ok", "timeout"]
    assert db.best("k1")["name"] == "cand2" and db.best("other") is None
    (k,) = db.keys()
    assert (k["trials"], k["ok"], k["best_ms"]) == (4, 2, 2.0)
    exported = db.export("k1")
    assert len(exported["trials"]) == 4 and exported["trials"][0]["schedule"]["mc"] == 8
    assert db.clear("k1") == 4 and db.trials("k1") == []


def test_a_fingerprint_change_is_a_miss(tmp_path) -> None:
    host = probe()
    fp = fingerprint(host, "cpu")
    db = TuningDB(tmp_path / "t.sqlite")
    key = tuning_key(OP.signature, "cpu-portable.gemm", fp)
    db.add_trial(_start(db, key), key, _trial(0))
    db.close()
    assert stored_schedule(OP, "cpu-portable.gemm", host, "cpu", str(tmp_path / "t.sqlite"))["mc"] == 8
    for change in ({"tracea_version": "999"},):
        other = dataclasses.replace(host, **change)
        assert fingerprint(other, "cpu") != fp
        assert stored_schedule(OP, "cpu-portable.gemm", other, "cpu", str(tmp_path / "t.sqlite")) is None
    cpu = dataclasses.replace(host.cpu, isa=[*host.cpu.isa, "newflag"])
    assert stored_schedule(OP, "cpu-portable.gemm", dataclasses.replace(host, cpu=cpu), "cpu",
                           str(tmp_path / "t.sqlite")) is None
    assert stored_schedule(dataclasses.replace(OP, n=128), "cpu-portable.gemm", host, "cpu",
                           str(tmp_path / "t.sqlite")) is None


def test_fingerprint_covers_what_a_schedule_depends_on() -> None:
    env_cpu = environment(probe(), "cpu")
    assert {"tracea", "backend", "cpu", "machine", "isa", "compiler"} <= set(env_cpu)
    env_cuda = environment(probe(), "cuda")
    assert {"gpus", "driver", "nvrtc"} <= set(env_cuda)


def _writer(path: str, worker: int, n: int) -> None:
    db = TuningDB(path)
    run = _start(db, "shared")
    for i in range(n):
        db.add_trial(run, "shared", _trial(worker * 1000 + i, "ok", float(i + 1)))
    db.finish_run(run, "done")


def test_several_processes_share_the_database(tmp_path) -> None:
    path = str(tmp_path / "shared.sqlite")
    TuningDB(path).close()
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_writer, args=(path, w, 40)) for w in range(3)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    db = TuningDB(path)
    assert len(db.trials("shared")) == 120
    assert db.conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    assert [r["state"] for r in db.conn.execute("SELECT state FROM runs")] == ["done"] * 3


def test_a_corrupt_database_is_bad_input(tmp_path) -> None:
    bad = tmp_path / "bad.sqlite"
    bad.write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(BadInputError, match="tuning database"):
        TuningDB(bad)
    assert sqlite3.sqlite_version


def test_context_bench_uses_the_stored_best(tmp_path, monkeypatch) -> None:
    import tracea

    monkeypatch.setenv("TRACEA_HOME", str(tmp_path))
    host = probe()
    op = Gemm(m=48, n=40, k=32)
    ctx = tracea.Context(host)
    variant = ctx.plan_kernel(op, backend="cpu").require()
    assert ctx.bench(op, repeats=2, warmup=1, min_seconds=0.0).schedule_source == "hero"  # nothing stored yet
    stored = _trial(0).schedule | {"mr": 2, "nr": 8 if "portable" in variant else 16, "mc": 8, "nc": 32,
                                   "threads": 1}
    if "avx2" in variant:
        stored["nr"] = 8
    key = tuning_key(op.signature, variant, fingerprint(host, "cpu"))
    db = TuningDB()
    db.add_trial(_start(db, key), key, dataclasses.replace(_trial(0), schedule=stored))
    db.close()
    result = ctx.bench(op, repeats=2, warmup=1, min_seconds=0.0)
    assert result.status == "ok" and result.schedule_source == "tuned" and result.schedule == stored


def test_many_connections_opening_one_new_database_together_all_succeed(tmp_path):
    """A suite's lanes (threads) and concurrent tunes (processes) open a new database at the same moment:
    SQLite answers the change to WAL mode with "database is locked" at once, outside the busy handler; every
    opener waits its turn instead of failing (the lanes' first run on two H200s lost a problem to this)."""
    import threading

    from tracea.tuner.db import TuningDB

    for trial in range(40):
        path = tmp_path / f"new-{trial}.sqlite"
        errors: list[str] = []
        barrier = threading.Barrier(4)

        def open_it(path=path, errors=errors, barrier=barrier):
            barrier.wait()
            try:
                TuningDB(path).close()
            except Exception as exc:  # noqa: BLE001 - what the test looks for
                errors.append(str(exc))

        threads = [threading.Thread(target=open_it) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors, errors
