"""The CPU backend (emitters/backend.py ``Backend``): C with SIMD intrinsics, compiled by the host compiler,
called through ctypes. Thin: each member delegates to the CPU emitter's public functions."""

from __future__ import annotations

import dataclasses
import platform
from pathlib import Path
from typing import Any

from tracea.doctor.errors import LaunchError, TraceaError, UnsupportedError
from tracea.doctor.variants import Variant

from ..backend import Builder, Rendering
from .build import build, hero_schedule
from .build import emit as _emit
from .export import export
from .isa import CpuIsa
from .schedule import CpuSchedule
from .space import search_space
from .suite import suites
from .variants import VARIANTS, resolve

NAME = "cpu"
ON_DEVICE = False
DEVICE = "cpu"
LANGUAGE = "c"
SOURCE_SUFFIX = CpuIsa.file_suffix  # ".c"
COMPILES_BUNDLED_FLAGS = True  # a bundle's gcc/clang flags: replay screens them first
LOAD_TIMEOUT_S = 60.0  # a bundled binary loaded in a child first (--binary): how long its loading may take

__all__ = ["NAME", "VARIANTS", "ON_DEVICE", "DEVICE", "LANGUAGE", "SOURCE_SUFFIX", "COMPILES_BUNDLED_FLAGS", "resolve", "present", "runs_kernels", "device_name", "target_host",
           "compute_metric", "copy_bandwidth", "layout_cost", "environment",
           "schedule_from_json", "hero_schedule", "search_space", "validate_schedule", "build", "emit", "rendering", "export",
           "build_from_source", "load_binary", "compile_command", "baseline_for", "bench_on_device", "vendor_on_device",
           "suites", "MEMBER_RESOURCES", "worker_mismatch", "pool_filter", "default_workers", "tuning_members"]


def present(host: Any) -> bool:
    return True  # every host has its CPU


def runs_kernels(host: Any) -> str | None:
    return None  # the process runs on the CPU; a missing compiler is the variants' own requirement


def device_name(host: Any) -> str | None:
    return getattr(getattr(host, "cpu", None), "model", None)


def target_host(host: Any, arch: str) -> Any:
    from tracea.doctor.errors import BadInputError

    raise BadInputError(f"--arch {arch}: the CPU backend builds for this machine's ISA only",
                        "leave out --arch, or name a GPU backend: --backend cuda (sm_80, sm_90a) or hip (gfx90a, gfx942)")


MEMBER_RESOURCES = {"num_cpus": 1}


def worker_mismatch(head: dict[str, Any], worker: dict[str, Any]) -> str | None:
    """Any difference: the compiler, the core count, the CPU model all change a CPU kernel's time."""
    for k in sorted(set(head) | set(worker)):
        if head.get(k) != worker.get(k):
            return f"{k} is {worker.get(k)!r} there, {head.get(k)!r} here"
    return None


def pool_filter(host: Any, n: int) -> Any:
    """Candidates whose threads fit the smallest core set of ``n`` workers (tuning_members)."""
    from tracea.doctor.cores import cpu_sets

    cores = min(len(s) for s in cpu_sets(n))
    return lambda s: getattr(s, "threads", 1) <= cores


def default_workers(host: Any) -> int:
    """One: a CPU candidate's own threads use the cores (--workers N splits them, see tuning_members)."""
    return 1


def tuning_members(host: Any, n: int) -> list[dict[str, str]]:
    """``n`` disjoint sets of this process's cores, one a worker (tuner/worker.py pins itself to it)."""
    from tracea.doctor.cores import cpu_sets

    return [{"TRACEA_WORKER_CPUS": ",".join(map(str, s))} for s in cpu_sets(n)]

def layout_cost(op: Any, variant: Any) -> str | None:
    return None  # the CPU convs read NCHW and NHWC alike


def compute_metric(dtype: str) -> str | None:
    return "fp32_flops" if dtype == "fp32" else None  # bf16 dot products beat fp32 FMAs: no ceiling bounds them


def copy_bandwidth(host: Any) -> dict[str, Any] | None:
    """A stream triad over every logical core (doctor/measure.py, as ``tracea doctor --measure`` runs it; its FMA
    loop cut short): 3 x 128 MiB fp32 arrays, best of 5."""
    from tracea.doctor.measure import measure_cpu_info

    try:
        return measure_cpu_info(host.cpu, fma_iters=1000)["memory_bandwidth"]
    except Exception as exc:  # noqa: BLE001 - a timeout, an unwritable temp folder: the figure is missing, with why
        return {"error": f"{type(exc).__name__}: {exc}"}


def environment(host: Any) -> dict[str, Any]:
    cc = next((t for t in host.toolchains if t.name in ("cc", "gcc", "clang") and t.found), None)
    return {"compiler": f"{cc.name} {cc.version} {cc.details.get('realpath')}" if cc else None,
            "threads": host.cpu.logical_cores}


def schedule_from_json(d: dict[str, Any]) -> Any:
    if isinstance(d, dict) and "bq" in d:  # the attention core's tiling (attention.py)
        from .attention import AttentionSchedule

        return AttentionSchedule.from_json(d)
    if isinstance(d, dict) and "pack" in d:  # the scaled 8-bit GEMM's (scaled_gemm.py)
        from .scaled_gemm import ScaledGemmSchedule

        return ScaledGemmSchedule.from_json(d)
    return CpuSchedule.from_json(d)


