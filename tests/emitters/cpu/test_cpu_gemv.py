"""The CPU small-M GEMM path (``emitters/cpu/gemv.py``, ``CpuSchedule.small_m``): compiled with the host
compiler for every family this machine runs and checked against the float64 reference on fresh random
inputs (odd shapes, every epilogue, fp32/fp16/bf16, all four layout pairs, K split), the hero rule, the
search space, the JSON round trip, and the NEON and portable renders."""

from __future__ import annotations

import dataclasses
import importlib.util
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from tracea.doctor import probe
from tracea.doctor.errors import BadInputError
from tracea.emitters import cpu
from tracea.emitters.cpu import gemv
from tracea.emitters.cpu.render import render
from tracea.emitters.cpu.schedule import CpuSchedule
from tracea.kernels import Conv2d, Gemm, relative_error, tolerance
from tracea.kernels.dtypes import to_float64

HOST = probe()
FAMILIES = ("cpu-avx512", "cpu-avx2-fma", "cpu-portable")
pytestmark = pytest.mark.usefixtures("kernel_cache")

CASES = [
    # m, n, k, dtype, layout_a, layout_b, epilogue
    (1, 1, 1, "fp32", "row", "row", ()),
    (1, 4097, 1000, "fp32", "row", "row", ("bias",)),
    (3, 1000, 4097, "fp32", "col", "row", ("relu",)),
    (8, 33, 1023, "fp32", "row", "col", ("gelu",)),
    (16, 1023, 33, "fp32", "col", "col", ("scale",)),
    (5, 17, 700, "fp32", "row", "row", ("residual",)),
    (13, 100, 301, "fp32", "row", "row", ("residual", "scale", "gelu", "bias", "relu")),
    (16, 257, 129, "fp32", "col", "col", ("relu", "bias", "residual", "scale", "gelu")),
    (32, 100, 1000, "fp32", "row", "row", ("bias",)),
    (27, 1001, 77, "fp32", "col", "col", ()),
    (1, 1000, 1000, "fp16", "row", "col", ("bias", "gelu")),
    (7, 129, 513, "fp16", "col", "row", ()),
    (16, 31, 1000, "bf16", "row", "row", ("residual", "scale")),
    (2, 1000, 77, "bf16", "col", "col", ("relu",)),
    # N too narrow for the threads: K is split and the partial sums reduced
    (16, 40, 20000, "fp32", "row", "row", ("bias",)),
    (4, 9, 30000, "bf16", "col", "col", ("gelu",)),
    (11, 3, 40000, "fp16", "row", "col", ("residual",)),
]


def runnable(family: str, dtype: str = "fp32"):
    v = cpu.resolve(f"{family}.gemm")
    unmet = v.unmet(HOST, dtype)
    if unmet:
        pytest.skip(f"{v.id} cannot run here: {'; '.join(unmet)}")
    return v


def check(op, v, s):
    assert s.small_m
    kernel = cpu.build(op, v, s, HOST)
    inputs = op.random_inputs(np.random.default_rng())
    got = kernel(inputs, None)
    err = relative_error(to_float64(got, op.dtype), op.reference(inputs))
    assert err <= tolerance(op), f"{kernel.artifact.name} {op.signature} {s.name}: relative error {err:.3g}"


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0]}x{c[1]}x{c[2]}-{c[3]}-{c[4][0]}{c[5][0]}-{'+'.join(c[6]) or 'none'}")
def test_small_m_matches_the_reference(family, case):
    m, n, k, dtype, la, lb, epi = case
    v = runnable(family, dtype)
    op = Gemm(m, n, k, dtype=dtype, layout_a=la, layout_b=lb, epilogue=epi, alpha=-0.75)
    check(op, v, cpu.hero_schedule(op, v, HOST))


