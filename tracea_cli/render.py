"""Rich rendering of a ``HostReport``: readable on a terminal, plain one-shot text in a pipe.

Shared with the TUI: the ``*_lines`` functions yield (label, text) rows per section, so both views
say the same thing in the same words.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tracea.doctor.report import OK, PROBLEM, WARNING, AmdGpu, AppleGpu, Ceiling, HostReport, NvidiaGpu

MARK_STYLE = {OK: ("✓", "green"), WARNING: ("!", "yellow"), PROBLEM: ("✗", "red")}
MARK_PLAIN = {OK: "[ok]", WARNING: "[warning]", PROBLEM: "[problem]"}


def human_bytes(n: float | None) -> str:
    if n is None:
        return "n/a"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" or n == int(n) else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"


def si(value: float | None, unit: str) -> str:
    if value is None:
        return "n/a"
    for prefix, scale in (("P", 1e15), ("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(value) >= scale:
            return f"{value / scale:.1f} {prefix}{unit}"
    return f"{value:.1f} {unit}"


def _na(section, key: str) -> str:
    reason = section.unavailable.get(key)
    return f"n/a ({reason})" if reason else "n/a"


def cpu_lines(report: HostReport) -> Iterator[tuple[str, str]]:
    c = report.cpu
    yield "model", f"{c.model or _na(c, 'model')} ({c.vendor or '?'}, {c.architecture or '?'})"
    sockets = f", {c.sockets} socket{'s' if c.sockets != 1 else ''}" if c.sockets else ""
    numa = f", {c.numa_nodes} NUMA node{'s' if c.numa_nodes != 1 else ''}" if c.numa_nodes else ""
    phys = c.physical_cores if c.physical_cores is not None else "?"
    yield "cores", f"{phys} physical / {c.logical_cores or '?'} logical{sockets}{numa}"
    if c.microarchitecture:
        die = f" ({c.codename})" if c.codename else ""
        where = (c.sources.get("microarchitecture") or "").partition(": ")[2]
        vm = ", in a virtual machine" if c.hypervisor else ""
        yield "microarch", f"{c.microarchitecture}{die}{vm}" + (f" · {where}" if where else "")
    else:
        yield "microarch", _na(c, "microarchitecture")
    clocks = []
    for label, key in (("base", "base_clock_hz"), ("max", "max_clock_hz"), ("current", "current_clock_hz")):
        v = getattr(c, key)
        clocks.append(f"{label} {v / 1e9:.2f} GHz" if v else f"{label} n/a")
    yield "clock", " · ".join(clocks)
    yield "caches", (f"L1d {human_bytes(c.l1d_bytes_per_core)}/core · L2 {human_bytes(c.l2_bytes_per_core)}/core"
                     f" · L3 {human_bytes(c.l3_bytes_total)} total")
    yield "memory", f"{human_bytes(c.memory_total_bytes)} total, {human_bytes(c.memory_available_bytes)} available"
    yield "ISA", " ".join(c.isa or []) or _na(c, "isa")
    if c.simd_family:
        width = f"{c.vector_width_bits}-bit vectors" if c.vector_width_bits else "scalar"
        yield "CPU emitter", f"{c.simd_family}, {width}, flags: {' '.join(c.emitter_flags or []) or '(none)'}"


def gpu_lines(g: NvidiaGpu) -> Iterator[tuple[str, str]]:
    cc = g.compute_capability
    sm = f"sm_{cc.replace('.', '')}" if cc else "sm_?"
    yield "device", f"{g.name or _na(g, 'name')} · {g.uuid or '?'} · PCI {g.pci_bus_id or '?'}"
    yield "compute", (f"compute capability {cc or '?'} ({sm}, {g.architecture or '?'}) · {g.sm_count or '?'} SMs"
                      f" [{g.sources.get('sm_count', 'n/a')}]")
    yield "tensor cores", f"{g.tensor_core_generation or 'none'}: {' '.join(g.precisions or []) or '-'}"
    yield "memory", (f"{human_bytes(g.memory_total_bytes)} ({human_bytes(g.memory_used_bytes)} used)"
                     f" · {g.memory_bus_width_bits or '?'}-bit bus")
    optin = g.shared_memory_per_block_optin_bytes
    yield "shared memory", (f"{human_bytes(g.shared_memory_per_block_bytes)}/block default · "
                            f"{human_bytes(optin)} ({optin if optin is not None else '?'} B)/block opt-in · "
                            f"{human_bytes(g.shared_memory_per_sm_bytes)}/SM"
                            f" [{g.sources.get('shared_memory_per_block_optin_bytes', 'n/a')}]")
    yn = {True: "yes", False: "no", None: "?"}
    yield "limits", (f"{g.registers_per_sm or '?'} regs/SM · {g.max_threads_per_sm or '?'} threads/SM · "
                     f"warp {g.warp_size or '?'} · L2 {human_bytes(g.l2_cache_bytes)} · "
                     f"clusters {yn[g.cluster_launch]} · TMA {yn[g.tma]}")
    yield "clocks", (f"SM {g.sm_clock_mhz or '?'} / {g.sm_clock_max_mhz or '?'} MHz max · "
                     f"memory {g.memory_clock_mhz or '?'} / {g.memory_clock_max_mhz or '?'} MHz max")
    power = f"{g.power_draw_w:.0f} W" if g.power_draw_w is not None else "? W"
    limit = f"{g.power_limit_w:.0f} W" if g.power_limit_w is not None else "? W"
    temp = f"{g.temperature_c} °C" if g.temperature_c is not None else "? °C"
    yield "telemetry", (f"{power} of {limit} · {temp} · utilization {g.utilization_gpu_percent}% "
                        f"(memory {g.utilization_memory_percent}%)")
    yield "PCIe", (f"gen {g.pcie_generation or '?'} (max {g.pcie_generation_max or '?'}) · "
                   f"x{g.pcie_width or '?'} (max x{g.pcie_width_max or '?'})")
    persist = {True: "on", False: "off", None: "?"}[g.persistence_mode]
    throttle = ", ".join(g.throttle_reasons) if g.throttle_reasons else "none"
    yield "modes", f"MIG {g.mig_mode or '?'} · persistence {persist} · clock events: {throttle}"


def amd_lines(g: AmdGpu) -> Iterator[tuple[str, str]]:
    yield "device", f"{g.name or _na(g, 'name')} · {g.gfx_target or '?'} · KFD node {g.node} · PCI id {g.pci_device_id}"
    yield "compute", (f"{g.compute_units or '?'} CUs · {g.simd_per_cu or '?'} SIMD/CU · wavefront {g.wavefront_size or '?'}"
                      f" · LDS {human_bytes(g.lds_bytes_per_workgroup)} · {g.max_engine_clock_mhz or '?'} MHz max")
    yield "memory", f"VRAM {human_bytes(g.vram_bytes) if g.vram_bytes else _na(g, 'vram_bytes')}"
    yield "driver", g.driver_version or _na(g, "driver_version")


def apple_lines(g: AppleGpu) -> Iterator[tuple[str, str]]:
    yield "device", f"{g.chip or '?'} · {g.gpu_cores or '?'} GPU cores · {g.metal_family or '?'}"
    yield "family", g.gpu_family or _na(g, "gpu_family")
    unified = g.unified_memory_bytes
    yield "memory", f"{human_bytes(unified)} unified" if unified else _na(g, "unified_memory_bytes")


def toolchain_lines(report: HostReport) -> Iterator[tuple[str, str]]:
    """One row per tool; a second name for the same compiler binary says so instead of repeating it."""
    seen_binaries: dict[str, str] = {}
    for t in report.toolchains:
        if not t.found:
            yield t.name, f"- {t.reason or 'not found'}"
            continue
        real = t.details.get("realpath")
        if real and real in seen_binaries:
            yield t.name, f"✓ {t.version or '?'} {t.path or ''} (same compiler as {seen_binaries[real]})"
            continue
        if real:
            seen_binaries[real] = t.name
        extra = ""
        if "march_native_enables" in t.details:
            resolved = t.details.get("march_native_resolved")
            extra = (f" · -march=native{'=' + resolved if resolved else ''}: "
                     f"{' '.join(t.details['march_native_enables'])}")
        elif t.details.get("march_native") == "fails":
            extra = " · -march=native fails"
        yield t.name, f"✓ {t.version or '?'} {t.path or ''}{extra}"


def python_lines(report: HostReport) -> Iterator[tuple[str, str]]:
    p = report.python
    pk = p.packages
    yield "Python", f"{p.python_version} ({p.implementation}) {p.executable or ''}"
    yield "numpy", f"{pk.get('numpy') or '-'}" + (f" (BLAS: {p.numpy_blas})" if p.numpy_blas else "")
    yield "torch", f"{pk.get('torch') or '-'}" + (f" (CUDA {p.torch_cuda})" if p.torch_cuda else "")
    for name in ("triton", "nvidia-ml-py", "cuda-core", "cuda-bindings", "amdsmi"):
        yield name, pk.get(name) or "-"
    if p.pynvml_shadow:
        yield "pynvml", p.pynvml_shadow


def ceiling_text(c: Ceiling) -> tuple[str, str, str, str]:
    spec = si(c.spec, c.unit.replace("/s", "") + "/s") if c.spec is not None else "n/a"
    measured = si(c.measured, c.unit.replace("/s", "") + "/s") if c.measured is not None else "-"
    if c.measured is not None and c.spec:
        measured += f" ({c.measured / c.spec:.0%} of spec)"
    note = c.basis or ""
    if c.method:
        note = f"{note}; measured: {c.method}" if note else f"measured: {c.method}"
    if c.reason and (c.measured is None or (c.spec and c.measured > c.spec)):
        note = f"{note}; {c.reason}" if note else c.reason
    return f"{c.device} {c.metric}", spec, measured, note


WHOLE_WIDTH = 100_000
"""The width of a console that writes to a pipe or a file: no terminal to fit, so tables are printed whole
(Rich would fold or cut them to 80 columns)."""


def make_console(plain: bool = False, stderr: bool = False):
    """The rich Console every command prints through (on stderr with ``stderr``): styled on a terminal;
    plain text in a pipe or a file, where lines are not wrapped and tables are printed whole, however wide.
    ``COLUMNS``, when set, is the width instead; a table cell that does not fit it then wraps (or folds a
    long word) but is never cut short. A closed pipe ends the command quietly."""
    import os

    from rich.console import Console, RenderHook
    from rich.table import Table

    class _Console(Console):
        def on_broken_pipe(self) -> None:
            raise BrokenPipeError  # tracea.__main__ turns it into a quiet exit 0

    class _NoCutCells(RenderHook):
        def process_renderables(self, renderables: list) -> list:
            for r in renderables:
                for col in r.columns if isinstance(r, Table) else ():
                    col.no_wrap, col.overflow = False, "fold"  # no "…": a file keeps every character
            return renderables

    console = _Console(highlight=False, no_color=plain, emoji=False, stderr=stderr)
    if plain or not console.is_terminal:
        to_file = not console.is_terminal
        width = WHOLE_WIDTH if to_file and not os.environ.get("COLUMNS", "").strip().isdigit() else None
        console = _Console(highlight=False, no_color=True, emoji=False, soft_wrap=True, stderr=stderr, width=width)
        if to_file:
            console.push_render_hook(_NoCutCells())
    return console


def render_doctor(report: HostReport, plain: bool = False, saved_to: Path | None = None) -> None:
    """Print the doctor's report: the host, each section under its heading, the ceilings and the checks
    (styled on a terminal, plain text with ``plain`` or in a pipe)."""
    from rich.markup import escape

    console = make_console(plain)
    plain = plain or console.no_color
    origin = "" if report.origin == "live" else f" · {report.origin}"
    console.print(f"[bold]Tracea doctor[/bold] {escape(f'{report.tracea_version} · {report.created_at}{origin}')}")
    h = report.host
    console.print(escape(f"host: {h.os_name} {h.os_release} {h.machine}"
                         + (" · WSL" if h.wsl else "") + (f" · container: {h.container}" if h.container else "")))

    _heading(console, plain, "CPU")
    _rows(console, plain, cpu_lines(report))
    _gpu_sections(console, plain, report)
    _heading(console, plain, "Toolchains")
    _rows(console, plain, toolchain_lines(report))
    _heading(console, plain, "Python")
    _rows(console, plain, python_lines(report))
    _heading(console, plain, "Ceilings (spec = clock x units; measured with --measure)")
    _ceilings(console, plain, report.ceilings)
    _heading(console, plain, "Checks")
    _checks(console, plain, report)
    if saved_to is not None:
        console.print(f"\nsnapshot saved to {escape(str(saved_to))}")


def _heading(console: Any, plain: bool, text: str) -> None:
    from rich.markup import escape

    console.print(f"\n[bold]{escape(text)}[/bold]" if not plain else f"\n{text}")


def _rows(console: Any, plain: bool, lines: Iterator[tuple[str, str]], indent: int = 2) -> None:
    from rich.markup import escape

    for label, text in lines:
        console.print(f"{' ' * indent}{label:<14} {escape(text)}", soft_wrap=plain)


def _gpu_sections(console: Any, plain: bool, report: HostReport) -> None:
    """The NVIDIA, AMD and Apple sections: each device's rows, or why none was found."""
    from rich.markup import escape

    _heading(console, plain, "NVIDIA GPUs")
    nv = report.nvidia
    if nv.driver_version:
        console.print(escape(f"  driver {nv.driver_version} · CUDA {nv.cuda_driver_version} · NVML {nv.nvml_version}"))
    if not nv.devices:
        console.print(f"  none found: {escape(nv.reason or 'unknown reason')}")
    for g in nv.devices:
        console.print(f"  [bold]GPU {g.cuda_index}[/bold]" if not plain else f"  GPU {g.cuda_index}")
        _rows(console, plain, gpu_lines(g), indent=4)

    _heading(console, plain, "AMD GPUs")
    if not report.amd.devices:
        console.print(f"  none found: {escape(report.amd.reason or 'unknown reason')}")
    for a in report.amd.devices:
        _rows(console, plain, amd_lines(a), indent=4)

    _heading(console, plain, "Apple GPUs")
    if not report.apple.devices:
        console.print(f"  none found: {escape(report.apple.reason or 'unknown reason')}")
    for m in report.apple.devices:
        _rows(console, plain, apple_lines(m), indent=4)


