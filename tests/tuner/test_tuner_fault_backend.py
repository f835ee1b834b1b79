"""A test-only backend whose candidates really fail: real C, compiled by the host compiler and called
through ctypes, that segfaults, never returns, computes a wrong answer or does not compile. The tuner
reaches it the way it reaches any backend module (``Target.module``), in its worker process, so
the fault tests exercise the real isolation, not a mocked status.

The module is imported by the tuner's worker as ``test_tuner_fault_backend`` (tests/tuner/ is put on
PYTHONPATH); its own test below only checks that the healthy candidate is a correct GEMM.
"""

from __future__ import annotations

import ctypes
import dataclasses
from dataclasses import dataclass
from typing import Any, ClassVar

from tracea.doctor.errors import BadInputError, UnsupportedError
from tracea.doctor.variants import Requirements, Variant

MODES = ("ok", "segfault", "hang", "wrong", "nocompile", "slow")
VARIANTS = (Variant(id="faulty.gemm", op="gemm", backend="cpu", family="faulty", precisions=("fp32",),
                    requirements=Requirements(toolchain=("cc", "gcc", "clang")), priority=1,
                    description="test-only: candidates that crash, hang, lie or do not compile"),)

BODY = {
    "ok": "",
    "slow": "for (int r = 0; r < 3; r++) naive(A, B, C, m, n, k);",
    "segfault": "*(volatile int*)0 = 1;",
    "hang": "for (volatile int spin = 0;; spin++) { }",
    "wrong": "C[0] += 1000.0f;",
    "nocompile": "this is not C;",
}

SOURCE = """
static void naive(const float* A, const float* B, float* C, long m, long n, long k) {
    for (long i = 0; i < m; i++)
        for (long j = 0; j < n; j++) {
            float s = 0.0f;
            for (long p = 0; p < k; p++) s += A[i * k + p] * B[p * n + j];
            C[i * n + j] = s;
        }
}
__attribute__((visibility("default"))) void faulty_gemm(const float* A, const float* B, float* C, long m, long n, long k) {
    naive(A, B, C, m, n, k);
    %s
}
"""


@dataclass(frozen=True)
class FaultSchedule:
    mode: str = "ok"
    modes: ClassVar[tuple[str, ...]] = MODES  # the CUDA fault backend subclasses with its own
    backend: ClassVar[str] = "faulty"
    prefix: ClassVar[str] = "fault"

    def validate(self, op: Any = None, host: Any = None, variant: Any = None) -> None:
        if self.mode not in self.modes:
            raise BadInputError(f"mode: {self.mode!r} is not one of {', '.join(self.modes)}")

    def to_json(self) -> dict[str, Any]:
        return {"schema_version": 1, "backend": self.backend, **dataclasses.asdict(self)}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> FaultSchedule:
        return cls(mode=d["mode"])

    @property
    def name(self) -> str:
        return f"{self.prefix}-{self.mode}"


class FaultKernel:
    def __init__(self, op: Any, lib: ctypes.CDLL, artifact: Any) -> None:
        self.op, self.lib, self.artifact = op, lib, artifact
        self.fn = lib.faulty_gemm
        self.fn.argtypes = [ctypes.c_void_p] * 3 + [ctypes.c_long] * 3

    def __call__(self, inputs: dict[str, Any], out: Any) -> Any:
        a, b = inputs["a"], inputs["b"]
        self.fn(a.ctypes.data, b.ctypes.data, out.ctypes.data, self.op.m, self.op.n, self.op.k)
        return out


@dataclass(frozen=True)
class _Artifact:
    name: str
    compile_seconds: float
    cache_hit: bool


# the backend protocol (emitters/backend.py): what the tuner's worker uses is real, the rest refuses
NAME = "faulty"
ON_DEVICE = False  # forked verification, host timers, the host baseline
DEVICE = "cpu"
LANGUAGE = "c"
SOURCE_SUFFIX = ".c"
COMPILES_BUNDLED_FLAGS = False


def resolve(variant: Any) -> Variant:
    found = next((v for v in VARIANTS if variant in (v, v.id)), None)
    if found is None:
        raise UnsupportedError(f"no test variant {variant!r}")
    return found


def present(host: Any) -> bool:
    return True


def runs_kernels(host: Any) -> str | None:
    return None


def device_name(host: Any) -> str | None:
    return None


