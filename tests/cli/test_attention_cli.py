"""`tracea plan|emit|bench|tune attention`: every flag parses to the right Attention op, bad input is one
line and exit 2, the design documents' alias and precision work, and the SDPA baseline matches the float64
reference (where torch is installed; on CUDA with the gpu marker)."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys

import numpy as np
import pytest

from tracea.__main__ import main
from tracea.kernels import relative_error, tolerance
from tracea.kernels.ops.attention import Attention

SHAPE = ["--heads", "8", "--seq", "64", "--head-dim", "64"]


@pytest.fixture(autouse=True)
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("TRACEA_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


def tracea(capsys, *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def planned_op(capsys, *flags: str, name: str = "attention") -> dict:
    code, out, err = tracea(capsys, "plan", name, *flags, "--backend", "cpu", "--json")
    assert code == 0, err
    return json.loads(out)["op"]


def one_line(code: int, err: str, *words: str, exit_code: int = 2) -> None:
    assert code == exit_code, err
    lines = err.strip().splitlines()
    assert "Traceback" not in err and lines and lines[0].startswith("error: ") and len(lines) <= 2, err
    assert len(lines) == 1 or lines[1].startswith("hint: "), err
    for w in words:
        assert w in lines[0], err


# ---- flags -> the op -------------------------------------------------------------------------------------

@pytest.mark.parametrize(("flags", "want"), [
    ([], dict(batch=1, heads=8, seq_q=64, head_dim=64)),
    (["--batch", "3", "--kv-heads", "2", "--seq-k", "96", "--causal", "--dtype", "bf16", "--scale", "0.5"],
     dict(batch=3, heads=8, seq_q=64, head_dim=64, kv_heads=2, seq_k=96, causal=True, dtype="bf16", scale=0.5)),
    (["--window", "16,4"], dict(batch=1, heads=8, seq_q=64, head_dim=64, window=(16, 4))),
    (["--window", "8", "--no-causal"], dict(batch=1, heads=8, seq_q=64, head_dim=64, window=(8, 8))),
    (["--block-size", "16,32", "--dtype", "fp16"], dict(batch=1, heads=8, seq_q=64, head_dim=64, block_size=(16, 32),
                                                       dtype="fp16")),
])
def test_flags_make_the_op(capsys, flags, want):
    assert planned_op(capsys, *SHAPE, *flags) == Attention(**want).to_json()


@pytest.mark.parametrize(("flags", "want"), [
    (["--batch", "3", "--seq-lens", "64,5,0", "--page-size", "16"],
     dict(batch=3, heads=8, seq_q=1, head_dim=64, seq_k=64, seq_lens=(64, 5, 0), page_size=16)),
    (["--batch", "2", "--seq-lens", "7,100", "--seq-k", "128"],
     dict(batch=2, heads=8, seq_q=1, head_dim=64, seq_k=128, seq_lens=(7, 100))),
    (["--batch", "2", "--seq-k", "100", "--page-size", "24", "--causal"],
     dict(batch=2, heads=8, seq_q=1, head_dim=64, seq_k=100, page_size=24, causal=True)),
])
def test_serving_flags_make_the_op(capsys, flags, want):
    """--seq-lens (one key length per entry; --seq-k defaults to the longest) and --page-size."""
    shape = ["--heads", "8", "--seq", "1", "--head-dim", "64"]
    assert planned_op(capsys, *shape, *flags) == Attention(**want).to_json()


def test_packed_flags_make_the_op(capsys):
    """--packed: the --seq-lens entries' tokens one after another; --seq (and --seq-k) the longest an entry may be."""
    got = planned_op(capsys, "--heads", "8", "--seq", "100", "--head-dim", "64", "--batch", "3", "--seq-lens",
                     "100,30,7", "--packed", "--causal")
    assert got == Attention(batch=3, heads=8, seq_q=100, head_dim=64, seq_k=100, seq_lens=(100, 30, 7), packed=True,
                            causal=True).to_json()


