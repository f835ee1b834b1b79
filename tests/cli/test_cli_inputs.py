"""Bad input to any command is one line on stderr (plus a hint) and exit 2, decided before any work;
an op too large for this machine is exit 3 with what it needs and what there is. Each case of issue 14's
input findings is here, run in-process through ``tracea.__main__.main`` (where the error policy lives),
on real components: the real Click app, the real tuner, gcc, SQLite and the machine's memory figures."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from cli_runner import tracea  # tests/helpers/ (tests/conftest.py puts it on the path)

from tracea.doctor.errors import BadInputError, UnsupportedError

SPACES = Path(__file__).parents[1] / "fixtures" / "spaces"
HUGE_GEMM = ["gemm", "--m", "1000000", "--n", "1000000", "--k", "8"]  # 1e12 outputs: valid, and no machine's


def one_line_error(code: int, err: str, *words: str, exit_code: int = 2) -> str:
    """The error policy: the exit code, ``error: ...`` (and at most a hint line), every word in it."""
    assert code == exit_code, err
    assert "Traceback" not in err and "internal error" not in err, err
    lines = err.strip().splitlines()
    assert lines and lines[0].startswith("error: ") and len(lines) <= 2, err
    assert len(lines) == 1 or lines[1].startswith("hint: "), err
    for w in words:
        assert w in err, (w, err)
    return lines[0]


# ------------------------------------------------------------------------------------ sizes and counts


@pytest.mark.parametrize("verb", ["plan", "emit", "bench", "tune"])
@pytest.mark.parametrize("flag, value", [("--n", "0"), ("--k", "0"), ("--m", "0"), ("--n", "-3"), ("--k", "-1")])
def test_a_zero_or_negative_size_names_its_flag(capsys, home, tmp_path, verb, flag, value) -> None:
    args = ["--m", "64", flag, value] if flag != "--m" else ["--m", value]
    extra = {"emit": ["--out", str(tmp_path / "out")], "tune": ["--no-tui"]}.get(verb, [])
    code, out, err = tracea(capsys, verb, "gemm", *args, *extra)
    one_line_error(code, err, f"'{flag}'", value, "positive")
    assert not (home / "tuning.sqlite").exists() and not (home / "runs").exists()  # stopped before any work
    assert not (tmp_path / "out").exists()


def test_n_and_k_left_out_mean_m_and_given_they_are_kept() -> None:
    from tracea.op_options import make_op

    base = {"dtype": "fp32", "layout_a": "row", "layout_b": "row", "epilogue": "", "alpha": 1.0}
    op = make_op("gemm", {"m": 64, "n": None, "k": None, **base})
    assert (op.m, op.n, op.k) == (64, 64, 64)
    op = make_op("gemm", {"m": 64, "n": 8, "k": 3, **base})
    assert (op.m, op.n, op.k) == (64, 8, 3)
    with pytest.raises(BadInputError, match="n: must be positive"):
        make_op("gemm", {"m": 64, "n": 0, "k": None, **base})  # 0 is never "the default"


@pytest.mark.parametrize("args, flag", [
    (["--repeat", "0"], "--repeat"), (["--repeat", "-1", "--warmup", "-5"], "--repeat"), (["--warmup", "-5"], "--warmup"),
    (["--repeat", "10000000000"], "--repeat"), (["--seed", "-1"], "--seed"), (["--seed", str(2**32)], "--seed"),
])
def test_bench_counts_are_checked_like_tune_and_replay(capsys, home, args, flag) -> None:
    code, out, err = tracea(capsys, "bench", "gemm", "--m", "8", *args)
    one_line_error(code, err, f"'{flag}'", "expected an integer")
    assert not (home / "runs").exists()


@pytest.mark.parametrize("args, flag", [
    (["--timeout", "nan"], "--timeout"), (["--timeout", "0"], "--timeout"), (["--time-limit", "inf"], "--time-limit"),
    (["--time-limit", "-1"], "--time-limit"), (["--budget", "0"], "--budget"), (["--patience", "-1"], "--patience"),
    (["--repeat", "0"], "--repeat"), (["--warmup", "-1"], "--warmup"), (["--seed", "-2"], "--seed"),
    (["--simulate", "/nonexistent.json"], "--simulate"), (["--space", "."], "--space"),
])
def test_tune_options_are_checked_while_parsing(capsys, home, args, flag) -> None:
    code, out, err = tracea(capsys, "tune", "gemm", "--m", "64", "--no-tui", *args)
    one_line_error(code, err, f"'{flag}'")
    assert not (home / "tuning.sqlite").exists()


@pytest.mark.parametrize("args, flag", [
    (["--padding", "-1"], "--padding"), (["--stride", "0"], "--stride"), (["--groups", "0"], "--groups"),
    (["--c", "0"], "--c"), (["--dilation", "-2"], "--dilation"),
])
def test_conv2d_sizes_are_checked(capsys, home, args, flag) -> None:
    base = {"--c": "4", "--h": "8", "--w": "8", "--k": "4"}
    for i in range(0, len(args), 2):
        base[args[i]] = args[i + 1]
    code, out, err = tracea(capsys, "plan", "conv2d", *[x for kv in base.items() for x in kv])
    one_line_error(code, err, f"'{flag}'")


def test_alpha_must_be_finite_and_replay_counts_are_checked(capsys, home, tmp_path) -> None:
    code, _, err = tracea(capsys, "plan", "gemm", "--m", "8", "--alpha", "nan")
    one_line_error(code, err, "'--alpha'", "finite")
    code, _, err = tracea(capsys, "replay", str(tmp_path), "--repeat", "0")
    one_line_error(code, err, "'--repeat'")


def test_every_checked_option_says_its_domain_in_its_help() -> None:
    """Walk the whole app: an option with a domain has the domain's words in its help."""
    from tracea.app import build_command
    from tracea.validate import Domain

    seen = 0

    def walk(cmd) -> None:
        nonlocal seen
        for sub in getattr(cmd, "commands", {}).values():
            walk(sub)
        for p in cmd.params:
            domain = getattr(getattr(p.callback, "__wrapped__", None), "__self__", None)  # Typer wraps it
            if isinstance(domain, Domain):
                seen += 1
                assert domain.text in (p.help or ""), (cmd.name, p.name)

    walk(build_command())
    assert seen > 50  # sizes of three ops in four verbs, plus the counts


