"""A test-only CUDA backend whose candidates really fail on the GPU: CUDA C++ compiled by NVRTC and run
through Tracea's CUDA runtime (emitters/cuda), that hangs the GPU, writes through a null pointer (a
sticky CUDA_ERROR_ILLEGAL_ADDRESS: the context is unusable afterwards), traps, computes a wrong answer
or does not compile. The tuner reaches it as it reaches any backend module (``Target.module``), in
its worker process, so tests/tuner/test_tuner_faults.py's GPU test exercises the real isolation on a device.

Imported by the tuner's worker as ``test_tuner_cuda_fault_backend`` (tests/tuner/ on PYTHONPATH).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from test_tuner_fault_backend import (  # noqa: F401 - tests/tuner/ is on the path; the protocol's refusals
    COMPILES_BUNDLED_FLAGS,
    MEMBER_RESOURCES,
    bench_on_device,
    build_from_source,
    compute_metric,
    copy_bandwidth,
    default_workers,
    device_name,
    emit,
    environment,
    export,
    layout_cost,
    load_binary,
    pool_filter,
    present,
    rendering,
    runs_kernels,
    suites,
    target_host,
    tuning_members,
    validate_schedule,
    vendor_on_device,
    worker_mismatch,
)
from test_tuner_fault_backend import FaultSchedule as CpuFaultSchedule

from tracea.doctor.errors import BadInputError
from tracea.doctor.variants import Requirements, Variant

MODES = ("ok", "illegal", "hang", "trap", "wrong", "nocompile", "ok2")
VARIANTS = (Variant(id="cuda-faulty.gemm", op="gemm", backend="cuda", family="cuda-faulty", precisions=("fp32",),
                    requirements=Requirements(min_compute_capability=(7, 0)), priority=1,
                    description="test-only: CUDA candidates that hang, fault, lie or do not compile"),)

BODY = {
    "ok": "",
    "ok2": "",  # a second healthy candidate, evaluated after the faults: the worker recovered
    "illegal": "if (i == 0 && j == 0) *(volatile float*)0 = 1.0f;",
    "hang": "if (i == 0 && j == 0) { for (volatile long spin = 0;; spin++) { } }",
    "trap": "if (i == 0 && j == 0) __trap();",
    "wrong": "if (i == 0 && j == 0) acc += 1000.0f;",
    "nocompile": "this is not CUDA;",
}

SOURCE = """
extern "C" __global__ void faulty_gemm(const float* a, const float* b, float* out, int M, int N, int K) {
    int i = blockIdx.y * blockDim.y + threadIdx.y, j = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= M || j >= N) return;
    float acc = 0.0f;
    for (int p = 0; p < K; p++) acc += a[i * K + p] * b[p * N + j];
    %s
    out[i * N + j] = acc;
}
"""


@dataclass(frozen=True)
class FaultSchedule(CpuFaultSchedule):
    modes: ClassVar[tuple[str, ...]] = MODES
    backend: ClassVar[str] = "cuda-faulty"
    prefix: ClassVar[str] = "cuda-fault"


NAME = "cuda-faulty"
# its baseline stays the host's NumPy, as before the protocol (the worker named only the registered CUDA
# backend's module an on-device one); the faults it tests are the kernel's, not the baseline's
ON_DEVICE = False
DEVICE = "cuda:0"
LANGUAGE = "cuda"
SOURCE_SUFFIX = ".cu"


def resolve(variant: Any) -> Variant:
    found = next((v for v in VARIANTS if variant in (v, v.id)), None)
    if found is None:
        raise BadInputError(f"no test variant {variant!r}")
    return found


def schedule_from_json(d: dict[str, Any]) -> FaultSchedule:
    return FaultSchedule.from_json(d)


def compile_command(compiler: str, flags: list[str], source: str, binary: str) -> list[str] | None:
    return None


def baseline_for(op: Any, inputs: dict[str, Any]) -> Any:
    from tracea.emitters.baselines import baseline_for as host_baseline

    return host_baseline(op, inputs)


def hero_schedule(op: Any, variant: Any, host: Any) -> FaultSchedule:
    return FaultSchedule("ok")


def search_space(op: Any, variant: Any, host: Any) -> list[FaultSchedule]:
    return [FaultSchedule(m) for m in MODES]


def build(op: Any, variant: Any, schedule: FaultSchedule, host: Any) -> Any:
    from cuda.core import Device

    from tracea.emitters import nvrtc as nv
    from tracea.emitters.artifact import Artifact
    from tracea.emitters.cuda.render import Rendered
    from tracea.emitters.cuda.runtime import CudaKernel

    schedule.validate()
    cc = Device().compute_capability
    arch = f"sm_{cc[0]}{cc[1]}"
    source = SOURCE % BODY[schedule.mode]
    name = f"faulty_{schedule.mode}"
    cubin, _, _, hit, seconds = nv.compile_cached(source, name, "faulty_gemm", arch)
    r = Rendered(name=name, entry="faulty_gemm", source=source, params=("a", "b", "out", "M", "N", "K"),
                 grid=(-(-op.n // 16), -(-op.m // 16), 1), block=(16, 16, 1), smem=0, metadata={})
    art = Artifact(name=name, op=op.to_json(), variant=VARIANTS[0].id, schedule=schedule.to_json(), source=source,
                   language="cuda", entry="faulty_gemm", compiler="NVRTC", compiler_version=nv.find_nvrtc().version,
                   flags=(), binary=str(cubin), cache_hit=hit, compile_seconds=seconds, metadata={})
    return CudaKernel(op, art, r, {"M": op.m, "N": op.n, "K": op.k})
