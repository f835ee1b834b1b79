"""The Metal backend (emitters/backend.py ``Backend``): Metal Shading Language kernels for Apple-silicon GPUs
(families Apple7-Apple9: M1 to M4), compiled from source at run time by Metal itself
(``newLibraryWithSource``) and launched and timed through PyObjC's Metal bindings (runtime.py), against
PyTorch's MPS in the same run. Everything short of running on a Mac works on any machine: ``tracea emit
--backend metal --arch apple8`` writes the source, its schedule and its launch (and the ``.metallib`` where
Apple's ``xcrun metal`` is installed); ``tracea plan --input`` ranks the variants for a recorded Mac. The
kernels' logic is checked on the CPU by compiling the rendered MSL as C++ (compat.py, simulate.py).
docs/metal.md says what is proved."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tracea.doctor.errors import BadInputError, UnsupportedError
from tracea.doctor.variants import Variant

from ..backend import Builder, Rendering
from .build import (
    LANGUAGE,
    SOURCE_SUFFIX,
    apple_gpus,
    emit,
    family_of,
    hero_schedule,
    resolve,
    schedule_from_json,
    search_space,
    target_for,
    validate_schedule,
)
from .variants import VARIANTS

NAME = "metal"
ON_DEVICE = True
DEVICE = "mps:0"  # torch's device type for an Apple GPU's tensors (tracea.ops matches on it); no doctor ceiling has it yet
COMPILES_BUNDLED_FLAGS = False  # the runtime compiles with Metal's own options; replay of a bundle is not built
MEMBER_RESOURCES = {"num_gpus": 1, "num_cpus": 1}
NO_GPU_HINT = ("on a Mac with Apple silicon (pip install pyobjc-framework-Metal); elsewhere `tracea emit ... "
               "--backend metal --arch apple8` writes the kernel")
COMPILER = "Metal newLibraryWithSource"

__all__ = ["NAME", "VARIANTS", "ON_DEVICE", "DEVICE", "LANGUAGE", "SOURCE_SUFFIX", "COMPILES_BUNDLED_FLAGS", "resolve",
           "present", "runs_kernels", "device_name", "target_host", "compute_metric", "copy_bandwidth", "layout_cost",
           "environment", "schedule_from_json", "hero_schedule", "search_space", "validate_schedule", "build", "emit",
           "rendering", "export", "build_from_source", "load_binary", "compile_command", "baseline_for",
           "bench_on_device", "vendor_on_device", "suites", "MEMBER_RESOURCES", "worker_mismatch", "pool_filter",
           "default_workers", "tuning_members"]


def present(host: Any) -> bool:
    return bool(apple_gpus(host))


def runs_kernels(host: Any) -> str | None:
    if not present(host):
        return f"no Apple GPU ({getattr(getattr(host, 'apple', None), 'reason', None) or 'none found'})"
    from .runtime import kernels_problem  # PyObjC's Metal, else PyTorch's MPS shader library

    return kernels_problem()


def device_name(host: Any) -> str | None:
    gpus = apple_gpus(host)
    if not gpus:
        return None
    g = gpus[0]
    return f"GPU 0 ({g.chip or 'Apple GPU'}, {g.gpu_family or 'family unknown'}, {g.gpu_cores or '?'} GPU cores)"


def target_host(host: Any, arch: str) -> Any:
    """``host`` with its Apple section replaced by one GPU of family ``arch`` (apple7, apple8, apple9; case and
    spaces aside): what ``--arch`` plans and emits for. Its core count is unknown (the heuristic's default)."""
    import dataclasses

    from tracea.doctor.report import AppleGpu, AppleSection

    family = family_of(arch)
    gpu = AppleGpu(chip=f"target {family}", gpu_family=family, sources={"gpu_family": f"--arch {family}"},
                   unavailable={"gpu_cores": "an --arch target has no core count"})
    return dataclasses.replace(host, apple=AppleSection(devices=[gpu], sources={"devices": f"--arch {family} (not a probed GPU)"}))


def worker_mismatch(head: dict[str, Any], worker: dict[str, Any]) -> str | None:
    """The worker's GPU must be among the head's, the rest equal (emitters/gpu.py, as CUDA's and HIP's)."""
    from ..gpu import worker_mismatch as gpu_rule

    return gpu_rule(head, worker)


def pool_filter(host: Any, n: int) -> Any:
    return None  # a worker owns the whole GPU


def default_workers(host: Any) -> int:
    return 1  # a Mac has one GPU


def tuning_members(host: Any, n: int) -> list[dict[str, str]]:
    """One worker: a Mac has one GPU, and Metal has no variable that hands a process another."""
    if n > 1:
        raise BadInputError(f"--workers: {n} Metal workers need as many GPUs; a Mac has one", "--workers 1")
    return [{}]


def layout_cost(op: Any, variant: Any) -> str | None:
    return None  # the cores read their ops' layouts in place (an op they do not read is refused by check_op)


def compute_metric(dtype: str) -> str | None:
    return None  # the doctor has no Apple GPU ceilings yet


def copy_bandwidth(host: Any) -> dict[str, Any] | None:
    return None  # nothing measures an Apple GPU's copy here


def environment(host: Any) -> dict[str, Any]:
    """The GPU, its Metal version and the OS release: the compiler that builds the source is the OS's Metal."""
    gpus = apple_gpus(host)
    return {"gpus": [(g.chip, g.gpu_family, g.gpu_cores) for g in gpus],
            "metal_version": gpus[0].metal_family if gpus else None,
            "os_release": getattr(getattr(host, "host", None), "os_release", None)}


def rendering(op: Any, variant: Variant, schedule: Any, host: Any, arch: str | None = None) -> Rendering:
    from .build import launch

    if arch is not None:
        target_for(host, arch)  # an --arch that is no family is refused; the source is the same for every family
    ln = launch(op, schedule)
    return Rendering(ln.name, ln.source, None, COMPILER)


def build(op: Any, variant: Variant | str, schedule: Any, host: Any) -> Any:
    """The kernel on this Mac's GPU (runtime.py's ``OpKernel``: compiled from its source by Metal on first use);
    ``UnsupportedError`` where Metal does not run here."""
    problem = runs_kernels(host)
    if problem:
        raise UnsupportedError(f"Metal kernels cannot run here: {problem}", NO_GPU_HINT)
    from .build import artifact, launch
    from .runtime import OpKernel

    v = resolve(variant)
    validate_schedule(op, v, schedule, host)
    ln = launch(op, schedule)
    return OpKernel(op, ln, artifact(op, v, schedule, ln, target_for(host, None), COMPILER))


def export(op: Any, variant: Variant | str, schedule: Any, host: Any, out_dir: str | Path, arch: str | None = None,
           force: bool = False, schedule_source: str = "given", prefix: str | None = None) -> list[Path]:
    raise UnsupportedError("tracea export has no Metal package yet", "tracea emit --backend metal writes the kernel")


def build_from_source(source: str, name: str | None, flags: list[str] | None, recorded: dict[str, Any]) -> Builder:
    raise UnsupportedError("replaying a bundle's Metal source is not supported yet", "replay without --bundled-source")


def load_binary(path: Path, arch: str | None, name: str | None, recorded: dict[str, Any], source: str = "") -> Builder:
    raise UnsupportedError("replaying a bundle's .metallib is not supported yet", "replay without --binary")


def compile_command(compiler: str, flags: list[str], source: str, binary: str) -> list[str] | None:
    return None  # compiled in the process, by Metal (newLibraryWithSource): no command line


def baseline_for(op: Any, inputs: dict[str, Any]) -> Any:
    raise UnsupportedError("Metal kernels are timed on the GPU beside PyTorch's MPS (bench_on_device)")


def bench_on_device(kernel: Any, op: Any, inputs: dict[str, Any], ref: Any, tol: float, warmup: int,
                    repeats: int) -> dict[str, Any]:
    """Verify, then time with the command buffers' GPU timestamps beside PyTorch on ``mps`` tensors (runtime.py)."""
    from .runtime import bench_on_device as on_device

    return on_device(kernel, op, inputs, ref, tol, warmup, repeats)


def vendor_on_device(op: Any, inputs: dict[str, Any], ref: Any, warmup: int, repeats: int,
                     kernel: Any = None) -> dict[str, Any]:
    from .runtime import vendor_on_device as on_device

    return on_device(op, inputs, ref, warmup, repeats, kernel)


def suites(quick: bool = False) -> dict[str, list[Any]]:
    from ..gpu import gpu_suites

    return gpu_suites(quick, VARIANTS)
