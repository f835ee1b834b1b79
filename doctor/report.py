"""The doctor's values: frozen snapshots of what was found, with where each value came from.

Every section records, beside its values, ``sources`` (field -> where it was read: ``nvml``,
``cuda-core``, ``/proc/cpuinfo``, ``table:cc9.0``, ...) and ``unavailable`` (field -> why it is
``None``). Missing data is a value with a reason, never an exception (the nvitop habit).

The JSON form is a written contract (DESIGN.md): bump ``SCHEMA_VERSION`` on any change that is not
purely additive.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

SCHEMA_VERSION = 1

OK = "ok"
WARNING = "warning"
PROBLEM = "problem"
MARKS = (OK, WARNING, PROBLEM)


class Record:
    """Mixin: JSON round-trip for frozen dataclasses whose nested records are listed in ``_nested``."""

    _nested: ClassVar[Mapping[str, type]] = {}

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):  # type: ignore[arg-type]
            out[f.name] = _dump(getattr(self, f.name))
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]):
        names = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
        kwargs: dict[str, Any] = {}
        for key, value in data.items():
            if key not in names:
                continue  # additive schema changes: newer fields are ignored by older readers
            sub = cls._nested.get(key)
            if sub is not None and value is not None:
                value = [sub.from_json(v) for v in value] if isinstance(value, list) else sub.from_json(value)
            kwargs[key] = value
        obj = cls(**kwargs)
        _check_types(obj)
        return obj


_SCALARS = {"int": (int,), "float": (int, float), "str": (str,), "bool": (bool,)}


def _check_types(obj: Record) -> None:
    """A record read from a file holds the types its fields declare (a hand-edited or foreign file
    fails here, with the field named, instead of deep inside the renderer)."""
    for f in dataclasses.fields(obj):  # type: ignore[arg-type]
        value = getattr(obj, f.name)
        if value is None or isinstance(value, Record):
            continue
        kind = str(f.type).split("|")[0].strip().split("[")[0]
        if kind in _SCALARS:
            ok = isinstance(value, _SCALARS[kind]) and not (kind in ("int", "float") and isinstance(value, bool))
        elif kind in ("list", "tuple"):
            ok = isinstance(value, list) and all(isinstance(v, Record) or not isinstance(v, (dict, list)) for v in value)
        elif kind == "dict":
            ok = isinstance(value, dict)
        else:
            ok = True
        if not ok:
            raise ValueError(f"{type(obj).__name__}.{f.name} should be {f.type}, not {type(value).__name__}")
    if isinstance(obj, Check) and obj.mark not in MARKS:
        raise ValueError(f"Check.mark must be one of {MARKS}, not {obj.mark!r}")


def _dump(value: Any) -> Any:
    if isinstance(value, Record):
        return value.to_json()
    if isinstance(value, (list, tuple)):
        return [_dump(v) for v in value]
    if isinstance(value, Mapping):
        return {k: _dump(v) for k, v in value.items()}
    return value


class FieldSet:
    """Collects a section's values with their sources and the reasons for the missing ones."""

    def __init__(self) -> None:
        self.values: dict[str, Any] = {}
        self.sources: dict[str, str] = {}
        self.unavailable: dict[str, str] = {}

    def put(self, key: str, value: Any, source: str, missing_reason: str | None = None) -> None:
        """Set ``key``; a ``None`` value is recorded as unavailable with ``missing_reason``."""
        if value is None:
            self.miss(key, missing_reason or f"not reported by {source}")
            return
        self.values[key] = value
        self.sources[key] = source
        self.unavailable.pop(key, None)

    def miss(self, key: str, reason: str) -> None:
        self.values[key] = None
        self.sources.pop(key, None)
        self.unavailable[key] = reason

    def setdefault(self, key: str, value: Any, source: str, missing_reason: str | None = None) -> None:
        """Like ``put`` but only where ``key`` has no value yet (a fallback source)."""
        if self.values.get(key) is None:
            if value is None and key in self.unavailable:
                return  # keep the first, more specific reason
            self.put(key, value, source, missing_reason)

    def has(self, key: str) -> bool:
        return self.values.get(key) is not None

    def build(self, cls: type, **extra: Any):
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = set(self.values) - names
        if unknown:
            raise TypeError(f"{cls.__name__} has no fields {sorted(unknown)}")
        return cls(**self.values, sources=dict(self.sources), unavailable=dict(self.unavailable), **extra)


