"""Environment variables that pin a BLAS library below what this CPU can run.

A NumPy baseline run with ``OPENBLAS_CORETYPE=Haswell`` on an AVX-512 CPU uses AVX2 kernels and runs
at about half speed, so every "x NumPy" ratio against it is wrong. ``pinned_below(cpu, environ)`` says
why, one reason per variable; bench and tune print it on the ratio line, the doctor as a check.

OpenBLAS reads ``OPENBLAS_CORETYPE`` (case-insensitive core names, its TargetList.txt) and its thread
count from ``OPENBLAS_NUM_THREADS``, else ``GOTO_NUM_THREADS``, else ``OMP_NUM_THREADS``; MKL from
``MKL_NUM_THREADS``, else ``OMP_NUM_THREADS``, and caps its code path with ``MKL_ENABLE_INSTRUCTIONS``
and ``MKL_CBWR``. ``OPENBLAS_VERBOSE`` only prints the core type and is not a pin.
"""

from __future__ import annotations

from collections.abc import Mapping

from .report import CpuInfo

# ISA levels, low to high: what a core type's kernels use.
X86_LEVELS = ("sse", "avx", "avx2", "avx512")
ARM_LEVELS = ("neon", "sve")

# OpenBLAS core type (upper case) -> the ISA level its kernels use.
OPENBLAS_CORETYPES: dict[str, str] = {
    **dict.fromkeys(("P2", "KATMAI", "COPPERMINE", "NORTHWOOD", "PRESCOTT", "BANIAS", "YONAH", "CORE2", "PENRYN",
                     "DUNNINGTON", "NEHALEM", "ATOM", "ATHLON", "OPTERON", "OPTERON_SSE3", "BARCELONA",
                     "SHANGHAI", "ISTANBUL", "BOBCAT", "NANO", "SSE_GENERIC"), "sse"),
    **dict.fromkeys(("SANDYBRIDGE", "BULLDOZER", "PILEDRIVER", "STEAMROLLER", "EXCAVATOR"), "avx"),
    **dict.fromkeys(("HASWELL", "ZEN"), "avx2"),
    **dict.fromkeys(("SKYLAKEX", "COOPERLAKE", "SAPPHIRERAPIDS"), "avx512"),
    **dict.fromkeys(("ARMV8", "CORTEXA53", "CORTEXA55", "CORTEXA57", "CORTEXA72", "CORTEXA73", "NEOVERSEN1",
                     "THUNDERX", "THUNDERX2T99", "TSV110", "EMAG8180", "FALKOR"), "neon"),
    **dict.fromkeys(("NEOVERSEV1", "NEOVERSEN2", "NEOVERSEV2", "ARMV8SVE", "A64FX"), "sve"),
}

# MKL_ENABLE_INSTRUCTIONS / MKL_CBWR branch -> ISA level (AVX512_E1.. and AVX10 are AVX-512 class).
MKL_BRANCHES: dict[str, str] = {
    "COMPATIBLE": "sse", "SSE2": "sse", "SSE3": "sse", "SSSE3": "sse", "SSE4_1": "sse", "SSE4_2": "sse",
    "AVX": "avx", "AVX2": "avx2", "AVX2_E1": "avx2", "AVX512": "avx512", "AVX512_E1": "avx512",
    "AVX512_E2": "avx512", "AVX512_E3": "avx512", "AVX512_E4": "avx512", "AVX512_E5": "avx512",
    "AVX512_MIC": "avx512", "AVX10": "avx512",
}

THREAD_VARIABLES = {  # library -> the variables it reads, first one set wins
    "openblas": ("OPENBLAS_NUM_THREADS", "GOTO_NUM_THREADS", "OMP_NUM_THREADS"),
    "mkl": ("MKL_NUM_THREADS", "OMP_NUM_THREADS"),
    "blis": ("BLIS_NUM_THREADS", "OMP_NUM_THREADS"),
}
# Every variable a BLAS reads that can pin it; the doctor records these in its snapshot.
BLAS_ENV_KEYS = ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE", "OPENBLAS_NUM_THREADS", "GOTO_NUM_THREADS",
                 "OMP_NUM_THREADS", "MKL_NUM_THREADS", "BLIS_NUM_THREADS", "MKL_ENABLE_INSTRUCTIONS", "MKL_CBWR",
                 "OPENBLAS_VERBOSE")


