"""The Metal attention forward (emitters/metal/attention.py, cores/attention.py): its schedule's JSON and
checks, what it refuses, its hero, space and launch, and the rendered MSL run through the CPU simulator
(emitters/metal/simulate.py) on fresh random inputs against the op's float64 reference within the op's
tolerance: causal and not, seq_q above and below seq_k (rows that keep no key give 0), grouped-query and
multi-query heads, head dims 64, 128, 40 and 256, lengths that fill no block, each dtype, and each distinct
form of a sample of the search space."""

from __future__ import annotations

import random
import re

import numpy as np
import pytest

from tracea.doctor.errors import BadInputError, UnsupportedError
from tracea.emitters.metal import attention as at
from tracea.emitters.metal import simulate
from tracea.emitters.metal.core import KERNEL_BUILTINS, THREADGROUP_MEMORY
from tracea.emitters.metal.cores import CORES, core_for
from tracea.kernels.dtypes import to_float64
from tracea.kernels.op import relative_error, tolerance
from tracea.kernels.ops.attention import Attention

CORE = CORES["attention"]
NAN_BITS = {"fp32": np.float32(np.nan), "fp16": np.float16(np.nan), "bf16": np.uint16(0x7FC0)}


# ---------------------------------------------------------------------------------------------- schedule

def test_the_schedule_reads_back_from_its_json_and_refuses_others():
    s = at.MetalAttentionSchedule(simdgroups=2, bk=16, kv_tiles=1)
    assert s.to_json() == {"backend": "metal", "kind": "metal-attention", "simdgroups": 2, "bk": 16, "kv_tiles": 1}
    assert at.MetalAttentionSchedule.from_json(s.to_json()) == s and s.name == "attn_q16_k16_t1" and s.bq == 16
    for bad, word in (({**s.to_json(), "kind": "metal-softmax"}, "kind"), ({**s.to_json(), "bq": 3}, "bq"),
                      ({**s.to_json(), "bk": 24}, "bk"), ({**s.to_json(), "kv_tiles": 3}, "kv_tiles"),
                      ({**s.to_json(), "simdgroups": 16}, "simdgroups"), ({"kind": "metal-attention"}, "missing"),
                      ([1], "JSON object")):
        with pytest.raises(BadInputError, match=word):
            at.MetalAttentionSchedule.from_json(bad)


@pytest.mark.parametrize("fields, word", [
    ({"window": (16, 0)}, "sliding windows"),
    ({"block_mask": ("10", "11"), "block_size": (64, 64), "seq_q": 128}, "block masks"),
    ({"seq_lens": (40, 64)}, "serving forms"),
    ({"page_size": 16}, "serving forms"),
    ({"seq_lens": (40, 64), "packed": True, "seq_q": 128}, "serving forms"),
])
def test_the_core_refuses_what_the_kernel_does_not_compute_in_one_line(fields, word):
    op = Attention(**{"batch": 2, "heads": 4, "seq_q": 64, "head_dim": 64, "seq_k": 128, **fields})
    with pytest.raises(UnsupportedError, match=word) as e:
        core_for(op)
    assert "\n" not in str(e.value) and "--backend cpu" in e.value.hint


def test_offsets_past_32_bits_are_refused():
    with pytest.raises(UnsupportedError, match="32-bit offsets"):
        core_for(Attention(64, 32, 16384, 128, dtype="fp16"))
    assert core_for(Attention(1, 2, 8, 64)) is CORE


def test_the_hero_fills_the_gpu_before_it_grows_the_block():
    """Blocks of a K/V head's group's rows: as many as fill the GPU's cores, 32 rows at most."""
    assert CORE.hero(Attention(4, 32, 4096, 128), 10) == at.MetalAttentionSchedule(4, 16, 2)
    assert CORE.hero(Attention(4, 32, 4096, 64), 10) == at.MetalAttentionSchedule(4, 32, 2)
    assert CORE.hero(Attention(1, 8, 1, 128, seq_k=4096), 10).simdgroups == 1  # decode: one query a head
    assert CORE.hero(Attention(1, 32, 1, 128, seq_k=4096, kv_heads=8), 10).simdgroups == 1  # a group's 4 rows
    assert CORE.hero(Attention(2, 32, 16, 128, kv_heads=4), 10).simdgroups == 4  # 8 heads x 16: 128 rows
    assert CORE.hero(Attention(1, 2, 64, 64), 10).simdgroups == 1  # 4 heads-blocks of 32 would idle cores
    assert CORE.hero(Attention(1, 2, 64, 256), 10) == at.MetalAttentionSchedule(1, 16, 1)


