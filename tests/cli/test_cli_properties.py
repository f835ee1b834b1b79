"""A property over every command of the app: whatever hostile values its options get (0, negatives, huge
integers, NaN and infinities, empty and odd unicode strings, folders, missing, empty and binary files),
``tracea`` answers with an exit code and at most a one-line error, never a traceback and never an
"internal error". The commands and their options are read from the Click app itself, so a new command or
option is covered the day it is added.

Runs in-process through ``tracea.__main__.main`` (the error policy), in a scratch TRACEA_HOME and working
folder. Real work is kept small: tune always replays a recording (``--simulate``, a hostile file or a real
one), sizes that pass validation are tiny, doctor never measures or opens its TUI, replay only gets
hostile bundles. Each of the 11 command groups runs 20 to 50 examples (``EXAMPLES``; 40 where unnamed), 410
in all over the 46 commands, each example one command with several hostile option values. The examples are
fixed (derandomized) so CI is stable; ``TRACEA_PROPERTY_SCALE=10`` runs ten times as many, freshly random,
to hunt.
"""

from __future__ import annotations

import contextlib
import io
import os
from pathlib import Path
from typing import Any

import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from tracea.__main__ import main  # noqa: E402
from tracea.app import build_command  # noqa: E402

FIXTURES = Path(__file__).parents[1] / "fixtures"


def _leaves(cmd: Any, path: tuple[str, ...] = ()) -> dict[tuple[str, ...], Any]:
    subs = getattr(cmd, "commands", None)
    if not subs:
        return {path: cmd}
    out: dict[tuple[str, ...], Any] = {}
    for name, sub in subs.items():
        out.update(_leaves(sub, (*path, name)))
    return out


COMMANDS = _leaves(build_command())
GROUPS = sorted({path[0] for path in COMMANDS})


def _annotation(param: Any) -> Any:
    td = getattr(param, "type_descriptor", None)  # Typer >= 0.29 keeps the Python annotation
    if td is not None:
        return td.annotation
    return {"integer": int, "float": float, "path": Path, "boolean": bool}.get(getattr(param.type, "name", ""), str)


# ------------------------------------------------------------------------------------- hostile values

HUGE_INTS = [2**31, 2**32, 2**63, 10**30, -(2**63)]
INTS = st.one_of(
    st.sampled_from([0, -1, -7, *HUGE_INTS]).map(str),
    st.integers(1, 12).map(str),  # valid and small: real work stays cheap
    st.sampled_from(["", "abc", "1.5", "0x10", "1e3", " 3", "٣"]),  # not integers (one an Arabic-Indic digit)
)
FLOATS = st.sampled_from(["nan", "-nan", "inf", "-inf", "0", "-1", "1e308", "1e-320", "0.5", "2", "", "abc", "1,5"])
ODD_TEXT = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=12)
TEXT = st.one_of(
    st.sampled_from(["", " ", "fp32", "bf16", "fp16", "int8", "row", "col", "nchw", "nhwc", "cpu", "cuda", "hip",
                     "bias,relu", "gelu,gelu", "bayes", "random", "exhaustive", "sm_80", "sm_12", "LAST", "..",
                     "../../etc/passwd", "x" * 300, "\u202e\u200b", "ß", "😀", "-", "--m", "8x8", "64x64", "0x4",
                     "-1x2", "99999999x9", "ldmatrix.x4", "ld.32.row", "st.128.column", "cp.async.128.row",
                     "xor8", "128B", "sw<3,4,3>", "sw<99,99,99>", "cpu-portable.gemm", "cpu-avx512.softmax"]),
    ODD_TEXT,
)


@pytest.fixture(scope="module")
def scratch(tmp_path_factory) -> dict[str, str]:
    """Files of every hostile kind, a scratch TRACEA_HOME and a scratch working folder."""
    root = tmp_path_factory.mktemp("props")
    (root / "dir").mkdir()
    (root / "empty.json").write_text("")
    (root / "binary.json").write_bytes(bytes(range(256)) * 4)
    (root / "bad.jsonl").write_text("{not json\n")
    (root / "deep.json").write_text("[" * 50_000)
    (root / "list.json").write_text("[1, 2, 3]")
    (root / "bundle.tar.gz").write_bytes(b"\x1f\x8b\x08\x00garbage")
    (root / "metrics.csv").write_text("timestamp,op\n2026,gemm\n")
    for name in ("spaces/cpu_gemm_512_avx2.json", "snapshots/ci_vm.json", "bank_patterns/h100_2026-11-21.json"):
        (root / Path(name).name).write_bytes((FIXTURES / name).read_bytes())  # copies: outputs may land on them
    paths = {
        "dir": root / "dir", "missing": root / "missing.json", "empty": root / "empty.json",
        "binary": root / "binary.json", "bad": root / "bad.jsonl", "deep": root / "deep.json",
        "list": root / "list.json", "bundle": root / "bundle.tar.gz", "metrics": root / "metrics.csv",
        "new": root / "new" / "out.jsonl", "new_tgz": root / "new" / "b.tar.gz",
        "space": root / "cpu_gemm_512_avx2.json",
        "snapshot": root / "ci_vm.json", "pattern": root / "h100_2026-11-21.json",
    }
    old_home, old_cwd = os.environ.get("TRACEA_HOME"), os.getcwd()
    os.environ["TRACEA_HOME"] = str(root / "home")
    (root / "cwd").mkdir()
    os.chdir(root / "cwd")  # relative outputs (pack-repro -o x.tar.gz) land here
    yield {k: str(v) for k, v in paths.items()}
    os.chdir(old_cwd)
    if old_home is None:
        os.environ.pop("TRACEA_HOME", None)
    else:
        os.environ["TRACEA_HOME"] = old_home