@dataclass(frozen=True)
class HostInfo(Record):
    os_name: str | None = None
    os_release: str | None = None
    machine: str | None = None
    wsl: bool | None = None
    container: str | None = None
    sources: dict[str, str] = field(default_factory=dict)
    unavailable: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class CpuInfo(Record):
    vendor: str | None = None
    model: str | None = None
    architecture: str | None = None
    sockets: int | None = None
    physical_cores: int | None = None
    logical_cores: int | None = None
    base_clock_hz: int | None = None
    max_clock_hz: int | None = None
    current_clock_hz: int | None = None
    l1d_bytes_per_core: int | None = None
    l2_bytes_per_core: int | None = None
    l3_bytes_total: int | None = None
    memory_total_bytes: int | None = None
    memory_available_bytes: int | None = None
    numa_nodes: int | None = None
    isa: list[str] | None = None
    simd_family: str | None = None
    vector_width_bits: int | None = None
    emitter_flags: list[str] | None = None
    scaling_governor: str | None = None
    microarchitecture: str | None = None
    codename: str | None = None
    hypervisor: bool | None = None
    sources: dict[str, str] = field(default_factory=dict)
    unavailable: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class NvidiaGpu(Record):
    cuda_index: int | None = None
    nvml_index: int | None = None
    name: str | None = None
    uuid: str | None = None
    pci_bus_id: str | None = None
    compute_capability: str | None = None
    architecture: str | None = None
    memory_total_bytes: int | None = None
    memory_used_bytes: int | None = None
    memory_bus_width_bits: int | None = None
    sm_clock_mhz: int | None = None
    sm_clock_max_mhz: int | None = None
    memory_clock_mhz: int | None = None
    memory_clock_max_mhz: int | None = None
    power_draw_w: float | None = None
    power_limit_w: float | None = None
    temperature_c: int | None = None
    utilization_gpu_percent: int | None = None
    utilization_memory_percent: int | None = None
    pcie_generation: int | None = None
    pcie_generation_max: int | None = None
    pcie_width: int | None = None
    pcie_width_max: int | None = None
    mig_mode: str | None = None
    mig_devices: list[str] | None = None
    persistence_mode: bool | None = None
    throttle_reasons: list[str] | None = None
    sm_count: int | None = None
    shared_memory_per_block_bytes: int | None = None
    shared_memory_per_block_optin_bytes: int | None = None
    shared_memory_per_sm_bytes: int | None = None
    registers_per_sm: int | None = None
    max_threads_per_sm: int | None = None
    l2_cache_bytes: int | None = None
    warp_size: int | None = None
    cluster_launch: bool | None = None
    tma: bool | None = None
    tensor_core_generation: str | None = None
    precisions: list[str] | None = None
    sources: dict[str, str] = field(default_factory=dict)
    unavailable: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class NvidiaSection(Record):
    devices: list[NvidiaGpu] = field(default_factory=list)
    reason: str | None = None
    driver_version: str | None = None
    cuda_driver_version: str | None = None
    nvml_version: str | None = None
    cuda_visible_devices: str | None = None
    hidden_by_cuda_visible_devices: int = 0
    sources: dict[str, str] = field(default_factory=dict)
    unavailable: dict[str, str] = field(default_factory=dict)
    _nested: ClassVar[Mapping[str, type]] = {"devices": NvidiaGpu}