def cpu_level(cpu: CpuInfo) -> str | None:
    """The highest ISA level this CPU runs, in the same scale as the tables above."""
    isa = set(cpu.isa or [])
    if {"avx512f", "avx512bw", "avx512vl"} <= isa:
        return "avx512"
    if {"avx2", "fma"} <= isa:
        return "avx2"
    if "avx" in isa:
        return "avx"
    if "sve" in isa:
        return "sve"
    if "neon" in isa:
        return "neon"
    return "sse" if "sse4.2" in isa else None


def _below(level: str | None, cpu: str | None) -> bool:
    for scale in (X86_LEVELS, ARM_LEVELS):
        if level in scale and cpu in scale:
            return scale.index(level) < scale.index(cpu)
    return False


def _threads(text: str | None) -> int | None:
    """An OMP-style count ("8", or "8,2" for nested levels: the first counts)."""
    try:
        n = int((text or "").split(",")[0].strip())
    except ValueError:
        return None
    return n if n > 0 else None


def _library(blas: str | None) -> str | None:
    name = (blas or "").lower()
    return next((lib for lib in THREAD_VARIABLES if lib in name), None)


def pinned_below(cpu: CpuInfo, environ: Mapping[str, str], blas: str | None = None) -> list[str]:
    """Why the BLAS this environment configures runs below this CPU: one reason per pinning
    variable, empty when nothing pins it. ``blas`` ("scipy-openblas 0.3.27", "mkl", ...) narrows the
    thread variables to the ones that library reads; without it every library's are judged.

    On an AVX-512 CPU, ``pinned_below(cpu, {"OPENBLAS_CORETYPE": "Haswell"})`` is
    ``["OPENBLAS_CORETYPE=Haswell selects avx2 kernels; this CPU runs avx512"]``.
    """
    reasons: list[str] = []
    level = cpu_level(cpu)
    library = _library(blas)
    if library in (None, "openblas"):
        core = (environ.get("OPENBLAS_CORETYPE") or "").strip()
        core_level = OPENBLAS_CORETYPES.get(core.upper())
        if core and _below(core_level, level):
            reasons.append(f"OPENBLAS_CORETYPE={core} selects {core_level} kernels; this CPU runs {level}")
    if library in (None, "mkl"):
        for var in ("MKL_ENABLE_INSTRUCTIONS", "MKL_CBWR"):
            value = (environ.get(var) or "").strip()
            branch = value.split(",")[0].strip().upper()  # MKL_CBWR=AVX2,STRICT
            if value and _below(MKL_BRANCHES.get(branch), level):
                reasons.append(f"{var}={value} caps MKL at {MKL_BRANCHES[branch]} code; this CPU runs {level}")
    cores = cpu.physical_cores or cpu.logical_cores
    if cores:
        for lib, variables in THREAD_VARIABLES.items():
            if library not in (None, lib):
                continue
            var = next((v for v in variables if environ.get(v) is not None), None)
            n = _threads(environ.get(var)) if var else None
            if n is not None and n < cores:
                reason = f"{var}={environ[var]} runs {n} thread{'s' if n != 1 else ''}; this CPU has {cores} cores"
                if reason not in reasons:  # OMP_NUM_THREADS can be every library's answer
                    reasons.append(reason)
    return reasons


def unset_command(environ: Mapping[str, str], reasons: list[str]) -> str:
    """The variables to drop for one command, as `env -u ...` (OPENBLAS_L2_SIZE goes with a pinned
    core type: it is that core's cache size)."""
    names = [r.split("=", 1)[0] for r in reasons]
    if "OPENBLAS_CORETYPE" in names and "OPENBLAS_L2_SIZE" in environ:
        names.append("OPENBLAS_L2_SIZE")
    return "env " + " ".join(f"-u {n}" for n in dict.fromkeys(names))
