"""``tracea plan``, ``tracea emit`` and ``tracea bench``: one op-flag set (op_options.py), three verbs.
Each verb imports its layers when it runs."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from .op_options import add_op_commands, option
from .validate import OUTPUT, REPEATS, SEED, WARMUP, checked

BACKEND = option("backend", str | None, None, "--backend",
                 help="cpu, cuda, hip or metal. Default: the backend of the planner's first choice on this machine "
                      "(a GPU when one can run the op); the first line says which and why.")
PRECISION = option("precision", str | None, None, "--precision", help="Requested precision (default: --dtype); falls back BF16 -> FP16 -> FP32.")
JSON = option("json_out", bool, False, "--json", help="Print JSON.")
DUMP_IR = option("dump_ir", Path | None, None, "--dump-ir", help="Write every stage of the kernel (op, decision, schedule, source, compile, binary, metadata) into DIR.")


def _host() -> Any:
    from tracea.doctor import probe

    return probe()


def resolve_backend(op: Any, host: Any, backend: str | None, precision: str | None, to_stderr: bool = False,
                    runs_here: bool = True) -> str:
    """``--backend`` as given, else the planner's first choice here, said in the first line of the output
    (on stderr with ``to_stderr``, so --json and --csv output stay machine-readable). ``runs_here``: the
    command runs kernels in this process, so a backend that cannot run them here is passed over, and one
    named by --backend is refused in one line, exit 3 (False for a plan of a recorded machine)."""
    if backend is not None:
        from tracea.emitters.registry import backend as backend_of
        from tracea.emitters.registry import require_runnable

        backend_of(backend)  # an unknown name fails here, with the list of backends
        if runs_here:
            _require_registered(op, host, backend, precision)  # an op it has no kernel for: the planner's line
            require_runnable(backend, host)  # no GPU here: said before a run folder (or crash bundle) exists
        return backend
    from tracea.emitters.registry import default_backend

    backend, why = default_backend(op, host, precision, runs_here=runs_here)
    typer.echo(f"backend {backend} ({why}; --backend picks another)", err=to_stderr)
    return backend


def do_plan(op: Any, backend: str | None, precision: str | None, json_out: bool, input_file: Path | None = None) -> None:
    from tracea.doctor.plan import plan
    from tracea.emitters.registry import all_variants

    from .render_kernels import plan_table

    if input_file is not None:  # plan for a recorded machine (`tracea doctor --save`), not this one
        from tracea.doctor.snapshot import read_snapshot

        host = read_snapshot(input_file)[0]
    else:
        host = _host()
    if backend is None:
        resolve_backend(op, host, None, precision, to_stderr=json_out, runs_here=False)  # a plan runs nothing
    decision = plan(op, host, all_variants(backend) if backend else all_variants(), precision=precision, backend=backend)
    if json_out:
        import json

        typer.echo(json.dumps(decision.to_json(), indent=1))
        return
    notes = ()
    if input_file is not None and not host.toolchains:
        notes = (f"{input_file.name} records no toolchains; this plan assumes the compilers its variants need "
                 "(hipcc, nvrtc, a C compiler) are installed there",)
    plan_table(decision, notes)


def do_emit(op: Any, backend: str | None, precision: str | None, out: Path, json_out: bool,
            dump_ir: Path | None = None, arch: str | None = None) -> None:
    import json

    from tracea.doctor.plan import plan
    from tracea.emitters import registry

    host = _host()
    if arch is not None:  # plan and emit for the named target, installed here or not
        backend, host = targeted(host, backend, arch)
    # emitting needs the compiler, not the device's runtime: a backend is not passed over for want of one
    backend = backend or resolve_backend(op, host, None, precision, to_stderr=json_out, runs_here=False)
    decision = plan(op, host, registry.all_variants(backend), precision=precision, backend=backend)
    variant = registry.variant(decision.require())
    op = decision.planned_op(op)  # the plan may fall back (bf16 -> fp16 on gfx908)
    mod = registry.backend(backend)
    schedule = mod.hero_schedule(op, variant, host)
    paths = mod.emit(op, variant, schedule, host, out, arch=arch) if arch else mod.emit(op, variant, schedule, host, out)
    if dump_ir is not None:
        from .cmd_evidence import dump_emitted

        paths += dump_emitted(op, decision, variant, schedule, host, mod, paths, dump_ir)
    if json_out:
        typer.echo(json.dumps({"variant": variant.id, "schedule": schedule.to_json(), "files": [str(p) for p in paths]}, indent=1))
        return
    typer.echo(f"{variant.id} · schedule {json.dumps(schedule.to_json())}")
    for p in paths:
        typer.echo(f"  wrote {p}")


def targeted(host: Any, backend: str | None, arch: str) -> tuple[str, Any]:
    """(backend, ``host`` as if its device were ``arch``), for ``--arch`` (emit, export): the named backend's
    ``target_host``, else that of the first registered backend whose targets include ``arch`` (sm_90a: cuda,
    gfx90a: hip). BadInputError (one line, exit 2) naming the arch and the backends tried, each one's refusal
    in the hint, when none has it. Only the protocol is asked: no backend is named here."""
    from tracea.doctor.errors import BadInputError
    from tracea.emitters import registry

    if not arch.strip():
        raise BadInputError("--arch: empty; name a GPU target (e.g. sm_90a, gfx90a, apple8)")
    if backend is not None:  # its own refusal of a target it does not have is the error
        return backend, registry.backend(backend).target_host(host, arch)
    refusals = []
    for name in registry.BACKENDS:
        try:
            return name, registry.backend(name).target_host(host, arch)
        except BadInputError as exc:
            refusals.append(f"{name}: {exc.message.removeprefix(f'--arch {arch}: ')}")  # the line names it
    raise BadInputError(f"--arch {arch}: no backend builds for it (tried {', '.join(registry.BACKENDS)})",
                        "; ".join(refusals))


def _require_registered(op: Any, host: Any, backend: str, precision: str | None) -> None:
    """An op no variant of ``backend`` computes (attention, until its kernels land) is the planner's one-line
    "no variant" error before a run folder exists: there is nothing to record, and no crash."""
    from tracea.emitters.registry import all_variants

    variants = all_variants(backend)
    if not any(v.op == op.kind for v in variants):
        from tracea.doctor.plan import plan

        plan(op, host, variants, precision=precision, backend=backend).require()


def do_bench(op: Any, backend: str | None, precision: str | None, repeat: int, warmup: int, seed: int | None,
             json_out: bool, csv_out: bool, dump_ir: Path | None = None, metrics: Path | None = None) -> None:
    from tracea.doctor.errors import TraceaError
    from tracea.emitters import copy_bandwidth
    from tracea.emitters.bench import bench
    from tracea.kernels.footprint import require_host_memory
    from tracea.reports.metrics import bench_row, to_csv, to_jsonl
    from tracea.reports.record import RunRecorder

    from .cmd_evidence import command_line, say_run
    from .render_kernels import bench_table

    require_host_memory(op)  # too large for this machine: said before a run folder (and crash bundle) exists
    host = _host()
    backend = resolve_backend(op, host, backend, precision, to_stderr=json_out or csv_out)
    _require_registered(op, host, backend, precision)
    with RunRecorder("bench", command_line(), host, dump_ir=dump_ir, metrics=metrics) as rec:  # run folder, crash bundle
        from tracea.tuner.lookup import tuned_lookup  # the best stored schedule, when tuned here

        result = bench(op, host, backend=backend, precision=precision, repeats=repeat, warmup=warmup, seed=seed,
                       build=rec.build_hook(backend), tuned=tuned_lookup(host, backend))
        if not (json_out or csv_out):  # the metrics rows have no bandwidth fields: the table's line alone shows it
            result = copy_bandwidth.attach(result, host)  # the device's copy, measured in this run
        rec.bench_result(result, {"backend": backend, "precision": precision, "repeat": repeat, "warmup": warmup})
    if json_out:
        typer.echo(to_jsonl([bench_row(result)]), nl=False)
    elif csv_out:
        typer.echo(to_csv([bench_row(result)]), nl=False)
    else:
        bench_table(result)
    say_run(rec, to_stderr=json_out or csv_out)
    if result.status != "ok":
        raise TraceaError(f"{result.status}: {result.error}",
                          "the metrics row above records it; rerun with the same --seed to reproduce")


plan_app = typer.Typer(help="Rank the kernel variants for an operation on this machine, and say why.", no_args_is_help=True)
emit_app = typer.Typer(help="Write the generated kernel source, its schedule and metadata.", no_args_is_help=True)
bench_app = typer.Typer(
    help="Measure a Tracea kernel against the vendor library in the same run. With no operation: this "
         "machine's suites (LLM GEMMs, ResNet-50 convolutions, softmax rows) on every backend it can run, "
         "one table with the geometric mean and the worst row.",
    invoke_without_command=True)


@bench_app.callback()
def bench_suite(
    ctx: typer.Context,
    backend: Annotated[str | None, typer.Option("--backend", help="Only this backend's suite (cpu, cuda, hip or metal).")] = None,
    repeat: Annotated[int, checked(REPEATS, "--repeat", help="Timed runs of each contender (at least)")] = 10,
    warmup: Annotated[int, checked(WARMUP, "--warmup", help="Untimed runs of each contender first")] = 2,
    seed: Annotated[int | None, checked(SEED, "--seed", help="Random inputs' seed (default: fresh, recorded)")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print the suite as one JSON object: its rows, the geometric mean, the worst row.")] = False,
    metrics: Annotated[Path | None, typer.Option("--metrics", help="Append every row to FILE (.csv or .jsonl).")] = None,
    suite: Annotated[str | None, typer.Option("--suite", help="Only this suite: llm-gemm, resnet50 or softmax (--list says more).")] = None,
    quick: Annotated[bool, typer.Option("--quick", help="A few rows of each suite (what CI runs).")] = False,
    list_: Annotated[bool, typer.Option("--list", help="List the suites and their case counts, run nothing.")] = False,
) -> None:
    """Without an operation, run this machine's suites and print one table."""
    if ctx.invoked_subcommand is not None:
        return
    from .suite import list_suites, run_suite

    if list_:
        if suite is not None:
            from tracea.kernels.workloads import check_suite

            check_suite(suite)
        list_suites(backend, quick)
        return
    run_suite(backend, repeat=repeat, warmup=warmup, seed=seed, json_out=json_out, metrics=metrics, suite=suite,
              quick=quick)