# ------------------------------------------------------------------------------------------ memory


def test_an_op_too_large_for_this_machine_is_exit_3_with_the_figures(capsys, home) -> None:
    for verb in ("bench", "tune"):
        code, out, err = tracea(capsys, verb, *HUGE_GEMM, *(["--no-tui"] if verb == "tune" else []))
        line = one_line_error(code, err, "this needs", "GiB", "the machine has", "available", exit_code=3)
        need = float(line.split("this needs ")[1].split(" GiB")[0])
        assert need > 1e12 * 4 / 2**30  # at least the fp32 output itself
    assert not (home / "runs").exists() and not (home / "tuning.sqlite").exists()


def test_the_footprint_counts_inputs_reference_and_output() -> None:
    from tracea.kernels import Conv2d, Gemm, Softmax
    from tracea.kernels.footprint import host_bytes

    g = Gemm(m=256, n=128, k=64)
    bare = (256 * 64 + 64 * 128 + 256 * 128) * 4
    assert bare + 256 * 128 * 8 < host_bytes(g) < 12 * bare  # more than the tensors and the reference
    assert host_bytes(Gemm(m=256, n=128, k=64, dtype="bf16")) < host_bytes(g)
    assert host_bytes(Softmax(rows=1000, cols=1000)) >= 1000 * 1000 * (4 + 8 + 4)
    assert host_bytes(Conv2d(n=2, c=8, h=16, w=16, k=4, r=3, s=3)) > 2 * 4 * 14 * 14 * 8


def test_bench_the_tuners_worker_and_replays_bench_check_memory_before_allocating(home) -> None:
    from tracea.doctor import probe
    from tracea.emitters.bench import bench
    from tracea.kernels import Gemm
    from tracea.tuner.worker_requests import _Session

    op = Gemm(m=1_000_000, n=1_000_000, k=8)
    with pytest.raises(UnsupportedError, match="this needs .* GiB of memory .* the machine has"):
        bench(op, probe())  # replay runs through bench()
    session = _Session(io.StringIO())
    with pytest.raises(UnsupportedError, match="this needs"):
        session.op_data(op, 0)
    assert session.data == {}


def test_a_memory_error_that_happens_anyway_is_said_plainly(capsys, home, monkeypatch) -> None:
    from tracea.kernels import Gemm

    def no_memory(self, rng):
        raise MemoryError

    monkeypatch.setattr(Gemm, "random_inputs", no_memory)
    code, out, err = tracea(capsys, "bench", "gemm", "--m", "8")
    assert code == 3 and "Traceback" not in err and "internal error" not in err, err
    assert "error: out of memory: the machine has" in err and "GiB available" in err


