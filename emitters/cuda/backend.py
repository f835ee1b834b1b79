"""The CUDA backend (emitters/backend.py ``Backend``): CUDA C++ compiled by NVRTC, loaded and launched through
cuda-core, timed with CUDA events. Thin: each member delegates to emitters/cuda/build.py's public functions
or to the core registry (cores.py), which also launches a kernel rebuilt from a bundle."""

from __future__ import annotations

import dataclasses
import importlib
from pathlib import Path
from typing import Any

from tracea.doctor.errors import UnsupportedError
from tracea.doctor.variants import Variant

from ..backend import Builder, Rendering
from . import bank_conflict_drop  # the optional hooks the tuner looks up: bank_conflict_drop, tuning_features
from .build import build, hero_schedule, schedule_from_json, search_space, tuning_features, validate_schedule
from .export import export
from .render import CudaRenderer
from .suite import suites
from .variants import VARIANTS, resolve

NAME = "cuda"
ON_DEVICE = True
DEVICE = "cuda:0"
LANGUAGE = "cuda"
SOURCE_SUFFIX = CudaRenderer.file_suffix  # ".cu"
COMPILES_BUNDLED_FLAGS = False  # NVRTC always runs with Tracea's options for this GPU

# the ceiling (doctor/ceilings.py) a CUDA kernel of each dtype is bounded by: tensor cores for 16-bit types
COMPUTE_METRIC = {"fp32": "fp32_flops", "fp16": "fp16_tensor_flops", "bf16": "bf16_tensor_flops",
                  "tf32": "tf32_tensor_flops", "fp64": "fp64_flops", "int8": "int8_tensor_flops"}

__all__ = ["NAME", "VARIANTS", "ON_DEVICE", "DEVICE", "LANGUAGE", "SOURCE_SUFFIX", "COMPILES_BUNDLED_FLAGS", "resolve", "present", "runs_kernels", "device_name", "target_host", "compute_metric", "copy_bandwidth", "layout_cost", "environment",
           "schedule_from_json", "hero_schedule", "search_space", "validate_schedule", "build", "emit", "rendering", "export",
           "build_from_source", "load_binary", "compile_command", "baseline_for", "bench_on_device", "vendor_on_device",
           "suites", "MEMBER_RESOURCES", "worker_mismatch", "pool_filter", "default_workers", "tuning_members", "tuning_features", "bank_conflict_drop"]


def _build_module() -> Any:
    return importlib.import_module("tracea.emitters.cuda.build")  # the package's `build` is a function


def present(host: Any) -> bool:
    return bool(getattr(getattr(host, "nvidia", None), "devices", None))


def runs_kernels(host: Any) -> str | None:
    return None if present(host) else f"no NVIDIA GPU ({getattr(host.nvidia, 'reason', None) or 'none found'})"


def device_name(host: Any) -> str | None:
    gpus = getattr(getattr(host, "nvidia", None), "devices", None) or []
    return f"GPU 0 ({gpus[0].name})" if gpus else None


def target_host(host: Any, arch: str) -> Any:
    from .arch import target_host as nvidia_target

    return nvidia_target(host, arch)


MEMBER_RESOURCES = {"num_gpus": 1, "num_cpus": 1}


def worker_mismatch(head: dict[str, Any], worker: dict[str, Any]) -> str | None:
    """The worker's GPUs (the one it was given) must be among the head's, the rest equal."""
    from ..gpu import worker_mismatch as gpu_rule

    return gpu_rule(head, worker)


def pool_filter(host: Any, n: int) -> Any:
    return None  # a worker owns a whole GPU


def default_workers(host: Any) -> int:
    """Every GPU this process sees, a worker each (at least one)."""
    return max(1, len(getattr(getattr(host, "nvidia", None), "devices", None) or []))


def tuning_members(host: Any, n: int) -> list[dict[str, str]]:
    """A GPU a worker: ``CUDA_VISIBLE_DEVICES`` naming the i-th device this process sees (where the caller's
    own ``CUDA_VISIBLE_DEVICES`` already picked devices, the i-th of those)."""
    from ..gpu import gpu_members

    return gpu_members("CUDA_VISIBLE_DEVICES", n, len(getattr(getattr(host, "nvidia", None), "devices", None) or []),
                       "CUDA")


def layout_cost(op: Any, variant: Any) -> str | None:
    """The Hopper conv reads NHWC: an NCHW conv on it is transposed inside every call."""
    if resolve(variant).id == "cuda-wgmma.conv2d" and getattr(op, "layout", None) == "nchw":
        return ("the Hopper kernels read NHWC, so x and the filter are transposed before each call and the result "
                "after it (three extra passes over memory)")
    return None


def compute_metric(dtype: str) -> str | None:
    return COMPUTE_METRIC.get(dtype)


def copy_bandwidth(host: Any) -> dict[str, Any] | None:
    """A 1 GiB device-to-device copy on device 0 (the one the kernels run on: the runtime's current device),
    bytes read + written, CUDA events, median of 20 (doctor/measure.py, as ``tracea doctor --measure`` runs it)."""
    from tracea.doctor.measure import measure_gpu_copy

    return measure_gpu_copy(0)


