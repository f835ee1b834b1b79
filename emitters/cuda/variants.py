"""The CUDA emitter's variants: core family x operation, with what a host needs to run them.

``ALL_VARIANTS`` are rendered and NVRTC-compiled in CI for sm_80 and sm_90a. ``VARIANTS`` (offered to
the planner) holds only those whose kernels ran and verified against the float64 references on a GPU
(docs/device-runs/h200-cuda-kernels-and-tuner/cuda/ keeps the logs of those runs; docs/cuda.md says which).
"""

from __future__ import annotations

from tracea.doctor.errors import BadInputError
from tracea.doctor.variants import Requirements, Variant

TOOLCHAIN = ("nvrtc",)

# (family, op) -> (precisions, min compute capability, priority, description)
TABLE: dict[tuple[str, str], tuple[tuple[str, ...], tuple[int, int], int, str]] = {
    ("cuda-mma-sync", "gemm"): (("bf16", "fp16"), (8, 0), 60,
                                "tensor-core GEMM: mma.sync m16n8k16 fed by ldmatrix, multi-stage cp.async pipeline, "
                                "swizzled shared memory, fused epilogue, fp32 accumulation"),
    ("cuda-mma-sync", "conv2d"): (("bf16", "fp16"), (8, 0), 60,
                                  "implicit-GEMM convolution on the mma.sync core (NCHW/NHWC, magic-number "
                                  "division, hoisted coordinate table)"),
    ("cuda-simt", "gemm"): (("fp32",), (7, 0), 50, "warp-tiled fp32 GEMM on CUDA cores (8x8 per thread, "
                                                     "double-buffered shared tiles)"),
    ("cuda-simt", "conv2d"): (("fp32",), (7, 0), 50, "implicit-GEMM fp32 convolution on the SIMT core"),
    ("cuda-simt", "softmax"): (("fp32", "fp16", "bf16"), (7, 0), 50,
                               "row softmax: one kernel, online max and sum, vectorised, one pass when the row "
                               "fits in registers"),
    # tests/test_cuda_attention_gpu.py: 16 of 16 verified on an H100 (docs/device-runs/h100-splitk-simt-attention/attention-mma-sync/)
    ("cuda-mma-sync", "attention"): (("bf16", "fp16"), (8, 0), 60,
                                     "fused attention forward (FlashAttention-2 style): Q in registers, K/V by cp.async "
                                     "ring, mma.sync, online softmax, masked tiles skipped, lse written"),
}

# Each verified on odd shapes on an NVIDIA H200 (17 of 17 within tolerance: docs/device-runs/h200-cuda-kernels-and-tuner/cuda/smoke-verify,
# docs/device-runs/h200-cuda-kernels-and-tuner/cuda/full-checks-memcheck-api-reports).
REGISTERED: tuple[str, ...] = ("cuda-mma-sync.gemm", "cuda-mma-sync.conv2d", "cuda-simt.gemm", "cuda-simt.conv2d",
                                 "cuda-simt.softmax", "cuda-mma-sync.attention")


# opt-in shared memory per block the largest hero schedule takes: 256x128x32 with 4 stages (mma.sync),
# 128x128x16 double-buffered fp32 tiles (SIMT); softmax needs only its static reduction arrays
MIN_SMEM = {"cuda-mma-sync": 98304, "cuda-simt": 33792}


def make_variant(family: str, op: str) -> Variant:
    precisions, cc, priority, text = TABLE[(family, op)]
    smem = MIN_SMEM.get(family) if op != "softmax" else None
    return Variant(id=f"{family}.{op}", op=op, backend="cuda", family=family, precisions=precisions,
                   requirements=Requirements(toolchain=TOOLCHAIN, min_compute_capability=cc,
                                             min_shared_memory_per_block_bytes=smem),
                   priority=priority, description=text)


ALL_VARIANTS: tuple[Variant, ...] = tuple(make_variant(f, o) for f, o in TABLE)
VARIANTS: tuple[Variant, ...] = tuple(v for v in ALL_VARIANTS if v.id in REGISTERED)