@pytest.mark.parametrize("layout_b", ["row", "col"])
def test_space_variants_match_the_reference(layout_b):
    """A spread of the space's small-M candidates (shapes, K chunks, unrolls, prefetch, threads)."""
    family = next(v for v in (cpu.resolve(f"{f}.gemm") for f in FAMILIES) if not v.unmet(HOST, "fp32"))
    op = Gemm(9, 301, 517, layout_b=layout_b, epilogue=("bias", "relu"))
    cands = [s for s in cpu.search_space(op, family, HOST) if s.small_m]
    for s in cands[:: max(1, len(cands) // 12)]:
        check(op, family, s)


def test_hero_rule_and_space():
    v = cpu.resolve("cpu-portable.gemm")
    for m in (1, 3, 8, 16, 32):
        for lb in ("row", "col"):
            op = Gemm(m, 4096, 4096, layout_b=lb)
            hero = cpu.hero_schedule(op, v, HOST)
            assert hero.small_m and hero.mr <= m
            space = cpu.search_space(op, v, HOST)
            assert space[0] == hero
            assert any(not s.small_m for s in space) and sum(s.small_m for s in space) > 10
    for m in (33, 128):
        op = Gemm(m, 4096, 4096)
        assert not cpu.hero_schedule(op, v, HOST).small_m
        assert not any(s.small_m for s in cpu.search_space(op, v, HOST))


def test_json_round_trip_and_validation():
    op = Gemm(4, 100, 100)
    s = cpu.hero_schedule(op, cpu.resolve("cpu-avx2-fma.gemm"), HOST)
    d = s.to_json()
    assert d["small_m"] is True and CpuSchedule.from_json(d) == s
    from tracea.emitters.cpu.backend import schedule_from_json

    assert schedule_from_json(d) == s
    blocked = dataclasses.replace(s, small_m=False)
    assert "small_m" not in blocked.to_json() and CpuSchedule.from_json(blocked.to_json()) == blocked
    assert s.name.startswith("sm_") and not blocked.name.startswith("sm_")
    conv = Conv2d(1, 4, 8, 8, 4, 3, 3)
    with pytest.raises(BadInputError, match="small_m"):
        s.validate(conv, HOST, "cpu-avx2-fma")
    with pytest.raises(BadInputError, match="small_m"):
        dataclasses.replace(s, small_m=1).validate(op, HOST, "cpu-avx2-fma")
    meta = render(op, "cpu-avx2-fma", s).metadata
    assert meta["path"] == "small-m" and meta["pack"] == {"a": False, "b": False}


CROSS = shutil.which("aarch64-linux-gnu-gcc")
QEMU = shutil.which("qemu-aarch64")
NEON_OPS = [
    Gemm(1, 1001, 257, epilogue=("bias", "gelu")),
    Gemm(16, 37, 1030, layout_a="col", layout_b="col", epilogue=("residual", "scale"), alpha=0.5),
    Gemm(5, 70, 130, dtype="fp16", layout_b="col", epilogue=("relu",)),
    Gemm(9, 45, 1030, dtype="bf16", layout_a="col", epilogue=("bias",)),
]


@pytest.mark.skipif(not (CROSS and QEMU), reason="needs aarch64-linux-gnu-gcc and qemu-aarch64")
@pytest.mark.parametrize("op", NEON_OPS, ids=lambda o: o.signature[:60])
def test_neon_under_emulation(op, tmp_path):
    spec = importlib.util.spec_from_file_location("neon_runner", Path(__file__).with_name("test_cpu_neon.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert cpu.hero_schedule(op, cpu.resolve("cpu-neon.gemm"), HOST).small_m
    err = mod.run_neon(op, tmp_path, np.random.default_rng())
    assert err <= tolerance(op), f"{op.signature}: relative error {err:.3g}"


@pytest.mark.parametrize("layout_b", ["row", "col"])
def test_neon_render_is_neon(layout_b):
    """Where no cross compiler exists: the NEON render uses NEON's dialect only (no x86 intrinsics) and,
    with one, it compiles."""
    op = Gemm(3, 100, 100, dtype="bf16", layout_b=layout_b, epilogue=("bias", "gelu"))
    s = cpu.hero_schedule(op, cpu.resolve("cpu-neon.gemm"), HOST)
    r = render(op, "cpu-neon", s)
    assert s.small_m and "arm_neon.h" in r.source and "_mm" not in r.source
    assert ("rowk_1" if layout_b == "row" else "colk_1") in r.source
    if CROSS:
        src = Path(__file__).parent / f"_neon_gemv_{layout_b}.c"
        try:
            src.write_text(r.source)
            proc = subprocess.run([CROSS, "-O2", "-std=gnu11", "-pthread", *r.flags, "-c", str(src), "-o", "/dev/null"],
                                  capture_output=True, text=True)
        finally:
            src.unlink(missing_ok=True)
        assert proc.returncode == 0, proc.stderr[:2000]


def test_hero_bound():
    assert gemv.MAX_M == 32 and gemv.prefers(Gemm(32, 8, 8)) and not gemv.prefers(Gemm(33, 8, 8))


def test_amd_avx512_hosts_take_short_k_chunks():
    """The recorded AMD EPYC VM (AVX-512) gets K chunks of 8 rows (one row of A: 4-vector blocks) for row-major B;
    the recorded Xeon, col-major B and other families keep the defaults (kc 32, 8 vectors for one row)."""
    from tracea.doctor.snapshot import read_snapshot

    snaps = Path(__file__).parents[2] / "fixtures" / "snapshots"
    amd, xeon = (read_snapshot(snaps / f"{n}.json")[0] for n in ("ci_vm", "h100_live"))
    assert amd.cpu.vendor == "AuthenticAMD" and xeon.cpu.vendor == "GenuineIntel"
    v = cpu.resolve("cpu-avx512.gemm")
    one, sixteen = Gemm(1, 4096, 4096), Gemm(16, 4096, 4096)
    assert (cpu.hero_schedule(one, v, amd).kc, cpu.hero_schedule(one, v, amd).nr) == (8, 64)
    assert (cpu.hero_schedule(sixteen, v, amd).kc, cpu.hero_schedule(sixteen, v, amd).nr) == (8, 48)
    assert (cpu.hero_schedule(one, v, xeon).kc, cpu.hero_schedule(one, v, xeon).nr) == (32, 128)
    assert cpu.hero_schedule(Gemm(1, 4096, 4096, layout_b="col"), v, amd).kc == 1024
    assert cpu.hero_schedule(one, cpu.resolve("cpu-portable.gemm"), amd).kc == 32
    for s in (cpu.hero_schedule(one, v, amd), cpu.hero_schedule(sixteen, v, amd)):
        assert s in cpu.search_space(one if s.mr == 1 else sixteen, v, amd)
