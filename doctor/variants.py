"""Kernel variants and their hard requirements.

A ``Variant`` is what an emitter can generate for one operation: its backend, instruction family,
precisions and what the host must have. Emitters own their variant lists (``emitters.<backend>.VARIANTS``)
and register a variant only once it produces working code; the decision engine (``plan.py``) reads
them, and this module only says whether a host meets a variant's requirements, and why not.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .report import HostReport

PRECISIONS = ("fp32", "fp16", "bf16", "int8", "fp8e4m3", "fp8e5m2")


@dataclass(frozen=True)
class Requirements:
    """What a host must have. Empty fields ask nothing."""

    machine: tuple[str, ...] = ()  # CPU architectures (platform.machine()), any of
    isa: tuple[str, ...] = ()  # CPU ISA names as in CpuInfo.isa, all of
    toolchain: tuple[str, ...] = ()  # any of these tools found (e.g. ("cc", "gcc", "clang"))
    min_compute_capability: tuple[int, int] | None = None  # NVIDIA
    max_compute_capability: tuple[int, int] | None = None  # e.g. sm_90a-only instructions
    min_shared_memory_per_block_bytes: int | None = None  # opt-in, NVIDIA
    amd_targets: tuple[str, ...] = ()  # AMD GPU ISA targets (gfx90a, gfx942, ...), any of
    apple_families: tuple[str, ...] = ()  # Apple GPU families (apple7, apple8, apple9: AppleGpu.gpu_family), any of

    def to_json(self) -> dict[str, Any]:
        return {k: (list(v) if isinstance(v, tuple) else v) for k, v in self.__dict__.items()}

    def unmet(self, host: HostReport, device: int | None = None) -> list[str]:
        """Why ``host`` cannot run this, one reason per unmet requirement (empty: it can)."""
        reasons = []
        cpu = host.cpu
        if self.machine and (cpu.architecture or "") not in self.machine:
            reasons.append(f"needs a {'/'.join(self.machine)} CPU (this is {cpu.architecture or 'unknown'})")
        if self.isa:
            have = set(cpu.isa or [])
            missing = [i for i in self.isa if i not in have]
            if missing:
                reasons.append(f"CPU lacks {', '.join(missing)}")
        # a report with no tools at all is a recording without the toolchain section: not judged
        if self.toolchain and host.toolchains and not any((t := host.tool(name)) is not None and t.found
                                                          for name in self.toolchain):
            reasons.append(f"no {' or '.join(self.toolchain)} found")
        if self.min_compute_capability or self.min_shared_memory_per_block_bytes:
            reasons += self._gpu_unmet(host, device)
        if self.amd_targets:
            reasons += self._amd_unmet(host, device)
        if self.apple_families:
            reasons += self._apple_unmet(host, device)
        return reasons

    def _apple_unmet(self, host: HostReport, device: int | None) -> list[str]:
        gpus = host.apple.devices
        if not gpus:
            return [f"no Apple GPU ({host.apple.reason or 'none found'})"]
        g = gpus[device or 0]
        if g.gpu_family not in self.apple_families:
            have = g.gpu_family or f"of unknown family: {g.unavailable.get('gpu_family', 'not reported')}"
            return [f"needs an Apple GPU of family {' or '.join(self.apple_families)} "
                    f"(Apple GPU {device or 0}, {g.chip or 'unnamed'}, is {have})"]
        return []

    def _amd_unmet(self, host: HostReport, device: int | None) -> list[str]:
        gpus = host.amd.devices
        if not gpus:
            return [f"no AMD GPU ({host.amd.reason or 'none found'})"]
        g = gpus[device or 0]
        if g.gfx_target not in self.amd_targets:
            return [f"needs {' or '.join(self.amd_targets)} (AMD GPU {device or 0} is {g.gfx_target or 'unknown'})"]
        return []

    def _gpu_unmet(self, host: HostReport, device: int | None) -> list[str]:
        gpus = host.nvidia.devices
        if not gpus:
            return [f"no NVIDIA GPU ({host.nvidia.reason or 'none found'})"]
        g = gpus[device or 0]
        out = []
        cc = tuple(int(x) for x in (g.compute_capability or "0.0").split("."))
        if self.min_compute_capability and cc < self.min_compute_capability:
            out.append(f"needs compute capability >= {'.'.join(map(str, self.min_compute_capability))} (GPU {g.cuda_index} is {g.compute_capability})")
        if self.max_compute_capability and cc > self.max_compute_capability:
            out.append(f"runs only up to compute capability {'.'.join(map(str, self.max_compute_capability))} (GPU {g.cuda_index} is {g.compute_capability})")
        need = self.min_shared_memory_per_block_bytes
        if need and (g.shared_memory_per_block_optin_bytes or 0) < need:
            out.append(f"needs {need} B shared memory per block (GPU {g.cuda_index} has {g.shared_memory_per_block_optin_bytes})")
        return out


@dataclass(frozen=True)
class Variant:
    """One kernel implementation an emitter can generate."""

    id: str  # e.g. "cpu-avx2-fma.gemm"
    op: str  # "gemm" | "conv2d" | "softmax"
    backend: str  # "cpu" | "cuda" | "hip" | "metal"
    family: str  # instruction family: "cpu-avx2-fma", "cpu-avx512", "cpu-neon", "cpu-portable", "cuda-mma-sync", ...
    precisions: tuple[str, ...]  # input precisions it computes (16-bit inputs accumulate in fp32)
    requirements: Requirements = field(default_factory=Requirements)
    # Extra requirements for one precision (e.g. fp16 on AVX2 needs F16C to convert).
    precision_requirements: dict[str, Requirements] = field(default_factory=dict)
    priority: int = 0  # higher is preferred when several fit
    description: str = ""
    # Why it cannot compute an op of its kind as given (the op's own shape or layout: a kernel's limit that no
    # host changes), or None where it can; None: it takes every op its precisions allow. Given by the emitter.
    refuses: Callable[[Any], str | None] | None = field(default=None, compare=False, repr=False)

    def unmet(self, host: HostReport, precision: str, device: int | None = None) -> list[str]:
        reasons = self.requirements.unmet(host, device)
        if precision not in self.precisions:
            reasons.append(f"does not compute {precision} (only {', '.join(self.precisions)})")
        elif precision in self.precision_requirements:
            reasons += [f"{precision}: {r}" for r in self.precision_requirements[precision].unmet(host, device)]
        return reasons

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id, "op": self.op, "backend": self.backend, "family": self.family,
            "precisions": list(self.precisions), "requirements": self.requirements.to_json(),
            "precision_requirements": {k: v.to_json() for k, v in self.precision_requirements.items()},
            "priority": self.priority, "description": self.description,
        }
