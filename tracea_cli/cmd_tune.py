"""``tracea tune gemm --m 4096``: search the schedule space of the chosen variant, verify and time every
candidate in a worker process, keep every trial in the tuning database, and report the best.

On a terminal a live Textual dashboard shows the run; with ``--no-tui`` (or when stdout is not a
terminal) a progress bar on stderr and a summary; ``--json`` prints the result object. Only Typer is
imported when the app loads.
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path
from typing import Any

import typer

from .op_options import add_op_commands, option
from .validate import COUNT, FILE, NON_NEGATIVE, REPEATS, SECONDS, SEED, WARMUP, check_variant

PARAMS = [
    option("backend", str | None, None, "--backend",
           help="cpu, cuda, hip or metal. Default: the backend of the planner's first choice on this machine (a GPU when "
                "one can run the op); the first line says which and why."),
    option("precision", str | None, None, "--precision", help="Requested precision (default: --dtype); falls back BF16 -> FP16 -> FP32."),
    option("variant", str | None, None, "--variant", help="Tune this variant (e.g. cpu-avx2-fma.gemm) instead of the planner's choice."),
    option("strategy", str, "bayes", "--strategy", help="bayes (Gaussian process + expected improvement), random or exhaustive."),
    option("budget", int | None, None, "--budget", help="Evaluations in this run (default 60; exhaustive: the whole space).", domain=COUNT),
    option("time_limit", float | None, None, "--time-limit", help="Stop starting candidates after S seconds.", domain=SECONDS),
    option("patience", int, 40, "--patience", help="Converged after N evaluations without a 0.5% gain (0: never).", domain=NON_NEGATIVE),
    option("seed", int, 0, "--seed", help="Seed of the strategy and of the random inputs: a run is reproducible.", domain=SEED),
    option("repeat", int, 10, "--repeat", help="Timed runs per candidate (at least; more until 0.1 s).", domain=REPEATS),
    option("warmup", int, 2, "--warmup", help="Untimed runs per candidate first.", domain=WARMUP),
    option("timeout", float, 60.0, "--timeout", help="Seconds one candidate may take (compile + verify + time).", domain=SECONDS),
    option("space", Path | None, None, "--space", help="TOML file: [restrict] / [extend] parameter values.", domain=FILE),
    option("simulate", Path | None, None, "--simulate", help="Replay a recorded complete space (JSON) instead of running kernels.", domain=FILE),
    option("resume", bool, False, "--resume", help="Continue the last interrupted or stopped run of this op."),
    option("retune", bool, False, "--retune", help="Search again even when a best schedule is stored."),
    option("workers", int | None, None, "--workers", help="Candidates evaluated at once, each by its own worker: a GPU "
           "each (cuda), or a set of cores each (cpu); with --cluster, Ray actors. Default: every GPU of this "
           "machine for a CUDA run, else 1.", domain=COUNT),
    option("cluster", str | None, None, "--cluster", help="Run the workers as Ray actors: 'local' (a private Ray "
           "instance), 'auto' or the address of a running cluster (`ray start --head`). Needs tracea[cluster]."),
    option("compile_ahead", bool, True, "--compile-ahead/--no-compile-ahead", help="Compile upcoming candidates while one is verified."),
    option("no_tui", bool, False, "--no-tui", help="Progress bar and summary instead of the live dashboard."),
    option("json_out", bool, False, "--json", help="Print the result object as JSON."),
    option("jsonl", Path | None, None, "--jsonl", help="Append per-trial metrics rows to FILE (JSONL)."),
    option("csv", Path | None, None, "--csv", help="Append per-trial metrics rows to FILE (CSV)."),
    option("metrics", Path | None, None, "--metrics", help="Append per-trial metrics rows to FILE (.csv or .jsonl, as bench)."),
    option("dump_ir", Path | None, None, "--dump-ir", help="Write every candidate's kernel stages (source, compile, metadata) into DIR."),
]


def do_tune(op: Any, backend: str | None, precision: str | None, variant: str | None, strategy: str, budget: int | None,
            time_limit: float | None, patience: int, seed: int, repeat: int, warmup: int, timeout: float,
            space: Path | None, simulate: Path | None, resume: bool, retune: bool, workers: int | None,
            cluster: str | None, compile_ahead: bool,
            no_tui: bool, json_out: bool, jsonl: Path | None, csv: Path | None, metrics: Path | None,
            dump_ir: Path | None) -> None:
    from tracea.doctor.errors import TraceaError

    config, host = tune_config(op, backend, precision, variant, strategy, budget, time_limit, patience, seed, repeat,
                               warmup, timeout, space, simulate, resume, retune, workers, cluster, compile_ahead,
                               json_out, jsonl, csv, metrics, dump_ir)
    use_tui = not (no_tui or json_out) and sys.stdout.isatty() and sys.stdin.isatty()
    if use_tui:
        from .tui.tune_app import run_tune_tui

        result = run_tune_tui(op, host, config)
        if result is None:
            return
    else:
        result = _run_with_progress(op, host, config, quiet=json_out)
    if json_out:
        import json

        typer.echo(json.dumps(result.to_json(), indent=1, default=str))
    else:
        tune_summary(result)
    if result.best is None:
        raise TraceaError("no candidate passed verification", "the trials above record each failure and its reason")


def tune_config(op: Any, backend: str | None, precision: str | None, variant: str | None, strategy: str,
                budget: int | None, time_limit: float | None, patience: int, seed: int, repeat: int, warmup: int,
                timeout: float, space: Path | None, simulate: Path | None, resume: bool, retune: bool, workers: int | None,
                cluster: str | None, compile_ahead: bool, json_out: bool, jsonl: Path | None, csv: Path | None,
                metrics: Path | None, dump_ir: Path | None, host: Any = None) -> tuple[Any, Any]:
    """The run's TuneConfig from the options (each checked: one line and exit 2 for a bad one) and the host
    report (None for a replay; ``host``: one already probed, as a suite's problems share), with the backend
    resolved for ``op``."""
    from tracea.tuner.run import Evaluation, Outputs, SearchLimits, Target, TuneConfig

    backend = _checked_search(op, strategy, resume, retune, simulate, space, variant, backend)
    config = TuneConfig(
        target=Target(backend=backend, precision=precision, variant=variant,
                      space_file=str(space) if space else None, simulate=str(simulate) if simulate else None),
        evaluation=Evaluation(warmup=warmup, repeats=repeat, timeout_s=timeout, compile_ahead=compile_ahead,
                              workers=workers or 1, cluster=cluster),
        limits=SearchLimits(strategy=strategy, seed=seed, budget=budget, time_limit_s=time_limit,
                            patience=patience or None, resume=resume, retune=retune),
        outputs=Outputs(argv=sys.argv[1:], run_folder=simulate is None,
                        metrics_files=[str(p) for p in (jsonl, csv, metrics) if p is not None],
                        dump_ir=str(dump_ir.resolve()) if dump_ir is not None else None))
    _checked_outputs(dump_ir, jsonl, csv, metrics)
    if simulate is not None:
        return config, None
    return _for_this_host(op, config, host, backend, precision, workers, cluster, json_out)


def _checked_search(op: Any, strategy: str, resume: bool, retune: bool, simulate: Path | None, space: Path | None,
                    variant: str | None, backend: str | None) -> str | None:
    """The search options checked against each other, and, for a run that runs kernels, the named variant
    against the op and the op against this host's memory; returns the backend (a named variant names it)."""
    from tracea.doctor.errors import BadInputError
    from tracea.tuner.strategies import NAMES

    if strategy not in NAMES:
        raise BadInputError(f"--strategy: unknown strategy {strategy!r}; known: {', '.join(NAMES)}")
    if resume and retune:
        raise BadInputError("--resume and --retune are mutually exclusive")
    if simulate is not None and space is not None:
        raise BadInputError("--space cannot change a recorded space (--simulate)")
    if simulate is None:
        from tracea.kernels.footprint import require_host_memory

        if variant is not None:
            if backend is None:  # a named variant names its backend
                from tracea.emitters import registry

                backend = next((v.backend for v in registry.all_variants() if v.id == variant), None)
            check_variant(variant, op.kind, backend or "cpu")
            backend = backend or "cpu"
        require_host_memory(op)  # before any worker allocates: "needs N GiB, the machine has M"
    return backend


def _checked_outputs(dump_ir: Path | None, jsonl: Path | None, csv: Path | None, metrics: Path | None) -> None:
    """The --dump-ir folder created; each metrics file's extension matching its format."""
    from tracea.doctor.errors import BadInputError

    if dump_ir is not None:
        try:
            dump_ir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise BadInputError(f"--dump-ir: cannot create {dump_ir} ({exc.strerror})") from None
    if jsonl is not None and jsonl.suffix != ".jsonl":
        raise BadInputError(f"--jsonl: {jsonl} should end in .jsonl (the format follows the extension)")
    if csv is not None and csv.suffix != ".csv":
        raise BadInputError(f"--csv: {csv} should end in .csv (the format follows the extension)")
    if metrics is not None and metrics.suffix not in (".csv", ".jsonl"):
        raise BadInputError(f"--metrics: {metrics}: the extension must be .csv or .jsonl (it picks the format)")


def _for_this_host(op: Any, config: Any, host: Any, backend: str | None, precision: str | None,
                   workers: int | None, cluster: str | None, json_out: bool) -> tuple[Any, Any]:
    """``config`` with the backend chosen for ``op`` on the host (probed unless given) and, unless
    --workers said, that backend's default number of workers; and the host."""
    from tracea.doctor import probe

    from .cmd_kernels import resolve_backend

    host = host or probe()
    # a backend named but not runnable here is one line, exit 3; unless Ray actors run the kernels, maybe
    # on other machines (then only its name is checked)
    chosen = resolve_backend(op, host, backend, precision, to_stderr=json_out,
                             runs_here=backend is None or cluster is None)
    config = dataclasses.replace(config, target=dataclasses.replace(config.target, backend=chosen))
    if workers is None:  # the backend's own default: every GPU of a multi-GPU host, one CPU worker
        from tracea.emitters import registry

        n = registry.backend(chosen).default_workers(host)
        config = dataclasses.replace(config, evaluation=dataclasses.replace(config.evaluation, workers=n))
    return config, host


def _run_with_progress(op: Any, host: Any, config: Any, quiet: bool) -> Any:
    """The run with a rich progress bar on stderr (so --json output stays clean)."""
    from rich.markup import escape
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    from tracea.tuner.run import tune

    from .render import make_console

    console = make_console(stderr=True)
    progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                        TimeRemainingColumn(), console=console, disable=quiet or not console.is_terminal,
                        transient=True)
    task = None
    state = {"best": None}

    def on_event(kind: str, data: dict[str, Any]) -> None:
        nonlocal task
        if kind == "start":
            task = progress.add_task("starting", total=data["budget"])
            if not quiet:
                console.print(f"tuning {escape(data['op'].signature)} · {data['variant']} · {data['space_size']} "
                              f"candidates · {data['strategy']} · budget {data['budget']}"
                              + (f" · {data['workers']} workers at once" + (" (Ray actors)" if data.get("ray") else
                                                                             " (each on its own cores or GPU)")
                                 if data.get("workers", 1) > 1 else "")
                              + (f" · {data['known']} known from earlier runs" if data["known"] else "")
                              + (f" · {data['pruned']} pruned for bank conflicts" if data.get("pruned") else ""))
        elif kind == "phase" and task is not None:
            best = f" · best {state['best']:.3f} ms" if state["best"] else ""
            progress.update(task, description=f"{data['phase']:8s} {escape(str(data['name']))}{best}")
        elif kind == "trial" and task is not None:
            state["best"] = data["best_ms"]
            progress.update(task, completed=data["done"])
            t = data["trial"]
            if not console.is_terminal and not quiet:
                m = t.measurement
                console.print(f"{data['done']:4d}/{data['budget']} {t.name} {m.status}"
                              + (f" {m.p50_ms:.3f} ms" if m.p50_ms is not None else f": {escape(m.error or '')}"))

    with progress:
        return tune(op, host, config, on_event=on_event)


