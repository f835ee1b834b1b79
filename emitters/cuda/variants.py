"""The CUDA emitter's variants: core family x operation, with what a host needs to run them.

A variant is its family's main core for an op, made from the core's line (``cores.CORES``: the family,
the ops, their precisions, shared memory, descriptions, and whether its kernels were verified), in the
registry's order; what each family needs of the device is listed here. So a new op or core adds its core
line and nothing here.

``ALL_VARIANTS`` are rendered and NVRTC-compiled in CI for sm_80 and sm_90a; the sm_90a-only family
(cuda-wgmma: wgmma, TMA and setmaxnreg are sm_90a instructions) is kept out of it, since CI compiles
``ALL_VARIANTS`` for sm_80 too. ``VARIANTS`` (offered to the planner) holds only those whose kernels ran and
verified against the float64 references on a GPU (docs/device-runs/ keeps the logs of those runs; the
core lines and docs/cuda.md say which).
"""

from __future__ import annotations

from tracea.doctor.errors import BadInputError
from tracea.doctor.variants import Requirements, Variant

from .core import CudaCore
from .cores import BY_VARIANT, CORES

TOOLCHAIN = ("nvrtc",)

# family -> (min compute capability, max compute capability, priority). cuda-wgmma runs on sm_90 exactly
# (min = max 9.0) and is ranked above cuda-mma-sync, which is ranked above the SIMT kernels.
FAMILIES: dict[str, tuple[tuple[int, int], tuple[int, int] | None, int]] = {
    "cuda-mma-sync": ((8, 0), None, 60),
    "cuda-simt": ((7, 0), None, 50),
    "cuda-wgmma": ((9, 0), (9, 0), 70),
}


def make_variant(core: CudaCore, op: str) -> Variant:
    """The variant of ``core``'s family for ``op``: the family's compute capabilities and rank, the core's
    precisions, shared memory and description."""
    cc, max_cc, priority = FAMILIES[core.family]
    return Variant(id=f"{core.family}.{op}", op=op, backend="cuda", family=core.family, precisions=core.precisions,
                   requirements=Requirements(toolchain=TOOLCHAIN, min_compute_capability=cc,
                                             max_compute_capability=max_cc,
                                             min_shared_memory_per_block_bytes=core.smem),
                   priority=priority, description=core.descriptions[op], refuses=core.refuses)


RENDERED: tuple[Variant, ...] = tuple(make_variant(c, op) for c in CORES if c.family for op in c.ops)
ALL_VARIANTS: tuple[Variant, ...] = tuple(v for v in RENDERED if v.requirements.max_compute_capability is None)
VARIANTS: tuple[Variant, ...] = tuple(v for v in RENDERED if BY_VARIANT[(v.family, v.op)].verified)


def resolve(variant: Variant | str) -> Variant:
    if isinstance(variant, Variant):
        return variant
    found = next((v for v in RENDERED if v.id == variant), None)
    if found is None:
        raise BadInputError(f"variant: unknown CUDA variant {variant!r}; known: {', '.join(v.id for v in ALL_VARIANTS)}")
    return found
