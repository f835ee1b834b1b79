"""``tracea bench`` with no operation: this machine's suites (kernels/workloads.py: llm-gemm, resnet50,
softmax), one table; ``--suite NAME`` one of them, ``--quick`` a few rows of each, ``--list`` what there is.

Each backend the machine can run contributes its cases (``suites()`` of the backend module);
every case is a full ``tracea bench`` (tuned schedule when stored, else the heuristic one; verified on
fresh random inputs before it is timed; its own run folder). The table ends with the geometric mean of
the ratios and the worst row; a case whose timing never settled is listed as unstable and left out of
the mean, never counted as a ratio. The last line names every case's run folder (with ``--json``: on
stderr, and each row's ``run``).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import typer


def selected_cases(backends: list[str], suite: str | None, quick: bool) -> list[tuple[str, str, Any]]:
    """(backend, suite name, op) for every case to run, in suite order per backend; a named suite no backend has
    rows for (int8 GEMMs on a GPU) is UnsupportedError."""
    from tracea.doctor.errors import UnsupportedError
    from tracea.emitters import registry

    cases = [(b, name, op) for b in backends for name, ops in registry.backend(b).suites(quick).items()
             if suite is None or name == suite for op in ops]
    if suite is not None and not cases:
        raise UnsupportedError(f"--suite {suite}: no rows for {', '.join(backends) or 'any backend here'}",
                               "`tracea bench --list` shows each backend's suites")
    return cases


def list_suites(backend: str | None, quick: bool) -> None:
    from tracea.doctor import probe
    from tracea.emitters import registry
    from tracea.kernels.workloads import summary

    backends = [backend] if backend else registry.runnable_backends(probe())
    cases = {b: registry.backend(b).suites(quick) for b in backends}
    for name, line in summary().items():
        counts = ", ".join(f"{b} {len(cases[b].get(name, []))}" for b in backends)
        typer.echo(f"{name:<10} {line} ({counts} cases{', --quick' if quick else ''})")


def run_suite(backend: str | None, *, repeat: int, warmup: int, seed: int | None, json_out: bool,
              metrics: Path | None, suite: str | None = None, quick: bool = False) -> None:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from tracea.doctor import probe
    from tracea.doctor.errors import TraceaError
    from tracea.emitters import copy_bandwidth, registry
    from tracea.emitters.bench import bench
    from tracea.kernels.workloads import check_suite
    from tracea.reports.record import RunRecorder
    from tracea.tuner.lookup import tuned_lookup

    from .cmd_evidence import command_line, say_runs
    from .render import make_console

    if suite is not None:
        check_suite(suite)
    host = probe()
    if backend is not None:
        registry.require_runnable(backend, host)  # an unknown name, or no such GPU here: one line, no run folder
    backends = [backend] if backend else registry.runnable_backends(host)
    cases = selected_cases(backends, suite, quick)
    err = make_console(stderr=True)
    if not json_out:
        err.print(f"{suite or 'every'} suite{' (quick)' if quick else ''}: {len(cases)} cases on "
                  f"{', '.join(backends) or 'no backend'} "
                  "(each verified on fresh random inputs, then timed beside the vendor library)")
    results, runs = [], []
    progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                        console=err, transient=True, disable=not err.is_terminal)
    try:
        with progress:
            task = progress.add_task("suite", total=len(cases))
            for b, name, op in cases:
                progress.update(task, description=f"{b} {name} {op.case_label()}")
                with RunRecorder("bench", command_line(), host, metrics=metrics) as rec:
                    runs.append(rec.run.path)
                    result = copy_bandwidth.attach(bench(op, host, backend=b, repeats=repeat, warmup=warmup, seed=seed,
                                                         build=rec.build_hook(b), tuned=tuned_lookup(host, b)), host)
                    rec.bench_result(result, {"backend": b, "suite": name, "quick": quick, "repeat": repeat,
                                              "warmup": warmup})
                results.append((b, name, result))
                progress.advance(task)
    except BaseException:  # a case that raised (or Ctrl-C): the cases run so far are still where they are
        say_runs(runs, "case", to_stderr=True)
        raise
    summary = summarise(results, suite or "all", quick, runs)
    if json_out:
        import json

        typer.echo(json.dumps(summary, indent=1))
    else:
        suite_table(results, summary)
    say_runs(runs, "case", to_stderr=json_out)
    failed = [r for _, _, r in results if r.status != "ok"]
    if failed:
        raise TraceaError(f"{len(failed)} of {len(results)} suite cases did not pass: "
                          + "; ".join(f"{r.op.kind} {r.status}" for r in failed),
                          "each failed case left a run folder (named above) and a crash bundle in it")


def _geomean(ratios: list[float]) -> float | None:
    return math.exp(sum(math.log(x) for x in ratios) / len(ratios)) if ratios else None


def summarise(results: list[tuple[str, str, Any]], suite: str = "all", quick: bool = False,
              runs: list[Path] | None = None) -> dict[str, Any]:
    """The suite as JSON: every row (nested objects; ``run``: the case's run folder, given ``runs``), the
    geometric mean of the stable ratios, the worst row and the rows under 0.8x, overall and per suite."""
    from tracea.reports.metrics import bench_row

    rows = [{**bench_row(r).to_json(), "case": r.op.case_label(), "suite": name, "memory_bound": r.memory_bound,
             "copy_gbps": r.copy_gbps, "of_copy": r.of_copy} for _, name, r in results]
    for row, run in zip(rows, runs or [], strict=False):
        row["run"] = str(run)
    ratios = [(r.ratio, row) for (_, _, r), row in zip(results, rows, strict=True) if r.ratio]

    def stats(pairs: list[tuple[float, dict[str, Any]]]) -> dict[str, Any]:
        return {"geomean_ratio": _geomean([x for x, _ in pairs]), "rows_with_ratio": len(pairs),
                "rows_below_0.8": sum(1 for x, _ in pairs if x < 0.8),
                "worst": min(pairs, key=lambda t: t[0])[1] if pairs else None}

    per_suite = {name: stats([(x, row) for x, row in ratios if row["suite"] == name])
                 for name in dict.fromkeys(row["suite"] for row in rows)}
    return {"schema_version": 2, "suite": suite, "quick": quick, "rows": rows, **stats(ratios),
            "suites": per_suite}


def suite_table(results: list[tuple[str, str, Any]], summary: dict[str, Any]) -> None:
    from rich.markup import escape
    from rich.table import Table

    from .render import make_console

    console = make_console()
    table = Table(box=None, header_style="bold", pad_edge=False)
    for col in ("backend", "suite", "case", "variant", "schedule", "tracea ms", "vendor ms", "ratio", "GB/s (of copy)"):
        table.add_column(col, justify="left" if col in ("backend", "suite", "case", "variant", "schedule") else "right",
                         no_wrap=True)
    vendors: list[str] = []
    for b, name, r in results:
        t, base = r.tracea, r.baseline
        if r.status != "ok":
            ratio = f"[red]{r.status}[/red]"
        elif r.unstable:
            ratio = "[yellow]unstable[/yellow]"
        elif r.ratio is not None:
            ratio = f"{r.ratio:.2f}" + ("~" if r.ratio_interval else "") + ("*" if r.baseline_note else "")
        else:
            ratio = "-"
        vendor = (r.baseline_name or "-") if base else f"{r.baseline_name or 'vendor'} unavailable: {r.baseline_reason}"
        if vendor not in vendors:
            vendors.append(vendor)
        table.add_row(b, name, escape(r.op.case_label()), r.variant or "-", r.schedule_source or "-",
                      f"{t.p50_ms:.3f}" if t else "-",
                      (f"{base.p50_ms:.3f}" if base else "-") + f" [{vendors.index(vendor) + 1}]", ratio,
                      bandwidth_cell(r))
    console.print(table)
    for line in copy_lines([r for _, _, r in results]):
        console.print(escape(line), highlight=False)
    for i, v in enumerate(vendors, 1):
        console.print(f"[{i}] {escape(v)}", highlight=False)
    per_suite = summary["suites"]
    for name, st in (per_suite.items() if len(per_suite) > 1 else []):
        if st["geomean_ratio"] is not None:
            console.print(f"{name}: geometric mean {st['geomean_ratio']:.2f}x over {st['rows_with_ratio']} rows, "
                          f"{st['rows_below_0.8']} below 0.8x")
    g = summary["geomean_ratio"]
    if g is None:
        console.print("no stable ratio in this run")
    else:
        w = summary["worst"]
        console.print(f"geometric mean {g:.2f}x over {summary['rows_with_ratio']} rows (> 1: Tracea faster), "
                      f"{summary['rows_below_0.8']} below 0.8x; "
                      f"worst {w['ratio']:.2f}x: {w['backend']} {escape(_op_of(w).case_label())}")
    for n in {r.baseline_note for _, _, r in results if r.baseline_note}:
        console.print(f"[yellow]*[/yellow] {escape(n)}")
    for _, _, r in results:
        if r.unstable:
            console.print(f"unstable {escape(r.op.case_label())}: {escape(r.unstable)}")
        elif r.paired_note:
            console.print(f"~ {escape(r.op.case_label())}: {escape(r.paired_note)}", highlight=False)


def _op_of(row: dict[str, Any]) -> Any:
    from tracea.kernels import Op

    return Op.from_json({**row["shape"], "op": row["op"], "dtype": row["dtype"]})


def bandwidth_cell(r: Any) -> str:
    """A memory-bound row's bytes a second and their share of the copy measured in the same run; "-" else."""
    if not r.memory_bound or r.of_copy is None:
        return "-"
    return f"{r.gbps:.0f} ({100 * r.of_copy:.0f} %)"


def copy_lines(results: list[Any]) -> list[str]:
    """What the bandwidth column is held against: each backend's copy measured in this run (or why not)."""
    from tracea.emitters.copy_bandwidth import OVER_COPY

    out, seen = [], set()
    for r in results:
        b = r.decision.backend
        if b in seen or (r.copy_gbps is None and r.copy_method is None):
            continue
        seen.add(b)
        if r.copy_gbps is None:
            out.append(f"{b}: {r.copy_method}")
            continue
        out.append(f"GB/s (of copy): the kernel's bytes (each input read once, the output written once) a second, "
                   f"on memory-bound rows; {b} copy measured in this run: {r.copy_gbps:.1f} GB/s ({r.copy_method})")
        if any(x.decision.backend == b and x.memory_bound and (x.of_copy or 0) > 1 for x in results):
            out.append(f"{b}: {OVER_COPY}")
    return out

