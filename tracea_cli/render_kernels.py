"""Tables for ``tracea plan`` and ``tracea bench`` (rich on a terminal, plain text in a pipe)."""

from __future__ import annotations

from typing import Any


def _console():
    from .render import make_console

    return make_console()


def plan_table(decision: Any, notes: tuple[str, ...] = ()) -> None:
    from rich.markup import escape
    from rich.table import Table

    console = _console()
    op = decision.op
    shape = ", ".join(f"{k}={v}" for k, v in op.items() if k not in ("op", "schema_version"))
    console.print(f"{op['op']}({escape(shape)})  requested {decision.requested_precision}"
                  f" → {decision.precision or 'nothing runs here'}")
    if decision.fallback:
        console.print(f"precision fallback: {escape(decision.fallback)}")
    table = Table(box=None, header_style="bold", pad_edge=False)
    for col in ("", "variant", "backend", "family", "precision", "score", "why not"):
        table.add_column(col, overflow="fold")
    for c in decision.candidates:
        mark = "→" if c.variant == decision.chosen else ("✓" if c.accepted else "✗")
        table.add_row(mark, c.variant, c.backend, c.family, c.precision, f"{c.score:g}", escape("; ".join(c.reasons)))
    console.print(table)
    if decision.chosen:
        from tracea.emitters.registry import variant

        fits = sum(c.accepted for c in decision.candidates)
        console.print(f"chosen: {decision.chosen}: {escape(variant(decision.chosen).description)} (the highest score of "
                      f"the {fits} variant{'s' if fits != 1 else ''} whose requirements hold here)")
    else:
        console.print("no variant can run this here")
    for note in notes:
        console.print(f"note: {escape(note)}")


def bench_table(result: Any) -> None:
    from rich.markup import escape
    from rich.table import Table

    console = _console()
    op = result.op
    console.print(f"{escape(op.signature)}")
    console.print(f"variant {result.variant} · schedule ({result.schedule_source}) {escape(str(result.schedule))}")
    console.print(f"inputs: fresh random, seed {result.seed} · verified against a float64 reference"
                  + (f" · rel err {result.rel_err:.2e} (tolerance {result.tolerance:.0e})" if result.rel_err is not None else ""))
    if result.status != "ok":
        console.print(f"[red]{result.status}[/red]: {escape(result.error or '')}")
        return
    table = Table(box=None, header_style="bold", pad_edge=False)
    for col in ("", "p50 ms", "p95 ms", "runs", "TFLOP/s", "GB/s", "rel err"):
        table.add_column(col, justify="right" if col else "left")
    t = result.tracea
    table.add_row("tracea", f"{t.p50_ms:.3f}", f"{t.p95_ms:.3f}", str(t.runs), f"{result.tflops:.3f}",
                  f"{result.gbps:.1f}", f"{result.rel_err:.1e}")
    if result.baseline:
        b = result.baseline
        flops = op.flops / (b.p50_ms * 1e-3) / 1e12
        gbps = op.bytes / (b.p50_ms * 1e-3) / 1e9
        err = f"{result.baseline_rel_err:.1e}" if result.baseline_rel_err is not None else "-"
        table.add_row(escape(result.baseline_name), f"{b.p50_ms:.3f}", f"{b.p95_ms:.3f}", str(b.runs), f"{flops:.3f}",
                      f"{gbps:.1f}", err)
    console.print(table)
    if result.memory_bound and result.of_copy is not None:
        from tracea.emitters.copy_bandwidth import OVER_COPY

        console.print(f"memory-bound: {result.gbps:.1f} GB/s, {100 * result.of_copy:.0f} % of the copy bandwidth "
                      f"measured in this run ({result.copy_gbps:.1f} GB/s: {escape(result.copy_method or '')})"
                      + (f"; {OVER_COPY}" if result.of_copy > 1 else ""), highlight=False)
    if not result.baseline:  # said whatever the timing was: an unstable one must not hide why there is no baseline
        console.print(f"baseline unavailable: {escape(result.baseline_reason or 'no reason recorded')}")
    if result.unstable:
        console.print(f"[yellow]{'no ratio: ' if result.baseline else ''}the measurement was "
                      f"{escape(result.unstable)}[/yellow] (something else is using the cores; rerun on a quiet machine)")
    elif result.baseline_wrong:
        console.print(f"[yellow]{escape(result.baseline_wrong)}[/yellow]")
    elif result.ratio is not None:
        verdict = "faster" if result.ratio >= 1 else "slower"
        console.print(f"ratio baseline/tracea = {result.ratio:.2f} (Tracea is {verdict})"
                      + (" [yellow]against a pinned baseline[/yellow]" if result.baseline_note else ""))
        if result.paired_note:
            console.print(escape(result.paired_note), highlight=False)
    if result.baseline_note:
        console.print(f"[yellow]warning[/yellow]: {escape(result.baseline_note)}")