add_op_commands(plan_app, [BACKEND, PRECISION, JSON, option(
    "input_file", Path | None, None, "--input",
    help="Plan for the machine of a saved doctor snapshot or report (tracea doctor --save FILE) instead of this one.")],
    do_plan, "Plan")
add_op_commands(
    emit_app,
    [BACKEND, PRECISION, option("out", Path, ..., *OUTPUT, help="Folder to write into."), JSON, DUMP_IR,
     option("arch", str | None, None, "--arch",
            help="GPU target to compile for: CUDA (sm_80, sm_90a, ...), AMD (gfx90a, gfx942, ...) or an Apple GPU "
                 "family (apple7, apple8, apple9); no GPU needed. Picks the backend when --backend is not given.")],
    do_emit, "Emit",
)
add_op_commands(
    bench_app,
    [BACKEND, PRECISION,
     option("repeat", int, 10, "--repeat", help="Timed runs of each contender (at least; on a CPU more until 0.5 s, or $TRACEA_MIN_TIME s).", domain=REPEATS),
     option("warmup", int, 2, "--warmup", help="Untimed runs of each contender first.", domain=WARMUP),
     option("seed", int | None, None, "--seed", help="Random inputs' seed (default: fresh, and recorded).", domain=SEED),
     JSON, option("csv_out", bool, False, "--csv", help="Print the metrics row as CSV."), DUMP_IR,
     option("metrics", Path | None, None, "--metrics", help="Append the metrics row to FILE (.csv or .jsonl).")],
    do_bench, "Bench",
)


def register(app: typer.Typer) -> None:
    app.add_typer(plan_app, name="plan")
    app.add_typer(emit_app, name="emit")
    app.add_typer(bench_app, name="bench")