def _ceilings(console: Any, plain: bool, ceilings: list[Ceiling]) -> None:
    """One line per ceiling in plain text; a table on a terminal."""
    from rich.markup import escape
    from rich.table import Table

    if plain:
        for c in ceilings:
            name, spec, measured, note = ceiling_text(c)
            console.print(f"  {name:<28} spec {spec:<16} measured {measured:<24} {escape(note)}")
        return
    table = Table(box=None, show_header=True, header_style="bold", pad_edge=False, padding=(0, 2, 0, 2))
    for col in ("ceiling", "spec", "measured", "basis"):
        table.add_column(col, overflow="fold")
    for c in ceilings:
        table.add_row(*(escape(x) for x in ceiling_text(c)))
    console.print(table)


def _checks(console: Any, plain: bool, report: HostReport) -> None:
    """Each check with its mark and hint, then the probes' errors and warnings."""
    from rich.markup import escape

    for c in report.checks:
        if plain:
            console.print(f"  {escape(MARK_PLAIN[c.mark])} {escape(c.message)}")
        else:
            sym, style = MARK_STYLE[c.mark]
            console.print(f"  [{style}]{sym}[/{style}] {escape(c.message)}")
        if c.hint:
            console.print(f"      hint: {escape(c.hint)}")
    for e in report.errors:
        console.print(f"  {escape(MARK_PLAIN[PROBLEM]) if plain else '[red]✗[/red]'} probe error: {escape(e)}")
    for w in report.warnings:
        console.print(f"  {escape(MARK_PLAIN[WARNING]) if plain else '[yellow]![/yellow]'} {escape(w)}")
