"""``tracea export OP ... --backend cpu|cuda --out DIR``: a self-contained C/C++ package of the kernel
(emitters/export_abi.py has the C ABI). The op flags are ``emit``'s (op_options.py); the schedule is the
one tuned here when the database has it, else the heuristic one, or ``--schedule``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from .cmd_kernels import BACKEND, PRECISION, _host, resolve_backend
from .op_options import add_op_commands, option
from .validate import OUTPUT, check_variant


def _schedule_json(text: str) -> dict[str, Any]:
    """``--schedule``: a JSON object, inline or in a file."""

    from tracea.doctor.errors import BadInputError
    from tracea.doctor.inputs import parse_json, read_text

    source = text
    if not text.lstrip().startswith("{"):
        if not Path(text).is_file():
            raise BadInputError(f"--schedule: {text!r} is neither a JSON object nor a readable file")
        source = read_text(text, "--schedule:")
    doc = parse_json(source, "--schedule")
    if not isinstance(doc, dict):
        raise BadInputError("--schedule: expected a JSON object (a schedule as `tracea emit --json` prints it)")
    return doc


def _choose(op: Any, host: Any, backend: str, mod: Any, precision: str | None, variant: str | None,
            schedule: str | None) -> tuple[Any, Any, str]:
    """(variant, schedule, where the schedule came from): --schedule, the tuning database, or the heuristic."""
    from tracea.doctor.errors import BadInputError
    from tracea.emitters import registry

    if variant is not None:
        check_variant(variant, op.kind, backend)
        v = mod.resolve(variant)
    else:
        from tracea.doctor.plan import plan

        v = registry.variant(plan(op, host, registry.all_variants(backend), precision=precision,
                                  backend=backend).require())
    if schedule is not None:
        try:
            s = mod.schedule_from_json(_schedule_json(schedule))
        except (KeyError, TypeError, ValueError) as exc:
            raise BadInputError(f"--schedule: not a {backend} schedule ({exc})") from None
        mod.validate_schedule(op, v, s, host)
        return v, s, "given (--schedule)"
    from tracea.tuner.lookup import stored_schedule

    stored = stored_schedule(op, v.id, host, backend)
    if stored is not None:
        return v, mod.schedule_from_json(stored), "tuned (the tuning database's best on this machine)"
    return v, mod.hero_schedule(op, v, host), "heuristic (nothing tuned for this shape here)"


def do_export(op: Any, backend: str | None, precision: str | None, out: Path, arch: str | None,
              variant: str | None, schedule: str | None, force: bool, json_out: bool) -> None:
    import json

    from tracea.doctor.errors import BadInputError
    from tracea.emitters import registry

    host = _host()
    if backend is None and variant is not None:  # a named variant names its backend
        backend = next((v.backend for v in registry.all_variants() if v.id == variant), None)
    backend = backend or ("cuda" if arch else resolve_backend(op, host, None, precision, to_stderr=json_out))
    mod = registry.backend(backend)
    if arch is not None:
        if backend != "cuda":
            raise BadInputError(f"--arch names a CUDA target; it does not apply to --backend {backend}")
        from tracea.emitters.cuda.arch import target_host

        host = target_host(host, arch)  # export for the named GPU, installed here or not
    v, s, source = _choose(op, host, backend, mod, precision, variant, schedule)
    paths = mod.export(op, v, s, host, out, arch=arch, force=force, schedule_source=source)
    if json_out:
        typer.echo(json.dumps({"variant": v.id, "schedule": s.to_json(), "schedule_source": source,
                               "files": [str(p) for p in paths]}, indent=1))
        return
    typer.echo(f"{v.id} · schedule {source}: {json.dumps(s.to_json())}")
    for p in paths:
        typer.echo(f"  wrote {p}")
    typer.echo(f"build and verify: cmake -S {out} -B {out}/build && cmake --build {out}/build && "
               f"ctest --test-dir {out}/build")


export_app = typer.Typer(
    help="Write a self-contained C/C++ package of the kernel: tracea.h (C ABI), tracea.hpp (RAII, exceptions), "
         "the kernel, a CMake file and an example that verifies against a C reference.",
    no_args_is_help=True)

add_op_commands(
    export_app,
    [BACKEND, PRECISION, option("out", Path, ..., *OUTPUT, help="Folder to write the package into (new or empty)."),
     option("arch", str | None, None, "--arch", help="CUDA target to compile for (sm_80, sm_90a, ...); no GPU needed."),
     option("variant", str | None, None, "--variant",
            help="The variant to export (default: the planner's first choice), e.g. cuda-mma-sync.gemm."),
     option("schedule", str | None, None, "--schedule",
            help="A schedule (JSON object, or a file holding one) instead of the tuned or heuristic one."),
     option("force", bool, False, "--force", help="Write into a non-empty -o/--output folder."),
     option("json_out", bool, False, "--json", help="Print JSON.")],
    do_export, "Export",
)


def register(app: typer.Typer) -> None:
    app.add_typer(export_app, name="export")
