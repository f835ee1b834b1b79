"""build / emit / hero_schedule: from (op, variant, schedule, host) to a loaded kernel or files on disk."""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

from tracea.doctor.errors import BadInputError, UnsupportedError
from tracea.doctor.variants import Variant

from ..schedule import FAMILY_REGISTERS, CpuSchedule
from . import compiler as cc
from .render import Rendered, render
from .variants import resolve


def _check(op: Any, variant: Variant, schedule: CpuSchedule, host: Any) -> None:
    if getattr(op, "kind", None) != variant.op:
        raise BadInputError(f"variant: {variant.id} computes {variant.op}, not {getattr(op, 'kind', op)!r}")
    if not isinstance(schedule, CpuSchedule):
        raise BadInputError(f"schedule: expected a CpuSchedule, got {type(schedule).__name__}")
    schedule.validate(op, host, variant)


# The A block's ceiling per family, below half of L2. AVX2 6x16: on a 2 MiB-L2 core an A block of half of L2
# (mc 252) ran at 0.81x NumPy (AVX2 OpenBLAS) at 2048, mc 60 at 0.93x (1024: 0.93x, 4096: 0.95x; CI machine,
# 2026-11-23, bench_cpu_gemm_probe.py); the AVX-512 8x48 kernel is the same at mc 64 and 256. Where L2 is
# 512 KiB (Zen 3) the ceiling changes nothing.
A_BLOCK_MAX = {"cpu-avx2-fma": 256 << 10}


def hero_schedule(op: Any, variant: Variant | str, host: Any) -> CpuSchedule:
    """A good default for this host: the micro-kernel shape of the family, blocks from the cache sizes
    (B micro-panel in half of L1 .. L2, A block in half of L2, B panel in a share of L3), all cores."""
    v = resolve(variant)
    lanes, _ = FAMILY_REGISTERS[v.family]
    cpu = host.cpu
    cores = max(1, cpu.logical_cores or 1)
    del lanes
    l2 = cpu.l2_bytes_per_core or 1 << 20
    l3 = cpu.l3_bytes_total or 8 << 20
    # measured here (2-core Zen 4): 8x48, 6x64 and 14x32 within 3 %, 8x48 ahead at 1024..4096
    mr, nr = {"cpu-avx512": (8, 48), "cpu-avx2-fma": (6, 16), "cpu-neon": (8, 12), "cpu-portable": (4, 4)}[v.family]
    # KC: an A and a B micro-panel in a quarter of L2 (measured here: long K blocks win, the micro-panels
    # stream from L2 well and C is read and written fewer times), at most 1024
    kc = max(64, min(1024, (l2 // 4) // ((mr + nr) * 4)) // 64 * 64)
    mc = max(mr, min(l2 // 2, A_BLOCK_MAX.get(v.family, l2)) // (kc * 4) // mr * mr)  # A block: half of L2
    nc = max(nr, min(8192, (l3 // 2) // (kc * 4)) // nr * nr)  # B panel: half of L3
    # AVX-512 8x48 keeps 24 accumulators + 3 B vectors + the A broadcast in registers: unrolled by 2 it
    # compiles without a spill (by 4, gcc spills one zmm), at the same speed (CI machine, 2026-11-23)
    unroll = 2 if v.family == "cpu-avx512" else 4
    sched = CpuSchedule(mr=mr, nr=nr, mc=mc, kc=kc, nc=nc, threads=cores, unroll=unroll, prefetch=0)
    return sched


def _render_checked(op: Any, variant: Any, schedule: CpuSchedule, host: Any) -> tuple[Variant, Rendered]:
    v = resolve(variant)
    _check(op, v, schedule, host)
    return v, render(op, v.family, schedule)


def build(op: Any, variant: Variant | str, schedule: CpuSchedule, host: Any):
    """Render, compile (cached by content hash) and load the kernel; raises a TraceaError, never a raw one."""
    from .runtime import Artifact, CpuKernel

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
    return CpuKernel(op, artifact, r)


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
    src = out / f"{r.name}.c"
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
            cc.write_atomic(path, text)
        (out / "compile.sh").chmod(0o755)
    except OSError as exc:
        raise BadInputError(f"out: cannot write into {out} ({exc.strerror})") from None
    return list(files)
