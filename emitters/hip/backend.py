"""The HIP backend (emitters/backend.py ``Backend``): HIP C++ compiled by hipcc for AMD Instinct GPUs (gfx90a,
gfx942), loaded and launched through the HIP runtime (ctypes), timed with HIP events, against PyTorch for
ROCm (rocBLAS/hipBLASLt, MIOpen) in the same run. Everything short of running on AMD silicon works on any
Linux machine with hipcc: ``tracea emit --backend hip --arch gfx90a`` writes the source, the code object,
its disassembly and its resources. Nothing here has run on an AMD GPU (docs/hip.md)."""

from __future__ import annotations

import functools
import os
from pathlib import Path
from typing import Any

from tracea.doctor.errors import BadInputError, UnsupportedError
from tracea.doctor.variants import Variant

from ..backend import Builder, Rendering
from .build import (  # bank_conflict_drop: the optional hook the tuner looks up
    amd_gpus,
    bank_conflict_drop,
    emit,
    hero_schedule,
    resolve,
    schedule_from_json,
    search_space,
    target_for,
    validate_schedule,
)
from .render import HipRenderer
from .variants import CDNA, VARIANTS

NAME = "hip"
ON_DEVICE = True
DEVICE = "hip:0"
LANGUAGE = "hip"
SOURCE_SUFFIX = HipRenderer.file_suffix  # ".hip"
COMPILES_BUNDLED_FLAGS = False  # hipcc always runs with Tracea's options for the GPU's target
MEMBER_RESOURCES = {"num_gpus": 1, "num_cpus": 1}
NO_GPU_HINT = ("on an AMD Instinct machine with ROCm; elsewhere `tracea emit ... --backend hip --arch gfx90a` "
               "builds the code object")

__all__ = ["NAME", "VARIANTS", "ON_DEVICE", "DEVICE", "LANGUAGE", "SOURCE_SUFFIX", "COMPILES_BUNDLED_FLAGS", "resolve", "present",
           "runs_kernels", "device_name", "target_host", "compute_metric", "copy_bandwidth", "layout_cost", "environment", "schedule_from_json",
           "hero_schedule", "search_space", "validate_schedule", "build", "emit", "rendering", "export",
           "build_from_source", "load_binary", "compile_command", "baseline_for", "bench_on_device", "vendor_on_device", "suites",
           "MEMBER_RESOURCES", "worker_mismatch", "pool_filter", "default_workers", "tuning_members",
           "bank_conflict_drop"]


def present(host: Any) -> bool:
    return bool(amd_gpus(host))


@functools.lru_cache(maxsize=1)
def _runtime_problem() -> str | None:
    from .runtime import HipRuntime

    try:
        HipRuntime()
    except UnsupportedError as exc:
        return exc.message
    return None


def runs_kernels(host: Any) -> str | None:
    if not present(host):
        return f"no AMD GPU ({getattr(host.amd, 'reason', None) or 'none found'})"
    return _runtime_problem()


def device_name(host: Any) -> str | None:
    gpus = amd_gpus(host)
    return f"GPU 0 ({gpus[0].name or 'AMD GPU'}, {gpus[0].gfx_target})" if gpus else None


def target_host(host: Any, arch: str) -> Any:
    """``host`` with its AMD section replaced by one GPU of target ``arch`` (gfx908, gfx90a, gfx940-gfx942)."""
    import dataclasses

    from tracea.doctor.report import AmdGpu, AmdSection

    name = str(arch).strip().lower()
    if name not in CDNA:
        raise BadInputError(f"--arch {arch}: not an AMD Instinct (CDNA) target; use one of {', '.join(CDNA)}")
    gpu = AmdGpu(node=None, name=f"target {name}", gfx_target=name, wavefront_size=64,
                 lds_bytes_per_workgroup=64 * 1024, sources={"gfx_target": f"--arch {name}"})
    return dataclasses.replace(host, amd=AmdSection(devices=[gpu], sources={"devices": f"--arch {name} (not a probed GPU)"}))


def worker_mismatch(head: dict[str, Any], worker: dict[str, Any]) -> str | None:
    """The worker's GPU must be among the head's, the rest equal (emitters/gpu.py, as CUDA's)."""
    from ..gpu import worker_mismatch as gpu_rule

    return gpu_rule(head, worker)


def pool_filter(host: Any, n: int) -> Any:
    return None  # a worker owns a whole GPU