@pytest.mark.parametrize("head_dim, count", [(64, 28), (128, 20), (256, 12)])
def test_the_space_is_every_form_whose_tiles_fit_the_hero_first(head_dim, count):
    op = Attention(2, 8, 300, head_dim, dtype="fp16")
    hero = CORE.hero(op, 10)
    space = CORE.space(op, hero)
    assert space[0] == hero and len(set(space)) == len(space) == count
    for s in space:
        s.validate(op)
        assert s.threadgroup_bytes(head_dim) <= THREADGROUP_MEMORY
    with pytest.raises(BadInputError, match="threadgroup memory"):
        at.MetalAttentionSchedule(4, 64, 2).validate(Attention(1, 1, 8, 128))


def plausible_msl(launch) -> None:
    """Buffers in the launch's order, then the five built-ins; threadgroup float tiles at the top of the body
    and the launch's bytes; no half literal; threads a multiple of 32."""
    src = launch.source
    assert src.startswith("#include <metal_stdlib>\nusing namespace metal;\n")
    assert not re.search(r"\b\d+(\.\d*)?h\b", src), "a half literal"
    head = src[src.index("kernel void"):src.index(") {", src.index("kernel void"))]
    assert re.findall(r"\[\[buffer\((\d+)\)\]\]", head) == [str(i) for i in range(len(launch.args))]
    assert head.endswith(",\n        ".join(KERNEL_BUILTINS))
    body = src[src.index(") {", src.index("kernel void")) + 3:].splitlines()
    tiles = [int(n) for n in re.findall(r"^    threadgroup float \w+\[(\d+)\];$", "\n".join(body[1:3]), re.M)]
    assert 4 * sum(tiles) == launch.threadgroup_bytes and "threadgroup float" not in "\n".join(body[1 + len(tiles):])
    assert launch.threads % 32 == 0 and launch.threads <= 1024


