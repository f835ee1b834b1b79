"""The MFMA placement model (emitters/hip/mfma.py) against AMD's own tables, and its emulation against a
matrix product (issue 19). The tables in tests/fixtures/mfma/ are the AMD Matrix Instruction Calculator's
`--register-layout --csv` output for each instruction on CDNA2 and CDNA3 (tests/fixtures/SOURCES.md)."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from tracea.emitters.hip.mfma import INSTRUCTIONS, WAVE

TABLES = Path(__file__).parents[2] / "fixtures" / "mfma"
ARCH = {"gfx90a": "CDNA2", "gfx942": "CDNA3"}
CELL = re.compile(r"v(\d+)\{(\d+)\}(?:\.\[(\d+):(\d+)\])?")


def _table(arch: str, mnemonic: str, matrix: str) -> dict[tuple[int, int], tuple[int, int, int | None]]:
    """{(row, col): (register, lane, 16-bit half or None)} from one calculator table."""
    lines = (TABLES / f"{arch}_{mnemonic}_{matrix}.csv").read_text().splitlines()
    assert lines[0] == f"Architecture: {arch}" and lines[1] == f"Instruction: {mnemonic.upper()}"
    assert lines[2] == "Block 0" and len([ln for ln in lines if ln.startswith("Block")]) == 1
    out = {}
    for line in lines[4:]:
        row, *cells = line.split(",")
        for col, cell in enumerate(cells):
            m = CELL.fullmatch(cell)
            assert m, cell
            half = None if m.group(3) is None else int(m.group(4)) // 16
            out[(int(row), col)] = (int(m.group(1)), int(m.group(2)), half)
    return out


CASES = [(name, target) for name in INSTRUCTIONS for target in ARCH]


@pytest.mark.parametrize("name,target", CASES)
def test_the_model_places_every_element_where_amd_s_tables_do(name, target):
    mf = INSTRUCTIONS[name]
    arch, mnemonic = ARCH[target], mf.mnemonic(target)
    a, b, d = (_table(arch, mnemonic, x) for x in "ABD")
    assert len(a) == mf.m * mf.k and len(b) == mf.k * mf.n and len(d) == mf.m * mf.n
    for (i, kk), want in a.items():
        lane, e = mf.a_slot(i, kk)
        assert (mf.register_of(e)[0], lane, mf.register_of(e)[1]) == want, ("A", i, kk)
    for (kk, j), want in b.items():
        lane, e = mf.b_slot(kk, j)
        assert (mf.register_of(e)[0], lane, mf.register_of(e)[1]) == want, ("B", kk, j)
    for (i, j), want in d.items():
        lane, r = mf.d_slot(i, j)
        assert (r, lane, None) == want, ("D", i, j)
    assert max(r for r, _, _ in a.values()) + 1 == mf.input_registers
    assert max(r for r, _, _ in d.values()) + 1 == mf.acc_registers


@pytest.mark.parametrize("name", list(INSTRUCTIONS))
def test_every_lane_and_register_holds_one_element(name):
    mf = INSTRUCTIONS[name]
    a = {mf.a_slot(i, kk) for i in range(mf.m) for kk in range(mf.k)}
    b = {mf.b_slot(kk, j) for kk in range(mf.k) for j in range(mf.n)}
    d = {mf.d_slot(i, j) for i in range(mf.m) for j in range(mf.n)}
    assert a == b == {(lane, e) for lane in range(WAVE) for e in range(mf.per_lane)}
    assert d == {(lane, r) for lane in range(WAVE) for r in range(mf.acc_registers)}


@pytest.mark.parametrize("name", list(INSTRUCTIONS))
def test_the_emulated_instruction_is_a_matrix_product_on_fresh_random_inputs(name):
    mf = INSTRUCTIONS[name]
    rng = np.random.default_rng()
    # inputs exact in the instruction's type: small integers over powers of two (products exact in fp32)
    a = (rng.integers(-8, 9, (mf.m, mf.k)) / 4).astype(np.float32)
    b = (rng.integers(-8, 9, (mf.k, mf.n)) / 8).astype(np.float32)
    c = rng.standard_normal((mf.m, mf.n)).astype(np.float32)
    d = mf.unpack_d(mf.emulate(mf.pack_a(a), mf.pack_b(b), mf.pack_d(c)))
    want = a.astype(np.float64) @ b.astype(np.float64) + c
    np.testing.assert_allclose(d, want, rtol=1e-6, atol=1e-6)
    assert not np.allclose(d, c)  # the product is not zero: the check can fail


@pytest.mark.parametrize("name", list(INSTRUCTIONS))
def test_the_index_expressions_kernels_are_written_with_are_the_model(name):
    """``a_row``/``a_k``/``d_row`` (what the HIP kernels' fragment loads and stores are rendered from),
    evaluated for every lane, element and register, give the slots the tables were checked against."""
    mf = INSTRUCTIONS[name]
    for lane in range(WAVE):
        for e in range(mf.per_lane):
            row, kk = eval(mf.a_row("lane")), eval(mf.a_k("lane", "e"))  # noqa: S307 - our own expressions
            assert mf.a_slot(row, kk) == (lane, e) and mf.b_slot(kk, row) == (lane, e)
        for r in range(mf.acc_registers):
            assert mf.d_slot(eval(mf.d_row("lane", "r")), eval(mf.a_row("lane"))) == (lane, r)  # noqa: S307


def test_the_planner_prefers_matrix_cores_on_a_recorded_mi210_host_and_says_why_not_elsewhere(fixtures):
    """The HIP variants (not offered by the registry yet) planned on the real 8x MI210 topology
    (tests/fixtures/kfd/, gfx90a) with hipcc among its tools: the MFMA GEMM in bf16; the same host as a
    gfx908 falls back to fp16, saying why; a host without an AMD GPU gets the reason."""
    import dataclasses

    from tracea.doctor.plan import plan
    from tracea.doctor.report import AmdSection, HostReport, Tool
    from tracea.doctor.sources import amd
    from tracea.emitters.hip.variants import VARIANTS
    from tracea.kernels import Gemm

    section = amd.interpret({"kfd": amd.collect_kfd(str(fixtures / "kfd" / "mi210_8x_xgmi"))})
    hipcc = Tool("hipcc", True, "/usr/bin/hipcc", "5.2.21153-0")
    host = dataclasses.replace(HostReport(), amd=section, toolchains=[hipcc])
    op = Gemm(4096, 4096, 4096, dtype="bf16")
    d = plan(op, host, VARIANTS)
    assert d.chosen == "hip-mfma.gemm" and d.precision == "bf16" and d.fallback is None
    mi100 = dataclasses.replace(host, amd=dataclasses.replace(section, devices=[
        dataclasses.replace(g, gfx_target="gfx908") for g in section.devices]))
    d = plan(op, mi100, VARIANTS)
    assert d.chosen == "hip-mfma.gemm" and d.precision == "fp16"
    assert "bf16: needs gfx90a or gfx940 or gfx941 or gfx942 (AMD GPU 0 is gfx908)" in d.fallback
    d = plan(op, dataclasses.replace(host, amd=AmdSection(reason="no /dev/kfd")), VARIANTS)
    assert d.chosen is None and any("no AMD GPU (no /dev/kfd)" in r for c in d.candidates for r in c.reasons)