@dataclass(frozen=True)
class AmdGpu(Record):
    node: int | None = None
    name: str | None = None
    gfx_target: str | None = None
    compute_units: int | None = None
    simd_per_cu: int | None = None
    wavefront_size: int | None = None
    lds_bytes_per_workgroup: int | None = None
    vram_bytes: int | None = None
    max_engine_clock_mhz: int | None = None
    pci_device_id: str | None = None
    driver_version: str | None = None
    sources: dict[str, str] = field(default_factory=dict)
    unavailable: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class AmdSection(Record):
    devices: list[AmdGpu] = field(default_factory=list)
    reason: str | None = None
    sources: dict[str, str] = field(default_factory=dict)
    unavailable: dict[str, str] = field(default_factory=dict)
    _nested: ClassVar[Mapping[str, type]] = {"devices": AmdGpu}


@dataclass(frozen=True)
class AppleGpu(Record):
    """One Apple-silicon GPU. ``metal_family`` is the Metal version system_profiler says it supports ("Metal 3");
    ``gpu_family`` the Apple GPU family ("apple7", "apple8", "apple9": Apple's Metal feature set tables), what
    a Metal kernel's features depend on (sources/apple.py derives it from the chip)."""

    chip: str | None = None
    gpu_cores: int | None = None
    metal_family: str | None = None
    gpu_family: str | None = None
    unified_memory_bytes: int | None = None
    sources: dict[str, str] = field(default_factory=dict)
    unavailable: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class AppleSection(Record):
    devices: list[AppleGpu] = field(default_factory=list)
    reason: str | None = None
    sources: dict[str, str] = field(default_factory=dict)
    unavailable: dict[str, str] = field(default_factory=dict)
    _nested: ClassVar[Mapping[str, type]] = {"devices": AppleGpu}


@dataclass(frozen=True)
class Tool(Record):
    """One toolchain component; ``details`` holds tool-specific facts (march_native_enables, ...)."""

    name: str
    found: bool
    path: str | None = None
    version: str | None = None
    reason: str | None = None
    details: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class PythonEnv(Record):
    python_version: str | None = None
    implementation: str | None = None
    executable: str | None = None
    packages: dict[str, str | None] = field(default_factory=dict)
    numpy_blas: str | None = None
    torch_cuda: str | None = None
    pynvml_shadow: str | None = None
    sources: dict[str, str] = field(default_factory=dict)
    unavailable: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Ceiling(Record):
    """A roofline ceiling: the spec figure (clock x units) and, with --measure, the measured one."""

    device: str
    metric: str
    unit: str
    spec: float | None = None
    basis: str | None = None
    measured: float | None = None
    method: str | None = None
    reason: str | None = None


@dataclass(frozen=True)
class Check(Record):
    id: str
    mark: str
    message: str
    hint: str | None = None


@dataclass(frozen=True)
class HostReport(Record):
    schema_version: int = SCHEMA_VERSION
    tracea_version: str | None = None
    created_at: str | None = None
    origin: str = "live"
    host: HostInfo = field(default_factory=HostInfo)
    cpu: CpuInfo = field(default_factory=CpuInfo)
    nvidia: NvidiaSection = field(default_factory=NvidiaSection)
    amd: AmdSection = field(default_factory=AmdSection)
    apple: AppleSection = field(default_factory=AppleSection)
    toolchains: list[Tool] = field(default_factory=list)
    python: PythonEnv = field(default_factory=PythonEnv)
    ceilings: list[Ceiling] = field(default_factory=list)
    checks: list[Check] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    _nested: ClassVar[Mapping[str, type]] = {
        "host": HostInfo,
        "cpu": CpuInfo,
        "nvidia": NvidiaSection,
        "amd": AmdSection,
        "apple": AppleSection,
        "toolchains": Tool,
        "python": PythonEnv,
        "ceilings": Ceiling,
        "checks": Check,
    }

    def tool(self, name: str) -> Tool | None:
        return next((t for t in self.toolchains if t.name == name), None)

    @property
    def worst_mark(self) -> str:
        marks = {c.mark for c in self.checks}
        return PROBLEM if PROBLEM in marks else WARNING if WARNING in marks else OK