# ------------------------------------------------------------------------------------------ files


def _recorded(tmp_path: Path, edit) -> Path:
    doc = json.loads((SPACES / "cpu_gemm_512_avx2.json").read_text())
    edit(doc)
    path = tmp_path / "space.json"
    path.write_text(json.dumps(doc))
    return path


@pytest.mark.parametrize("make, words", [
    (lambda t: (t / "b.json").write_bytes(bytes(range(256))) and t / "b.json", ["not UTF-8"]),
    (lambda t: (t / "b.json").write_text("{not json") and t / "b.json", ["not valid JSON"]),
    (lambda t: (t / "b.json").write_text("[" * 100_000) and t / "b.json", ["nested too deeply"]),
    (lambda t: (t / "b.json").write_text("[1, 2]") and t / "b.json", ["not a recorded space"]),
    (lambda t: _recorded(t, lambda d: d.update(schema_version=2)), ["schema_version 1"]),
    (lambda t: _recorded(t, lambda d: d.update(op=[1])), ["'op' must be an object"]),
    (lambda t: _recorded(t, lambda d: d["op"].update(m="big")), ["'op': m: expected a positive integer"]),
    (lambda t: _recorded(t, lambda d: d.update(variant=7)), ["'variant' must be a string"]),
    (lambda t: _recorded(t, lambda d: d["trials"][3].update(p95_ms="fast")), ["trial 3", "p95_ms"]),
    (lambda t: _recorded(t, lambda d: d["trials"][0].update(status="great")), ["trial 0"]),
])
def test_simulate_on_a_file_that_is_not_a_recorded_space(capsys, home, tmp_path, make, words) -> None:
    path = make(tmp_path)
    code, out, err = tracea(capsys, "tune", "gemm", "--m", "512", "--simulate", str(path), "--no-tui")
    one_line_error(code, err, str(path), *words)


def test_simulate_still_replays_a_good_recording(capsys, home) -> None:
    code, out, err = tracea(capsys, "tune", "gemm", "--m", "512", "--simulate", str(SPACES / "cpu_gemm_512_avx2.json"),
                            "--budget", "3", "--no-tui", "--json")
    assert code == 0, err
    assert json.loads(out)["evaluated"] == 3


@pytest.mark.parametrize("args", [["bench", "gemm", "--m", "8"], ["cache", "list"], ["pack-repro", "-o", "x.tar.gz"],
                                  ["tune", "gemm", "--m", "8", "--no-tui", "--budget", "1"]])
@pytest.mark.parametrize("where", ["file", "under a file"])
def test_tracea_home_that_cannot_be_a_folder_names_the_variable(capsys, tmp_path, monkeypatch, args, where) -> None:
    f = tmp_path / "afile"
    f.write_text("x")
    home = f if where == "file" else f / "sub"
    monkeypatch.setenv("TRACEA_HOME", str(home))
    code, out, err = tracea(capsys, *args)
    one_line_error(code, err, f"TRACEA_HOME={home}", "TRACEA_HOME at a writable folder")
    assert f.read_text() == "x"


def test_report_snapshot_is_checked(capsys, home, tmp_path, fixtures) -> None:
    """--snapshot names the machine whose ceilings judge the rows (ceiling errors, and --plot's roofline)."""
    metrics = tmp_path / "m.jsonl"
    metrics.write_text("")
    code, _, err = tracea(capsys, "report", str(metrics), "--snapshot", "/nonexistent")
    one_line_error(code, err, "'--snapshot'", "no such file /nonexistent")
    code, _, err = tracea(capsys, "report", str(metrics), "--snapshot", str(fixtures / "snapshots" / "ci_vm.json"))
    assert code == 0, err


@pytest.mark.parametrize("args, words", [
    (["gemm", "--m", "8", "--variant", "cpu-avx512.softmax"], ["computes softmax, not gemm", "cpu-portable.gemm"]),
    (["gemm", "--m", "8", "--backend", "cpu", "--variant", "cuda-simt.gemm"],
     ["cuda variant of gemm", "--backend cpu", "cpu-portable.gemm"]),
    (["softmax", "--rows", "8", "--cols", "8", "--variant", "zzz"], ["no such variant", "cpu-portable.softmax"]),
])
def test_variant_of_another_op_or_backend_says_whose_it_is(capsys, home, args, words) -> None:
    code, out, err = tracea(capsys, "tune", *args, "--no-tui")
    one_line_error(code, err, *words)
    assert "cpu-portable.conv2d" not in err  # only this op's variants are offered


