"""``tracea bench`` with no operation: this machine's standard suite, one table.

Each backend the machine can run contributes its suite (``standard_suite()`` of the backend package);
every case is a full ``tracea bench`` (tuned schedule when stored, else the heuristic one; verified on
fresh random inputs before it is timed; its own run folder). The table ends with the geometric mean of
the ratios and the worst row; a case whose timing never settled is listed as unstable and left out of
the mean, never counted as a ratio.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import typer


def run_suite(backend: str | None, *, repeat: int, warmup: int, seed: int | None, json_out: bool,
              metrics: Path | None) -> None:
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from tracea.doctor import probe
    from tracea.doctor.errors import TraceaError
    from tracea.emitters import registry
    from tracea.emitters.bench import bench
    from tracea.reports.record import RunRecorder
    from tracea.tuner.lookup import tuned_lookup

    from .cmd_evidence import command_line

    host = probe()
    if backend is not None:
        registry.backend(backend)  # an unknown name fails here
    backends = [backend] if backend else registry.runnable_backends(host)
    cases = [(b, op) for b in backends for op in registry.backend(b).standard_suite()]
    err = Console(stderr=True)
    if not json_out:
        err.print(f"standard suite: {len(cases)} cases on {', '.join(backends) or 'no backend'} "
                  "(each verified on fresh random inputs, then timed beside the vendor library)")
    results = []
    progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                        console=err, transient=True, disable=not err.is_terminal)
    with progress:
        task = progress.add_task("suite", total=len(cases))
        for b, op in cases:
            progress.update(task, description=f"{b} {op.kind}")
            with RunRecorder("bench", command_line(), host, metrics=metrics) as rec:
                result = bench(op, host, backend=b, repeats=repeat, warmup=warmup, seed=seed,
                               build=rec.build_hook(b), tuned=tuned_lookup(host, b))
                rec.bench_result(result, {"backend": b, "suite": "standard", "repeat": repeat, "warmup": warmup})
            results.append((b, result))
            progress.advance(task)
    summary = summarise(results)
    if json_out:
        import json

        typer.echo(json.dumps(summary, indent=1))
    else:
        suite_table(results, summary)
    failed = [r for _, r in results if r.status != "ok"]
    if failed:
        raise TraceaError(f"{len(failed)} of {len(results)} suite cases did not pass: "
                          + "; ".join(f"{r.op.kind} {r.status}" for r in failed),
                          "each failed case left a run folder and a crash bundle (tracea pack-repro)")


def summarise(results: list[tuple[str, Any]]) -> dict[str, Any]:
    """The suite as JSON: every row (nested objects), the geometric mean of the stable ratios, the worst."""
    from tracea.reports.metrics import bench_row

    rows = [{**bench_row(r).to_json(), "case": short_case(r.op)} for _, r in results]
    ratios = [(r.ratio, row) for (_, r), row in zip(results, rows, strict=True) if r.ratio]
    geomean = math.exp(sum(math.log(x) for x, _ in ratios) / len(ratios)) if ratios else None
    worst = min(ratios, key=lambda t: t[0])[1] if ratios else None
    return {"schema_version": 1, "suite": "standard", "rows": rows, "geomean_ratio": geomean,
            "rows_with_ratio": len(ratios), "worst": worst}


def suite_table(results: list[tuple[str, Any]], summary: dict[str, Any]) -> None:
    from rich.markup import escape
    from rich.table import Table

    from .render import make_console

    console = make_console()
    if not console.is_terminal:
        console.width = 160  # a pipe or a file: the table whole, not folded to 80 columns
    table = Table(box=None, header_style="bold", pad_edge=False)
    for col in ("backend", "case", "variant", "schedule", "tracea ms", "vendor ms", "ratio"):
        table.add_column(col, justify="right" if col.endswith("ms") or col == "ratio" else "left", no_wrap=True)
    vendors: list[str] = []
    for b, r in results:
        t, base = r.tracea, r.baseline
        if r.status != "ok":
            ratio = f"[red]{r.status}[/red]"
        elif r.unstable:
            ratio = "[yellow]unstable[/yellow]"
        elif r.ratio is not None:
            ratio = f"{r.ratio:.2f}" + ("*" if r.baseline_note else "")
        else:
            ratio = "-"
        vendor = (r.baseline_name or "-") if base else f"{r.baseline_name or 'vendor'} unavailable: {r.baseline_reason}"
        if vendor not in vendors:
            vendors.append(vendor)
        table.add_row(b, escape(short_case(r.op)), r.variant or "-", r.schedule_source or "-",
                      f"{t.p50_ms:.3f}" if t else "-",
                      (f"{base.p50_ms:.3f}" if base else "-") + f" [{vendors.index(vendor) + 1}]", ratio)
    console.print(table)
    for i, v in enumerate(vendors, 1):
        console.print(f"[{i}] {escape(v)}", highlight=False)
    g = summary["geomean_ratio"]
    if g is None:
        console.print("no stable ratio in this run")
    else:
        w = summary["worst"]
        console.print(f"geometric mean {g:.2f}x over {summary['rows_with_ratio']} rows (> 1: Tracea faster); "
                      f"worst {w['ratio']:.2f}x: {w['backend']} {escape(short_case(_op_of(w)))}")
    for n in {r.baseline_note for _, r in results if r.baseline_note}:
        console.print(f"[yellow]*[/yellow] {escape(n)}")
    for _, r in results:
        if r.unstable:
            console.print(f"unstable {escape(short_case(r.op))}: {escape(r.unstable)}")


def _op_of(row: dict[str, Any]) -> Any:
    from tracea.kernels import Op

    return Op.from_json({**row["shape"], "op": row["op"], "dtype": row["dtype"]})


def short_case(op: Any) -> str:
    """A case in a few characters: gemm 1024x1024x1024 bf16, conv2d n32 c256 56x56 k256 3x3 s1 p1 nhwc fp16."""
    j = op.to_json()
    kind, dtype = j["op"], j.get("dtype", "")
    if kind == "gemm":
        extra = "".join(f" {x}" for x in (j.get("epilogue") or []))
        return f"gemm {j['m']}x{j['n']}x{j['k']} {dtype}{extra}"
    if kind == "conv2d":
        pair = lambda v: v[0] if isinstance(v, list | tuple) and len(set(v)) == 1 else v  # noqa: E731
        return (f"conv2d n{j['n']} c{j['c']} {j['h']}x{j['w']} k{j['k']} {j['r']}x{j['s']} s{pair(j['stride'])} "
                f"p{pair(j['padding'])} {j['layout']} {dtype}")
    if kind == "softmax":
        return f"softmax {j['rows']}x{j['cols']} {dtype}"
    return op.signature