# The Hopper GEMM (hopper/gemm.py, tma.py; issue 5). sm_90 only: wgmma, TMA and setmaxnreg are sm_90a
# instructions (min = max compute capability 9.0); needs the hero's opt-in shared memory (230480 B,
# WgmmaSchedule().smem_bytes; tests/test_cuda_wgmma.py checks the two agree); ranked above
# cuda-mma-sync. Kept out of ALL_VARIANTS, which CI compiles for sm_80 too; verified on an H200
# (docs/device-runs/h200-cuda-kernels-and-tuner/wgmma/, docs/hopper.md).
def hopper_variant(op: str, smem: int, description: str) -> Variant:
    """A cuda-wgmma variant: bf16/fp16, sm_90 exactly (wgmma, TMA and setmaxnreg are sm_90a instructions),
    the hero's opt-in shared memory, ranked above cuda-mma-sync."""
    return Variant(id=f"cuda-wgmma.{op}", op=op, backend="cuda", family="cuda-wgmma", precisions=("bf16", "fp16"),
                   requirements=Requirements(toolchain=TOOLCHAIN, min_compute_capability=(9, 0),
                                             max_compute_capability=(9, 0), min_shared_memory_per_block_bytes=smem),
                   priority=70, description=description)


WGMMA_GEMM = hopper_variant(
    "gemm", 230480, "Hopper GEMM: TMA into 128B-swizzled shared memory, wgmma.mma_async on warpgroups, "
                    "producer/consumer warp specialisation over an mbarrier ring, setmaxnreg, "
                    "persistent L2-grouped tile order, fused epilogue, fp32 accumulation")
VARIANTS = VARIANTS + (WGMMA_GEMM,)

# The Hopper implicit-GEMM convolution (hopper/conv.py): the GEMM's parts with a producer warpgroup
# that gathers the activations by cp.async (NHWC; NCHW through transposes inside the call; bf16/fp16).
# sm_90 only, like cuda-wgmma.gemm; needs its larger hero's opt-in shared memory (128x128 ping-pong,
# 6 stages: 230512 B); ranked above cuda-mma-sync.conv2d. Verified on an H200 (docs/device-runs/h200-cuda-kernels-and-tuner/wgmma_conv/).
WGMMA_CONV = hopper_variant(
    "conv2d", 230512, "Hopper implicit-GEMM convolution (NHWC; NCHW via transposes): filter by TMA, "
                      "activations gathered by a cp.async producer warpgroup into 128B-swizzled shared memory "
                      "(zero fill for padding), wgmma.mma_async consumers, mbarrier ring, persistent tiles, bias")
VARIANTS = VARIANTS + (WGMMA_CONV,)

# The Hopper attention forward (hopper/attention*.py, issue 17): sm_90a only, like the other cuda-wgmma
# variants. Verified on an H100: 30 of 30 cases (O and lse against float64; sequence 1, 17, 1000, seq_q !=
# seq_k, causal, window, block mask, GQA, head dim 64/128/256, bf16 and fp16).
WGMMA_ATTENTION = hopper_variant(
    "attention", 230480, "Hopper attention forward (FlashAttention-3 style): TMA K/V ring over the mask's "
                         "tiles only, producer/consumer warpgroups, wgmma S and register-P P.V, ping-pong and "
                         "intra-warpgroup overlap, log-sum-exp written")
VARIANTS = VARIANTS + (WGMMA_ATTENTION,)


def resolve(variant: Variant | str) -> Variant:
    if isinstance(variant, Variant):
        return variant
    found = next((v for v in ALL_VARIANTS + (WGMMA_GEMM, WGMMA_CONV, WGMMA_ATTENTION) if v.id == variant), None)
    if found is None:
        raise BadInputError(f"variant: unknown CUDA variant {variant!r}; known: {', '.join(v.id for v in ALL_VARIANTS)}")
    return found