def validate_schedule(op: Any, variant: Variant | str, schedule: Any, host: Any) -> None:
    schedule.validate(op, host, variant)


def emit(op: Any, variant: Variant | str, schedule: Any, host: Any, out_dir: str | Path,
         arch: str | None = None) -> list[Path]:
    if arch is not None:
        raise UnsupportedError(f"the CPU backend builds for this machine only, not {arch}")
    return _emit(op, variant, schedule, host, out_dir)


def rendering(op: Any, variant: Variant, schedule: Any, host: Any, arch: str | None = None) -> Rendering:
    from .. import host_compiler as cc
    from .render import render

    schedule.validate(op, host, variant)
    r = render(op, variant.family, schedule)
    try:
        comp = cc.find_compiler(host)
        compiler = f"{comp.path} ({comp.version})"
    except TraceaError as exc:
        compiler = f"no C compiler here ({exc.message})"
    return Rendering(r.name, r.source, [*cc.BASE_FLAGS, *r.flags], compiler)


def _bundled(source: str, name: str | None, flags: list[str] | None, recorded: dict[str, Any],
             binary: Path | None) -> Builder:
    """Compile ``source`` with ``flags`` (None: Tracea's), or load ``binary``; the call interface comes
    from this Tracea's rendering of the op and schedule."""
    def build(op: Any, variant: Any, schedule: Any, host: Any) -> Any:
        from .. import host_compiler as cc
        from ..artifact import Artifact
        from .cores import core_for
        from .render import render
        from .runtime import CpuKernel

        schedule.validate(op, host, variant)
        rendered = render(op, variant.family, schedule)  # the runtime's call interface for this op
        kname = name or rendered.name
        if binary is not None:
            _load_in_a_child(binary, rendered.entry)
            path, hit, seconds = binary, True, 0.0
            comp = cc.Compiler(recorded.get("compiler") or "?", recorded.get("compiler_version") or "?")
            used = list(recorded.get("flags") or [])
        else:
            comp = cc.find_compiler(host)
            used = list(flags if flags is not None else [*cc.BASE_FLAGS, *rendered.flags])
            path, hit, seconds = cc.compile_cached(source, kname, used, comp)
        artifact = Artifact(name=kname, op=op.to_json(), variant=variant.id, schedule=schedule.to_json(),
                            source=source, language="c", entry=rendered.entry, compiler=comp.path,
                            compiler_version=comp.version, flags=tuple(used), binary=str(path), cache_hit=hit,
                            compile_seconds=seconds, metadata=rendered.metadata)
        wrap = core_for(op.kind).kernel
        kernel = CpuKernel(op, artifact, dataclasses.replace(rendered, source=source))
        return wrap(kernel) if wrap else kernel

    return build


def _load_in_a_child(binary: Path, entry: str) -> None:
    """Load a bundled binary in a forked child before this process loads it: code that runs when it is
    loaded (a constructor) and crashes, hangs or ends the process ends the child, and is reported as what
    it did (LaunchError), instead of ending Tracea with a signal or a false success."""
    import ctypes

    from ..bench import run_isolated

    def load() -> float:
        getattr(ctypes.CDLL(str(binary)), entry)
        return 0.0

    status, _, text = run_isolated(load, LOAD_TIMEOUT_S, what=f"the bundled binary {binary.name}, while being loaded,")
    if status != "ok":
        raise LaunchError(text or f"the bundled binary {binary.name} could not be loaded",
                          "replay without --binary builds Tracea's own rendering")


def _language(recorded: dict[str, Any]) -> None:
    if recorded.get("language") not in (None, LANGUAGE):
        raise UnsupportedError(f"replay of {NAME} kernels in {recorded.get('language')} is not supported by this "
                               "Tracea (the CPU backend compiles C)",
                               "replay without --binary or --bundled-source builds Tracea's own rendering")


def build_from_source(source: str, name: str | None, flags: list[str] | None, recorded: dict[str, Any]) -> Builder:
    _language(recorded)
    return _bundled(source, name, flags, recorded, None)


def load_binary(path: Path, arch: str | None, name: str | None, recorded: dict[str, Any],
                source: str = "") -> Builder:
    _language(recorded)
    if arch != platform.machine():
        raise UnsupportedError(f"the bundled binary was built for {arch}, this machine is {platform.machine()}",
                               "replay without --binary builds Tracea's own rendering")
    return _bundled(source, name, None, recorded, path)


def compile_command(compiler: str, flags: list[str], source: str, binary: str) -> list[str] | None:
    from ..host_compiler import LINK_FLAGS

    return [compiler, *flags, source, "-o", binary, *LINK_FLAGS]


def baseline_for(op: Any, inputs: dict[str, Any]) -> Any:
    from ..baselines import baseline_for as host_baseline

    return host_baseline(op, inputs)


def bench_on_device(kernel: Any, op: Any, inputs: dict[str, Any], ref: Any, tol: float, warmup: int,
                    repeats: int) -> dict[str, Any]:
    raise UnsupportedError("the CPU backend runs on the host: its kernels are verified in a forked child")


def vendor_on_device(op: Any, inputs: dict[str, Any], ref: Any, warmup: int, repeats: int,
                     kernel: Any = None) -> dict[str, Any]:
    raise UnsupportedError("the CPU backend runs on the host: its baseline is the host library (baseline_for)")
