"""The CPU search space, --space TOML files, and the encoding the Gaussian process sees."""

from __future__ import annotations

import dataclasses
import math

import pytest

from tracea.doctor import probe
from tracea.doctor.errors import BadInputError
from tracea.emitters import cpu
from tracea.emitters.cpu.schedule import FAMILY_REGISTERS
from tracea.emitters.cpu.space import micro_kernels, thread_counts
from tracea.kernels import Conv2d, Gemm, Softmax
from tracea.tuner.space import apply_space_file, build_space, encode, read_space_file


@pytest.fixture(scope="module")
def host():
    return probe()


@pytest.mark.parametrize("family", sorted(FAMILY_REGISTERS))
def test_micro_kernels_fill_the_register_file_and_fit(family) -> None:
    lanes, vregs = FAMILY_REGISTERS[family]
    shapes = micro_kernels(family)
    assert shapes and len(set(shapes)) == len(shapes)
    for mr, nr in shapes:
        vectors = nr // lanes
        assert nr % lanes == 0 and mr * vectors + vectors + 1 <= vregs
        assert mr * vectors >= 0.6 * vregs


@pytest.mark.parametrize("op", [Gemm(m=512, n=384, k=256), Gemm(m=100, n=70, k=1000, dtype="bf16"),
                                Conv2d(n=1, c=32, h=28, w=28, k=64, r=3, s=3), Softmax(rows=64, cols=512)],
                         ids=["gemm", "gemm-bf16-odd", "conv2d", "softmax"])