def target_host(host: Any, arch: str) -> Any:
    raise BadInputError(f"--arch {arch}: the test backend has no targets")


MEMBER_RESOURCES = {"num_cpus": 1}


def worker_mismatch(head: dict[str, Any], worker: dict[str, Any]) -> str | None:
    return None


def pool_filter(host: Any, n: int) -> Any:
    return None


def default_workers(host: Any) -> int:
    return 1


def tuning_members(host: Any, n: int) -> list[dict[str, str]]:
    return [{} for _ in range(n)]  # the fault kernels run in the worker; nothing to divide


def compute_metric(dtype: str) -> str | None:
    return None


def copy_bandwidth(host: Any) -> dict[str, Any] | None:
    return None


def layout_cost(op: Any, variant: Any) -> str | None:
    return None


def environment(host: Any) -> dict[str, Any]:
    return {}


def schedule_from_json(d: dict[str, Any]) -> FaultSchedule:
    return FaultSchedule.from_json(d)


def validate_schedule(op: Any, variant: Any, schedule: Any, host: Any) -> None:
    schedule.validate(op, host, variant)


def _unsupported(what: str) -> Any:
    raise UnsupportedError(f"the test fault backend has no {what}")


def emit(op: Any, variant: Any, schedule: Any, host: Any, out_dir: Any, arch: str | None = None) -> list[Any]:
    return _unsupported("emit")


def export(op: Any, variant: Any, schedule: Any, host: Any, out_dir: Any, arch: str | None = None,
           force: bool = False, schedule_source: str = "given", prefix: str | None = None) -> list[Any]:
    return _unsupported("export")


def rendering(op: Any, variant: Any, schedule: Any, host: Any, arch: str | None = None) -> Any:
    return _unsupported("rendering")


def build_from_source(source: str, name: str | None, flags: list[str] | None, recorded: dict[str, Any]) -> Any:
    return _unsupported("build_from_source")


def load_binary(path: Any, arch: str | None, name: str | None, recorded: dict[str, Any], source: str = "") -> Any:
    return _unsupported("load_binary")


def compile_command(compiler: str, flags: list[str], source: str, binary: str) -> list[str] | None:
    return None


def baseline_for(op: Any, inputs: dict[str, Any]) -> Any:
    from tracea.emitters.baselines import baseline_for as host_baseline

    return host_baseline(op, inputs)


def bench_on_device(kernel: Any, op: Any, inputs: dict[str, Any], ref: Any, tol: float, warmup: int,
                    repeats: int) -> dict[str, Any]:
    return _unsupported("device")


def vendor_on_device(op: Any, inputs: dict[str, Any], ref: Any, warmup: int, repeats: int,
                     kernel: Any = None) -> dict[str, Any]:
    return _unsupported("device")


def suites(quick: bool = False) -> dict[str, list[Any]]:
    return {}


def hero_schedule(op: Any, variant: Any, host: Any) -> FaultSchedule:
    return FaultSchedule("ok")


def search_space(op: Any, variant: Any, host: Any) -> list[FaultSchedule]:
    return [FaultSchedule(m) for m in MODES]


def build(op: Any, variant: Any, schedule: FaultSchedule, host: Any) -> FaultKernel:
    from tracea.emitters import host_compiler as cc

    schedule.validate()
    source = SOURCE % BODY[schedule.mode]
    binary, hit, seconds = cc.compile_cached(source, f"faulty_{schedule.mode}", [*cc.BASE_FLAGS, "-O1"],
                                             cc.find_compiler(host))
    return FaultKernel(op, ctypes.CDLL(str(binary)), _Artifact(f"faulty_{schedule.mode}", seconds, hit))


def test_the_healthy_fault_candidate_is_a_correct_gemm(tmp_path, monkeypatch) -> None:
    import numpy as np

    from tracea.doctor import probe
    from tracea.kernels import Gemm, relative_error

    monkeypatch.setenv("TRACEA_HOME", str(tmp_path))
    op = Gemm(m=16, n=24, k=8)
    inputs = op.random_inputs(np.random.default_rng(0))
    kernel = build(op, VARIANTS[0], FaultSchedule("ok"), probe())
    out = np.full((16, 24), np.nan, np.float32)
    kernel(inputs, out)
    assert relative_error(out.astype(np.float64), op.reference(inputs)) < 1e-5
