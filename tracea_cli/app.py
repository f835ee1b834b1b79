"""The ``tracea`` Typer app. Only Typer is imported here: each command imports its layer when it runs,
so ``tracea --help`` and Tab-completion never pay for the doctor, NVML, cuda-core or Textual.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Annotated, Any

import typer

app = typer.Typer(
    name="tracea",
    help="What is the fastest correct way to run this operation on this machine, and can you prove it?",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _version_callback(value: bool) -> None:
    if value:
        from . import _version

        typer.echo(f"tracea {_version()}")
        raise typer.Exit()


@app.callback()
def main(
    version: Annotated[
        bool, typer.Option("--version", help="Print the version and exit.", callback=_version_callback, is_eager=True)
    ] = False,
    debug: Annotated[bool, typer.Option("--debug", help="Show tracebacks instead of one-line errors.")] = False,
) -> None:
    """Tracea: diagnose, plan, generate, tune and verify compute kernels."""


@app.command()
def doctor(
    json_out: Annotated[bool, typer.Option("--json", help="Print the report as JSON (versioned schema).")] = False,
    save: Annotated[
        Path | None, typer.Option("--save", help="Write the snapshot (report + raw answers) to FILE.", metavar="FILE")
    ] = None,
    input_file: Annotated[
        Path | None,
        typer.Option("--input", help="Re-render a saved snapshot instead of probing this machine.", metavar="FILE"),
    ] = None,
    measure: Annotated[
        bool, typer.Option("--measure", help="Also measure the ceilings (FMA, stream triad; GPU copy, matrix loop).")
    ] = False,
    tui: Annotated[bool, typer.Option("--tui", help="Interactive view with live telemetry.")] = False,
    plain: Annotated[bool, typer.Option("--plain", help="No colours or styling, even on a terminal.")] = False,
    no_cache: Annotated[
        bool, typer.Option("--no-cache", help="Read the static CUDA device attributes live, not from the cache.")
    ] = False,
) -> None:
    """Diagnose this machine for kernel work: CPU, GPUs, toolchains, ceilings and checks."""
    from tracea.doctor.errors import BadInputError

    if input_file is not None and measure:
        raise BadInputError("--measure cannot be combined with --input (a snapshot is not this machine)")
    if json_out and tui:
        raise BadInputError("--json and --tui are mutually exclusive")
    report, raw = _doctor_report(input_file, measure, no_cache)
    if save is not None:
        _save_snapshot(save, raw, report, input_file)
    if tui:
        from .tui.doctor_app import run_doctor_tui

        run_doctor_tui(report, raw, live=input_file is None)
        return
    if json_out:
        import json

        from tracea.doctor.snapshot import report_document

        typer.echo(json.dumps(report_document(report), indent=1))
        return
    from .render import render_doctor

    render_doctor(report, plain=plain, saved_to=save)


def _doctor_report(input_file: Path | None, measure: bool, no_cache: bool) -> tuple[Any, dict[str, Any] | None]:
    """The report and its raw answers: read from ``input_file`` (a saved report has none), or probed on
    this machine (and measured with ``measure``)."""
    from tracea.doctor.snapshot import build_report, collect_raw, read_snapshot

    if input_file is not None:
        return read_snapshot(input_file)
    raw = collect_raw(use_cache=not no_cache)
    if measure:
        from tracea.doctor.measure import measure_all

        raw["measured"] = measure_all(raw)
    return build_report(raw), raw


def _save_snapshot(save: Path, raw: dict[str, Any] | None, report: Any, input_file: Path | None) -> None:
    """``--save``: the snapshot (report and raw answers) written atomically to ``save``."""
    from tracea.doctor.errors import BadInputError
    from tracea.doctor.snapshot import snapshot_document, write_json_atomic

    if raw is None:
        raise BadInputError(f"{input_file} is a report without raw answers; only snapshots can be re-saved")
    try:
        write_json_atomic(save, snapshot_document(raw, report))
    except OSError as exc:
        raise BadInputError(f"cannot write snapshot to {save}: {exc.strerror or exc}") from None


from . import cmd_kernels  # noqa: E402  (each command module imports only Typer at load)

cmd_kernels.register(app)


from . import cmd_bank_sim  # noqa: E402

cmd_bank_sim.register(app)


from . import cmd_evidence  # noqa: E402

cmd_evidence.register(app)


from . import cmd_cache, cmd_tune, cmd_tune_suite  # noqa: E402

cmd_tune_suite.register(cmd_tune.register(app))
cmd_cache.register(app)
from . import cmd_export  # noqa: E402, I001

cmd_export.register(app)


@functools.lru_cache(maxsize=1)
def build_command() -> Any:
    """The Click command behind the app (the console script runs it under Tracea's error policy), built once
    per process: Typer reads every command's signature to build it (a tenth of a second), and a Click
    command keeps no state between invocations, so a program (or a test) calling ``main`` many times
    reuses it."""
    return typer.main.get_command(app)
