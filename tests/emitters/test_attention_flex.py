"""The FlexAttention baseline's mask (emitters/baselines/attention.py ``flex_mask_mod``), checked on the CPU: the mask it
expresses equals the op's own keep mask element by element, and FlexAttention (eager, unfused: the same mask
and BlockMask the compiled CUDA baseline uses) matches the float64 reference, rows that keep no key 0.
Skipped without a torch that has FlexAttention; the compiled CUDA path is in test_attention_flex_gpu.py."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from tracea.kernels import relative_error, tolerance
from tracea.kernels.ops.attention import Attention

torch = pytest.importorskip("torch")
pytest.importorskip("torch.nn.attention.flex_attention")


def _tiles(rng: np.random.Generator, grid: tuple[int, int]) -> np.ndarray:
    """About a third of the tiles kept; q block 1 keeps none (its rows: output 0)."""
    bm = rng.random(grid) < 0.35
    bm[0, 0] = True
    bm[1] = False
    return bm


def _cases() -> list[Attention]:
    rng = np.random.default_rng(7)
    return [
        Attention(1, 2, 150, 64, window=(20, 5)),
        Attention(1, 2, 90, 64, seq_k=130, causal=True, window=(30, 30)),  # bottom-right, seq_q < seq_k
        Attention(1, 2, 130, 64, seq_k=70, causal=True, window=(10, 0)),  # seq_q > seq_k: first rows keep nothing
        Attention(1, 4, 100, 64, seq_k=77, kv_heads=2, window=(7, 7)),  # GQA
        Attention(1, 2, 200, 64, block_size=(32, 16), block_mask=_tiles(rng, (7, 13))),
        Attention(1, 2, 256, 128, block_size=(64, 64), causal=True, block_mask=_tiles(rng, (4, 4))),
        Attention(1, 2, 96, 64, seq_k=160, block_size=(32, 32), window=(50, 10), block_mask=_tiles(rng, (3, 5))),
    ]


@pytest.mark.parametrize("op", _cases(), ids=lambda op: op.signature)
def test_mask_mod_is_the_ops_rule(op):
    from torch.nn.attention.flex_attention import create_mask

    from tracea.emitters.baselines.attention import flex_mask_mod

    mask = create_mask(flex_mask_mod(op, torch, "cpu"), None, None, op.seq_q, op.seq_k, device="cpu")
    assert mask.shape[-2:] == (op.seq_q, op.seq_k)
    np.testing.assert_array_equal(mask[0, 0].numpy(), op.keep_mask(0, op.seq_q))


@pytest.mark.parametrize("op", _cases(), ids=lambda op: op.signature)
def test_flex_matches_the_reference(op):
    from tracea.emitters.baselines.attention import torch_flex

    inputs = op.random_inputs(np.random.default_rng(3))
    t = {k: torch.from_numpy(inputs[k]) for k in ("q", "k", "v")}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # eager flex_attention warns that it is unfused
        name, call = torch_flex(op, t, torch, compiled=False)
        out = call().double().numpy()
    ref, lse = op.reference_with_lse(inputs)
    assert name.startswith("flex_attention (eager, BlockMask 128x128")
    assert relative_error(out, ref) <= tolerance(op), name
    empty = np.isneginf(lse)
    assert np.all(out[empty] == 0.0)


def test_masked_ops_and_flex_availability(monkeypatch):
    import builtins

    from tracea.emitters.baselines.attention import flex_available, masked_op

    assert masked_op(Attention(1, 1, 8, 64, window=(1, 1)))
    assert masked_op(Attention(1, 1, 8, 64, block_size=4, block_mask=np.ones((2, 2), bool)))
    assert not masked_op(Attention(1, 1, 8, 64, causal=True))
    assert flex_available(torch) is None
    real = builtins.__import__

    def no_flex(name, *args, **kwargs):
        if name.startswith("torch.nn.attention.flex_attention"):
            raise ImportError(name)
        return real(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_flex)
    assert "has no torch.nn.attention.flex_attention" in flex_available(torch)


def _eager_flex(op, t, torch):
    from tracea.emitters.baselines.attention import torch_flex

    torch_flex = getattr(torch_flex, "real", torch_flex)  # the module's own, where a test stands this one in
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return torch_flex(op, t, torch, compiled=False)


def test_cuda_bench_picks_flex_for_masked_ops_and_sdpa_otherwise(monkeypatch):
    """The CUDA bench's choice, made here on CPU tensors (eager flex for the compiled one): a masked op gets
    FlexAttention with SDPA-with-the-mask beside it, or SDPA alone saying why; a causal op SDPA alone."""
    from tracea.emitters.baselines import attention as attention_baselines

    _eager_flex.real = attention_baselines.torch_flex
    monkeypatch.setattr(attention_baselines, "torch_flex", _eager_flex)
    op = Attention(1, 4, 120, 64, seq_k=150, kv_heads=2, causal=True, window=(40, 0))
    inputs = op.random_inputs(np.random.default_rng(5))
    t = {k: torch.from_numpy(inputs[k]) for k in ("q", "k", "v")}
    ref = op.reference(inputs)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        name, run, also = attention_baselines.device(op, t, torch)
        assert name.startswith("flex_attention") and len(also) == 1 and "explicit boolean mask" in also[0][0]
        for call in (run, also[0][1]):
            assert relative_error(call().double().numpy(), ref) <= tolerance(op)
    monkeypatch.setattr(attention_baselines, "flex_available", lambda torch: "no flex in this torch")
    name, run = attention_baselines.device(op, t, torch)
    assert name.startswith("scaled_dot_product_attention") and name.endswith("[no FlexAttention: no flex in this torch]")
    causal = Attention(1, 2, 64, 64, causal=True)
    made = attention_baselines.device(causal, {k: torch.from_numpy(v) for k, v in
                                                    causal.random_inputs(np.random.default_rng(1)).items()}, torch)
    assert len(made) == 2 and "flex" not in made[0]


def test_the_second_figure_joins_the_baselines_name(monkeypatch):
    """bench_on_device times each ``also`` baseline like the first and writes its figure into the baseline's
    name (the table's row and the JSON's baseline field), the metrics schema unchanged. CPU stand-ins for the
    device's tensors and events."""
    from tracea.emitters import device_baselines
    from tracea.emitters.timing import Timing

    op = Attention(1, 2, 40, 64, window=(4, 4))
    inputs = op.random_inputs(np.random.default_rng(2))
    ref = op.reference(inputs)
    y = torch.from_numpy(ref)
    timings = iter([Timing(2.0, 2.5, 1.9, 10), Timing(8.0, 9.0, 7.5, 10)])
    monkeypatch.setattr(device_baselines, "time_torch", lambda run, warmup, repeats: next(timings))
    monkeypatch.setattr(device_baselines, "torch_baseline", lambda op, inputs: device_baselines.GpuBaseline(
        "torch flex_attention (compiled)", lambda: y, also=(("torch SDPA (explicit boolean mask)", lambda: y),)))

    class StandIn:
        def __call__(self, inputs, out):
            out[...] = ref

        def time(self, inputs, warmup, repeats):
            return Timing(4.0, 4.5, 3.9, 10)

    fields = device_baselines.bench_on_device(StandIn(), op, inputs, ref, tolerance(op), 1, 10)
    assert fields["status"] == "ok" and fields["baseline"].p50_ms == 2.0
    name = fields["baseline_name"]
    assert name.startswith("torch flex_attention (compiled); also timed: torch SDPA (explicit boolean mask): ")
    assert "p50 8.000 ms" in name and "2.00x Tracea's time" in name
