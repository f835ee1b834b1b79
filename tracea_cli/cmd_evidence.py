"""``tracea report``, ``tracea pack-repro`` and ``tracea replay``: reading, packing and replaying the
evidence that bench and tune leave (tracea.reports). Each command imports its layers when it runs."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from .validate import FILE, OUTPUT, REPEATS, SEED, WARMUP, checked


def _console() -> Any:
    from .render import make_console

    return make_console()


def _fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def report(
    metrics_file: Annotated[Path, typer.Argument(help="A metrics file from bench or tune (.csv or .jsonl).", metavar="METRICS_FILE")],
    plot: Annotated[Path | None, typer.Option("--plot", help="Also draw TFLOP/s and a roofline into FILE (.png, .svg, .pdf).", metavar="FILE")] = None,
    snapshot: Annotated[Path | None, checked(FILE, "--snapshot", help="The ceilings from a saved doctor snapshot (doctor --measure --save) instead of this machine: for the ceiling-error check and --plot.", metavar="FILE")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print the summary as JSON.")] = False,
) -> None:
    """Summarise a metrics file per kernel configuration; optionally plot it against the roofline. A row
    faster than the spec ceiling is flagged as a ceiling error (the ceiling is wrong, not the kernel)."""
    from tracea.reports.metrics import format_of, read_metrics
    from tracea.reports.summary import ceiling_errors, roofline_ceilings, summarise

    format_of(metrics_file)
    if plot is not None:
        from tracea.reports.plot import _pyplot, check_plot_path

        check_plot_path(plot)
        _pyplot()  # a missing matplotlib is said before any work
    rows = read_metrics(metrics_file)
    groups = summarise(rows)
    host, fingerprints = _ceilings_host(snapshot, rows)
    errors = ceiling_errors(host, groups, fingerprints)
    if json_out:
        typer.echo(json.dumps([{**g.to_json(), "ceiling_error": errors.get(i)} for i, g in enumerate(groups)],
                              indent=1))
    else:
        _summary_table(metrics_file, rows, groups)
        for i, err in errors.items():
            g = groups[i]
            typer.echo(f"{g.op} {g.shape} {g.dtype} {g.backend} {g.variant}: {err['message']}")
    if plot is not None:
        from tracea.reports.plot import plot as draw

        device, ceilings, notes = roofline_ceilings(host, rows)
        path = draw(rows, plot, device, ceilings, notes, title=f"{metrics_file.name}: {len(rows)} rows")
        (sys.stderr if json_out else sys.stdout).write(f"plot: {path}\n")


def _ceilings_host(snapshot: Path | None, rows: list[dict[str, Any]]) -> tuple[Any, set[str] | None]:
    """The host whose ceilings bound the rows, and the fingerprints of the rows it may judge: a named
    snapshot judges every row; this machine only the rows measured on it (same env fingerprint)."""
    if snapshot is not None:
        from tracea.doctor.snapshot import load_snapshot

        return load_snapshot(snapshot), None
    from tracea.doctor import probe
    from tracea.emitters.registry import fingerprint

    host = probe()
    return host, {fingerprint(host, b) for b in {r["backend"] for r in rows if r["backend"]}}


def _summary_table(path: Path, rows: list[dict[str, Any]], groups: list[Any]) -> None:
    from rich.markup import escape
    from rich.table import Table

    console = _console()
    console.print(f"{escape(str(path))}: {len(rows)} rows, {len(groups)} configurations")
    table = Table(box=None, header_style="bold", pad_edge=False)
    right = ("rows", "TFLOP/s", "p50 ms", "base ms", "ratio", "rel err")
    for col in ("op", "shape", "dtype", "variant", "rows", "status", "TFLOP/s", "p50 ms", "baseline", "base ms",
                "ratio", "rel err"):
        table.add_column(col, justify="right" if col in right else "left", no_wrap=col in ("shape", "variant"))
    for g in groups:
        j = g.to_json()
        status = ", ".join(f"{k} {v}" for k, v in j["statuses"].items())
        baseline = (j["baseline"] or "-").split(" (")[0]  # build details stay in the file
        table.add_row(j["op"], escape(j["shape"]), j["dtype"], escape(j["variant"]), str(j["rows"]), status,
                      _fmt(j["best_tflops"]), _fmt(j["best_p50_ms"]), escape(baseline),
                      _fmt(j["baseline_p50_ms"]), _fmt(j["best_ratio"]), _fmt(j["max_rel_err"]))
    console.print("TFLOP/s, p50 ms, base ms and ratio: the best ok row's; rel err: the worst ok row's")
    console.print(table)


def pack_repro(
    out: Annotated[Path, typer.Option(*OUTPUT, help="The bundle to write (.tar.gz).", metavar="FILE")],
    run: Annotated[str, typer.Option("--run", help="LAST (the newest run), a run id, an id prefix, or a run folder.", metavar="LAST|ID")] = "LAST",
) -> None:
    """Bundle a bench or tune run (sources, binaries, IR, metrics, snapshot, env) for someone to replay."""
    from tracea.doctor.errors import BadInputError
    from tracea.reports.bundle import pack_run
    from tracea.reports.runs import find_run

    if not out.name.endswith((".tar.gz", ".tgz")):
        raise BadInputError(f"-o {out}: the bundle is a .tar.gz; name it so")
    found = find_run(run)
    path = pack_run(found, out, argv=sys.argv[1:])
    size = path.stat().st_size
    typer.echo(f"run {found.id} ({found.kind}, {found.manifest.get('status')}) -> {path} ({size / 1024:.0f} KiB)")
    typer.echo(f"replay it with: tracea replay {path}")


def replay(
    bundle: Annotated[Path, typer.Argument(help="A bundle from `tracea pack-repro` (.tar.gz), or its unpacked folder.", metavar="BUNDLE")],
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask (needed when stdin is not a terminal). Without --bundled-source or --binary nothing from the bundle runs.")] = False,
    bundled_source: Annotated[bool, typer.Option("--bundled-source", help="Compile and run the bundle's own source (and its flags, if on the allow-list) instead of Tracea's rendering: runs code from the bundle on this machine.")] = False,
    binary: Annotated[bool, typer.Option("--binary", help="Load the bundled binary (same architecture only): runs code from the bundle on this machine.")] = False,
    into: Annotated[Path | None, typer.Option("--into", help="Unpack into DIR (new or empty) instead of a temporary folder.", metavar="DIR")] = None,
    kernel: Annotated[str | None, typer.Option("--kernel", help="Replay only the kernels whose folder name starts with NAME.", metavar="NAME")] = None,
    every: Annotated[bool, typer.Option("--all", help="Replay every kernel of a tune bundle, not only its best schedule's.")] = False,
    repeat: Annotated[int, checked(REPEATS, "--repeat", help="Timed runs of each contender (at least).")] = 10,
    warmup: Annotated[int, checked(WARMUP, "--warmup", help="Untimed runs of each contender first.")] = 2,
    seed: Annotated[int | None, checked(SEED, "--seed", help="Random inputs' seed (default: fresh).")] = None,
) -> None:
    """Unpack a repro bundle safely, show what would run and what differs, rebuild, rerun, verify, compare.

    By default the kernel is this Tracea's own rendering of the bundled op and schedule: nothing from the
    bundle is compiled, loaded or run. --bundled-source and --binary run the bundle's own code."""
    from tracea.doctor.errors import BadInputError

    if bundled_source and binary:
        raise BadInputError("--bundled-source and --binary exclude each other (one compiles the bundled source, "
                            "the other loads the bundled binary)")
    import shutil
    import tempfile

    mode = "binary" if binary else "source" if bundled_source else "own"
    scratch = None if into is not None or bundle.is_dir() else Path(tempfile.mkdtemp(prefix="tracea-replay-"))
    try:
        _replay(bundle, into or scratch, yes, mode, kernel, every, repeat, warmup, seed, keep=scratch is None)
    finally:
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)


