"""``tracea tune suite NAME|FILE`` (also spelled ``tracea tune --suite NAME|FILE``): tune many problems in one
command, each over the same workers (``--workers N``, ``--cluster``), filling the tuning database for all.

NAME is one of ``tracea bench``'s suites (llm-gemm, resnet50, softmax: the cases each runnable backend
contributes, ``--quick`` a few of each). FILE is a JSON list of ops as the IR writes them
(``{"op": "gemm", "m": 4096, "n": 4096, "k": 4096, "dtype": "bf16"}``, validated like any input from
elsewhere).

With several workers (``--workers N``; by default every GPU of the host), the problems run side by side,
one a worker ("lanes"): each problem is the serial search on one GPU (or one share of the cores), so its
sample efficiency is the serial tuner's, and no worker waits for another problem's baseline, final timing
or last candidate. Lanes take the problems largest first (their FLOPs), so the run does not end on one big
problem alone. With one worker, or one problem, problems run one after another with every worker. A problem
that fails is a row of the table, and the others go on; Ctrl-C stops every lane (the candidates in flight
finish and are stored). With ``--cluster``, Ray is started (or joined) once for the whole suite; its lanes
are actors that live for the whole suite (tuner/ray_lanes.py), and each problem is tuned once per kind of
machine in the cluster, on that kind's lanes, stored under that kind's fingerprint. The last line names the
run folder of every problem tuned (a stored best reused makes none; with ``--json``: on stderr, and each
row's ``run``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import typer

from .cmd_tune import PARAMS, _run_with_progress, tune_config
from .op_options import option

SUITE_PARAMS = [
    option("quick", bool, False, "--quick", help="A few cases of each suite (as tracea bench --quick)."),
]


def load_problems(suite: str, backend: str | None, quick: bool, host: Any,
                  here: bool = True) -> list[tuple[str, str | None, Any]]:
    """(label, backend or None for the planner's choice, op) for every problem of ``suite``: a JSON file of
    ops, else a bench suite's cases on ``backend`` (default: every backend this machine runs). ``here``: the
    kernels run on this machine (not on a Ray cluster's), so a ``backend`` it cannot run is refused."""
    from tracea.doctor.errors import BadInputError
    from tracea.emitters import registry
    from tracea.kernels import Op
    from tracea.kernels.workloads import check_suite

    from .suite import selected_cases

    if backend is not None and here:
        registry.require_runnable(backend, host)  # an unknown name, or no such GPU here: one line, before any run
    elif backend is not None:
        registry.backend(backend)  # an unknown name fails here
    path = Path(suite)
    if path.suffix == ".json" or path.is_file():
        from tracea.doctor.inputs import parse_json, read_text

        data = parse_json(read_text(path, "--suite:"), f"--suite: {suite}")
        if not isinstance(data, list) or not data:
            raise BadInputError(f"--suite: {suite} should hold a non-empty JSON list of ops",
                                '[{"op": "gemm", "m": 4096, "n": 4096, "k": 4096, "dtype": "bf16"}, ...]')
        out = []
        for i, entry in enumerate(data):
            try:
                op = Op.from_json(entry)
            except BadInputError as exc:
                raise BadInputError(f"--suite: {suite} entry {i}: {exc.message}", exc.hint) from None
            out.append((f"{i}", backend, op))
        return out
    check_suite(suite)
    backends = [backend] if backend else registry.runnable_backends(host)
    return [(name, b, op) for b, name, op in selected_cases(backends, suite, quick)]


def do_tune_suite(suite: str, quick: bool, **kw: Any) -> None:
    from tracea.doctor import probe
    from tracea.doctor.errors import BadInputError, TraceaError

    for name in ("simulate", "variant", "resume"):
        if kw.get(name):
            raise BadInputError(f"--{name}: not for a suite (each problem has its own space and variant)",
                                "tune one op with `tracea tune gemm ...` for that")
    host = probe()
    problems = load_problems(suite, kw["backend"], quick, host, here=kw.get("cluster") is None)
    ray_started = _join_cluster(kw.get("cluster"))
    try:
        rows = _tune_all(problems, kw, host)
    finally:
        if ray_started:
            import ray

            ray.shutdown()
    _print(rows, kw["json_out"])
    from .cmd_evidence import say_runs

    say_runs([Path(r["run"]) for r in rows if r.get("run")], "problem tuned", to_stderr=kw["json_out"])
    failed = [r for r in rows if r.get("best") is None]
    if failed:
        raise TraceaError(f"{len(failed)} of {len(rows)} problems have no verified best",
                          "each row above says why; the others are stored")


def _join_cluster(cluster: str | None) -> bool:
    """Ray started or joined once for the suite (each problem's pool then finds it running); whether this
    command started it."""
    if cluster is None:
        return False
    from tracea.tuner.ray_pool import connect

    return connect(cluster)


def _tune_all(problems: list[tuple[str, str | None, Any]], kw: dict[str, Any], host: Any) -> list[dict[str, Any]]:
    """Every problem's row, in the suite's order: each configured first (a bad one is its row's error),
    then those of one backend and worker count side by side when there are several workers (tune_lanes.py),
    else one after another; on a Ray cluster, once per kind of machine there (``_tune_on_ray``)."""
    from tracea.doctor.errors import TraceaError

    from .tune_lanes import Job, error_row, run_lanes

    rows: dict[tuple[int, int], dict[str, Any]] = {}
    groups: dict[tuple[str, int], list[Job]] = {}
    args = {k: v for k, v in kw.items() if k != "no_tui"}
    for i, (label, backend, op) in enumerate(problems):
        try:
            config, _ = tune_config(op, **{**args, "backend": backend}, host=host)
        except TraceaError as exc:
            rows[(i, 0)] = error_row(label, op, exc.message)
            continue
        groups.setdefault((config.target.backend, config.evaluation.workers), []).append(
            Job((i, 0), label, op, config))
    for (backend, workers), jobs in groups.items():
        if kw.get("cluster") and len(problems) > 1:
            rows.update(_tune_on_ray(backend, jobs, args, kw))
        elif workers > 1 and len(jobs) > 1:
            rows.update(run_lanes(jobs, workers, host, quiet=kw["json_out"], row=result_row))
        else:
            for job in jobs:
                rows[job.index] = _one(job, host, quiet=kw["json_out"])
    return [rows[i] for i in sorted(rows)]


def _tune_on_ray(backend: str, jobs: list[Any], args: dict[str, Any], kw: dict[str, Any]) -> dict[Any, dict[str, Any]]:
    """``jobs`` (one backend's problems) tuned on the cluster's lanes (``--workers``, default: every GPU of
    the cluster, or a lane per node for the CPU), once per kind of machine found there, each planned with
    that kind's host report and stored under its fingerprint."""
    from tracea.doctor.errors import TraceaError
    from tracea.tuner.ray_lanes import RayLanes, cluster_width, describe

    from .tune_lanes import Job, error_row, run_ray_lanes

    rows: dict[Any, dict[str, Any]] = {}
    lanes = RayLanes(kw["workers"] or cluster_width(backend), backend)
    try:
        kind_jobs = []
        for kno, (fp, (khost, _)) in enumerate(lanes.kinds.items()):
            machine = describe(khost, backend)
            for job in jobs:
                index = (job.index[0], kno)
                try:
                    config, _ = tune_config(job.op, **{**args, "backend": backend}, host=khost)
                except TraceaError as exc:
                    rows[index] = {**error_row(job.label, job.op, exc.message), "machine": machine, "fingerprint": fp}
                    continue
                kind_jobs.append(Job(index, job.label, job.op, config, kind=fp, machine=machine))
        rows.update(run_ray_lanes(kind_jobs, lanes, quiet=kw["json_out"], row=result_row))
    finally:
        lanes.close()
    return rows


def _one(job: Any, host: Any, quiet: bool) -> dict[str, Any]:
    from tracea.doctor.errors import TraceaError

    from .tune_lanes import error_row

    try:
        r = _run_with_progress(job.op, host, job.config, quiet=quiet)
    except TraceaError as exc:
        return error_row(job.label, job.op, exc.message)
    return result_row(job.label, job.op, r)


def result_row(label: str, op: Any, r: Any) -> dict[str, Any]:
    """A tuned problem's row of the table (and of --json)."""
    row: dict[str, Any] = {"problem": label, "op": op.signature}
    row.update(variant=r.variant, evaluated=len(r.trials), reused=r.reused, space=r.space_size,
               best=r.best["name"] if r.best else None, best_ms=r.best["p50_ms"] if r.best else None,
               ratio=r.ratio, stop=r.stop_reason, seconds=r.elapsed_s, key=r.key, run=r.run_dir)
    return row


def _print(rows: list[dict[str, Any]], json_out: bool) -> None:
    if json_out:
        typer.echo(json.dumps(rows, indent=1, default=str))
        return
    from rich.markup import escape
    from rich.table import Table

    from .render import make_console

    table = Table(title="tuned problems")
    machines = any(r.get("machine") for r in rows)
    for col in ("problem", "op", *(("machine",) if machines else ()), "variant", "evaluated", "best", "ms",
                "vs baseline", "s"):
        table.add_column(col)
    for r in rows:
        head = [escape(r["problem"]), escape(r["op"]), *((escape(r.get("machine") or ""),) if machines else ())]
        if r.get("best") is None:
            table.add_row(*head, "-", "-", "no verified best", escape((r.get("error") or r.get("stop") or "")[:60]),
                          "", "")
            continue
        table.add_row(*head, r["variant"], "reused" if r["reused"] else f"{r['evaluated']}/{r['space']}",
                      escape(r["best"]), f"{r['best_ms']:.4f}", f"{r['ratio']:.2f}x" if r.get("ratio") else "-",
                      f"{r['seconds']:.1f}")
    make_console().print(table)


def register(tune_app: typer.Typer) -> None:
    import inspect

    def suite(suite: str, **kwargs: Any) -> None:
        do_tune_suite(suite, **kwargs)

    params = [inspect.Parameter("suite", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=str,
                                default=typer.Argument(..., help="A bench suite (llm-gemm, resnet50, softmax) or a "
                                                                 "JSON file listing ops."))]
    suite.__signature__ = inspect.Signature([*params, *SUITE_PARAMS, *PARAMS])  # type: ignore[attr-defined]
    suite.__doc__ = ("Tune every problem of a suite (or a JSON file of ops), side by side one per worker; "
                     "results go to the tuning database.")
    tune_app.command(name="suite")(suite)
