"""The CUDA bench's attention baselines on a real GPU (skipped cleanly without one): for a window or a block
mask, FlexAttention compiled with a BlockMask is the baseline and SDPA with the explicit boolean mask is timed
in the same run beside it; both verified against the float64 reference on fresh random inputs (rows that keep
no key: 0). Dense and causal ops keep SDPA's fastest backend."""

from __future__ import annotations

import numpy as np
import pytest

from tracea.kernels import relative_error, tolerance
from tracea.kernels.ops.attention import Attention

pytestmark = pytest.mark.gpu


def _tiles(rng: np.random.Generator, grid: tuple[int, int], density: float = 0.25) -> np.ndarray:
    bm = rng.random(grid) < density
    bm[:, 0] |= ~bm.any(axis=1)
    bm[1] = False  # q block 1 keeps nothing: its rows are 0
    return bm


def _cases() -> list[Attention]:
    # the masks are part of the test's identity (their hash is in its id): the same in every process, so
    # that pytest-xdist's workers collect the same tests; the inputs each test draws stay fresh
    rng = np.random.default_rng(20261128)
    return [
        Attention(1, 4, 2048, 128, window=(256, 256), dtype="bf16"),
        Attention(1, 4, 1000, 64, seq_k=1300, causal=True, window=(200, 0), dtype="fp16"),  # bottom-right
        Attention(1, 4, 1300, 64, seq_k=1000, causal=True, window=(100, 0), dtype="bf16"),  # rows with no key
        Attention(2, 8, 777, 128, kv_heads=2, window=(64, 16), dtype="bf16"),  # GQA, a partial last tile
        Attention(1, 4, 2048, 128, dtype="bf16", block_mask=_tiles(rng, (16, 16))),  # 25 %, 128-blocks
        Attention(1, 2, 1000, 64, block_size=(64, 32), causal=True, dtype="fp16", block_mask=_tiles(rng, (16, 32))),
    ]


def _check(op: Attention, run, ref: np.ndarray, empty: np.ndarray, what: str) -> None:
    y = run().float().double().cpu().numpy()
    assert relative_error(y, ref) <= tolerance(op), (what, op.signature)
    assert np.all(y[empty] == 0.0), (what, op.signature)


@pytest.mark.parametrize("op", _cases(), ids=lambda op: op.signature)
def test_masked_ops_get_flex_and_sdpa_with_the_mask(op):
    from tracea.emitters.device_baselines import torch_baseline

    inputs = op.random_inputs(np.random.default_rng())
    ref, lse = op.reference_with_lse(inputs)
    base = torch_baseline(op, inputs)
    assert base.run is not None, base.reason
    assert "flex_attention (compiled, BlockMask 128x128" in base.name, base.name
    assert len(base.also) == 1 and "explicit boolean mask" in base.also[0][0], base.also
    empty = np.isneginf(lse)
    _check(op, base.run, ref, empty, base.name)
    _check(op, base.also[0][1], ref, empty, base.also[0][0])


@pytest.mark.parametrize("op", [Attention(1, 8, 1024, 128, dtype="bf16"),
                                Attention(1, 8, 1024, 64, causal=True, dtype="fp16")], ids=lambda op: op.signature)
def test_dense_and_causal_keep_sdpa(op):
    from tracea.emitters.device_baselines import torch_baseline

    base = torch_baseline(op, op.random_inputs(np.random.default_rng()))
    assert "scaled_dot_product_attention" in base.name and "flex" not in base.name and base.also == ()


def test_the_second_figure_joins_the_report():
    """bench_on_device times the SDPA-with-mask figure too and writes it into the baseline's name (the table's
    row and the JSON's baseline field). A stand-in kernel (torch's own result, timed by events) plays Tracea."""
    import torch

    from tracea.emitters.device_baselines import bench_on_device, time_torch
    from tracea.kernels.dtypes import to_storage

    op = Attention(1, 4, 1024, 64, window=(128, 0), dtype="bf16")
    inputs = op.random_inputs(np.random.default_rng())
    ref = op.reference(inputs)

    class StandIn:
        def __call__(self, inputs, out):
            out[...] = to_storage(ref, op.dtype)

        def time(self, inputs, warmup, repeats):
            x = torch.ones(1 << 20, device="cuda")
            return time_torch(lambda: x.mul_(1.0), warmup, repeats)

    fields = bench_on_device(StandIn(), op, inputs, ref, tolerance(op), 1, 10)
    assert fields["status"] == "ok", fields
    assert fields["baseline_name"].count("also timed:") == 1 and "explicit boolean mask" in fields["baseline_name"]
    assert fields["baseline"].p50_ms > 0 and fields["baseline_rel_err"] <= tolerance(op)
