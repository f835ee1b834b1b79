"""``tracea plan``, ``tracea emit`` and ``tracea bench``: one op-flag set (op_options.py), three verbs.
Each verb imports its layers when it runs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from .op_options import add_op_commands, option
from .validate import REPEATS, SEED, WARMUP

BACKEND = option("backend", str | None, None, "--backend", help="Restrict to one backend (cpu; cuda, hip, metal as they land).")
PRECISION = option("precision", str | None, None, "--precision", help="Requested precision (default: --dtype); falls back BF16 -> FP16 -> FP32.")
JSON = option("json_out", bool, False, "--json", help="Print JSON.")
DUMP_IR = option("dump_ir", Path | None, None, "--dump-ir", help="Write every stage of the kernel (op, decision, schedule, source, compile, binary, metadata) into DIR.")


def _host() -> Any:
    from tracea.doctor import probe

    return probe()


def do_plan(op: Any, backend: str | None, precision: str | None, json_out: bool) -> None:
    from tracea.doctor.plan import plan
    from tracea.emitters.registry import all_variants
    from tracea.render_kernels import plan_table

    decision = plan(op, _host(), all_variants(backend) if backend else all_variants(), precision=precision, backend=backend)
    if json_out:
        import json

        typer.echo(json.dumps(decision.to_json(), indent=1))
        return
    plan_table(decision)


def do_emit(op: Any, backend: str | None, precision: str | None, out: Path, json_out: bool,
            dump_ir: Path | None = None, arch: str | None = None) -> None:
    import json

    from tracea.doctor.plan import plan
    from tracea.emitters import registry

    backend = backend or ("cuda" if arch else "cpu")
    host = _host()
    if arch is not None:
        if backend != "cuda":
            from tracea.doctor.errors import BadInputError

            raise BadInputError(f"--arch names a CUDA target; it does not apply to --backend {backend}")
        from tracea.emitters.cuda.arch import target_host

        host = target_host(host, arch)  # plan and emit for the named GPU, installed here or not
    decision = plan(op, host, registry.all_variants(backend), precision=precision, backend=backend)
    variant = registry.variant(decision.require())
    mod = registry.backend_module(backend)
    schedule = mod.hero_schedule(op, variant, host)
    paths = mod.emit(op, variant, schedule, host, out, arch=arch) if arch else mod.emit(op, variant, schedule, host, out)
    if dump_ir is not None:
        from tracea.cmd_evidence import dump_emitted

        paths += dump_emitted(op, decision, variant, schedule, host, mod, paths, dump_ir)
    if json_out:
        typer.echo(json.dumps({"variant": variant.id, "schedule": schedule.to_json(), "files": [str(p) for p in paths]}, indent=1))
        return
    typer.echo(f"{variant.id} · schedule {json.dumps(schedule.to_json())}")
    for p in paths:
        typer.echo(f"  wrote {p}")


def do_bench(op: Any, backend: str | None, precision: str | None, repeat: int, warmup: int, seed: int | None,
             json_out: bool, csv_out: bool, dump_ir: Path | None = None, metrics: Path | None = None) -> None:
    from tracea.cmd_evidence import command_line, say_run
    from tracea.doctor.errors import TraceaError
    from tracea.emitters.bench import bench
    from tracea.kernels.footprint import require_host_memory
    from tracea.render_kernels import bench_table
    from tracea.reports.metrics import to_csv, to_jsonl
    from tracea.reports.record import RunRecorder

    require_host_memory(op)  # too large for this machine: said before a run folder (and crash bundle) exists
    host, backend = _host(), backend or "cpu"
    with RunRecorder("bench", command_line(), host, dump_ir=dump_ir, metrics=metrics) as rec:  # run folder, crash bundle
        from tracea.tuner.lookup import tuned_lookup  # the best stored schedule, when tuned here

        result = bench(op, host, backend=backend, precision=precision, repeats=repeat, warmup=warmup, seed=seed,
                       build=rec.build_hook(backend), tuned=tuned_lookup(host, backend))
        rec.bench_result(result, {"backend": backend, "precision": precision, "repeat": repeat, "warmup": warmup})
    if json_out:
        typer.echo(to_jsonl([result.row()]), nl=False)
    elif csv_out:
        typer.echo(to_csv([result.row()]), nl=False)
    else:
        bench_table(result)
    say_run(rec, to_stderr=json_out or csv_out)
    if result.status != "ok":
        raise TraceaError(f"{result.status}: {result.error}",
                          "the metrics row above records it; rerun with the same --seed to reproduce")


plan_app = typer.Typer(help="Rank the kernel variants for an operation on this machine, and say why.", no_args_is_help=True)
emit_app = typer.Typer(help="Write the generated kernel source, its schedule and metadata.", no_args_is_help=True)
bench_app = typer.Typer(help="Measure a Tracea kernel against the vendor library in the same run.", no_args_is_help=True)

add_op_commands(plan_app, [BACKEND, PRECISION, JSON], do_plan, "Plan")
add_op_commands(
    emit_app,
    [BACKEND, PRECISION, option("out", Path, ..., "--out", help="Folder to write into."), JSON, DUMP_IR,
     option("arch", str | None, None, "--arch", help="CUDA target to compile for (sm_80, sm_90a, ...); no GPU needed.")],
    do_emit, "Emit",
)
add_op_commands(
    bench_app,
    [BACKEND, PRECISION,
     option("repeat", int, 10, "--repeat", help="Timed runs of each contender (at least; more until 0.5 s).", domain=REPEATS),
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
