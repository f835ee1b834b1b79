"""``tracea export OP ... --backend cpu|cuda --out DIR [--prefix NAME]``: a self-contained C/C++ package of
the kernel (emitters/export_abi.py has the C ABI), every exported name under the package's prefix. The op
flags are ``emit``'s (op_options.py); the schedule is the one tuned here when the database has it, else the
heuristic one, or ``--schedule``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from .cmd_kernels import BACKEND, PRECISION, _host, resolve_backend, targeted
from .op_options import add_op_commands, option
from .validate import OUTPUT, Domain, check_variant


class _Prefix(Domain):
    def problem(self, value: Any) -> str | None:
        from tracea.emitters.export_abi import prefix_problem

        return prefix_problem(str(value))


PREFIX = _Prefix("a C identifier that is not a C or C++ keyword", lambda v: True)


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
              variant: str | None, schedule: str | None, force: bool, json_out: bool, prefix: str | None) -> None:
    import json

    from tracea.emitters import registry

    host = _host()
    if backend is None and variant is not None:  # a named variant names its backend
        backend = next((v.backend for v in registry.all_variants() if v.id == variant), None)
    if arch is not None:  # export for the named target, installed here or not
        backend, host = targeted(host, backend, arch)
    backend = backend or resolve_backend(op, host, None, precision, to_stderr=json_out)
    mod = registry.backend(backend)
    v, s, source = _choose(op, host, backend, mod, precision, variant, schedule)
    paths = mod.export(op, v, s, host, out, arch=arch, force=force, schedule_source=source, prefix=prefix)
    written = json.loads((out / "manifest.json").read_text())["prefix"]
    if json_out:
        typer.echo(json.dumps({"variant": v.id, "schedule": s.to_json(), "schedule_source": source,
                               "prefix": written, "files": [str(p) for p in paths]}, indent=1))
        return
    typer.echo(f"{v.id} · schedule {source}: {json.dumps(s.to_json())}")
    for p in paths:
        typer.echo(f"  wrote {p}")
    typer.echo(f"prefix {written}: #include <{written}/tracea.h>, {written}_{op.kind}(...), "
               f"CMake target {written}::{written}")
    typer.echo(f"build and verify: cmake -S {out} -B {out}/build && cmake --build {out}/build && "
               f"ctest --test-dir {out}/build")


export_app = typer.Typer(
    help="Write a self-contained C/C++ package of the kernel: tracea.h (C ABI), tracea.hpp (RAII, exceptions), "
         "the kernel, a CMake file (with install and find_package) and an example that verifies against a C "
         "reference. Every exported name carries the package's prefix, so packages link into one program.",
    no_args_is_help=True)

add_op_commands(
    export_app,
    [BACKEND, PRECISION, option("out", Path, ..., *OUTPUT, help="Folder to write the package into (new or empty)."),
     option("arch", str | None, None, "--arch", help="GPU target to compile for, e.g. sm_80 or sm_90a (CUDA); no GPU needed. Picks the "
                 "backend whose targets include it when --backend (or --variant) does not name one."),
     option("variant", str | None, None, "--variant",
            help="The variant to export (default: the planner's first choice), e.g. cuda-mma-sync.gemm."),
     option("schedule", str | None, None, "--schedule",
            help="A schedule (JSON object, or a file holding one) instead of the tuned or heuristic one."),
     option("force", bool, False, "--force", help="Write into a non-empty -o/--output folder."),
     option("json_out", bool, False, "--json", help="Print JSON."),
     option("prefix", str | None, None, "--prefix",
            help="The package's name: its C symbols (NAME_gemm, NAME_init, ...), macros, C++ namespace, include "
                 "folder and CMake package and target (NAME::NAME). Default: op, dtype, size and a hash of the op "
                 "and backend, e.g. gemm_fp16_1024x1024x1024_3f9c2a", domain=PREFIX)],
    do_export, "Export",
)


def register(app: typer.Typer) -> None:
    app.add_typer(export_app, name="export")
