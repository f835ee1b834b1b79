"""One clear line, never an internal error, for what issue 30 found ending in a traceback or a NumPy error:
deeply nested JSON (a suite, a schedule, a tuning export, a bundle manifest), integers past what the
database holds, files that are not UTF-8, a .npz or an empty map as a block mask, a space that would
take hours to expand, SIGTERM under several tune workers; and through ``tracea.ops``: zero strides,
unknown epilogue names, a string alpha, empty inputs, a broadcast view the float64 fallback would copy
whole, complex and integer arrays (refused by the call and by ``explain`` alike). The reading layer is
``doctor/inputs.py``; each case runs the real command or call."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import numpy as np
import pytest

from tracea.doctor.errors import BadInputError, UnsupportedError
from tracea.doctor.inputs import check_int, check_ints_in, parse_json, read_text


def tracea(home: Path, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tracea", *args], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "TRACEA_HOME": str(home)}, cwd=cwd, stdin=subprocess.DEVNULL)


def one_line(out: subprocess.CompletedProcess, code: int, *says: str) -> None:
    errors = [ln for ln in out.stderr.splitlines() if ln.startswith("error:")]
    assert out.returncode == code, out.stderr
    assert len(errors) == 1 and "internal error" not in out.stderr and "Traceback" not in out.stderr, out.stderr
    for s in says:
        assert s in errors[0], out.stderr


@pytest.fixture
def files(tmp_path) -> Path:
    (tmp_path / "deep.json").write_text("[" * 100_000 + "]" * 100_000)
    (tmp_path / "deep_obj.json").write_text('{"a": ' * 5000 + "1" + "}" * 5000)
    (tmp_path / "big.json").write_text(json.dumps({"schema_version": 1, "runs": [{"id": 2**70}], "trials": []}))
    (tmp_path / "latin1.json").write_bytes(b'[{"op": "gemm", "m": 64, "name": "\xe9"}]')
    (tmp_path / "latin1.toml").write_bytes(b"[restrict]\nmc = [64] # \xff\n")
    np.save(tmp_path / "empty.npy", np.zeros((0, 0), bool))
    np.savez(tmp_path / "masks.npz", a=np.ones((2, 2), bool))
    (tmp_path / "wide.toml").write_text("[extend]\nmc = " + str(list(range(8, 30008))) + "\n")
    return tmp_path


GEMM = ["--m", "64", "--backend", "cpu"]
CASES = {
    "suite nested": (["tune", "--suite", "deep.json", "--backend", "cpu"], 2, "nests 100000 levels deep"),
    "suite objects nested": (["tune", "--suite", "deep_obj.json", "--backend", "cpu"], 2, "levels deep"),
    "suite not UTF-8": (["tune", "--suite", "latin1.json", "--backend", "cpu"], 2, "is not UTF-8 text"),
    "schedule nested": (["export", "gemm", *GEMM, "--schedule", "deep.json", "--out", "pkg"], 2, "levels deep"),
    "cache import nested": (["cache", "import", "deep.json"], 2, "levels deep"),
    "cache import 2**70": (["cache", "import", "big.json"], 2, "outside -9223372036854775808"),
    "budget past 64 bits": (["tune", "gemm", *GEMM, "--budget", str(2**63), "--no-tui"], 2, "--budget"),
    "patience past 64 bits": (["tune", "gemm", *GEMM, "--patience", str(2**64), "--no-tui"], 2, "--patience"),
    "space not UTF-8": (["tune", "gemm", *GEMM, "--space", "latin1.toml", "--no-tui"], 2, "is not UTF-8 text"),
    "space too wide": (["tune", "gemm", *GEMM, "--space", "wide.toml", "--no-tui"], 2, "candidates to check"),
    "empty block mask": (["bench", "attention", "--batch", "1", "--heads", "2", "--seq", "256", "--head-dim", "64",
                          "--block-mask", "empty.npy", "--backend", "cpu"], 2, "got 0 x 0"),
    "npz block mask": (["bench", "attention", "--batch", "1", "--heads", "2", "--seq", "256", "--head-dim", "64",
                        "--block-mask", "masks.npz", "--backend", "cpu"], 2, ".npz archive"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_hostile_files_and_values_are_one_line(files, case):
    args, code, says = CASES[case]
    started = time.monotonic()
    one_line(tracea(files / "home", *args, cwd=files), code, says)
    assert time.monotonic() - started < 60  # refused up front, not after hours of work


def test_a_bundle_whose_manifest_nests_too_deep_is_one_line(tmp_path):
    top = tmp_path / "tracea-repro"
    top.mkdir()
    (top / "manifest.json").write_text("[" * 50_000 + "]" * 50_000)
    with tarfile.open(tmp_path / "b.tar.gz", "w:gz") as tar:
        tar.add(top, arcname="tracea-repro")
    one_line(tracea(tmp_path / "home", "replay", str(tmp_path / "b.tar.gz"), "--yes"), 2, "levels deep")


def test_sigterm_under_two_tune_workers_is_one_line_and_no_thread_traceback(tmp_path):
    env = {**os.environ, "TRACEA_HOME": str(tmp_path / "home")}
    proc = subprocess.Popen([sys.executable, "-m", "tracea", "tune", "gemm", "--m", "128", "--backend", "cpu",
                             "--workers", "2", "--budget", "60", "--patience", "0", "--no-tui"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    deadline = time.monotonic() + 120
    out = ""
    while " ok " not in out:  # a trial done: the workers are running
        assert time.monotonic() < deadline and proc.poll() is None, proc.communicate()
        line = proc.stderr.readline()
        out += line
        if "workers at once" in line:
            assert "2 workers" in line  # and it says it used them
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 128 + signal.SIGTERM, err
    assert "Traceback" not in err and "Exception in thread" not in err, err
    assert err.strip().splitlines()[-1] == "error: interrupted (SIGTERM)"


# ------------------------------------------------------------------------------------------ the layer


def test_the_reading_layer():
    assert parse_json('{"a": [1, {"b": "[[[{"}]}', "x") == {"a": [1, {"b": "[[[{"}]}  # brackets in strings
    with pytest.raises(BadInputError, match="65 levels deep"):
        parse_json("[" * 65 + "]" * 65, "x")
    assert parse_json("[" * 64 + "]" * 64, "x") is not None
    with pytest.raises(BadInputError, match="is not JSON"):
        parse_json("{", "x")
    with pytest.raises(BadInputError, match="not UTF-8 text .byte 0xff at offset 3"):
        parse_json(b"[1,\xff]", "x")
    with pytest.raises(BadInputError, match="outside"):
        check_ints_in({"a": [1, {"b": 2**63}]}, "doc")
    check_ints_in({"a": [1, True, -(2**63), 2**63 - 1, 1.5e300]}, "doc")
    with pytest.raises(BadInputError, match="not an integer"):
        check_int(True, "n")
    assert check_int(5, "n", 1, 10) == 5


def test_read_text_refuses_folders_big_and_binary_files(tmp_path):
    with pytest.raises(BadInputError, match="is a folder"):
        read_text(tmp_path, "--suite")
    (tmp_path / "big").write_bytes(b"x" * 2048)
    with pytest.raises(BadInputError, match="larger than"):
        read_text(tmp_path / "big", "--suite", limit=1024)
    (tmp_path / "bin").write_bytes(b"\x89PNG\r\n")
    with pytest.raises(BadInputError, match="not UTF-8"):
        read_text(tmp_path / "bin", "--suite")


# ---------------------------------------------------------------------------------------- tracea.ops


def test_ops_arguments_are_checked_before_anything_runs():
    from tracea import ops

    rng = np.random.default_rng()
    a = rng.standard_normal((8, 8)).astype(np.float32)
    x = rng.standard_normal((1, 3, 8, 8)).astype(np.float32)
    w = rng.standard_normal((4, 3, 3, 3)).astype(np.float32)
    for call, match in [
        (lambda: ops.conv2d(x, w, stride=0), "stride: expected integers from 1"),
        (lambda: ops.conv2d(x, w, dilation=(1, 0)), "dilation: expected integers from 1"),
        (lambda: ops.conv2d(x, w, padding=-1), "padding: expected integers from 0"),
        (lambda: ops.conv2d(x, w, stride=2**40), "stride: expected integers"),
        (lambda: ops.gemm(a, a, epilogue="relu;rm"), "unknown op 'relu;rm'"),
        (lambda: ops.gemm(a, a, epilogue=["relu", 3]), "epilogue: expected"),
        (lambda: ops.gemm(a, a, epilogue="scale", alpha="2"), "alpha: expected a finite real number"),
        (lambda: ops.gemm(a, a, epilogue="scale", alpha=float("nan")), "alpha"),
        (lambda: ops.attention(a[None, None], a[None, None], a[None, None], scale="2"), "scale"),
        (lambda: ops.attention(np.zeros((1, 2, 5, 64), np.float32), np.zeros((1, 2, 0, 64), np.float32),
                               np.zeros((1, 2, 0, 64), np.float32)), "no keys"),
        (lambda: ops.gemm(a.astype(np.complex64), a.astype(np.complex64)), "complex arrays are not taken"),
        (lambda: ops.gemm(a.astype(np.int32), a.astype(np.int32)), "int32 arrays are not taken"),
        (lambda: ops.explain(ops.gemm, a.astype(np.int32), a.astype(np.int32)), "int32 arrays are not taken"),
        (lambda: ops.explain(np.zeros((1000, 1000))), "unknown op ndarray"),
    ]:
        with pytest.raises(BadInputError, match=match):
            call()


def test_ops_on_empty_inputs_give_empty_results_as_numpy_and_torch_do():
    from tracea import ops

    y = ops.softmax(np.zeros((3, 0), np.float32))
    assert y.shape == (3, 0) and y.dtype == np.float32
    assert "nothing to compute" in str(ops.explain("softmax", np.zeros((3, 0), np.float32)))
    z = np.zeros((1, 2, 0, 64), np.float32)
    assert ops.attention(z, z, z).shape == (1, 2, 0, 64)
    assert ops.gemm(np.zeros((0, 4), np.float32), np.ones((4, 5), np.float32)).shape == (0, 5)
    c = ops.gemm(np.zeros((3, 0), np.float32), np.zeros((0, 4), np.float32))
    assert c.shape == (3, 4) and not c.any()  # k = 0: the sum of nothing


def test_a_broadcast_view_the_fallback_would_copy_whole_is_said_before_memory_runs_out():
    from tracea import ops

    big = np.broadcast_to(np.float32(1), (200_000, 200_000))  # 160 GB as float32, no memory as a view
    with pytest.raises(UnsupportedError, match="would need .* GiB for these operands"):
        ops.gemm(big, np.broadcast_to(np.float32(1), (200_000, 8)))


@pytest.mark.parametrize("value", ["abc", "-1", "nan", "inf", "1e9"])
def test_a_bad_min_time_is_one_line_before_anything_is_built(tmp_path, value):
    out = subprocess.run([sys.executable, "-m", "tracea", "bench", "gemm", "--m", "8", "--n", "8", "--k", "8"],
                         capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL,
                         env={**os.environ, "TRACEA_HOME": str(tmp_path), "TRACEA_MIN_TIME": value})
    one_line(out, 2, "TRACEA_MIN_TIME: expected seconds from 0 to 3600", repr(value))
    assert not (tmp_path / "cache").exists()  # refused before any kernel was compiled


def test_min_time_sets_how_long_a_host_bench_times_and_how_long_a_retry_waits(monkeypatch):
    from tracea.emitters import stability, timing

    monkeypatch.delenv("TRACEA_MIN_TIME", raising=False)
    assert timing.min_time_s() == timing.MIN_TIME_S == 0.5
    monkeypatch.setenv("TRACEA_MIN_TIME", " 2.5 ")
    assert timing.min_time_s() == 2.5
    monkeypatch.setenv("TRACEA_MIN_TIME", "0")
    assert timing.min_time_s() == 0.0
    slept: list[float] = []
    monkeypatch.setattr(stability.time, "sleep", slept.append)
    results = iter([3.0, 1.0])
    assert stability.measure_stable(lambda: next(results), lambda v: "noisy" if v > 2 else None) == (1.0, None)
    assert slept == [0.0]  # min(PAUSE_S, TRACEA_MIN_TIME)
    monkeypatch.setenv("TRACEA_MIN_TIME", "30")
    results = iter([3.0, 1.0])
    stability.measure_stable(lambda: next(results), lambda v: "noisy" if v > 2 else None)
    assert slept[-1] == stability.PAUSE_S  # a longer timing does not lengthen the pause
