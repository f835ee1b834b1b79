"""What the doctor TUI shows, as plain values: the tree's nodes and each node's detail lines.

No Textual here, so the wording can be tested without an app and stays the wording of
``tracea doctor`` (``tracea.render``): the line functions are reused, never re-phrased.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

from tracea.doctor.report import PROBLEM, WARNING, HostReport

from ..render import (
    MARK_STYLE,
    amd_lines,
    apple_lines,
    ceiling_text,
    cpu_lines,
    gpu_lines,
    python_lines,
    toolchain_lines,
)

Line = tuple[str, str]

# Node keys: a section name, or "<section>:<position in its device list>".
HOST, CPU, NVIDIA, AMD, APPLE = "host", "cpu", "nvidia", "amd", "apple"
TOOLCHAINS, PYTHON, CEILINGS, CHECKS = "toolchains", "python", "ceilings", "checks"


@dataclass(frozen=True)
class NodeSpec:
    key: str
    label: str
    children: tuple[NodeSpec, ...] = field(default_factory=tuple)


def origin_name(origin: str) -> str:
    """``replay:ci_vm.json`` -> ``ci_vm.json``; the prefix is already said by the word "replay"."""
    kind, _, name = origin.partition(":")
    return name if kind in ("replay", "report") and name else origin


def _count(n: int) -> str:
    return f"({n})" if n else "(none)"


def _checks_label(report: HostReport) -> str:
    worst = report.worst_mark if report.checks else None
    problems = sum(c.mark == PROBLEM for c in report.checks) + len(report.errors)
    warnings = sum(c.mark == WARNING for c in report.checks) + len(report.warnings)
    if problems or warnings:
        parts = [f"{problems} ✗" if problems else "", f"{warnings} !" if warnings else ""]
        return f"Checks ({', '.join(p for p in parts if p)})"
    return f"Checks ({MARK_STYLE[worst][0]})" if worst else "Checks"


def tree_spec(report: HostReport) -> NodeSpec:
    """Host → CPU; NVIDIA GPUs → GPU 0..; AMD GPUs; Apple GPUs; Toolchains; Python; Ceilings; Checks."""
    h = report.host
    host = " ".join(x for x in (h.os_name, h.machine) if x) or "?"
    nv = tuple(NodeSpec(f"{NVIDIA}:{i}", f"GPU {g.cuda_index if g.cuda_index is not None else i} · {g.name or '?'}")
               for i, g in enumerate(report.nvidia.devices))
    amd = tuple(NodeSpec(f"{AMD}:{i}", f"GPU {i} · {g.name or g.gfx_target or '?'}")
                for i, g in enumerate(report.amd.devices))
    apple = tuple(NodeSpec(f"{APPLE}:{i}", f"{g.chip or 'GPU'}") for i, g in enumerate(report.apple.devices))
    found = sum(t.found for t in report.toolchains)
    return NodeSpec(HOST, f"Host · {host}", (
        NodeSpec(CPU, f"CPU · {report.cpu.model or '?'}"),
        NodeSpec(NVIDIA, f"NVIDIA GPUs {_count(len(nv))}", nv),
        NodeSpec(AMD, f"AMD GPUs {_count(len(amd))}", amd),
        NodeSpec(APPLE, f"Apple GPUs {_count(len(apple))}", apple),
        NodeSpec(TOOLCHAINS, f"Toolchains ({found}/{len(report.toolchains)})"),
        NodeSpec(PYTHON, f"Python {report.python.python_version or '?'}"),
        NodeSpec(CEILINGS, f"Ceilings ({len(report.ceilings)})"),
        NodeSpec(CHECKS, _checks_label(report)),
    ))


def all_keys(spec: NodeSpec) -> Iterator[str]:
    yield spec.key
    for child in spec.children:
        yield from all_keys(child)


def _none_found(reason: str | None) -> Line:
    return "none found", reason or "unknown reason"


def host_lines(report: HostReport) -> Iterator[Line]:
    h = report.host
    yield "tracea", f"{report.tracea_version} · {report.created_at}"
    yield "origin", report.origin
    yield "host", (f"{h.os_name} {h.os_release} {h.machine}" + (" · WSL" if h.wsl else "")
                   + (f" · container: {h.container}" if h.container else ""))
    yield "checks", f"worst mark: {report.worst_mark} · {len(report.errors)} probe errors · {len(report.warnings)} warnings"


def _device_index(key: str) -> int:
    return int(key.partition(":")[2])


def detail_lines(report: HostReport, key: str) -> list[Line]:
    """The (label, text) rows for one tree node, in ``tracea doctor``'s words."""
    section = key.partition(":")[0]
    if key == HOST:
        return list(host_lines(report))
    if key == CPU:
        return list(cpu_lines(report))
    if key == NVIDIA:
        nv = report.nvidia
        rows: list[Line] = []
        if nv.driver_version:
            rows.append(("driver", f"{nv.driver_version} · CUDA {nv.cuda_driver_version} · NVML {nv.nvml_version}"))
        if nv.cuda_visible_devices is not None:
            rows.append(("visible", f"CUDA_VISIBLE_DEVICES={nv.cuda_visible_devices}"
                                    f" ({nv.hidden_by_cuda_visible_devices} hidden)"))
        rows += [(f"GPU {g.cuda_index}", g.name or "?") for g in nv.devices] or [_none_found(nv.reason)]
        return rows
    if section == NVIDIA:
        return list(gpu_lines(report.nvidia.devices[_device_index(key)]))
    if key == AMD:
        return [(f"GPU {i}", g.name or "?") for i, g in enumerate(report.amd.devices)] or [_none_found(report.amd.reason)]
    if section == AMD:
        return list(amd_lines(report.amd.devices[_device_index(key)]))
    if key == APPLE:
        return [(f"GPU {i}", g.chip or "?") for i, g in enumerate(report.apple.devices)] or [_none_found(report.apple.reason)]
    if section == APPLE:
        return list(apple_lines(report.apple.devices[_device_index(key)]))
    if key == TOOLCHAINS:
        return list(toolchain_lines(report)) or [("none", "no toolchains probed")]
    if key == PYTHON:
        return list(python_lines(report))
    if key == CEILINGS:
        rows = []
        for c in report.ceilings:
            name, spec, measured, note = ceiling_text(c)
            rows.append((name, f"spec {spec} · measured {measured}" + (f" · {note}" if note else "")))
        return rows or [("none", "no ceilings computed")]
    if key == CHECKS:
        rows = [(c.mark, c.message + (f" (hint: {c.hint})" if c.hint else "")) for c in report.checks]
        rows += [(PROBLEM, f"probe error: {e}") for e in report.errors]
        rows += [(WARNING, w) for w in report.warnings]
        return rows or [("none", "no checks ran")]
    raise KeyError(key)


def node_title(spec: NodeSpec, key: str) -> str:
    """The tree label of ``key`` (the details panel's heading)."""
    if spec.key == key:
        return spec.label
    for child in spec.children:
        found = node_title(child, key)
        if found:
            return found
    return ""