def test_bank_sim_refuses_a_tile_past_shared_memory_before_sweeping_it(capsys) -> None:
    code, _, err = tracea(capsys, "bank-sim", "--layout", "100000x100000", "--access", "ld.32.row")
    one_line_error(code, err, "--layout", "larger than")
    code, _, err = tracea(capsys, "bank-sim", "--layout", "8x8", "--access", "ld.32.row", "--limit", "-1")
    one_line_error(code, err, "'--limit'")


# ------------------------------------------------------------------------------------ the IR's checks


@pytest.mark.parametrize("doc, words", [
    ([1, 2], "op: expected an object"),
    ({"op": ["gemm"]}, "unknown operation"),
    ({"op": "gemm", "m": "8", "n": 1, "k": 1}, "m: expected a positive integer"),
    ({"op": "gemm", "m": 8, "n": 8, "k": 8, "alpha": "x"}, "alpha: expected a number"),
    ({"op": "gemm", "m": 8, "n": 8, "k": 8, "alpha": float("inf")}, "alpha: must be finite"),
    ({"op": "gemm", "m": 8, "n": 8, "k": 8, "epilogue": [1]}, "epilogue: expected op names"),
    ({"op": "conv2d", "n": 1, "c": 1, "h": 1, "w": 1, "k": 1, "r": 1, "s": 1, "stride": [1, "a"]}, "stride[1]"),
    ({"op": "softmax", "rows": 1, "cols": 1, "dtype": [1]}, "dtype: unknown type"),
    ({"op": "gemm", 1: 2}, "gemm:"),
])
def test_op_json_from_untrusted_files_names_the_field(doc, words) -> None:
    from tracea.kernels import Op

    with pytest.raises(BadInputError) as exc:
        Op.from_json(doc)
    assert words in exc.value.message


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs /proc (a folder where nothing can be created)")
@pytest.mark.parametrize("args", [["bench", "gemm", "--m", "8"], ["cache", "list"]])
def test_tracea_home_where_nothing_can_be_created_names_the_variable(capsys, monkeypatch, args) -> None:
    monkeypatch.setenv("TRACEA_HOME", "/proc/tracea-home")
    code, out, err = tracea(capsys, *args)
    one_line_error(code, err, "TRACEA_HOME=/proc/tracea-home: cannot create")


@pytest.mark.parametrize("args", [["doctor", "--save"], ["cache", "export", "--out"]])
def test_an_output_that_is_not_a_regular_file_is_never_replaced(capsys, home, tmp_path, args) -> None:
    """An atomic write renames over its target: over a FIFO (or, as root, /dev/null) that would put a
    regular file in its place."""
    import os
    import stat

    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    code, out, err = tracea(capsys, *args, str(fifo))
    one_line_error(code, err, str(fifo), "not a regular file")
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)


@pytest.mark.parametrize("verb", [["bench", "gemm", "--m", "8"], ["tune", "gemm", "--m", "8", "--no-tui"],
                                  ["plan", "gemm", "--m", "8"], ["bench"]])
def test_an_unknown_backend_is_bad_input_and_a_planned_one_unsupported(capsys, home, verb, monkeypatch) -> None:
    from tracea.emitters import registry

    code, _, err = tracea(capsys, *verb, "--backend", "foo")
    one_line_error(code, err, "unknown backend 'foo'", "cpu or cuda or hip or metal")
    monkeypatch.setattr(registry, "PLANNED", ("vulkan",))  # every backend the design names has landed: one stands in
    code, _, err = tracea(capsys, *verb, "--backend", "vulkan")
    one_line_error(code, err, "'vulkan' has no emitter yet", exit_code=3)


def test_an_unknown_suite_is_one_line_and_exit_2(capsys, home) -> None:
    for args in (["bench", "--suite", "resnet"], ["bench", "--list", "--suite", "resnet"]):
        code, _, err = tracea(capsys, *args)
        one_line_error(code, err, "no suite 'resnet'", "llm-gemm, llm-gemm-int8, llm-gemm-fp8, resnet50, softmax")