RISK = {"source": "--bundled-source compiles the bundle's own source and runs it: this runs code from the bundle "
                  "on this machine",
        "binary": "--binary loads the bundle's own binary and runs it: this runs code from the bundle on this machine"}
MAX_UNLISTED_LINES = 100


def _replay(bundle: Path, into: Path | None, yes: bool, mode: str, kernel: str | None, every: bool, repeat: int,
            warmup: int, seed: int | None, keep: bool) -> None:
    """What the bundle holds, how this machine differs from the recording and what will run (with its risk);
    then, once allowed, each kernel replayed beside its recorded figures."""
    from rich.markup import escape

    from tracea.doctor import probe
    from tracea.reports import replay as rp
    from tracea.reports.bundle_check import shown

    def say(text: str, style: str | None = None) -> None:  # bundle text: no markup, no control characters
        console.print(escape(shown(text)), style=style)

    b = rp.open_bundle(bundle, into)
    console = _console()
    _say_bundle(say, b, keep)
    host = probe()
    _say_environment(say, b, host)
    plans = _replay_plans(say, b, host, mode, kernel, every)
    if mode != "own":
        say(f"RISK: {RISK[mode]}", style="bold")
    _confirm(yes, mode)
    _replay_each(console, say, b, plans, host, repeat, warmup, seed)


