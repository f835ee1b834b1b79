"""The swapped AMX form of the CPU's scaled 8-bit GEMM (``emitters/cpu/scaled_gemm_amx_swapped_c.py``: C^T = B A^T,
the n x k weights read in place as tdpbssd's first operand, A packed a call) against the float64 reference on fresh
random inputs, on a host with AMX-INT8: M = 1 and edges of M (fewer than 16 and 32 rows, past a block of ``mc``),
N past a 16- and 32-row weight tile, K off 64 bytes (the padded tail) and in several chunks, every scale mode it
takes and output type, the fused epilogue, 1 and 2 threads; the VNNI fallback (``TRACEA_NO_AMX``) in a process of
its own; the schedule's checks and its place in the space."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys

import numpy as np
import pytest

from tracea.doctor import probe
from tracea.doctor.errors import BadInputError
from tracea.emitters import cpu
from tracea.emitters.cpu.backend import rendering, schedule_from_json
from tracea.emitters.cpu.scaled_gemm import ScaledGemmSchedule, schedule_space
from tracea.kernels import ScaledGemm, relative_error
from tracea.kernels.dtypes import to_float64

HOST = probe()
AMX = "amx-int8" in HOST.cpu.isa
pytestmark = pytest.mark.usefixtures("kernel_cache")
SWAP = ScaledGemmSchedule(mr=32, nr=32, kc=4096, mc=256, threads=1, pack=True, amx=True, swap=True)

CASES = [
    # m, n, k, scale, out_dtype, epilogue, kc, mc
    (1, 1, 1, "row", "fp32", "", 4096, 256),
    (1, 4096, 4096, "row", "fp32", "", 4096, 256),  # decode: one activation column, every weight tile
    (1, 300, 1000, "tensor", "bf16", "", 4096, 256),
    (3, 17, 63, "row", "fp32", "", 4096, 256),  # 17 weight rows: the second row group's tiles one row
    (8, 4096, 4096, "row", "fp32", "", 4096, 256),
    (16, 33, 64, "none", "int32", "", 4096, 256),
    (17, 100, 130, "row", "fp16", "", 4096, 256),  # 17 columns: the second activation tile one column
    (45, 70, 300, "row", "fp32", "", 4096, 256),
    (128, 4096, 4096, "row", "fp32", "", 4096, 256),
    (130, 520, 1040, "row", "bf16", "bias,relu", 4096, 64),  # blocks of 64 rows, the last 2
    (40, 96, 9001, "tensor", "bf16", "residual", 4096, 256),  # K in three chunks, its tail 9001 - 8960 = 41 bytes
    (70, 129, 8960, "none", "int32", "", 1024, 32),  # nine chunks of 1 KiB, no tail
    (300, 64, 4097, "row", "fp32", "", 4096, 256),  # a chunk of one byte (padded to 64)
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0]}x{c[1]}x{c[2]}-{c[3]}-{c[4]}-kc{c[6]}-mc{c[7]}")
def test_the_swapped_form_matches_the_reference(case):
    if not AMX:
        pytest.skip("this CPU has no AMX-INT8")
    m, n, k, scale, out, epi, kc, mc = case
    op = ScaledGemm(m, n, k, scale=scale, out_dtype=out, epilogue=epi)
    v = cpu.resolve("cpu-avx512.scaled_gemm")
    for threads in sorted({1, HOST.cpu.logical_cores or 1}):
        kernel = cpu.build(op, v, dataclasses.replace(SWAP, kc=kc, mc=mc, threads=threads), HOST)
        x = op.random_inputs(np.random.default_rng())
        got = kernel(x, None)
        assert got.dtype == op.output_dtype.storage
        err = relative_error(to_float64(got, op.output_dtype), op.reference(x))
        assert err <= op.tolerance_bound(), f"{op.signature} {threads} threads: relative error {err:.3g}"


FALLBACK = """
import numpy as np
from tracea.doctor import probe
from tracea.emitters import cpu
from tracea.emitters.cpu.scaled_gemm import ScaledGemmSchedule
from tracea.kernels import ScaledGemm, relative_error
from tracea.kernels.dtypes import to_float64
h = probe()
for m, n, k in ((1, 70, 300), (45, 70, 300), (40, 96, 9001)):
    op = ScaledGemm(m, n, k, scale='row', out_dtype='fp32')
    s = ScaledGemmSchedule(32, 32, 4096, 256, 2, True, True, True)
    kernel = cpu.build(op, cpu.resolve('cpu-avx512.scaled_gemm'), s, h)
    x = op.random_inputs(np.random.default_rng(7))
    err = relative_error(to_float64(kernel(x, None), op.output_dtype), op.reference(x))
    assert err <= op.tolerance_bound(), (m, n, k, err)
print('ok')
"""


def test_the_swapped_form_runs_the_vnni_tiles_where_amx_is_refused(tmp_path):
    """TRACEA_NO_AMX (as where the OS refuses the tile state): the call runs the AMX form's driver with the VNNI
    tiles (the weights packed and flipped), and matches."""
    if not AMX:
        pytest.skip("this CPU has no AMX-INT8")
    env = {**os.environ, "TRACEA_NO_AMX": "1", "TRACEA_HOME": str(tmp_path)}
    r = subprocess.run([sys.executable, "-c", FALLBACK], capture_output=True, text=True, timeout=600, env=env)
    assert r.returncode == 0 and r.stdout.split()[-1] == "ok", r.stderr[-2000:]


def test_the_swapped_schedule_checks_and_space():
    """Refused for a row B and without the AMX form (its 32 x 32 tile, blocks of whole tiles: the AMX checks); in the space of a col
    op on an AMX host (none elsewhere); its JSON round trip and its source (tdpbssd, the swapped call)."""
    v = cpu.resolve("cpu-avx512.scaled_gemm")
    op = ScaledGemm(64, 256, 512)
    assert schedule_from_json(SWAP.to_json()) == SWAP and SWAP.name.startswith("amxs32x32")
    for bad, what in ((dataclasses.replace(SWAP, amx=False), op), (SWAP, ScaledGemm(64, 256, 512, layout_b="row"))):
        with pytest.raises(BadInputError, match="swap"):
            bad.validate(what, HOST, v)
    assert not any(s.swap for s in schedule_space(ScaledGemm(64, 256, 512, layout_b="row"), v, HOST))
    if not AMX:
        assert not any(s.swap for s in schedule_space(op, v, HOST))
        return
    assert any(s.swap for s in schedule_space(op, v, HOST))
    src = rendering(op, v, SWAP, HOST).source
    assert "_tile_dpbssd(3, 5, 7);" in src and "return tr_scaled_gemm_swapped(bufs, dims, fparams);" in src
