"""What NVML does not say, by compute capability (CUDA C++ Programming Guide, "Compute Capabilities",
and the architecture whitepapers). Used when cuda-core is absent, and always for the per-SM unit counts
behind the spec ceilings. Values from this table are marked ``table:ccX.Y`` in the report.
"""

from __future__ import annotations

from dataclasses import dataclass

KIB = 1024


@dataclass(frozen=True)
class ArchSpec:
    architecture: str
    tensor_core_generation: str | None
    precisions: tuple[str, ...]  # tensor-core input precisions
    shared_memory_per_block_optin_bytes: int
    shared_memory_per_sm_bytes: int
    max_threads_per_sm: int
    registers_per_sm: int
    cores_per_sm: int  # FP32 lanes: NVML's GPU core count / this = SM count
    cluster_launch: bool
    tma: bool
    # Dense FLOP per clock per SM (an FMA counts two), per precision; "fp32"/"fp64" are the CUDA cores.
    flops_per_clock_per_sm: dict[str, int]


def _spec(arch, gen, prec, optin_kib, sm_kib, threads, cores, flops, hopper=False) -> ArchSpec:
    return ArchSpec(arch, gen, prec, optin_kib * KIB, sm_kib * KIB, threads, 65536, cores, hopper, hopper, flops)


SPECS: dict[tuple[int, int], ArchSpec] = {
    (7, 0): _spec("Volta", "1st gen", ("fp16",), 96, 96, 2048, 64,
                  {"fp32": 128, "fp64": 64, "fp16": 1024}),
    (7, 5): _spec("Turing", "2nd gen", ("fp16", "int8"), 64, 64, 1024, 64,
                  {"fp32": 128, "fp64": 4, "fp16": 1024, "int8": 2048}),
    (8, 0): _spec("Ampere", "3rd gen", ("fp16", "bf16", "tf32", "int8", "fp64"), 163, 164, 2048, 64,
                  {"fp32": 128, "fp64": 64, "fp16": 2048, "bf16": 2048, "tf32": 1024, "int8": 4096}),
    (8, 6): _spec("Ampere", "3rd gen", ("fp16", "bf16", "tf32", "int8"), 99, 100, 1536, 128,
                  {"fp32": 256, "fp64": 4, "fp16": 1024, "bf16": 1024, "tf32": 512, "int8": 2048}),
    # Jetson Orin: GA100-class tensor cores (85 dense INT8 TOPS = 16 SMs x 1.3 GHz x 4096)
    (8, 7): _spec("Ampere", "3rd gen", ("fp16", "bf16", "tf32", "int8"), 163, 164, 1536, 128,
                  {"fp32": 256, "fp64": 4, "fp16": 2048, "bf16": 2048, "tf32": 1024, "int8": 4096}),
    (8, 9): _spec("Ada Lovelace", "4th gen", ("fp16", "bf16", "tf32", "fp8", "int8"), 99, 100, 1536, 128,
                  {"fp32": 256, "fp64": 4, "fp16": 1024, "bf16": 1024, "tf32": 512, "fp8": 2048, "int8": 2048}),
    (9, 0): _spec("Hopper", "4th gen (wgmma)", ("fp16", "bf16", "tf32", "fp8", "int8", "fp64"), 227, 228, 2048, 128,
                  {"fp32": 256, "fp64": 128, "fp16": 4096, "bf16": 4096, "tf32": 2048, "fp8": 8192, "int8": 8192},
                  hopper=True),
    (10, 0): _spec("Blackwell", "5th gen (tcgen05)", ("fp16", "bf16", "tf32", "fp8", "fp6", "fp4", "int8", "fp64"),
                   227, 228, 2048, 128,
                   {"fp32": 256, "fp64": 128, "fp16": 8192, "bf16": 8192, "tf32": 4096, "fp8": 16384, "int8": 16384},
                   hopper=True),
    (12, 0): _spec("Blackwell", "5th gen", ("fp16", "bf16", "tf32", "fp8", "fp6", "fp4", "int8"), 99, 100, 1536, 128,
                   {"fp32": 256, "fp64": 4, "fp16": 1024, "bf16": 1024, "tf32": 512, "fp8": 2048, "int8": 2048},
                   hopper=True),
}

# L2 size and SM count vary within one compute capability; these are per product, by NVML name.
PRODUCTS: dict[str, dict[str, int]] = {
    "NVIDIA H100 80GB HBM3": {"sm_count": 132, "l2_cache_bytes": 50 * 1024 * KIB},
    "NVIDIA H100 PCIe": {"sm_count": 114, "l2_cache_bytes": 50 * 1024 * KIB},
    "NVIDIA H100 NVL": {"sm_count": 132, "l2_cache_bytes": 50 * 1024 * KIB},
    "NVIDIA H200": {"sm_count": 132, "l2_cache_bytes": 60 * 1024 * KIB},
    "NVIDIA A100-SXM4-80GB": {"sm_count": 108, "l2_cache_bytes": 40 * 1024 * KIB},
    "NVIDIA A100-SXM4-40GB": {"sm_count": 108, "l2_cache_bytes": 40 * 1024 * KIB},
    "NVIDIA A100 80GB PCIe": {"sm_count": 108, "l2_cache_bytes": 40 * 1024 * KIB},
    "NVIDIA L4": {"sm_count": 58, "l2_cache_bytes": 48 * 1024 * KIB},
    "NVIDIA L40S": {"sm_count": 142, "l2_cache_bytes": 96 * 1024 * KIB},
    "Tesla T4": {"sm_count": 40, "l2_cache_bytes": 4 * 1024 * KIB},
    "Tesla V100-SXM2-16GB": {"sm_count": 80, "l2_cache_bytes": 6 * 1024 * KIB},
}


# Compute capabilities shared by GeForce and professional cards: the table holds the professional
# (and fp16-accumulate) tensor rates; GeForce cards run fp16/bf16 with fp32 accumulate at half.
HALF_RATE_ON_GEFORCE = {(8, 6), (8, 9), (12, 0)}


def spec_for(cc: tuple[int, int] | None) -> ArchSpec | None:
    """The spec of a compute capability; an unknown minor falls back to its major's first entry."""
    if cc is None:
        return None
    if cc in SPECS:
        return SPECS[cc]
    same_major = sorted(k for k in SPECS if k[0] == cc[0] and k[1] <= cc[1])
    return SPECS[same_major[-1]] if same_major else None