def _say_bundle(say: Any, b: Any, keep: bool) -> None:
    """Which run the bundle recorded, with what command, where it is unpacked, and what it holds unlisted."""
    m = b.manifest
    run = m.get("run") or {}
    say(f"bundle: run {run.get('id')} ({run.get('run_kind')}, recorded status {run.get('status')}) made "
        f"{m.get('created_at')} by Tracea {m.get('tracea_version')}")
    say(f"recorded command: {' '.join(['tracea', *(run.get('argv') or [])])}")
    say(f"unpacked in {b.root}" + ("" if keep else " (removed afterwards; --into DIR keeps it)"))
    if b.extra:
        say(f"the bundle holds {len(b.extra)} entries its manifest does not list (ignored, never read):")
        for rel, what in b.extra[:MAX_UNLISTED_LINES]:
            say(f"  unlisted: {rel}: {what}")
        if len(b.extra) > MAX_UNLISTED_LINES:
            say(f"  ... and {len(b.extra) - MAX_UNLISTED_LINES} more")


def _say_environment(say: Any, b: Any, host: Any) -> None:
    """How this machine and its installed packages differ from the recording."""
    from tracea.reports.replay_environment import env_differences, package_differences

    diffs = env_differences(b, host)
    if diffs:
        say("environment differs from the recording:")
        for key, was, now in diffs:
            say(f"  {key}: {json.dumps(was, default=str)} -> {json.dumps(now, default=str)}")
    else:
        say("environment: the same fingerprint fields as the recording")
    pkgs = package_differences(b)
    if pkgs:
        shown_pkgs = ", ".join(f"{n} {was or '-'} -> {now or '-'}" for n, was, now in pkgs[:8])
        say(f"installed packages: {len(pkgs)} differ from the recording ({shown_pkgs}" + (", ...)" if len(pkgs) > 8 else ")"))


def _replay_plans(say: Any, b: Any, host: Any, mode: str, kernel: str | None, every: bool) -> list[Any]:
    """The kernels to replay, each loaded and described beside what this Tracea renders for it."""
    from tracea.doctor.errors import BadInputError
    from tracea.reports import replay as rp

    entries, which = rp.select_kernels(b, kernel, every)
    if not entries:
        raise BadInputError("the bundle has no kernel to replay" + (f" matching {kernel!r}" if kernel else ""),
                            "a run that failed before building records no kernel; see run/log.txt in the bundle")
    plans = [rp.load_kernel(b, e, host, mode) for e in entries]
    say(f"replay will ({which}):")
    for k in plans:
        for line in rp.describe(k):
            say(f"  {line}")
        say(f"  compared with what this Tracea renders for {k.variant} and this schedule:")
        for line in rp.differences(k):
            say(f"  {line}")
    return plans


