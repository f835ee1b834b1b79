"""build / emit / hero_schedule: from (op, variant, schedule, host) to a loaded kernel or files on disk."""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

from tracea.doctor.errors import BadInputError, UnsupportedError
from tracea.doctor.files import write_atomic
from tracea.doctor.variants import Variant

from .. import host_compiler as cc
from ..core import refuse_serving
from .cores import core_for
from .isa import CpuIsa
from .render import Rendered, render
from .schedule import CpuSchedule
from .variants import resolve


def _check(op: Any, variant: Variant, schedule: CpuSchedule, host: Any) -> None:
    if getattr(op, "kind", None) != variant.op:
        raise BadInputError(f"variant: {variant.id} computes {variant.op}, not {getattr(op, 'kind', op)!r}")
    core = core_for(op.kind)
    if not isinstance(schedule, core.schedule):
        raise BadInputError(f"schedule: expected a {core.schedule.__name__}, got {type(schedule).__name__}")
    refuse_serving(core, op, "CPU")
    core.check(op, variant, schedule, host)


def hero_schedule(op: Any, variant: Variant | str, host: Any) -> CpuSchedule:
    """A good default for ``op`` on this host: its core's heuristic (``schedules.hero_schedule``)."""
    return core_for(op.kind).hero(op, resolve(variant), host)


def _render_checked(op: Any, variant: Any, schedule: CpuSchedule, host: Any) -> tuple[Variant, Rendered]:
    v = resolve(variant)
    _check(op, v, schedule, host)
    return v, render(op, v.family, schedule)


def build(op: Any, variant: Variant | str, schedule: CpuSchedule, host: Any):
    """Render, compile (cached by content hash) and load the kernel; raises a TraceaError, never a raw one."""
    from ..artifact import Artifact
    from .runtime import CpuKernel

    v = resolve(variant)
    compiler = cc.find_compiler(host)  # no compiler is its own error, before the requirement list says so
    precision = op.dtype.value if hasattr(op, "dtype") else "fp32"
    unmet = v.unmet(host, precision)
    if unmet:
        raise UnsupportedError(f"{v.id} cannot run {op.kind} {precision} here: {'; '.join(unmet)}",
                               "`tracea plan` lists the variants this host can run")
    v, r = _render_checked(op, v, schedule, host)
    flags = [*cc.BASE_FLAGS, *r.flags]
    binary, hit, seconds = cc.compile_cached(r.source, r.name, flags, compiler)
    artifact = Artifact(
        name=r.name, op=op.to_json(), variant=v.id, schedule=schedule.to_json(), source=r.source, language="c",
        entry=r.entry, compiler=compiler.path, compiler_version=compiler.version, flags=tuple(flags),
        binary=str(binary), cache_hit=hit, compile_seconds=seconds, metadata=r.metadata)
    wrap = core_for(op.kind).kernel
    kernel = CpuKernel(op, artifact, r)
    return wrap(kernel) if wrap else kernel


def emit(op: Any, variant: Variant | str, schedule: CpuSchedule, host: Any, out_dir: str | Path) -> list[Path]:
    """Write <name>.c, schedule.json, metadata.yaml and compile.sh (the command build() would run) into
    ``out_dir``. Needs no compiler: a kernel for another machine renders anywhere."""
    import yaml

    v, r = _render_checked(op, variant, schedule, host)
    out = Path(out_dir)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise BadInputError(f"out: cannot create {out} ({exc.strerror})") from None
    try:
        compiler: cc.Compiler | None = cc.find_compiler(host)
    except Exception:  # noqa: BLE001 - emitting needs no compiler; the command names a generic one
        compiler = None
    flags = [*cc.BASE_FLAGS, *r.flags]
    src = out / f"{r.name}{CpuIsa.file_suffix}"
    cmd = cc.command(compiler or cc.Compiler("cc", "unknown"), flags, src.name, f"{r.name}.so")
    meta = {"variant": v.id, "op": op.to_json(), **r.metadata, "entry": r.entry, "buffers": list(r.buffers)}
    files = {
        src: r.source,
        out / "schedule.json": json.dumps(schedule.to_json(), indent=2) + "\n",
        out / "metadata.yaml": yaml.safe_dump(meta, sort_keys=False),
        out / "compile.sh": "#!/bin/sh\n# rebuilds the kernel as `tracea` does (binary cached by content hash)\n"
                            f"cd \"$(dirname \"$0\")\" && {shlex.join(cmd)}\n",
    }
    try:
        for path, text in files.items():
            write_atomic(path, text)
        (out / "compile.sh").chmod(0o755)
    except OSError as exc:
        raise BadInputError(f"out: cannot write into {out} ({exc.strerror})") from None
    return list(files)