def _paths(scratch: dict[str, str]) -> st.SearchStrategy[str]:
    """Every path is inside the scratch folder: outputs are written for real (special files such as
    /dev/null or a FIFO are tested one by one in test_cli_inputs.py, never generated here)."""
    one_name = ODD_TEXT.map(lambda s: s.replace("/", "_") or "x")  # relative to the scratch working folder
    return st.one_of(st.sampled_from(sorted(scratch.values())), st.just(""), one_name)


# The few options whose valid values would start real work: kept on cheap or hostile ground.
def _override(group: str, name: str, scratch: dict[str, str]) -> st.SearchStrategy[str] | None:
    paths = _paths(scratch)
    if group == "tune" and name == "simulate":
        return st.sampled_from([scratch[k] for k in ("space", "binary", "deep", "list", "empty", "dir", "missing")])
    if group == "replay" and name == "bundle":
        return st.sampled_from([scratch[k] for k in ("bundle", "binary", "empty", "dir", "missing", "metrics")])
    if group == "doctor" and name == "input_file":
        return st.sampled_from([scratch[k] for k in ("snapshot", "binary", "deep", "list", "empty", "dir", "missing")])
    if group == "report" and name == "metrics_file":
        return st.one_of(st.sampled_from([scratch["metrics"], scratch["bad"]]), paths)
    return None


@st.composite
def argv(draw: Any, path: tuple[str, ...], scratch: dict[str, str]) -> list[str]:
    group, cmd = path[0], COMMANDS[path]
    args: list[str] = list(path)
    for p in cmd.params:
        if p.name == "help" or not p.opts:
            continue
        forced = (group == "tune" and p.name in ("simulate", "no_tui")) or (group == "doctor" and p.name == "input_file")
        if not (p.required or forced or draw(st.booleans())):
            continue
        kind = _annotation(p)
        if getattr(p, "is_flag", False) or kind is bool:
            if p.name in ("tui", "measure") and "--json" not in args and "--input" not in args:
                continue  # a live TUI or a ceiling measurement is real work; the refusals are tested
            args.append(p.opts[0])
            continue
        values = _override(group, p.name, scratch)
        if values is None:
            values = INTS if kind is int else FLOATS if kind is float else _paths(scratch) if kind is Path else TEXT
        count = draw(st.integers(1, 2)) if p.multiple else 1
        for _ in range(count):
            value = draw(values)
            if p.param_type_name == "argument":
                args += ["--", value] if value.startswith("-") else [value]
            else:
                args += [p.opts[0], value]
    return args


def _run(args: list[str]) -> tuple[int, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(args)
    return code, err.getvalue()


def _check(args: list[str]) -> None:
    code, err = _run(args)
    assert "Traceback" not in err, (args, err)
    assert "internal error" not in err, (args, err)
    assert code in (0, 1, 2, 3), (args, code, err)  # 1: a kernel or replay that failed, said as such


SCALE = int(os.environ.get("TRACEA_PROPERTY_SCALE", "1"))
EXAMPLES = {"bench": 30, "doctor": 20, "tune": 40, "plan": 40, "emit": 40, "replay": 40, "report": 40,
            "bank-sim": 50, "cache": 40, "pack-repro": 30}


@pytest.mark.parametrize("group", GROUPS)
def test_no_option_value_makes_an_internal_error(group: str, scratch: dict[str, str]) -> None:
    paths = sorted(p for p in COMMANDS if p[0] == group)

    @settings(max_examples=EXAMPLES.get(group, 40) * SCALE, deadline=None, derandomize=SCALE == 1, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
    @given(data=st.data())
    def prop(data: Any) -> None:
        path = data.draw(st.sampled_from(paths))
        _check(data.draw(argv(path, scratch)))

    prop()


def test_every_command_is_covered() -> None:
    """The groups above are the app's: a new top-level command gets examples without a list to edit."""
    assert {"doctor", "plan", "emit", "bench", "tune", "cache", "report", "pack-repro", "replay", "bank-sim"} <= set(GROUPS)
    assert len(COMMANDS) >= 20
