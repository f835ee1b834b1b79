"""The mma.sync attention core: FlashAttention-2-style fused forward (``emitters/cuda/attention.py``,
``attention_kernel.py``; issue 17), with the mma.sync GEMM's shared memory. tests of the CUDA attention on a
GPU: 16 of 16 verified on an H100 (docs/device-runs/h100-splitk-simt-attention/attention-mma-sync/); every
multiple of 16 from 32 to 256 (padded shared rows where the head dim is no multiple of 64): 29 of 29 on an H200
(docs/device-runs/h200-attention-head-dims/); the odd multiples of 8 over the next multiple of 16
(docs/device-runs/h200-attention-odd-head-dims/)."""

from __future__ import annotations

from .. import attention, attention_runtime
from ..core import CudaCore

ORDER = 40  # the registry's order, and its variants'

CORES = (
    CudaCore(name="attention-mma", family="cuda-mma-sync", ops=("attention",),
             schedule=attention.AttentionMmaSchedule, hero=attention.hero_schedule, space=attention.search_space,
             check=attention.check, render=attention.render, kernel=attention_runtime.attention_kernel,
             precisions=("bf16", "fp16"), smem=98304, verified=True, descriptions={
                 "attention": "fused attention forward (FlashAttention-2 style): Q in registers, K/V by cp.async "
                              "ring, mma.sync, online softmax, masked tiles skipped, lse written"}),
)