def default_workers(host: Any) -> int:
    """Every GPU this process may use, a worker each: the KFD report lists all of the machine's, so a
    ``HIP_VISIBLE_DEVICES`` the caller set narrows them."""
    visible = os.environ.get("HIP_VISIBLE_DEVICES")
    n = len(amd_gpus(host))
    return max(1, min(n, len([d for d in visible.split(",") if d.strip()])) if visible else n)


def tuning_members(host: Any, n: int) -> list[dict[str, str]]:
    """A GPU a worker, named by ``HIP_VISIBLE_DEVICES`` (the i-th of the caller's own, where it set them)."""
    from ..gpu import gpu_members

    return gpu_members("HIP_VISIBLE_DEVICES", n, len(amd_gpus(host)), "HIP")


def layout_cost(op: Any, variant: Any) -> str | None:
    return None  # HIP serves gemm and softmax: no layout to convert


def compute_metric(dtype: str) -> str | None:
    return None  # the doctor has no AMD ceilings yet


def copy_bandwidth(host: Any) -> dict[str, Any] | None:
    return None  # no AMD GPU has run here: nothing measures its copy


def environment(host: Any) -> dict[str, Any]:
    hipcc = host.tool("hipcc")
    gpus = amd_gpus(host)
    return {"gpus": [(g.name, g.gfx_target, g.compute_units) for g in gpus],
            "driver": gpus[0].driver_version if gpus else None, "hipcc": hipcc.version if hipcc and hipcc.found else None}


def rendering(op: Any, variant: Variant, schedule: Any, host: Any, arch: str | None = None) -> Rendering:
    from . import compiler as hc
    from .build import launch

    target, _ = target_for(host, arch if not present(host) else None)
    ln = launch(op, schedule, "amd")
    return Rendering(ln.name, ln.source, [*hc.FLAGS, f"--offload-arch={target}"], f"hipcc for {target}")


def build(op: Any, variant: Variant | str, schedule: Any, host: Any) -> Any:
    """The kernel on this host's AMD GPU (``run_amd.HipKernel``); ``UnsupportedError`` where there is none."""
    problem = runs_kernels(host)
    if problem:
        raise UnsupportedError(f"HIP kernels cannot run here: {problem}", NO_GPU_HINT)
    from .run_amd import HipKernel

    validate_schedule(op, resolve(variant), schedule, host)
    return HipKernel(op, schedule, target_for(host, None)[0])


def export(op: Any, variant: Variant | str, schedule: Any, host: Any, out_dir: str | Path, arch: str | None = None,
           force: bool = False, schedule_source: str = "given", prefix: str | None = None) -> list[Path]:
    raise UnsupportedError("tracea export has no HIP package yet", "tracea emit --backend hip writes the kernel and its code object")


def build_from_source(source: str, name: str | None, flags: list[str] | None, recorded: dict[str, Any]) -> Builder:
    raise UnsupportedError("replaying a bundle's HIP source is not supported yet", "replay without --bundled-source")


def load_binary(path: Path, arch: str | None, name: str | None, recorded: dict[str, Any], source: str = "") -> Builder:
    raise UnsupportedError("replaying a bundle's HIP code object is not supported yet", "replay without --binary")


def compile_command(compiler: str, flags: list[str], source: str, binary: str) -> list[str] | None:
    return [compiler, "--genco", *flags, source, "-o", binary]


def baseline_for(op: Any, inputs: dict[str, Any]) -> Any:
    raise UnsupportedError("HIP kernels are timed on the device beside PyTorch for ROCm (bench_on_device)")


def bench_on_device(kernel: Any, op: Any, inputs: dict[str, Any], ref: Any, tol: float, warmup: int,
                    repeats: int) -> dict[str, Any]:
    """Verify, then time with HIP events beside PyTorch for ROCm: its ``torch.cuda`` API is HIP's, so the
    GPU baseline of the CUDA backend measures rocBLAS/hipBLASLt and MIOpen here."""
    from ..device_baselines import bench_on_device as on_device

    return on_device(kernel, op, inputs, ref, tol, warmup, repeats)


def vendor_on_device(op: Any, inputs: dict[str, Any], ref: Any, warmup: int, repeats: int,
                     kernel: Any = None) -> dict[str, Any]:
    from ..device_baselines import vendor_on_device as on_device

    return on_device(op, inputs, ref, warmup, repeats, kernel)


def suites(quick: bool = False) -> dict[str, list[Any]]:
    from ..gpu import gpu_suites

    return gpu_suites(quick, VARIANTS)
