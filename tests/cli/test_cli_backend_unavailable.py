"""`--backend cuda` (or `hip`, `metal`) on a machine without that GPU is an expected condition, not a crash: one line
naming the backend and why it is not here, exit 3 (unsupported on this host), before any run folder, and no
crash bundle. Run on this machine's real probe: where the GPU is present the case does not exist, and the
test skips."""

from __future__ import annotations

import pytest

from tracea.__main__ import main
from tracea.doctor import probe
from tracea.doctor.errors import EXIT_UNSUPPORTED, UnsupportedError
from tracea.emitters import registry

WHY = {"cuda": "no NVIDIA GPU", "hip": "no AMD GPU", "metal": "no Apple GPU"}
COMMANDS = {
    "bench op": ["bench", "gemm", "--m", "64"],
    "bench attention": ["bench", "attention", "--heads", "2", "--seq", "64", "--head-dim", "64"],
    "bench suite": ["bench", "--quick"],
    "tune op": ["tune", "gemm", "--m", "64", "--no-tui"],
    "tune suite": ["tune", "--suite", "softmax", "--quick"],
}


def _absent(backend: str) -> str:
    problem = registry.backend(backend).runs_kernels(probe())
    if problem is None:
        pytest.skip(f"this machine runs {backend} kernels")
    return problem


@pytest.mark.parametrize("backend", sorted(WHY))
@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_a_backend_not_here_is_one_line_and_exit_3(capsys, home, backend, command) -> None:
    problem = _absent(backend)
    kind = COMMANDS[command][1]
    if kind == "attention" and not any(v.op == kind for v in registry.all_variants(backend)):
        pytest.skip(f"{backend} has no attention kernel: the planner's 'no variant' line comes first")
    code = main([*COMMANDS[command], "--backend", backend])
    out, err = capsys.readouterr()
    assert code == EXIT_UNSUPPORTED, err
    lines = err.splitlines()
    assert lines[0] == f"error: backend {backend} is not available here: {problem}", err
    assert WHY[backend] in lines[0]
    assert len(lines) == 2 and lines[1].startswith("hint: `tracea doctor`"), err
    assert "Traceback" not in err and "crash bundle" not in err and out == ""
    assert not (home / "runs").exists()  # no run folder, so no crash bundle either


def test_the_named_variant_of_a_backend_not_here_is_refused_alike(capsys, home) -> None:
    problem = _absent("cuda")
    code = main(["tune", "gemm", "--m", "64", "--variant", "cuda-simt.gemm", "--no-tui"])
    err = capsys.readouterr().err
    assert code == EXIT_UNSUPPORTED and err.startswith(f"error: backend cuda is not available here: {problem}\n")
    assert not (home / "runs").exists()


def test_what_this_host_cannot_do_inside_a_run_leaves_no_crash_bundle(capsys, home) -> None:
    """An UnsupportedError raised while a bench run is open (a precision, a compiler): the run folder says
    "error" with the message; the one-line error is all the user needs, so no crash bundle is packed."""
    from tracea.reports.record import CRASH_BUNDLE, RunRecorder

    with pytest.raises(UnsupportedError), RunRecorder("bench", ["bench"], probe()) as rec:
        raise UnsupportedError("no variant can run gemm in fp64 here")
    assert rec.run.manifest["status"] == "error" and "fp64" in rec.run.manifest["error"]
    assert not (rec.run.path / CRASH_BUNDLE).exists() and rec.crash_bundle is None
    assert "crash bundle" not in capsys.readouterr().err


def test_a_suite_for_a_ray_cluster_is_not_judged_by_this_machine() -> None:
    """With --cluster the kernels run on the cluster's machines (a GPU-less head tunes its GPU nodes), so a
    suite's --backend is checked for its name only, not against this machine."""
    from tracea.cmd_tune_suite import load_problems

    _absent("cuda")
    with pytest.raises(UnsupportedError, match="backend cuda is not available here"):
        load_problems("softmax", "cuda", True, probe())
    problems = load_problems("softmax", "cuda", True, probe(), here=False)
    assert problems and {b for _, b, _ in problems} == {"cuda"}
