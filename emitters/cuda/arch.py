"""Compile targets: an ``Arch`` is what the emitter needs to know of a GPU generation (compute
capability, opt-in shared memory per block, SM count for wave estimates), read from a live or recorded
GPU, or from the table below for a target named on the command line (``--arch sm_90a``) on a machine
without that GPU.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from tracea.doctor.errors import BadInputError, UnsupportedError

# compute capability -> (opt-in shared memory per block in bytes, SMs of the flagship part); CUDA C
# Programming Guide, "Technical Specifications per Compute Capability".
KNOWN: dict[tuple[int, int], tuple[int, int]] = {
    (7, 5): (65536, 72),
    (8, 0): (166912, 108),
    (8, 6): (101376, 84),
    (8, 7): (166912, 16),
    (8, 9): (101376, 128),
    (9, 0): (232448, 132),
    (10, 0): (232448, 148),
    (12, 0): (101376, 170),
}


@dataclass(frozen=True)
class Arch:
    major: int
    minor: int
    suffix: str = ""  # "a": the architecture-specific target (sm_90a), "" the portable one
    smem_optin: int = 49152
    sm_count: int = 1

    @property
    def name(self) -> str:
        return f"sm_{self.major}{self.minor}{self.suffix}"

    @property
    def cc(self) -> tuple[int, int]:
        return (self.major, self.minor)

    @property
    def compute_capability(self) -> str:
        return f"{self.major}.{self.minor}"


def parse_arch(text: str) -> Arch:
    """``sm_90a``, ``sm_80``, ``90``, ``9.0`` -> Arch with the table's limits."""
    t = str(text).strip().lower().removeprefix("sm_").removeprefix("compute_")
    suffix = ""
    if t.endswith(("a", "f")):
        t, suffix = t[:-1], t[-1]
    try:
        if "." in t:
            major, minor = (int(x) for x in t.split("."))
        else:
            major, minor = int(t[:-1]), int(t[-1])
    except ValueError:
        raise BadInputError(f"arch: {text!r} is not a CUDA target such as sm_80 or sm_90a") from None
    if (major, minor) not in KNOWN:
        known = ", ".join(f"sm_{a}{b}" for a, b in KNOWN)
        raise BadInputError(f"arch: sm_{major}{minor} is not a target Tracea knows ({known})")
    smem, sms = KNOWN[(major, minor)]
    return Arch(major, minor, suffix, smem, sms)


def arch_of_host(host: Any, device: int | None = None) -> Arch:
    """The Arch of the host's GPU (its compute capability, shared memory and SM count as reported)."""
    gpus = getattr(getattr(host, "nvidia", None), "devices", None) or []
    if not gpus:
        reason = getattr(getattr(host, "nvidia", None), "reason", None) or "none found"
        raise UnsupportedError(f"no NVIDIA GPU to compile for ({reason})",
                               "name a target instead: --arch sm_80 or --arch sm_90a")
    g = gpus[device or 0]
    base = parse_arch(g.compute_capability or "0.0")
    return dataclasses.replace(base, smem_optin=g.shared_memory_per_block_optin_bytes or base.smem_optin,
                               sm_count=g.sm_count or base.sm_count)


def target_host(host: Any, arch: str | Arch) -> Any:
    """``host`` with its NVIDIA section replaced by one GPU of ``arch``: what planning and emitting for a
    target that is not installed here needs (the planner then judges the target, not this machine)."""
    from tracea.doctor.report import NvidiaGpu, NvidiaSection

    a = parse_arch(arch) if isinstance(arch, str) else arch
    gpu = NvidiaGpu(cuda_index=0, name=f"target {a.name}", compute_capability=a.compute_capability,
                    architecture=a.name,
                    shared_memory_per_block_optin_bytes=a.smem_optin, sm_count=a.sm_count,
                    sources={"compute_capability": f"--arch {a.name}"})
    section = NvidiaSection(devices=[gpu], reason=None, sources={"devices": f"--arch {a.name} (not a probed GPU)"})
    return dataclasses.replace(host, nvidia=section)


def target_of(host: Any, arch: str | Arch | None = None) -> Arch:
    """The compile target: ``arch`` when given, else the host's GPU (its "a" target on sm_90)."""
    if arch is not None:
        return parse_arch(arch) if isinstance(arch, str) else arch
    a = arch_of_host(host)
    named = (host.nvidia.devices[0].architecture or "").lower()
    if named.startswith("sm_"):  # a target_host(): keep the suffix that was asked for
        return dataclasses.replace(a, suffix=parse_arch(named).suffix)
    return dataclasses.replace(a, suffix="a") if a.cc == (9, 0) else a
