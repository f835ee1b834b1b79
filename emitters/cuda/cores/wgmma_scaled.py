"""The Hopper 8-bit GEMM with scales' core: ``emitters/cuda/hopper/scaled_gemm.py`` (FP8 and int8 wgmma on the
GEMM's parts, the schedule the GEMM's ``WgmmaSchedule``). Its hero's opt-in shared memory: 128 x 128 tiles of 8-bit
values, 6 stages and the TMA-store staging (``WgmmaSchedule(bm=128, bn=128, stages=6, store="tma").smem_bytes``)."""

from __future__ import annotations

from typing import Any

from .. import tma
from ..core import CudaCore
from ..hopper import scaled_gemm
from ..hopper.schedule import WgmmaSchedule

ORDER = 51  # the registry's order, and its variants': after the Hopper GEMM and conv


def check(op: Any, v: Any, schedule: Any, arch: Any) -> None:
    """A WgmmaSchedule, the sm_90a target, an 8-bit input the variant computes, and ``scaled_gemm.check``."""
    from tracea.doctor.errors import BadInputError

    if not isinstance(schedule, WgmmaSchedule):
        raise BadInputError(f"schedule: {v.id} takes a wgmma schedule, got {type(schedule).__name__}")
    tma.require_sm90a(op, v, arch, "the CPU backend computes int8 (cuda-wgmma needs sm_90a)")
    scaled_gemm.check(op, schedule, arch.smem_optin)


CORES = (
    CudaCore(name="wgmma", family="cuda-wgmma", ops=("scaled_gemm",), schedule=WgmmaSchedule,
             hero=lambda op, host: scaled_gemm.hero_schedule(op, _sms(host)),
             space=lambda op, _hero, arch: scaled_gemm.search_space_scaled(
                 op, arch.smem_optin, arch.sm_count if arch.sm_count > 1 else 132),
             check=check, render=lambda op, s, arch: (scaled_gemm.rendered(op, s, arch.sm_count),
                                                      scaled_gemm.kernel_scalars(op, s)),
             kernel=scaled_gemm.scaled_kernel, precisions=("fp8e4m3", "fp8e5m2", "int8"), smem=230512,
             descriptions={"scaled_gemm": "Hopper 8-bit GEMM with scales: FP8 (e4m3, e5m2) wgmma promoted to fp32 "
                                          "every 128 of k, or int8 wgmma into int32; per-tensor, per-row or 1x128/"
                                          "128x128 block scales; TMA ring, warp-specialised consumers, split-K; "
                                          "FP8 decode (<= 16 rows) on the TMA-fed gemv"},
             verified=True, refuses=scaled_gemm.refusal),
)


def _sms(host: Any) -> int:
    from .. import mma

    return mma.sm_count(host)