def environment(host: Any) -> dict[str, Any]:
    nvrtc = host.tool("nvrtc")
    return {"gpus": [(g.name, g.compute_capability, g.sm_count) for g in host.nvidia.devices],
            "driver": host.nvidia.driver_version, "nvrtc": nvrtc.version if nvrtc and nvrtc.found else None}


def emit(op: Any, variant: Variant | str, schedule: Any, host: Any, out_dir: str | Path,
         arch: str | None = None) -> list[Path]:
    return _build_module().emit(op, variant, schedule, host, out_dir, arch=arch)


def rendering(op: Any, variant: Variant, schedule: Any, host: Any, arch: str | None = None) -> Rendering:
    from .. import nvrtc as nv
    from .arch import target_of

    if present(host):
        arch = None  # this host's GPU, not the recorded target
    elif arch is None:
        raise UnsupportedError("no GPU here and no recorded target to render for")
    target = target_of(host, arch)
    r, _ = _build_module().render(op, schedule, target)
    flags = [f"{key}={val}" for key, val in sorted(nv.options_for(target.name).items())]
    return Rendering(r.name, r.source, flags, f"NVRTC for {target.name}")


def _language(recorded: dict[str, Any]) -> None:
    if recorded.get("language") not in (None, LANGUAGE):
        raise UnsupportedError(f"replay of {NAME} kernels in {recorded.get('language')} is not supported by this "
                               "Tracea (the CUDA backend compiles CUDA C++)",
                               "replay without --binary or --bundled-source builds Tracea's own rendering")


def _bundled(source: str, name: str | None, recorded: dict[str, Any], binary: Path | None,
             arch: str | None) -> Builder:
    """NVRTC compiles ``source`` for this host's GPU with Tracea's options (``compile_cached``), or the
    ``binary`` loads when it was built for this GPU's architecture; the launch shape comes from the CUDA
    renderer."""
    def build_bundled(op: Any, variant: Any, schedule: Any, host: Any) -> Any:
        from .. import nvrtc as nv
        from ..artifact import Artifact
        from .arch import target_of

        target = target_of(host)  # this host's GPU (UnsupportedError without one)
        if binary is not None and arch != target.name:
            raise UnsupportedError(f"the bundled cubin was built for {arch}, this GPU is {target.name}",
                                   "replay without --binary builds Tracea's own rendering for this GPU")
        rendered, scalars = _build_module().render(op, schedule, target)  # grid, block, smem, entry for this op
        kname = name or rendered.name
        meta = dict(rendered.metadata)
        if binary is not None:
            cubin, hit, seconds, log = binary, True, 0.0, None
        else:
            cubin, res, log, hit, seconds = nv.compile_cached(source, kname, rendered.entry, target.name)
            meta["resources"] = res.to_json()
        meta |= {"arch": target.name, "compile_log": log}
        artifact = Artifact(name=kname, op=op.to_json(), variant=variant.id, schedule=schedule.to_json(),
                            source=source, language="cuda", entry=rendered.entry,
                            compiler="NVRTC (cuda.core.Program)", compiler_version=recorded.get("compiler_version") or "?",
                            flags=tuple(recorded.get("flags") or ()), binary=str(cubin), cache_hit=hit,
                            compile_seconds=seconds, metadata=meta)
        from .cores import for_schedule  # the core's own host side (the Hopper kernels build TMA maps)

        return for_schedule(op, schedule).kernel(op, artifact, dataclasses.replace(rendered, source=source), scalars)

    return build_bundled


def build_from_source(source: str, name: str | None, flags: list[str] | None, recorded: dict[str, Any]) -> Builder:
    _language(recorded)
    return _bundled(source, name, recorded, None, None)


def load_binary(path: Path, arch: str | None, name: str | None, recorded: dict[str, Any],
                source: str = "") -> Builder:
    _language(recorded)
    return _bundled(source, name, recorded, path, arch)


def compile_command(compiler: str, flags: list[str], source: str, binary: str) -> list[str] | None:
    return None  # NVRTC compiles in-process; 04_compile.json records its options


def baseline_for(op: Any, inputs: dict[str, Any]) -> Any:
    from ..baselines import baseline_for as host_baseline

    return host_baseline(op, inputs)


def bench_on_device(kernel: Any, op: Any, inputs: dict[str, Any], ref: Any, tol: float, warmup: int,
                    repeats: int) -> dict[str, Any]:
    from ..device_baselines import bench_on_device as on_device

    return on_device(kernel, op, inputs, ref, tol, warmup, repeats)


def vendor_on_device(op: Any, inputs: dict[str, Any], ref: Any, warmup: int, repeats: int,
                     kernel: Any = None) -> dict[str, Any]:
    from ..device_baselines import vendor_on_device as on_device

    return on_device(op, inputs, ref, warmup, repeats, kernel)
