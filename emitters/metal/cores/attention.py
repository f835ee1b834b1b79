"""The Metal attention's core: ``emitters/metal/attention.py``, the fused forward on 8 x 8 simdgroup
matrices with the online softmax in registers (causal, grouped-query heads)."""

from __future__ import annotations

from typing import Any

from .. import attention as at
from ..core import Launch, MetalCore

ORDER = 40  # the registry's order, and its variants'


def attention_hero(op: Any, gpu_cores: int) -> at.MetalAttentionSchedule:
    """32 query rows a threadgroup (fewer where that leaves GPU cores idle or a K/V head's group has few rows);
    32 keys a step in two tiles up to head dim 64, 16 in two tiles up to 128, 16 in one tile beyond (at most 18 KiB
    of threadgroup memory). Not measured: no Apple GPU here."""
    sg, rows = 4, at.group_rows(op)
    while sg > 1 and (8 * sg >= 2 * rows or -(-rows // (8 * sg)) * op.kv_heads * op.batch < gpu_cores):
        sg //= 2
    if op.head_dim <= 64:
        return at.MetalAttentionSchedule(simdgroups=sg, bk=32, kv_tiles=2)
    return at.MetalAttentionSchedule(simdgroups=sg, bk=16, kv_tiles=2 if op.head_dim <= 128 else 1)


def attention_space(op: Any, hero: at.MetalAttentionSchedule) -> list[at.MetalAttentionSchedule]:
    """Every simdgroup count, key step and tile count whose tiles fit 32 KiB at the op's head dim; the
    heuristic's first."""
    out = [hero]
    for sg in at.SIMDGROUPS:
        for bk in at.BKS:
            for tiles in at.KV_TILES:
                s = at.MetalAttentionSchedule(simdgroups=sg, bk=bk, kv_tiles=tiles)
                if s != hero and s.threadgroup_bytes(op.head_dim) <= at.THREADGROUP_MEMORY:
                    out.append(s)
    return out


def attention_check(op: Any, variant: Any, schedule: Any, host: Any) -> None:
    schedule.validate(op, host)


def attention_launch(op: Any, schedule: at.MetalAttentionSchedule) -> Launch:
    args = (("in", "q"), ("in", "k"), ("in", "v"), ("out", None), ("i32", op.seq_q), ("i32", op.seq_k),
            ("i32", op.heads), ("i32", op.kv_heads), ("i32", int(op.causal)), ("f32", at.scale_log2(op)))
    return Launch(at.KERNEL, at.render(op.dtype.value, op.head_dim, schedule), at.grid(op, schedule),
                  (schedule.threads, 1, 1), args, schedule.threadgroup_bytes(op.head_dim))


CORES = (
    MetalCore(name="attention", ops=("attention",), family="metal-simdgroup", schedule=at.MetalAttentionSchedule,
              check_op=at.check_attention, hero=attention_hero, space=attention_space, check=attention_check,
              render=attention_launch,
              descriptions={"attention": "fused attention forward: Q K^T and P V on 8 x 8 simdgroup matrices, online "
                                         "softmax in registers, causal, grouped-query heads"}),
)
