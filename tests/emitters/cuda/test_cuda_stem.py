"""The stem core (emitters/cuda/stem.py): its registry rules (the hero of both 16-bit conv families for
NHWC convs of fewer than 16 channels, NCHW kept on the mma core), JSON round trip and checks, a NumPy
model of its patch copies and k-packed gather against a reference im2col, and NVRTC compiles without
spills for sm_80 and sm_90a. The GPU cases are in test_cuda_stem_gpu.py."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from tracea.doctor.errors import BadInputError
from tracea.emitters import cuda
from tracea.emitters.cuda import cores, stem
from tracea.emitters.cuda.arch import parse_arch
from tracea.kernels import Conv2d


class NoGpu:
    nvidia = None


HOST = NoGpu()
FAMILIES = ("cuda-mma-sync.conv2d", "cuda-wgmma.conv2d")
STEM = Conv2d(32, 3, 224, 224, 64, 7, 7, stride=2, padding=3, layout="nhwc", dtype="fp16")


def conv(n=1, c=3, h=37, w=53, k=24, r=3, s=3, **kw):
    return Conv2d(n, c, h, w, k, r, s, layout=kw.pop("layout", "nhwc"), dtype=kw.pop("dtype", "fp16"), **kw)


# ---------------------------------------------------------------------------------------------- registry
@pytest.mark.parametrize("vid", FAMILIES)
@pytest.mark.parametrize("op", [STEM, dataclasses.replace(STEM, n=1), conv(c=1), conv(c=12, dtype="bf16")],
                         ids=lambda o: o.signature[:40])
def test_hero_is_the_stem_core_for_small_channel_nhwc(vid, op):
    hero = cuda.hero_schedule(op, vid, HOST)
    assert isinstance(hero, stem.StemSchedule) and cores.for_schedule(op, hero).name == "stem"
    assert cuda.schedule_from_json(hero.to_json()) == hero
    cuda.validate_schedule(op, vid, hero, HOST, "sm_90a")
    space = cuda.search_space(op, vid, HOST, "sm_90a")
    assert space[0] == hero and len(space) == len(set(space)) > 10


def test_hero_splits_k_where_blocks_hold_few_warps():
    """Blocks of fewer than 4 warps split a long reduction's k steps (2 or 4 ways) over more warps; the
    ResNet stem (7 warps) and short reductions keep one warp a k range. Every hero the rule makes validates."""
    c12 = Conv2d(4, 12, 96, 96, 32, 5, 5, stride=2, padding=2, layout="nhwc", dtype="fp16")
    h = stem.hero_schedule(c12, HOST)
    assert (h.pixels, h.warps, h.ksplit) == (48, 8, 4)
    assert stem.hero_schedule(STEM, HOST).ksplit == 1 and stem.hero_schedule(dataclasses.replace(STEM, n=1), HOST).ksplit == 1
    short = Conv2d(1, 4, 32, 32, 16, 3, 3, padding=1, layout="nhwc", dtype="fp16")  # 36 = 3 k steps: no split
    assert stem.hero_schedule(short, HOST).ksplit == 1
    arch = parse_arch("sm_90a")
    for n, c, hw, k, r, st in ((1, 12, 96, 32, 5, 2), (8, 4, 64, 32, 7, 2), (16, 8, 32, 64, 7, 1), (8, 15, 96, 16, 3, 2),
                               (1, 8, 32, 64, 5, 1), (1, 12, 64, 16, 5, 2), (2, 5, 17, 40, 7, 1)):
        op = Conv2d(n, c, hw, hw, k, r, r, stride=st, padding=r // 2, layout="nhwc", dtype="fp16")
        s = stem.hero_schedule(op, HOST)
        s.validate(op, arch)
        assert s.warps <= 8 and s.warps % s.ksplit == 0
        assert s.ksplit == 1 or s.warps // s.ksplit < 4
    # the split's partial sums take shared memory: never past what an sm_86 GPU has (AlexNet's conv1)
    alex = Conv2d(4, 3, 227, 227, 96, 11, 11, stride=4, layout="nhwc", dtype="fp16")
    h = stem.hero_schedule(alex, HOST)
    assert h.ksplit == 1
    h.validate(alex, parse_arch("sm_86"))


def test_other_convs_keep_their_cores():
    nchw = conv(layout="nchw")
    assert cuda.hero_schedule(nchw, "cuda-mma-sync.conv2d", HOST).core == "mma"
    assert cuda.hero_schedule(nchw, "cuda-wgmma.conv2d", HOST).core == "mma"  # the mma core's stem role
    wide = conv(c=16)
    assert cuda.hero_schedule(wide, "cuda-mma-sync.conv2d", HOST).core == "mma"
    assert cuda.hero_schedule(wide, "cuda-wgmma.conv2d", HOST).core == "wgmma"
    for op in (nchw, wide, conv(c=4, groups=2), conv(dtype="fp32")):
        assert not stem.applies(op)
        assert all(not isinstance(s, stem.StemSchedule) for s in stem.search_space(op, None, None))
    with pytest.raises(BadInputError, match="NHWC"):
        cuda.validate_schedule(nchw, "cuda-mma-sync.conv2d", stem.StemSchedule(), HOST, "sm_90a")
    with pytest.raises(BadInputError, match="fewer than 16"):
        cuda.validate_schedule(wide, "cuda-mma-sync.conv2d", stem.StemSchedule(), HOST, "sm_90a")
    with pytest.raises(BadInputError):  # the simt family never runs it
        cuda.validate_schedule(conv(dtype="fp32"), "cuda-simt.conv2d", stem.StemSchedule(), HOST, "sm_80")


def test_json_round_trip_and_bad_fields():
    s = stem.StemSchedule(pixels=384, warps=6, ksplit=2, stages=1)
    d = s.to_json()
    assert d["core"] == "stem" and cuda.schedule_from_json(d) == s
    for bad in ({"warps": 9}, {"ksplit": 3}, {"stages": 3}, {"pixels": 0}, {"pixels": 4096}, {"warps": True}, {"warps": 6, "ksplit": 4}):
        with pytest.raises(BadInputError):
            cuda.schedule_from_json({**d, **bad})
    with pytest.raises(BadInputError, match="unknown field"):
        cuda.schedule_from_json({**d, "bm": 64})
    with pytest.raises(BadInputError, match="m16 tiles"):  # 512 pixels over one warp
        stem.StemSchedule(pixels=512, warps=1).validate(conv(h=224, w=224, k=64, r=7, s=7), parse_arch("sm_90a"))


def test_tuning_features():
    f = cuda.tuning_features(STEM, stem.StemSchedule(pixels=256, warps=7).to_json())
    assert f["warps"] == 7 and f["smem_bytes"] == stem.geometry(STEM, stem.StemSchedule(pixels=256, warps=7)).smem


# ------------------------------------------------------------------------------------ the index math
def im2col(op, x, tile, g):
    """Reference A of a tile: rows its pixels (whole output rows), columns (r, s, c), zeros outside x."""
    rows = -(-op.p // g.rows)
    img, pb = divmod(tile, rows)
    a = np.zeros((g.bm, g.rsc))
    for m in range(g.bm):
        p, q = pb * g.rows + m // op.q, m % op.q
        for k in range(g.rsc):
            r, rem = divmod(k, op.s * op.c)
            s, c = divmod(rem, op.c)
            h = p * op.stride[0] - op.padding[0] + r * op.dilation[0]
            w = q * op.stride[1] - op.padding[1] + s * op.dilation[1]
            if 0 <= h < op.h and 0 <= w < op.w:
                a[m, k] = x[img, h, w, c]
    return a


MODEL_CASES = [
    (conv(n=2, h=224, w=224, k=64, r=7, s=7, stride=2, padding=3), stem.StemSchedule(pixels=256, warps=7)),
    (conv(n=2, c=1, padding=1), stem.StemSchedule(pixels=128, warps=4)),
    (conv(n=2, c=4, r=5, s=3, stride=2, padding=(2, 0)), stem.StemSchedule(pixels=64, warps=2)),
    (conv(n=2, c=12, dilation=2, padding=2, stride=(1, 2)), stem.StemSchedule(pixels=192, warps=4, ksplit=2)),
    (conv(n=3, c=3, h=9, w=5, r=3, s=3, padding=3), stem.StemSchedule(pixels=64, warps=2, stages=1)),
    (conv(n=2, c=5, h=17, w=11, r=2, s=4, stride=3, padding=1, dilation=(2, 1)), stem.StemSchedule(pixels=128)),
    (conv(n=2, c=4, h=16, w=18, r=2, s=2, stride=2), stem.StemSchedule(pixels=64, warps=1)),
]


@pytest.mark.parametrize("op,s", MODEL_CASES, ids=lambda v: v.signature[:44] if hasattr(v, "signature") else v.name)
def test_patch_and_gather_match_im2col(op, s):
    """Every tile's gathered A (through the copies' chunk placement, the zeroed pads and the k table)
    equals im2col, including each image's first and last tiles and the last image's last bytes; the
    padded k columns read written, finite patch elements (the model's patch starts as NaN)."""
    g = stem.geometry(op, s)
    x = np.random.default_rng(5).standard_normal((op.n, op.h, op.w, op.c))
    for tile in range(g.tiles):
        got = stem.gather_model(op, g, x, tile)
        want = im2col(op, x, tile, g)
        assert got.shape == (g.bm, g.kp) and np.isfinite(got).all(), tile
        np.testing.assert_array_equal(got[:, :g.rsc], want)


@pytest.mark.parametrize("op,s", MODEL_CASES[:3], ids=lambda v: v.signature[:44] if hasattr(v, "signature") else v.name)
def test_fragments_through_the_table(op, s):
    """A fragment rebuilt lane by lane as the kernel does (the [step][q] table's 4 offsets against the
    pixel bases of rows g and g + 8), then placed where m16n8k16 puts each register, is im2col."""
    g = stem.geometry(op, s)
    x = np.random.default_rng(6).standard_normal((op.n, op.h, op.w, op.c))
    buf, origin = stem.patch_model(op, g, x, 0)
    table = np.asarray(stem.fragment_table(op, g)).reshape(g.steps, 4, 4)
    a = np.full((g.wm * g.mt * 16, g.kp), np.nan)
    for tile in range(g.wm * g.mt):
        for lane in range(32):
            gq, q = divmod(lane, 4)
            rows = [tile * 16 + gq, tile * 16 + gq + 8]
            for st in range(g.steps):
                o = table[st, q]
                for reg, (row, ko) in enumerate(((0, 0), (1, 0), (0, 2), (1, 2))):
                    m = rows[row]
                    for half in range(2):
                        a[m, 16 * st + 2 * q + 8 * (reg >> 1) + half] = buf[origin + stem.row_base(op, g, m) + o[ko + half]]
    np.testing.assert_array_equal(a[:g.bm, :g.rsc], im2col(op, x, 0, g))
    assert (a[:g.bm, g.rsc:] == a[:g.bm, :1]).all()  # padded k: the pixel's first element (times a zero filter)


@pytest.mark.parametrize("op", [conv(n=2, c=3, k=130, h=12, w=9, padding=2, bias=True),
                                conv(n=3, c=2, h=11, w=7, k=24, r=5, s=3, stride=(2, 3), padding=(2, 1))],
                         ids=lambda o: o.signature[:44])
def test_tiles_assemble_the_output(op):
    """The whole output from the model, tile by tile and channel block by channel block as the kernel
    stores them (tile t: image t // row groups, its rows contiguous in NHWC), is the op's reference."""
    s = cuda.hero_schedule(op, "cuda-mma-sync.conv2d", HOST)
    g = stem.geometry(op, s)
    inputs = op.random_inputs(np.random.default_rng(7))
    x = inputs["x"].astype(np.float64)
    w = inputs["weight"].astype(np.float64).reshape(op.k, -1)
    out = np.full(op.n * op.p * op.q * op.k, np.nan)
    groups = -(-op.p // g.rows)
    for nb in range(g.ntiles):
        n0 = nb * g.bn
        filt = np.zeros((g.bn, g.kp))
        filt[:max(0, min(g.bn, op.k - n0)), :g.rsc] = w[n0:n0 + g.bn]
        bias = np.zeros(g.bn)
        if op.bias:
            vals = inputs["bias"].astype(np.float64)[n0:n0 + g.bn]
            bias[:len(vals)] = vals
        for tile in range(g.tiles):
            img, pb = divmod(tile, groups)
            tile_out = stem.gather_model(op, g, x, tile) @ filt.T + bias
            npix = min(g.rows, op.p - pb * g.rows) * op.q
            base = (img * op.p + pb * g.rows) * op.q
            for m in range(npix):
                cols = range(n0, min(op.k, n0 + g.bn))
                out[(base + m) * op.k + np.asarray(cols)] = tile_out[m, :len(cols)]
    np.testing.assert_allclose(out.reshape(op.output_shape()), op.reference(inputs), rtol=1e-9, atol=1e-9)


def test_rows_do_not_overlap_and_stay_aligned():
    """Each patch row's chunks land on 16-byte boundaries in its global phase, and no row's chunks reach
    another row's columns."""
    for op, s in MODEL_CASES:
        g = stem.geometry(op, s)
        wc, pwc = op.w * op.c, op.padding[1] * op.c
        assert g.padl % 8 == 0 and (g.iws - wc) % 8 == 0 and g.patch % 8 == 0
        for shift in range(8):
            spans = []
            for ih in range(g.ih):
                d = g.padl + ih * g.iws + shift
                lo, hi = min(d & ~7, d - pwc), max((d & ~7) + 8 * g.nch, d - pwc + g.iw * op.c)
                spans.append((lo, hi))
            assert spans[0][0] >= 0 and spans[-1][1] <= g.patch
            assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:], strict=False))