def test_cpu_space_is_valid_unique_and_hero_first(op, host) -> None:
    variant = f"cpu-portable.{op.kind}"
    space = cpu.search_space(op, variant, host)
    assert space[0] == dataclasses.replace(space[0])  # a CpuSchedule value
    hero = cpu.hero_schedule(op, variant, host)
    assert (space[0].mr, space[0].nr, space[0].threads) == (hero.mr, hero.nr, hero.threads)
    assert len(set(space)) == len(space)
    for s in space:
        s.validate(op, host, variant)  # raises on an invalid candidate
    if op.kind == "gemm":
        assert all(s.mc <= -(-op.m // s.mr) * s.mr and s.nc <= -(-op.n // s.nr) * s.nr for s in space)
        assert len(space) > 50
    assert {s.threads for s in space} == set(thread_counts(host))


def test_space_file_restricts_and_extends(tmp_path, host) -> None:
    op = Gemm(m=256, n=256, k=256)
    base = build_space(op, "cpu-portable.gemm", host, cpu)
    f = tmp_path / "space.toml"
    f.write_text("[restrict]\nkc = [128, 768]\nunroll = [2]\n\n[extend]\nkc = [768]\n")
    spec = read_space_file(f)
    space = build_space(op, "cpu-portable.gemm", host, cpu, f)
    assert spec == {"restrict": {"kc": [128, 768], "unroll": [2]}, "extend": {"kc": [768]}}
    assert {s.kc for s in space} == {128, 768} and {s.unroll for s in space} == {2}
    assert 768 not in {s.kc for s in base}  # the extension added values the default space lacks
    assert len(space) == len(set(space))


@pytest.mark.parametrize("text, message", [
    ("[restrict]\nkc = 128\n", "non-empty list"),
    ("[restrict]\nwarps = [4]\n", "not a schedule field"),
    ("[shrink]\nkc = [1]\n", "unknown table"),
    ("[restrict\n", "not valid TOML"),
    ("[restrict]\nkc = [3]\n", "no valid candidate"),
])
def test_bad_space_files_are_bad_input(tmp_path, host, text, message) -> None:
    f = tmp_path / "bad.toml"
    f.write_text(text)
    with pytest.raises(BadInputError, match=message):
        build_space(Gemm(m=64, n=64, k=64), "cpu-portable.gemm", host, cpu, f)


def test_extended_values_are_validated(host) -> None:
    op = Gemm(m=64, n=64, k=64)
    base = cpu.search_space(op, "cpu-portable.gemm", host)[:5]
    out = apply_space_file(base, {"extend": {"threads": [100000]}},
                           lambda s: s.threads <= (host.cpu.logical_cores or 1))
    assert out == base  # every extended candidate failed validation


def test_encoding_is_scaled_and_drops_constant_columns() -> None:
    scheds = [{"schema_version": 1, "backend": "cpu", "mr": 4, "nr": 16, "kc": k, "swz": sw, "pack": p}
              for k, sw, p in [(64, "none", True), (256, "xor4", False), (1024, "none", True)]]
    x = encode(scheds)
    assert x.shape == (3, 4)  # kc, pack, swz one-hot x2; mr and nr are constant
    assert x.min() == 0.0 and x.max() == 1.0
    kc_col = x[:, 0]
    lg = [math.log2(v + 1) for v in (64, 256, 1024)]
    assert kc_col[1] == pytest.approx((lg[1] - lg[0]) / (lg[2] - lg[0]))  # sizes on a log2 scale


def test_cuda_space_file_swizzles_are_validated_and_bank_pruned(tmp_path) -> None:
    """A --space file on the CUDA backend: extended candidates pass the CUDA checks (no GPU: the H200
    snapshot names the target), and named swizzles the bank simulator finds conflicting are dropped while
    auto (the emitter's conflict-free choice) and conflict-free named ones stay."""
    from pathlib import Path

    from tracea.doctor.snapshot import load_snapshot
    from tracea.emitters import cuda

    snap = load_snapshot(Path(__file__).parents[1] / "fixtures" / "snapshots" / "h200_live.json")
    op = Gemm(m=4096, n=4096, k=4096, dtype="bf16")
    f = tmp_path / "space.toml"
    f.write_text('[restrict]\nbm = [128]\nbn = [128]\nbk = [64]\nstages = [3]\n\n'
                 '[extend]\nswizzle = ["none", "xor8", "sw<3,4,3>", "nonsense"]\n')
    pruned: list[str] = []
    space = build_space(op, "cuda-mma-sync.gemm", snap, cuda, f, pruned=pruned)
    swizzles = {s.swizzle for s in space}
    assert swizzles == {"auto", "xor8"}  # xor8 on 128-byte lines is conflict-free; "nonsense" does not parse
    assert pruned and all(("none" in p or "sw<3,4,3>" in p) and "conflict wavefronts" in p for p in pruned)
    assert len(pruned) == 2 * len([s for s in space if s.swizzle == "auto"])
    from tracea.emitters.bank_sim import simulate
    from tracea.emitters.cuda.smem import mainloop_accesses

    for s in space:  # what is kept really is conflict-free in the simulator
        assert simulate(mainloop_accesses(op, s)).totals()["conflicts"] == 0


def test_cuda_schedules_of_every_core_decode_and_name_from_json() -> None:
    """The tuner names and features recorded CUDA schedules from their JSON alone (simulation mode has no
    GPU and no hero to take the class from): Hopper GEMM and conv schedules as well as CudaSchedule."""
    from tracea.emitters.cuda import CudaSchedule, schedule_from_json, tuning_features
    from tracea.emitters.cuda.hopper.conv_heroes import conv_hero_schedule as conv_hero
    from tracea.emitters.cuda.hopper.schedule import hero_schedule as gemm_hero
    from tracea.tuner.run_setup import schedule_name

    op = Gemm(m=4096, n=4096, k=4096, dtype="bf16")
    for s in (gemm_hero(op), conv_hero(), CudaSchedule("mma", 128, 128, 64, 64, 32, 3, raster=8)):
        assert schedule_from_json(s.to_json()) == s
        assert schedule_name("cuda", s.to_json()) == s.name
    f = tuning_features(op, gemm_hero(op).to_json())
    assert f["warps"] == gemm_hero(op).threads // 32 and f["tiles"] == (4096 // gemm_hero(op).bm) * (4096 // gemm_hero(op).bn)


def test_a_space_file_applies_to_a_mix_of_schedule_types() -> None:
    """A small-M GEMM's space holds gemv schedules beside the tiled cores': a field of either type may be
    extended or restricted; the other type's candidates are left as they are, or dropped by a restrict."""
    from tracea.emitters.cuda.gemv import GemvSchedule
    from tracea.emitters.cuda.schedule import CudaSchedule

    tiled, small = CudaSchedule("mma", bm=128, bn=128, bk=32, wm=64, wn=32, stages=4), GemvSchedule(warps=4)
    out = apply_space_file([small, tiled], {"extend": {"stages": [3]}}, lambda s: True)
    assert out[:2] == [small, tiled] and [s.stages for s in out[2:]] == [3]
    out = apply_space_file([small, tiled], {"extend": {"warps": [8]}, "restrict": {"warps": [8]}}, lambda s: True)
    assert out == [GemvSchedule(warps=8)]
    with pytest.raises(BadInputError, match="not a schedule field"):
        apply_space_file([small, tiled], {"restrict": {"colour": [1]}}, lambda s: True)


_CUDA_OPS = {  # one op of each shape family a CUDA core serves (tiles, small M, split-K, stem, masks, GQA)
    "gemm": [Gemm(4096, 4096, 4096, "bf16"), Gemm(1, 1024, 2048, "bf16"), Gemm(256, 256, 8192, "fp16"),
             Gemm(300, 200, 100)],
    "conv2d": [Conv2d(2, 64, 30, 30, 96, 3, 3, padding=1, layout="nhwc", dtype="fp16"),
               Conv2d(1, 3, 224, 224, 64, 7, 7, stride=2, padding=3, layout="nhwc", dtype="fp16"),
               Conv2d(2, 3, 17, 19, 10, 3, 3, padding=1)],
    "softmax": [Softmax(37, 1001), Softmax(3, 70001, "bf16")],
}


@pytest.mark.parametrize("variant", sorted({"cuda-mma-sync.gemm", "cuda-mma-sync.conv2d", "cuda-simt.gemm",
                                            "cuda-simt.conv2d", "cuda-simt.softmax", "cuda-mma-sync.attention",
                                            "cuda-wgmma.gemm", "cuda-wgmma.conv2d", "cuda-wgmma.attention"}))
def test_every_cuda_variant_space_encodes_for_the_tuner(variant) -> None:
    """The tuner encodes each candidate with the backend's features before its first trial (tuner/run.py
    ``search``): every CUDA core's schedules must give them. `tune attention --backend cuda` once ended in
    an internal error here (the wgmma attention schedule had no block tile). On a recorded H100, no GPU."""
    from pathlib import Path

    from tracea.doctor.snapshot import read_snapshot
    from tracea.emitters import cuda
    from tracea.emitters.cuda.variants import resolve
    from tracea.kernels.ops.attention import Attention

    host, _ = read_snapshot(Path(__file__).parents[1] / "fixtures" / "snapshots" / "h100_live.json")
    v = resolve(variant)
    ops = _CUDA_OPS.get(v.op) or [Attention(1, 4, 1024, 128, dtype="bf16", causal=True),
                                  Attention(2, 8, 777, 64, kv_heads=2, dtype="fp16", window=(64, 16)),
                                  Attention(1, 2, 512, 64, dtype="fp16", block_size=(128, 128),
                                            block_mask=[[True, False, False, True]] * 4)]
    encoded = 0
    for op in ops:
        if op.dtype.value not in v.precisions:
            continue
        space = [s.to_json() for s in cuda.search_space(op, variant, host)]
        assert space, f"{variant}: no candidate for {op.signature}"
        for s in space:
            f = cuda.tuning_features(op, s)
            assert all(isinstance(x, (int, float)) and math.isfinite(x) and x >= 0 for x in f.values()), (s, f)
        x = encode(space, lambda s, op=op: cuda.tuning_features(op, s))
        assert x.shape[0] == len(space) and ((x >= 0) & (x <= 1)).all()
        encoded += 1
    assert encoded
