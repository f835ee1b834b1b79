"""The Hopper attention core: attention forward, FlashAttention-3 style (``emitters/cuda/hopper/attention*.py``,
issue 17): TMA K/V ring, ping-pong consumers. Verified on an H100: 30 of 30 cases (O and lse against float64;
sequence 1, 17, 1000, seq_q != seq_k, causal, window, block mask, GQA, head dim 64/128/256, bf16 and fp16);
every multiple of 16 from 32 to 256 (64B- or 32B-swizzled head-dim chunks where the head dim is no multiple of
64): 30 of 30 tests on an H200 (docs/device-runs/h200-attention-head-dims/); the odd multiples of 8 over the next
multiple of 16 (docs/device-runs/h200-attention-odd-head-dims/). Packed variable-length entries
(``hopper/attention_packed.py``): 15 of 15 GPU tests on an H200 (docs/device-runs/h200-packed-prefill/)."""

from __future__ import annotations

from ..core import CudaCore
from ..hopper import attention as hopper_attention
from ..hopper import attention_kernel as hopper_attention_kernel
from ..hopper import attention_schedule as hopper_attention_schedule

ORDER = 60  # the registry's order, and its variants'

CORES = (
    CudaCore(name="wgmma-attention", family="cuda-wgmma", ops=("attention",),
             schedule=hopper_attention_schedule.AttnWgmmaSchedule,
             hero=lambda op, _host: hopper_attention_schedule.hero_schedule(op),
             space=lambda op, _hero, arch: hopper_attention_schedule.search_space(op, arch.smem_optin),
             check=hopper_attention_schedule.check, render=hopper_attention.render,
             kernel=hopper_attention_kernel.WgmmaAttentionKernel, precisions=("bf16", "fp16"), smem=230480,
             descriptions={"attention": "Hopper attention forward (FlashAttention-3 style): TMA K/V ring over the "
                                        "mask's tiles only, producer/consumer warpgroups, wgmma S and register-P "
                                        "P.V, ping-pong and intra-warpgroup overlap, log-sum-exp written"},
             verified=True, packed=True),
)
