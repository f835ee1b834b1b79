"""``tracea cache list | show | export | import | clear``: the tuning database (every trial of every run, keyed by
op, variant and environment fingerprint). Location: $TRACEA_HOME/tuning.sqlite, else the platform's user
data folder. list, show and export only read (a read-only database works; a malformed row is skipped with
a warning); clear writes under the database's write lock, and a tune running under a cleared key stops.
Only Typer is imported when the app loads."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer

from .validate import OUTPUT

cache_app = typer.Typer(help="The tuning database: list, show, export, import or clear stored results.",
                        no_args_is_help=True)

KEY = Annotated[str, typer.Argument(help="A tuning key or a unique prefix of one (see `tracea cache list`).")]
JSON = Annotated[bool, typer.Option("--json", help="Print JSON.")]


def _db(write: bool = False) -> Any:
    from tracea.tuner.db import TuningDB

    return TuningDB() if write else TuningDB.reader()


def _resolve(db: Any, prefix: str) -> str:
    from tracea.doctor.errors import BadInputError

    keys = db.find_keys(prefix)
    if not keys:
        raise BadInputError(f"no tuning key starts with {prefix!r}", "`tracea cache list` shows the stored keys")
    if len(keys) > 1:
        raise BadInputError(f"{prefix!r} matches {len(keys)} keys; give more characters")
    return keys[0]


@cache_app.command("list")
def list_cmd(json_out: JSON = False) -> None:
    """One line per tuned op x variant x environment: trials, verified, best time."""
    db = _db()
    rows = db.keys()
    if json_out:
        typer.echo(json.dumps({"database": str(db.path), "keys": rows}, indent=1))
        return
    from rich.markup import escape
    from rich.table import Table

    from .render import make_console

    console = make_console()
    console.print(f"database: {escape(str(db.path))}" + (" (read-only)" if db.immutable else ""))
    orphans = db.orphans()
    if orphans:
        console.print(f"[yellow]{orphans} trials belong to no run and are ignored[/yellow] "
                      "(`tracea cache clear --orphans` removes them)")
    if not rows:
        console.print("nothing tuned yet (`tracea tune gemm --m 1024` tunes one)")
        return
    table = Table(box=None, header_style="bold", pad_edge=False)
    for col in ("key", "op", "variant", "env", "runs", "trials", "ok", "best ms", "best schedule"):
        table.add_column(col, justify="right" if col in ("runs", "trials", "ok", "best ms") else "left", overflow="fold")
    for r in rows:
        table.add_row(r["key"][:12], escape(r["op_signature"]), r["variant"], r["fingerprint"][:8], str(r["runs"]),
                      str(r["trials"]), str(r["ok"]), f"{r['best_ms']:.3f}" if r["best_ms"] else "-",
                      escape(r["best_name"] or "-"))
    console.print(table)


@cache_app.command("show")
def show_cmd(key: KEY, json_out: JSON = False) -> None:
    """Every trial of one key, fastest verified first, failures with their reason."""
    db = _db()
    k = _resolve(db, key)
    trials = db.trials(key=k)
    run = db.latest_run(k)
    if run is None:
        from tracea.doctor.errors import BadInputError

        raise BadInputError(f"every run of {k} is malformed (see the warnings above)",
                            "`tracea cache export` shows what can be read; `tracea cache clear KEY` removes it")
    if json_out:
        typer.echo(json.dumps(db.export(k), indent=1))
        return
    from rich.markup import escape
    from rich.table import Table

    from .render import make_console

    console = make_console()
    console.print(f"{k} · {escape(run['op_signature'])} · {run['variant']} · env {run['fingerprint']}")
    baseline = (json.loads(run["baseline"]) if run.get("baseline") else None) or {}
    if baseline.get("p50_ms"):
        console.print(f"baseline {escape(str(baseline['name']))}: {baseline['p50_ms']:.3f} ms")
    table = Table(box=None, header_style="bold", pad_edge=False)
    for col in ("run", "schedule", "status", "p50 ms", "p95 ms", "compile s", "error"):
        table.add_column(col, overflow="fold")
    for t in sorted(trials, key=lambda t: (t["status"] != "ok", t["p50_ms"] or 0)):
        table.add_row(str(t["run_id"]), escape(t["name"]), t["status"],
                      f"{t['p50_ms']:.3f}" if t["p50_ms"] else "-", f"{t['p95_ms']:.3f}" if t["p95_ms"] else "-",
                      f"{t['compile_s']:.2f}" if t["compile_s"] else "-", escape(t["error"] or ""))
    console.print(table)


@cache_app.command("export")
def export_cmd(
    key: Annotated[str | None, typer.Argument(help="A key (prefix); default: everything.")] = None,
    out: Annotated[Path | None, typer.Option(*OUTPUT, help="Write to FILE (atomically) instead of stdout.",
                                             metavar="FILE")] = None,
) -> None:
    """Runs and trials as JSON (schedules, statuses, times, errors, environments)."""
    db = _db()
    doc = db.export(_resolve(db, key) if key else None)
    text = json.dumps(doc, indent=1) + "\n"
    if out is None:
        typer.echo(text, nl=False)
        return
    from tracea.doctor.errors import BadInputError
    from tracea.doctor.files import write_atomic

    try:
        write_atomic(out, text)
    except OSError as exc:
        raise BadInputError(f"-o/--output: cannot write {out}: {exc.strerror or exc}") from None
    typer.echo(f"wrote {len(doc['trials'])} trials of {len(doc['runs'])} runs to {out}")


@cache_app.command("import")
def import_cmd(
    file: Annotated[Path, typer.Argument(help="An export (`tracea cache export -o FILE`), e.g. from another machine.")],
    json_out: Annotated[bool, typer.Option("--json", help="Print the counts as JSON.")] = False,
) -> None:
    """Merge another database's export into this one by key: every row checked first, nothing added twice."""
    from tracea.doctor.inputs import check_ints_in, parse_json, read_text
    from tracea.tuner.db_import import merge

    doc = parse_json(read_text(file, "cache import:"), f"{file} (a JSON export)")
    check_ints_in(doc, f"{file}")  # SQLite holds 64-bit integers
    db = _db(write=True)
    try:
        counts = merge(db, doc)
    finally:
        db.close()
    if json_out:
        typer.echo(json.dumps(counts))
        return
    typer.echo(f"imported {counts['trials_added']} trials of {counts['runs_added']} runs into {db.path}"
               f" ({counts['trials_known']} trials and {counts['runs_known']} runs were already there)")


@cache_app.command("clear")
def clear_cmd(
    key: Annotated[str | None, typer.Argument(help="A key (prefix) to clear.")] = None,
    all_keys: Annotated[bool, typer.Option("--all", help="Clear every stored result.")] = False,
    orphans: Annotated[bool, typer.Option("--orphans", help="Clear only trials that belong to no run.")] = False,
) -> None:
    """Delete the runs and trials of one key, or of all keys with --all. A tune running under a cleared
    key stops at its next trial (exit 1) instead of writing trials of a run that is gone."""
    from tracea.doctor.errors import BadInputError

    if (key is not None) + all_keys + orphans != 1:
        raise BadInputError("give one of KEY, --all or --orphans")
    db = _db(write=True)
    if orphans:
        typer.echo(f"cleared {db.clear_orphans()} trials of no run")
        return
    n = db.clear(_resolve(db, key) if key else None)
    typer.echo(f"cleared {n} trials")


def register(app: typer.Typer) -> None:
    app.add_typer(cache_app, name="cache")