def _replay_each(console: Any, say: Any, b: Any, plans: list[Any], host: Any, repeat: int, warmup: int,
                      seed: int | None) -> None:
    """Replay each kernel and print it beside the recording; an error names every kernel whose status
    differs from the recorded one (or, unrecorded, is not ok)."""
    from tracea.doctor.errors import TraceaError
    from tracea.reports import replay as rp
    from tracea.reports.bundle_check import shown
    from tracea.reports.metrics import bench_row

    mismatched = []
    for k in plans:
        try:
            result = rp.replay_kernel(b, k, host, repeats=repeat, warmup=warmup, seed=seed)
        except TraceaError as exc:  # the same kind of error, naming the kernel
            raise type(exc)(f"{k.dir}: {shown(exc.message)}", exc.hint) from None
        new = bench_row(result).to_json()
        _side_by_side(console, k, result, rp.side_by_side(k.recorded, new))
        note = rp.built_source_note(k)
        if note:
            say(note)
        if k.recorded is not None and k.recorded.get("status") != new["status"]:
            mismatched.append(f"{k.dir}: recorded {shown(k.recorded.get('status'))}, now {new['status']}")
        elif k.recorded is None and new["status"] != "ok":
            mismatched.append(f"{k.dir}: {new['status']}: {result.error}")
    if mismatched:
        raise TraceaError("replay does not reproduce the recording: " + "; ".join(mismatched))


def _confirm(yes: bool, mode: str) -> None:
    """Ask before running. The question names what runs; --yes with an opt-in still prints the risk."""
    from tracea.doctor.errors import BadInputError

    if mode == "own":
        what = "replay builds and runs this Tracea's own kernels for the bundled ops (nothing from the bundle runs)"
        question = "Build and run Tracea's own kernels for these ops?"
    else:
        what = RISK[mode]
        question = f"Run code from the bundle on this machine ({'--binary' if mode == 'binary' else '--bundled-source'})?"
    if yes:
        if mode != "own":
            sys.stderr.write(f"warning: {what} (--yes: not asking)\n")
        return
    if not sys.stdin.isatty():
        raise BadInputError(f"{what}; pass --yes to allow it (stdin is not a terminal, so it cannot ask)")
    if not typer.confirm(question, default=False):  # a refusal is the user's answer, not a failure of Tracea
        raise BadInputError("replay declined at the prompt: nothing was built or run",
                            "pass --yes to replay without asking")


def _side_by_side(console: Any, k: Any, result: Any, rows: list[tuple[str, Any, Any]]) -> None:
    from rich.markup import escape
    from rich.table import Table

    from tracea.reports.bundle_check import shown

    table = Table(box=None, header_style="bold", pad_edge=False, title=None)
    table.add_column(escape(k.dir.split("/")[-1]))
    table.add_column("recorded", justify="right")
    table.add_column("now", justify="right")
    for name, was, now in rows:
        if name == "baseline":  # the name without its build details (those are in the bundle's metrics)
            was, now = (str(v).split(" (")[0] if v else v for v in (was, now))
        table.add_row(name, escape(shown(_fmt(was))), escape(_fmt(now)))  # recorded: the bundle's text
    console.print(table)
    built = {"own": "this Tracea's own rendering", "source": "the bundled source", "binary": "the bundled binary"}[k.mode]
    verdict = (f"verified: rel err {result.rel_err:.2e} within {result.tolerance:.0e} on fresh random inputs "
               f"(seed {result.seed}); built from {built}" if result.status == "ok" else f"{result.status}: {result.error}")
    console.print(escape(verdict))


