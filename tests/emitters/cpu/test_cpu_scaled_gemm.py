"""The CPU's scaled 8-bit GEMM (``emitters/cpu/scaled_gemm*.py``) compiled with the host compiler for every family
this machine runs (AVX-512 VNNI where it has it, the portable loops everywhere), both forms (dot products, packed
panels), and checked against the float64 reference on fresh random inputs: every scale mode and output type, both
B layouts, edges of M, N and K (K not a multiple of 4, 64 or the chunk; N past a tile), int8's extremes (-128 x
-128 over the largest K the int32 accumulator holds), 1 and 2 threads; the hero rule, the search space, the JSON
round trip and validation."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from tracea.doctor import probe
from tracea.doctor.errors import BadInputError
from tracea.emitters import cpu
from tracea.emitters.cpu.backend import schedule_from_json
from tracea.emitters.cpu.scaled_gemm import PACK_FROM_M, ScaledGemmSchedule, hero_schedule, schedule_space
from tracea.kernels import ScaledGemm, relative_error
from tracea.kernels.dtypes import to_float64
from tracea.kernels.ops.scaled_gemm import INT8_MAX_K

HOST = probe()
# this machine without AMX (the VNNI forms' rules, whatever the CPU): the AMX form's own tests below
VNNI_HOST = dataclasses.replace(HOST, cpu=dataclasses.replace(HOST.cpu, isa=[i for i in HOST.cpu.isa
                                                                               if not i.startswith("amx")]))
FAMILIES = ("cpu-avx512", "cpu-avx2-fma", "cpu-portable")
pytestmark = pytest.mark.usefixtures("kernel_cache")

CASES = [
    # m, n, k, scale, out_dtype, layout_b
    (1, 1, 1, "row", "fp32", "col"),
    (1, 300, 1000, "row", "fp32", "col"),
    (2, 77, 4097, "tensor", "bf16", "col"),
    (5, 129, 258, "row", "fp16", "row"),
    (16, 200, 640, "none", "int32", "col"),
    (33, 65, 130, "row", "fp32", "row"),
    (40, 300, 9001, "tensor", "fp32", "col"),  # K in three 4 KiB chunks, and no multiple of 4
    (70, 129, 512, "none", "int32", "row"),
    (9, 260, 384, "block128", "fp32", "col"),
    (4, 300, 8960, "block128", "bf16", "row"),
]


def runnable(family: str):
    v = cpu.resolve(f"{family}.scaled_gemm")
    unmet = v.unmet(HOST, "int8")
    if unmet:
        pytest.skip(f"{v.id} cannot run here: {'; '.join(unmet)}")
    return v


def check(op, v, s, inputs=None):
    kernel = cpu.build(op, v, s, HOST)
    inputs = op.random_inputs(np.random.default_rng()) if inputs is None else inputs
    got = kernel(inputs, None)
    assert got.dtype == op.output_dtype.storage
    err = relative_error(to_float64(got, op.output_dtype), op.reference(inputs))
    assert err <= op.tolerance_bound(), f"{kernel.artifact.name} {op.signature} {s.name}: relative error {err:.3g}"


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0]}x{c[1]}x{c[2]}-{c[3]}-{c[4]}-{c[5]}")
def test_the_hero_matches_the_reference(family, case):
    m, n, k, scale, out, layout = case
    v = runnable(family)
    op = ScaledGemm(m, n, k, scale=scale, out_dtype=out, layout_b=layout)
    check(op, v, hero_schedule(op, v, HOST))


@pytest.mark.parametrize("pack", [False, True])
@pytest.mark.parametrize("threads", [1, 2])
def test_both_vnni_forms_on_odd_shapes(pack, threads):
    """Both forms with small tiles and chunks, so every edge (rows, columns, K tails, chunks) is crossed."""
    v = runnable("cpu-avx512")
    s = ScaledGemmSchedule(mr=3, nr=32 if pack else 5, kc=256, mc=6, threads=min(threads, HOST.cpu.logical_cores or 1),
                           pack=pack)
    for m, n, k, scale, out, layout in [(7, 45, 700, "row", "fp32", "col"), (13, 33, 257, "none", "int32", "row"),
                                        (6, 100, 515, "tensor", "fp16", "col"), (1, 17, 2, "row", "bf16", "row")]:
        check(ScaledGemm(m, n, k, scale=scale, out_dtype=out, layout_b=layout), v, s)


EPILOGUES = [
    # m, n, k, scale, out_dtype, layout_b, epilogue, alpha: every op, each output type, both forms, chunks, blocks
    (1, 300, 1000, "row", "fp32", "col", "bias,relu", 1.0),
    (3, 130, 640, "tensor", "bf16", "col", "bias,gelu,scale,residual", 0.75),
    (70, 200, 1024, "row", "fp16", "col", "residual,relu", 1.0),  # the packed form from 32 rows (AMX where it is)
    (40, 96, 256, "block128", "fp32", "col", "scale,bias", -2.0),
    (64, 100, 8448, "row", "bf16", "row", "gelu", 1.0),  # K in chunks, B transposed
]


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("case", EPILOGUES, ids=lambda c: f"{c[0]}x{c[1]}x{c[2]}-{c[3]}-{c[4]}-{c[6]}")
def test_the_fused_epilogue_on_every_form(family, case):
    """The epilogue (bias and residual in C's type, ``alpha``) on the scaled value before C's rounding, as the
    reference applies it after the scaling; the store of each form (dot, packed, block scales) goes through it."""
    m, n, k, scale, out, layout, epi, alpha = case
    v = runnable(family)
    op = ScaledGemm(m, n, k, scale=scale, out_dtype=out, layout_b=layout, epilogue=epi, alpha=alpha)
    check(op, v, hero_schedule(op, v, HOST))
    plain = ScaledGemm(m, n, k, scale=scale, out_dtype=out, layout_b=layout)
    inputs = op.random_inputs(np.random.default_rng(3))
    assert not np.allclose(op.reference(inputs), plain.reference(inputs))  # the chain changes the function
    if family != "cpu-avx512" or scale == "block128":  # the dot form in K chunks: the chain on the last chunk alone
        check(op, v, ScaledGemmSchedule(mr=2, nr=3, kc=256, mc=4, threads=1))


@pytest.mark.parametrize("family", FAMILIES)
def test_int8_extremes_over_the_largest_k(family):
    """-128 x -128 summed over INT8_MAX_K: 2^31 - 16384, the largest the int32 accumulator must hold (the flipped
    form's running sums wrap past 2^31 before A's correction comes off)."""
    v = runnable(family)
    for pack in ([False, True] if family == "cpu-avx512" else [False]):
        op = ScaledGemm(2, 20, INT8_MAX_K, scale="none", out_dtype="int32")
        inputs = {"a": np.full((2, INT8_MAX_K), -128, np.int8), "b": np.full((20, INT8_MAX_K), -128, np.int8)}
        inputs["a"][1] = 127
        inputs["b"][1] = 127  # flipped to 255 against -128: the dot form's sum passes -2^31 before the correction
        s = dataclasses.replace(hero_schedule(op, v, HOST), mr=2, nr=32 if pack else 4, pack=pack)
        kernel = cpu.build(op, v, s, HOST)
        got = kernel(inputs, None)
        assert got[0, 0] == 128 * 128 * INT8_MAX_K and got[1, 0] == -127 * 128 * INT8_MAX_K
        assert got[0, 1] == -128 * 127 * INT8_MAX_K and got[1, 1] == 127 * 127 * INT8_MAX_K


def test_hero_rule_and_space():
    v = cpu.resolve("cpu-avx512.scaled_gemm")
    decode = ScaledGemm(1, 4096, 4096)
    assert hero_schedule(decode, v, VNNI_HOST) == ScaledGemmSchedule(1, 8, 4096, 128, HOST.cpu.logical_cores)
    assert hero_schedule(ScaledGemm(16, 4096, 14300), v, VNNI_HOST).kc == 14336  # all of K, in whole 128-byte blocks
    assert not hero_schedule(ScaledGemm(PACK_FROM_M - 1, 4096, 4096), v, VNNI_HOST).pack
    assert hero_schedule(ScaledGemm(PACK_FROM_M, 4096, 4096), v, VNNI_HOST).pack
    assert hero_schedule(ScaledGemm(4, 512, 512, layout_b="row"), v, VNNI_HOST).pack  # the packed form transposes
    assert not hero_schedule(ScaledGemm(512, 512, 512, scale="block128"), v, VNNI_HOST).pack
    assert hero_schedule(ScaledGemm(8, 16, 16), v, VNNI_HOST).threads == 1  # tiny: one thread
    for family in FAMILIES:
        fv = cpu.resolve(f"{family}.scaled_gemm")
        for op in (decode, ScaledGemm(300, 4096, 4096, layout_b="row"), ScaledGemm(64, 512, 1024, scale="block128")):
            space = schedule_space(op, fv, VNNI_HOST)
            assert space[0] == hero_schedule(op, fv, VNNI_HOST) and len(space) == len(set(space)) > 10
            assert all(s.pack == (family == "cpu-avx512") for s in space if s.pack)
            assert not any(s.pack for s in space) or op.scale != "block128"


def test_json_round_trip_and_validation():
    v = cpu.resolve("cpu-avx512.scaled_gemm")
    op = ScaledGemm(64, 512, 512)
    s = hero_schedule(op, v, VNNI_HOST)
    assert schedule_from_json(s.to_json()) == s and s.name.startswith("p")
    bad = [(dict(pack=1), "pack"), (dict(kc=100), "kc"), (dict(mr=9, pack=False), "mr"), (dict(nr=40), "nr"),
           (dict(mr=8, nr=128), "registers")]
    for change, word in bad:
        with pytest.raises(BadInputError, match=word):
            dataclasses.replace(s, **change).validate(op, HOST, v)
    with pytest.raises(BadInputError, match="pack"):
        s.validate(op, HOST, cpu.resolve("cpu-portable.scaled_gemm"))
    with pytest.raises(BadInputError, match="pack"):
        s.validate(ScaledGemm(64, 512, 512, scale="block128"), HOST, v)
    with pytest.raises(BadInputError, match="unknown field"):
        ScaledGemmSchedule.from_json({**s.to_json(), "nc": 4})


def test_variants_need_vnni_for_the_avx512_kernel():
    """A host with AVX-512 but no VNNI (a Skylake-X) is refused the AVX-512 kernel for int8, and plans the AVX2
    family's loops instead; FP8 has no CPU variant at all."""
    from tracea.doctor.plan import plan

    host = dataclasses.replace(HOST, cpu=dataclasses.replace(HOST.cpu, isa=["sse4.2", "avx", "avx2", "fma", "f16c",
                                                                           "avx512f", "avx512bw", "avx512vl"]))
    d = plan(ScaledGemm(16, 64, 64), host, cpu.VARIANTS, backend="cpu")
    assert d.chosen == "cpu-avx2-fma.scaled_gemm"
    assert any("avx512vnni" in r for c in d.rejected for r in c.reasons)
    with pytest.raises(Exception, match="fp8e4m3"):
        plan(ScaledGemm(16, 64, 64, dtype="fp8e4m3"), HOST, cpu.VARIANTS, backend="cpu").require()


AMX = [(128, 4096, 4096, "row", "fp32", "col", ""), (33, 100, 200, "row", "bf16", "col", ""),
       (50, 90, 333, "row", "fp32", "col", ""),  # the last block's 18 rows: the second row group's tiles part-filled
       (5, 70, 130, "tensor", "fp32", "row", ""), (64, 520, 1040, "none", "int32", "col", ""),
       (77, 300, 1000, "row", "fp16", "row", "bias,relu"), (40, 96, 9001, "tensor", "bf16", "col", "residual")]


@pytest.mark.parametrize("case", AMX, ids=lambda c: f"{c[0]}x{c[1]}x{c[2]}-{c[3]}-{c[4]}-{c[5]}")
def test_the_amx_form_matches_the_reference(case):
    """The AMX tile (tdpbsud over the packed panels, 32 x 32) on a host with AMX-INT8: edges of M (fewer than 16 and
    than 32 rows), N past a panel, K off 64 bytes (the padded copy) and in chunks, both B layouts, every output."""
    if "amx-int8" not in HOST.cpu.isa:
        pytest.skip("this CPU has no AMX-INT8")
    v = runnable("cpu-avx512")
    m, n, k, scale, out, layout, epi = case
    op = ScaledGemm(m, n, k, scale=scale, out_dtype=out, layout_b=layout, epilogue=epi)
    for threads in sorted({1, HOST.cpu.logical_cores or 1}):
        check(op, v, ScaledGemmSchedule(mr=32, nr=32, kc=4096, mc=96, threads=threads, pack=True, amx=True))


def test_the_amx_form_is_the_hero_on_a_recorded_amx_xeon():
    """On a recorded Sapphire Rapids Xeon (h100_live: amx-tile, amx-int8) from 32 rows of A with tensor, row or no
    scales; fewer rows, block scales and a host without AMX keep the VNNI forms; the schedule refused there."""
    from pathlib import Path

    from tracea.doctor.snapshot import read_snapshot

    xeon = read_snapshot(Path(__file__).parents[2] / "fixtures" / "snapshots" / "h100_live.json")[0]
    v = cpu.resolve("cpu-avx512.scaled_gemm")
    amx = hero_schedule(ScaledGemm(128, 4096, 4096, layout_b="row"), v, xeon)
    assert amx.amx and amx.pack and not amx.swap and (amx.mr, amx.nr) == (32, 32) and amx.name.startswith("amx32")
    assert not hero_schedule(ScaledGemm(16, 4096, 4096, layout_b="row"), v, xeon).amx
    # a col B (n x k): the swapped form from SWAP_FROM_M rows, the dot form below
    assert all(hero_schedule(ScaledGemm(m, n, k), v, xeon).swap for m, n, k in ((8, 4096, 4096), (2048, 64, 64)))
    assert not hero_schedule(ScaledGemm(4, 4096, 4096), v, xeon).amx
    assert not hero_schedule(ScaledGemm(128, 4096, 4096, scale="block128"), v, xeon).amx
    assert not hero_schedule(ScaledGemm(128, 4096, 4096), v, VNNI_HOST).amx
    assert amx in schedule_space(ScaledGemm(128, 4096, 4096, layout_b="row"), v, xeon)
    assert schedule_from_json(amx.to_json()) == amx
    with pytest.raises(BadInputError, match="AMX-INT8"):
        amx.validate(ScaledGemm(128, 4096, 4096), VNNI_HOST, v)
    with pytest.raises(BadInputError, match="32 x 32"):
        dataclasses.replace(amx, nr=64).validate(ScaledGemm(128, 4096, 4096), xeon, v)
    from tracea.emitters.cpu.backend import rendering

    src = rendering(ScaledGemm(128, 4096, 4096), v, amx, xeon).source
    assert "#define AMX 1" in src and "#define KALIGN 64" in src and "_tile_dpbsud(3, 5, 7);" in src


def test_the_amx_form_runs_the_vnni_tiles_where_amx_is_refused(tmp_path):
    """TRACEA_NO_AMX (as where the OS refuses the tile state): the AMX form's call runs the VNNI 12-row tiles over the
    same panels, and matches (a process of its own: the choice is made at a process's first call)."""
    import os
    import subprocess
    import sys

    if "amx-int8" not in HOST.cpu.isa:
        pytest.skip("this CPU has no AMX-INT8")
    code = (
        "import numpy as np\n"
        "from tracea.doctor import probe\n"
        "from tracea.emitters import cpu\n"
        "from tracea.emitters.cpu.scaled_gemm import ScaledGemmSchedule\n"
        "from tracea.kernels import ScaledGemm, relative_error\n"
        "from tracea.kernels.dtypes import to_float64\n"
        "h = probe()\n"
        "op = ScaledGemm(45, 70, 300, scale='row', out_dtype='fp32')\n"
        "k = cpu.build(op, cpu.resolve('cpu-avx512.scaled_gemm'), ScaledGemmSchedule(32, 32, 4096, 96, 1, True, True), h)\n"
        "x = op.random_inputs(np.random.default_rng(7))\n"
        "print(relative_error(to_float64(k(x, None), op.output_dtype), op.reference(x)))\n")
    env = {**os.environ, "TRACEA_NO_AMX": "1", "TRACEA_HOME": str(tmp_path)}
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600, env=env)
    assert r.returncode == 0, r.stderr[-2000:]
    assert float(r.stdout.split()[-1]) <= ScaledGemm(45, 70, 300, scale="row", out_dtype="fp32").tolerance_bound()


def test_vnni_packed_form_where_amx_would_be_the_hero():
    """The VNNI packed hero (6 x 64) on the shapes an AMX host gives the AMX form, so both are run here."""
    v = runnable("cpu-avx512")
    for m, n, k, scale, out, layout in [(128, 300, 1000, "row", "fp32", "col"), (40, 96, 9001, "tensor", "bf16", "row")]:
        op = ScaledGemm(m, n, k, scale=scale, out_dtype=out, layout_b=layout)
        s = hero_schedule(op, v, VNNI_HOST)
        assert s.pack and not s.amx
        check(op, v, s)