# ----------------------------------------------------------------------------------------------- compile
COMPILE = [
    STEM, dataclasses.replace(STEM, n=1), dataclasses.replace(STEM, n=8, dtype="bf16", bias=True),
    conv(c=1, bias=True), conv(c=4, k=10, stride=2, padding=2), conv(c=12, k=96, dilation=2, padding=1),
    conv(c=4, k=32, r=2, s=2, stride=2),  # r*s*c = 16: no padded k
]


@pytest.fixture
def _kernel_cache(kernel_home, monkeypatch):
    monkeypatch.setenv("TRACEA_HOME", str(kernel_home))


@pytest.mark.usefixtures("_kernel_cache")
@pytest.mark.parametrize("arch", ("sm_80", "sm_90a"))
@pytest.mark.parametrize("op", COMPILE, ids=lambda o: o.signature[:48])
def test_hero_compiles_without_spills(op, arch):
    pytest.importorskip("cuda.core")
    from tracea.emitters.cuda.build import compile_kernel

    sched = cuda.hero_schedule(op, "cuda-mma-sync.conv2d", HOST)
    _, r, _, art = compile_kernel(op, "cuda-mma-sync.conv2d", sched, HOST, arch)
    res = art.metadata["resources"]
    assert res["regs_per_thread"] > 0 and res["spills"] == 0, (r.name, res)
    assert r.smem <= parse_arch(arch).smem_optin and r.block[0] == sched.block_threads
    meta = art.metadata
    assert {"name", "tile", "fragments", "launch", "epilogue"} <= set(meta) and meta["fragments"]["dtype_acc"] == "fp32"
    assert meta["tile"]["reduction"] == op.r * op.s * op.c and meta["tile"]["reduction_padded"] % 16 == 0


@pytest.mark.usefixtures("_kernel_cache")
def test_a_sample_of_the_space_compiles_without_spills():
    pytest.importorskip("cuda.core")
    import random

    from tracea.emitters.cuda.build import compile_kernel

    rnd = random.Random(16)
    for op in (STEM, conv(c=4, k=10, dtype="bf16", bias=True)):
        space = [s for s in cuda.search_space(op, "cuda-mma-sync.conv2d", HOST, "sm_90a")
                 if isinstance(s, stem.StemSchedule)]
        for s in rnd.sample(space, 3):
            for arch in ("sm_80", "sm_90a"):
                try:
                    _, r, _, art = compile_kernel(op, "cuda-mma-sync.conv2d", s, HOST, arch)
                except BadInputError:  # the sm_80's smaller shared memory
                    continue
                assert art.metadata["resources"]["spills"] == 0, (s, arch)