def command_line() -> list[str]:
    """The arguments of this tracea command (for run manifests): sys.argv when the console script runs,
    else (a test calling main([...])) the command path and parameters Click parsed."""
    script = Path(sys.argv[0]) if sys.argv and sys.argv[0] else Path()
    if script.name == "tracea" or (script.name == "__main__.py" and script.parent.name in ("tracea", "tracea_cli")):
        return list(sys.argv[1:])
    try:  # Typer >= 0.29 vendors Click; older Typer uses it
        from typer._click.globals import get_current_context
    except ImportError:
        try:
            from click import get_current_context
        except ImportError:
            return []
    ctx = get_current_context(silent=True)
    if ctx is None:
        return []
    args = ctx.command_path.split()[1:]
    for name, value in ctx.params.items():
        if value is not None and value is not False:
            args += [f"--{name.replace('_', '-')}"] + ([] if value is True else [str(value)])
    return args


def say_run(rec: Any, to_stderr: bool) -> None:
    """Where the run's evidence is, and how to bundle it."""
    stream = sys.stderr if to_stderr else sys.stdout
    stream.write(f"run {rec.run.id}: {rec.run.path} (bundle it: tracea pack-repro --run {rec.run.id} -o FILE.tar.gz)\n")


def say_runs(paths: list[Path], each: str, to_stderr: bool) -> None:
    """Where a suite's evidence is, in one line: the run folder of each of its ``each`` (case, problem),
    named under the folder that holds them (every run folder is one of ``$TRACEA_HOME/runs``)."""
    if not paths:
        return
    stream = sys.stderr if to_stderr else sys.stdout
    parents = list(dict.fromkeys(str(p.parent) for p in paths))
    where = f" in {parents[0]}" if len(parents) == 1 else ""
    names = " ".join(p.name if where else str(p) for p in paths)
    stream.write(f"run folders ({len(paths)}, one per {each}){where}: {names} "
                 "(bundle one: tracea pack-repro --run ID -o FILE.tar.gz)\n")


def dump_emitted(op: Any, decision: Any, variant: Any, schedule: Any, host: Any, mod: Any, emitted: list[Path],
                 dump_ir: Path) -> list[Path]:
    """``tracea emit --dump-ir``: every stage. When the emitter wrote a binary (CUDA: the cubin for the
    named --arch) the emitted files are the stages; else the kernel is built here when this host can, and
    otherwise the stages up to the source are written, with the emitted metadata."""
    import yaml

    from tracea.doctor.errors import CompileError, UnsupportedError
    from tracea.reports.irdump import dump_kernel

    files = [Path(p) for p in emitted]
    src = next((p for p in files if p.suffix == mod.SOURCE_SUFFIX), None)
    binary = next((p for p in files if p.suffix in (".cubin", ".so", ".hsaco", ".co", ".metallib")), None)
    if binary is None:
        try:
            return dump_kernel(dump_ir, op, decision, schedule, mod.build(op, variant, schedule, host).artifact)
        except (UnsupportedError, CompileError):  # another machine's kernel, or no compiler: no binary stage
            pass
    meta_file = next((p for p in files if p.suffix == ".yaml"), None)
    log_file = next((p for p in files if p.suffix == ".log"), None)
    meta = (yaml.safe_load(meta_file.read_text()) if meta_file else None) or {}
    artifact = {"name": meta.get("name") or (src.stem if src else None), "source": src.read_text() if src else None,
                "language": mod.LANGUAGE if src else None, "metadata": meta, "variant": variant.id,
                "binary": str(binary) if binary else None, "entry": meta.get("entry") or meta.get("kernel"),
                "flags": meta.get("flags"),
                "compiler": meta.get("compiler"), "compiler_version": meta.get("compiler_version"),
                "log": log_file.read_text() if log_file else None}
    return dump_kernel(dump_ir, op, decision, schedule, artifact)


def register(app: typer.Typer) -> None:
    app.command(name="report")(report)
    app.command(name="pack-repro")(pack_repro)
    app.command(name="replay")(replay)