def test_block_mask_file(capsys, tmp_path):
    mask = np.array([[True, False, True], [False, False, True]])  # 2 x 3 tiles: seq 64 / 32, seq_k 96 / 32
    path = tmp_path / "mask.npy"
    np.save(path, mask)
    got = planned_op(capsys, *SHAPE, "--seq-k", "96", "--block-size", "32", "--block-mask", str(path))
    assert got == Attention(1, 8, 64, 64, seq_k=96, block_size=32, block_mask=mask).to_json()


def test_block_mask_density_is_seeded_and_keeps_the_diagonal(capsys):
    flags = [*SHAPE, "--seq", "256", "--seq-k", "512", "--block-size", "32", "--causal", "--block-mask", "0.25"]
    first, again = planned_op(capsys, *flags), planned_op(capsys, *flags)
    other = planned_op(capsys, *flags, "--mask-seed", "7")
    assert first == again and first["block_mask"] != other["block_mask"]
    op = Attention(1, 8, 256, 64, seq_k=512, block_size=32, causal=True, block_mask=first["block_mask"])
    grid = op.block_mask_array()
    assert grid.shape == (8, 16) and int(grid.sum()) == math.ceil(0.25 * grid.size)
    assert op.keep_mask(0, op.seq_q).any(axis=1).all()  # no query row left without a key
    assert all(grid[i, (i * 32 + 256) // 32] for i in range(8))  # each q block's bottom-right diagonal tile


def test_density_one_keeps_every_tile(capsys):
    got = planned_op(capsys, *SHAPE, "--block-size", "16", "--block-mask", "1")
    assert got["block_mask"] == ["1111"] * 4


def test_alias_is_attention_and_hidden(capsys):
    assert planned_op(capsys, *SHAPE, name="flash_attention_2") == planned_op(capsys, *SHAPE)
    code, out, _ = tracea(capsys, "plan", "--help")
    assert code == 0 and "attention" in out and "flash_attention_2" not in out


def test_cli_aliases_match_the_ir():
    from tracea.kernels import OP_ALIASES, OPS
    from tracea.op_options import op_flags

    cli = op_flags()
    assert {(a, k) for k, flags in cli.items() for a in getattr(flags, "ALIASES", ())} == set(OP_ALIASES.items())
    assert list(cli) == list(OPS)  # every op on the CLI, in the IR's order (each <op>_options.py's ORDER)


def test_context_takes_the_design_documents_spelling():
    from tracea import Context
    from tracea.doctor import probe

    ctx = Context(probe())
    op = ctx.op("flash_attention_2", precision="BF16")
    assert op == Attention(batch=4, heads=32, seq_q=4096, head_dim=128, dtype="bf16")
    decision = ctx.plan_kernel("flash_attention_2", precision="BF16", seq_q=128)
    assert decision.op["op"] == "attention" and decision.op["seq_q"] == 128
    assert decision.requested_precision == "bf16"


# ---- bad input: one line, exit 2 ------------------------------------------------------------------------

@pytest.mark.parametrize(("flags", "words"), [
    (["--heads", "8", "--kv-heads", "3", "--seq", "64", "--head-dim", "64"], ["kv_heads", "divisible"]),
    (["--heads", "8", "--seq", "64", "--head-dim", "300"], ["head_dim", "300"]),
    (["--heads", "8", "--seq", "64", "--head-dim", "60"], ["head_dim", "60"]),
    ([*SHAPE, "--window", "3,x"], ["--window", "'3,x'"]),
    ([*SHAPE, "--window", "-1,2"], ["--window"]),
    ([*SHAPE, "--window", "1,2,3"], ["--window"]),
    ([*SHAPE, "--block-size", "0"], ["--block-size"]),
    ([*SHAPE, "--block-mask", "0"], ["--block-mask", "density"]),
    ([*SHAPE, "--block-mask", "1.5"], ["--block-mask", "density"]),
    ([*SHAPE, "--block-mask", "nan"], ["--block-mask", "density"]),
    ([*SHAPE, "--block-mask", "no/such/mask.npy"], ["--block-mask", "no/such/mask.npy"]),
    ([*SHAPE, "--scale", "-1"], ["scale"]),
    ([*SHAPE, "--dtype", "int8"], ["int8"]),
    ([*SHAPE, "--seq-lens", "3,x"], ["--seq-lens", "'3,x'"]),
    ([*SHAPE, "--seq-lens", "3,-1"], ["--seq-lens"]),
    ([*SHAPE, "--seq-lens", "3,4"], ["--seq-lens", "2 lengths for --batch 1"]),
    ([*SHAPE, "--seq-lens", "0"], ["--seq-lens", "empty"]),
    ([*SHAPE, "--seq-lens", "65", "--seq-k", "64"], ["seq_lens[0]", "65"]),
    ([*SHAPE, "--page-size", "0"], ["--page-size"]),
    ([*SHAPE, "--page-size", "16", "--block-mask", "1"], ["block_mask", "page_size"]),
    ([*SHAPE, "--packed"], ["--packed", "--seq-lens"]),
    ([*SHAPE, "--packed", "--seq-lens", "65"], ["seq_lens[0]", "65"]),
    ([*SHAPE, "--packed", "--seq-lens", "60", "--seq-k", "70"], ["packed", "seq_q = seq_k"]),
])
@pytest.mark.parametrize("verb", ["plan", "bench", "emit", "tune"])
def test_bad_input_is_one_line(capsys, tmp_path, verb, flags, words):
    more = {"emit": ["--out", str(tmp_path / "out")], "tune": ["--no-tui"]}.get(verb, [])
    code, _, err = tracea(capsys, verb, "attention", *flags, "--backend", "cpu", *more)
    one_line(code, err, *words)


@pytest.mark.parametrize(("content", "words"), [
    (np.ones((3, 3), bool), ["2 x 2 tiles", "got 3 x 3"]),  # seq 64 at block 32: a 2 x 2 map
    (np.ones((2, 2), np.int64), ["int64", "booleans"]),
    (None, ["not a NumPy .npy array"]),
])
def test_bad_block_mask_file(capsys, tmp_path, content, words):
    path = tmp_path / "mask.npy"
    if content is None:
        path.write_text("not numpy")
    else:
        np.save(path, content)
    code, _, err = tracea(capsys, "plan", "attention", *SHAPE, "--block-size", "32", "--block-mask", str(path))
    one_line(code, err, "--block-mask", *words)


def test_help_names_every_flag(capsys):
    code, out, _ = tracea(capsys, "bench", "attention", "--help")
    assert code == 0
    for flag in ("--batch", "--heads", "--seq", "--seq-k", "--head-dim", "--kv-heads", "--causal", "--window",
                 "--block-mask", "--block-size", "--mask-seed", "--scale", "--seq-lens", "--page-size", "--packed", "--dtype",
                 "--backend", "--json"):
        assert flag in out, flag


def test_no_variant_is_the_planners_line_and_no_run_folder(capsys, home, tmp_path):
    """Until a backend registers an attention variant, bench and emit say so in the planner's words (exit 3,
    unsupported here), before any run folder or crash bundle exists."""
    from tracea.emitters.registry import all_variants

    bare = [b for b in ("cpu", "cuda") if not any(v.op == "attention" for v in all_variants(b))]
    if not bare:
        pytest.skip("every backend has an attention variant")
    for backend in bare:
        for verb, more in (("bench", ["--json"]), ("emit", ["--out", str(tmp_path / "out")])):
            code, out, err = tracea(capsys, verb, "attention", *SHAPE, "--backend", backend, *more)
            one_line(code, err, "no variant can run attention", exit_code=3)
            assert out == ""
    assert not (home / "runs").exists() or not any((home / "runs").iterdir())


@pytest.mark.parametrize("flags", [[], ["--seq-k", "40", "--kv-heads", "1", "--causal", "--block-size", "16",
                                       "--block-mask", "0.5", "--dtype", "bf16"]])
def test_bench_gives_a_verified_row_with_the_baseline(capsys, flags):
    """The issue's command on the CPU once a CPU attention variant is registered: a verified row, the SDPA
    baseline's name and time (with torch) and the ratio field in the JSON."""
    import importlib.util

    from tracea.emitters.registry import all_variants

    if not any(v.op == "attention" for v in all_variants("cpu")):
        pytest.skip("no CPU attention variant is registered yet")
    code, out, err = tracea(capsys, "bench", "attention", "--batch", "1", "--heads", "2", "--seq", "33", "--head-dim",
                            "64", *flags, "--backend", "cpu", "--json", "--repeat", "2", "--warmup", "0", "--seed", "5")
    assert code == 0, err
    row = json.loads(out.splitlines()[0])
    op = Attention(1, 2, 33, 64, **({} if not flags else dict(seq_k=40, kv_heads=1, causal=True, dtype="bf16")))
    assert row["op"] == "attention" and row["status"] == "ok" and row["rel_err"] <= tolerance(op)
    assert "ratio" in row and (row["ratio"] is None or row["ratio"] > 0)
    if importlib.util.find_spec("torch") is not None:
        assert "scaled_dot_product_attention" in row["baseline"] and row["baseline_p50_ms"] > 0


@pytest.mark.parametrize("unstable", [False, True])
@pytest.mark.parametrize("op", [["attention", "--batch", "1", "--heads", "2", "--seq", "33", "--head-dim", "64"],
                                ["conv2d", "--c", "8", "--h", "12", "--w", "12", "--k", "8"]])
def test_without_torch_bench_says_once_that_the_baseline_is_missing_and_why(capsys, monkeypatch, op, unstable):
    """On a machine without torch the attention row says why it has no baseline, once, as the conv row does,
    also when Tracea's own timing did not settle (a loaded machine, as a test machine often is: here one
    measurement is taken and called settled or not, so the case is decided, not left to the load). torch is
    made unimportable here, whether or not this machine has it."""
    import tracea.emitters.bench as bench_module
    from tracea.emitters.registry import all_variants

    if not any(v.op == op[0] for v in all_variants("cpu")):
        pytest.skip(f"no CPU {op[0]} variant is registered")
    monkeypatch.setitem(sys.modules, "torch", None)  # `import torch` fails, find_spec("torch") is None
    why = "unstable in 3 measurements: Tracea's p95 is 2.0x its p50" if unstable else None
    monkeypatch.setattr(bench_module, "measure_stable", lambda measure, problem, **kw: (measure(), why))
    code, out, err = tracea(capsys, "bench", *op, "--backend", "cpu", "--repeat", "1", "--warmup", "0")
    assert code == 0, err
    assert out.count("baseline unavailable: torch is not installed (pip install 'tracea[torch]')") == 1, out
    assert ("the measurement was unstable in 3 measurements" in out) == unstable, out
    assert "torch" not in err and "ratio baseline/tracea" not in out and "no ratio" not in out


def test_tab_completes_attention():
    env = {**os.environ, "_TRACEA_COMPLETE": "complete_bash", "COMP_WORDS": "tracea bench att", "COMP_CWORD": "2"}
    out = subprocess.run([sys.executable, "-m", "tracea"], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.split() == ["attention"], out


# ---- the baseline -----------------------------------------------------------------------------------------

BASELINE_CASES = [
    dict(batch=1, heads=2, seq_q=17, head_dim=64),
    dict(batch=2, heads=4, seq_q=33, head_dim=128, causal=True),
    dict(batch=1, heads=4, seq_q=20, seq_k=50, head_dim=64, causal=True),  # bottom-right aligned
    dict(batch=1, heads=4, seq_q=50, seq_k=20, head_dim=64, causal=True),  # rows with no key: 0
    dict(batch=1, heads=8, kv_heads=2, seq_q=40, head_dim=64, causal=True),
    dict(batch=1, heads=8, kv_heads=4, seq_q=20, seq_k=45, head_dim=64, causal=True),
    dict(batch=1, heads=2, seq_q=100, head_dim=64, window=(8, 3)),
    dict(batch=1, heads=2, seq_q=100, head_dim=64, window=(8, 3), causal=True, dtype="bf16"),
    dict(batch=1, heads=2, seq_q=100, head_dim=64, dtype="fp16", scale=0.3),
    dict(batch=1, heads=2, seq_q=100, head_dim=64, block_size=16,
         block_mask=np.eye(7, dtype=bool) | np.eye(7, k=-2, dtype=bool)),
    dict(batch=1, heads=2, seq_q=100, head_dim=64, block_size=16, block_mask=np.eye(7, k=1, dtype=bool)),
]


def _ids(case: dict) -> str:
    return ",".join(f"{k}={'map' if k == 'block_mask' else v}" for k, v in case.items())


@pytest.mark.parametrize("case", BASELINE_CASES, ids=_ids)
def test_cpu_baseline_matches_the_reference(case):
    pytest.importorskip("torch")
    from tracea.emitters.baselines import baseline_for

    op = Attention(**case)
    inputs = op.random_inputs(np.random.default_rng(1))
    base = baseline_for(op, inputs)
    assert base.run is not None, base.reason
    assert "scaled_dot_product_attention" in base.name and op.dtype.value in base.name
    err = relative_error(np.asarray(base.run(), dtype=np.float64), op.reference(inputs))
    assert err <= tolerance(op), (base.name, err)


def test_cpu_baseline_repeats_kv_heads_on_an_old_torch(monkeypatch):
    """Before torch 2.5 SDPA has no enable_gqa: K/V are repeated per q head, with the same result."""
    pytest.importorskip("torch")
    from tracea.emitters import baselines
    from tracea.emitters.baselines import attention as attention_baselines

    monkeypatch.setattr(attention_baselines, "_torch_version", lambda torch: (2, 4))
    op = Attention(1, 8, 40, 64, seq_k=30, kv_heads=2, window=(5, 2))
    inputs = op.random_inputs(np.random.default_rng(3))
    base = baselines.baseline_for(op, inputs)
    assert base.run is not None, base.reason
    assert relative_error(np.asarray(base.run(), dtype=np.float64), op.reference(inputs)) <= tolerance(op)


def test_cpu_baseline_without_torch(monkeypatch):
    from tracea.emitters import baselines
    from tracea.emitters.baselines import attention as attention_baselines

    monkeypatch.setattr(attention_baselines, "torch_or_none", lambda: None)
    op = Attention(1, 2, 16, 64)
    base = baselines.baseline_for(op, op.random_inputs(np.random.default_rng(0)))
    assert base.run is None and "torch is not installed" in base.reason


@pytest.mark.gpu
@pytest.mark.parametrize("case", [c for c in BASELINE_CASES if c.get("dtype") != "fp16"] + [
    dict(batch=2, heads=8, seq_q=256, head_dim=128, dtype="bf16"),
    dict(batch=1, heads=8, kv_heads=2, seq_q=300, head_dim=64, dtype="fp16", causal=True),
    dict(batch=1, heads=4, seq_q=1000, head_dim=256, dtype="bf16", window=(100, 0)),
], ids=_ids)
def test_cuda_baseline_matches_the_reference(case):
    """The CUDA bench's SDPA adapter (the fastest of cuDNN, flash, efficient) against the reference."""
    from tracea.emitters.device_baselines import torch_baseline

    op = Attention(**case)
    inputs = op.random_inputs(np.random.default_rng(2))
    base = torch_baseline(op, inputs)
    assert base.run is not None, base.reason
    y = base.run()
    err = relative_error(y.float().double().cpu().numpy(), op.reference(inputs))
    assert err <= tolerance(op), (base.name, err)


def test_export_refuses_serving_forms_in_one_line(capsys, tmp_path):
    """A paged or ragged op has int32 inputs the package ABI has no view for: refused before anything is written."""
    out = tmp_path / "pkg"
    code, _, err = tracea(capsys, "export", "attention", "--heads", "8", "--seq", "1", "--head-dim", "64", "--batch",
                          "2", "--seq-lens", "40,3", "--page-size", "16", "--backend", "cpu", "-o", str(out))
    one_line(code, err, "export", "--seq-lens or --page-size", exit_code=3)
    assert not out.exists()