@pytest.mark.parametrize("dtype", ["fp32", "fp16", "bf16"])
def test_every_form_of_the_space_renders_in_the_subset(dtype):
    op = Attention(2, 8, 100, 128, seq_k=70, kv_heads=2, dtype=dtype, causal=True, scale=0.2)
    sources = set()
    for s in CORE.space(op, CORE.hero(op, 10)):
        launch = CORE.render(op, s)
        plausible_msl(launch)
        assert launch.grid == (-(-400 // s.bq), 2, 2) and launch.block == (32 * s.simdgroups, 1, 1)
        assert launch.args[:-1] == (("in", "q"), ("in", "k"), ("in", "v"), ("out", None), ("i32", 100),
                                    ("i32", 70), ("i32", 8), ("i32", 2), ("i32", 1))
        assert launch.args[-1] == ("f32", pytest.approx(0.2 / np.log(2)))
        sources.add(launch.source)
    assert len(sources) == 20


@pytest.mark.parametrize("head_dim", [40, 64, 128, 256])
def test_the_fragment_loads_are_conflict_free_under_the_assumed_bank_model(head_dim):
    """K^T loads (a 4-byte word a lane, two accesses) at k_stride and V loads (a lane's pair, 8 bytes) at
    v_stride take one wavefront each under tg_banks.py's assumed Apple model; K at V's stride would not."""
    from tracea.emitters.bank_access import AccessBatch
    from tracea.emitters.bank_sim import simulate as score
    from tracea.emitters.metal.tg_banks import MODEL, fragment_place

    r, c = fragment_place(np.arange(32))

    def wavefronts(rows: list, nbytes: int) -> tuple[int, int]:
        t = score(AccessBatch.uniform("ld", nbytes, np.array(rows), model=MODEL)).totals()
        return t["wavefronts"], t["ideal"]

    def k_loads(ld: int) -> list:
        return [4 * ((n * 8 + c + t) * ld + i * 8 + r) for n in range(4) for i in range(head_dim // 8) for t in (0, 1)]

    kt, vt = at.k_stride(head_dim), at.v_stride(head_dim)
    v_loads = [4 * ((n * 8 + r) * vt + i * 8 + c) for n in range(4) for i in range(head_dim // 8)]
    assert kt % 8 == 4 and vt % 16 == 8
    k_cost, v_cost = wavefronts(k_loads(kt), 4), wavefronts(v_loads, 8)
    assert k_cost[0] == k_cost[1] and v_cost[0] == v_cost[1]
    assert wavefronts(k_loads(vt), 4)[0] >= 2 * k_cost[1]


# ---------------------------------------------------------------------------------------- run on the CPU

def run_attention(op: Attention, schedule: at.MetalAttentionSchedule | None = None, seed: int = 0) -> np.ndarray:
    """The kernel's output in float64 on fresh inputs (O pre-filled with NaN), asserted within the op's
    tolerance of its float64 reference."""
    schedule = schedule or CORE.hero(op, 10)
    inputs = op.random_inputs(np.random.default_rng(seed))
    out = np.full(op.output_shape(), NAN_BITS[op.dtype.value])
    simulate.run(CORE.render(op, schedule), inputs, out)
    got = to_float64(out, op.dtype)
    err = relative_error(got, op.reference(inputs))
    assert err <= tolerance(op), f"{op.signature} {schedule.name}: relative error {err:.3g}"
    return got


CASES = {
    "seq_q>seq_k": dict(batch=1, heads=2, seq_q=20, head_dim=64, seq_k=13),
    "causal,gqa,seq_q<seq_k": dict(batch=2, heads=4, seq_q=37, head_dim=64, seq_k=50, kv_heads=2, causal=True),
    "causal,seq_q>seq_k,d128": dict(batch=1, heads=2, seq_q=29, head_dim=128, seq_k=19, causal=True),
    "decode,gqa": dict(batch=2, heads=8, seq_q=1, head_dim=64, seq_k=45, kv_heads=2, causal=True),
}


@pytest.mark.parametrize("dtype", ["fp32", "fp16", "bf16"])
@pytest.mark.parametrize("case", list(CASES))
def test_the_hero_matches_the_reference(case, dtype):
    op = Attention(**CASES[case], dtype=dtype)
    got = run_attention(op, seed=len(case))
    if op.causal and op.seq_q > op.seq_k:  # query i keeps keys j <= i - (seq_q - seq_k): none before that
        assert (got[:, :, :op.seq_q - op.seq_k] == 0).all() and (got[:, :, op.seq_q - op.seq_k:] != 0).any()


@pytest.mark.parametrize("fields, schedule", [
    (dict(batch=1, heads=4, seq_q=21, head_dim=40, seq_k=27, kv_heads=1, dtype="fp16"),
     at.MetalAttentionSchedule(2, 8, 1)),
    (dict(batch=1, heads=2, seq_q=11, head_dim=256, seq_k=24, causal=True, dtype="bf16"), None),
    (dict(batch=1, heads=3, seq_q=9, head_dim=64, seq_k=70, kv_heads=1, scale=0.5, dtype="fp32"), None),
    (dict(batch=1, heads=4, seq_q=13, head_dim=64, seq_k=30, kv_heads=1, causal=True, dtype="fp32"),
     at.MetalAttentionSchedule(2, 8, 2)),
], ids=["d40,mqa,fp16", "d256,causal,bf16", "multi-query,scale,fp32", "causal,blocks-spanning-heads,fp32"])
def test_other_head_dims_multi_query_a_scale_and_blocks_across_heads(fields, schedule):
    """The last: 16-row blocks of a group of 4 heads of 13 queries, so a block holds the end of one head and
    the start of the next, and its causal keys run to the first head's last query's diagonal."""
    run_attention(Attention(**fields), schedule, seed=11)


def test_a_sample_of_the_search_space_each_form_once():
    """Eight forms of the space at head dim 64 (a fixed seed, the hero first), the dtypes taken in turn, on
    a causal grouped-query op whose lengths fill no block."""
    fields = dict(batch=1, heads=4, seq_q=45, head_dim=64, seq_k=71, kv_heads=2, causal=True)
    op0 = Attention(**fields)
    space = CORE.space(op0, CORE.hero(op0, 10))
    forms = [space[0], *random.Random(5).sample(space[1:], 7)]
    dtypes = ("fp32", "fp16", "bf16")
    seen = set()
    for i, s in enumerate(forms):
        op = Attention(**fields, dtype=dtypes[i % 3])
        seen.add(CORE.render(op, s).source)
        run_attention(op, s, seed=i)
    assert len(seen) == len(forms)