def tune_summary(result: Any, top: int = 8) -> None:
    """The best schedule, its speed against the baseline, and the fastest trials of this run."""
    from rich.markup import escape
    from rich.table import Table

    from .render import make_console

    console = make_console()
    console.print(f"{escape(result.op.signature)} · {result.variant} · key {result.key}"
                  + (" · simulated" if result.simulated else ""))
    if result.reused:
        console.print(f"stored best reused, nothing evaluated ({escape(result.stop_reason)})")
    else:
        counts: dict[str, int] = {}
        for t in result.trials:
            counts[t.measurement.status] = counts.get(t.measurement.status, 0) + 1
        console.print(f"{len(result.trials)} evaluated of {result.space_size} candidates in {result.elapsed_s:.1f} s "
                      f"({', '.join(f'{v} {k}' for k, v in sorted(counts.items()))}); {escape(result.stop_reason)}")
    if result.best:
        b = result.best
        line = f"best: {escape(b['name'])}  {b['p50_ms']:.3f} ms (p95 {b.get('p95_ms') or 0:.3f})  {result.best_tflops:.3f} TFLOP/s"
        base = result.baseline or {}
        if base.get("p50_ms"):
            how = (f"interleaved with the best: {base['tracea_p50_ms']:.3f} vs {base['p50_ms']:.3f} ms"
                   if base.get("tracea_p50_ms") else f"{base['p50_ms']:.3f} ms")
            line += f"\n  ·  {escape(str(base.get('name')))} {how}  ·  ratio {result.ratio:.2f}x"
            if base.get("note"):
                line += f"\n  [yellow]warning[/yellow]: {escape(str(base['note']))}"
        elif base.get("unstable"):
            line += (f"\n  ·  [yellow]no ratio[/yellow]: {escape(str(base['reason']))} (something else is using "
                     "the cores; `tracea bench` this shape on a quiet machine)")
        elif base.get("reason"):
            line += f"  ·  no baseline: {escape(str(base['reason']))}"
        console.print(line)
    else:
        console.print("[red]no verified candidate[/red]")
    if result.trials:
        table = Table(box=None, header_style="bold", pad_edge=False)
        for col in ("#", "schedule", "status", "p50 ms", "p95 ms", "compile s", "error"):
            table.add_column(col, justify="right" if col in ("#", "p50 ms", "p95 ms", "compile s") else "left")
        order = sorted(result.trials, key=lambda t: (t.objective is None, t.objective or 0))
        for t in order[:top] + [t for t in order[top:] if t.objective is None][:top]:
            m = t.measurement
            table.add_row(str(t.index), escape(t.name), m.status, f"{m.p50_ms:.3f}" if m.p50_ms else "-",
                          f"{m.p95_ms:.3f}" if m.p95_ms else "-", f"{m.compile_s:.2f}" if m.compile_s else "-",
                          escape((m.error or "")[:80]))
        console.print(table)
    console.print(f"database: {escape(result.db_path)}" + (f" · run folder: {escape(result.run_dir)}" if result.run_dir else ""))


def register(app: typer.Typer) -> typer.Typer:
    """The ``tune`` group with one command per op; returned, so that ``tune suite`` joins it (app.py)."""
    tune_app = typer.Typer(help="Search the schedule space for the fastest verified kernel; results are stored.",
                           no_args_is_help=True)
    add_op_commands(tune_app, PARAMS, do_tune, "Tune")
    app.add_typer(tune_app, name="tune")
    return tune_app
