"""The fused epilogue is spelled out once (kernels/epilogue.py); each language has one statement table,
and the baselines apply the same vocabulary with their library's primitives."""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pytest

from tracea.emitters.baselines import NUMPY_INPLACE
from tracea.emitters.cpu.epilogue import C_SCALAR, C_SIMD
from tracea.emitters.cstyle import C_REFERENCE
from tracea.emitters.gpu import EPILOGUE as GPU
from tracea.kernels import Gemm
from tracea.kernels.epilogue import EPILOGUES, NUMPY, VOCABULARY, apply, statements

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("table", [C_SIMD, GPU, C_REFERENCE, C_SCALAR], ids=["c-simd", "cuda-hip", "c-reference",
                                                                             "c-scalar"])
def test_each_language_table_covers_the_vocabulary_exactly(table):
    assert set(table) == set(EPILOGUES)
    for name, op in VOCABULARY.items():
        # An op that reads an operand must place the caller's expression for it, and only that one.
        line = statements([name], table, bias="<B>", residual="<R>")[0]
        assert ("<B>" in line) == (op.operand == "bias") and ("<R>" in line) == (op.operand == "residual"), line


def test_the_unary_ops_of_each_library_match_the_vocabulary():
    unary = {n for n, op in VOCABULARY.items() if op.form == "unary"}
    assert set(NUMPY.unary) == unary and set(NUMPY_INPLACE.unary) == unary


def test_the_in_place_baseline_computes_the_reference_epilogue():
    rng = np.random.default_rng(7)
    chain = ("bias", "gelu", "scale", "residual", "relu")
    c = rng.standard_normal((33, 17)).astype(np.float32)
    bias, res = rng.standard_normal(17).astype(np.float32), rng.standard_normal((33, 17)).astype(np.float32)
    want = apply(chain, c.astype(np.float64), {"bias": bias[None, :].astype(np.float64), "residual": res}, 0.75, NUMPY)
    got = apply(chain, c.copy(), {"bias": bias, "residual": res}, 0.75, NUMPY_INPLACE)
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    assert not np.allclose(want, c)  # the chain changed the values


def test_flops_count_the_chain():
    plain, fused = Gemm(64, 32, 16), Gemm(64, 32, 16, epilogue="bias,gelu")
    assert fused.flops - plain.flops == (1 + 8) * 64 * 32


def test_no_other_module_spells_out_the_unary_ops():
    """"relu" and "gelu" as string constants belong to the vocabulary, the language tables (cstyle.py's
    plain-C reference among them) and the baselines' library adapters (and isa.py, whose primitive table
    holds the SIMD body of ``vf_gelu``, the device code the C table calls); anywhere else they are a second
    copy of the vocabulary."""
    allowed = {"kernels/epilogue.py", "emitters/cpu/epilogue.py", "emitters/gpu.py", "emitters/cstyle.py",
               "emitters/baselines/__init__.py", "emitters/cpu/isa.py"}
    found = []
    for layer in ("kernels", "emitters", "tuner", "reports", "doctor"):
        for path in (ROOT / layer).rglob("*.py"):
            rel = path.relative_to(ROOT).as_posix()
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Constant) and node.value in ("relu", "gelu") and rel not in allowed:
                    found.append(f"{rel}:{node.lineno}")
    assert not found, found


def test_gpu_kernels_apply_the_epilogue_through_one_module():
    """CUDA's and HIP's kernels store C through emitters/gpu_epilogue.py's writers (direct, staged; the Hopper
    TMA store calls its ``element_ops``): no other GPU module applies the statement table itself."""
    found = []
    for path in [*(ROOT / "emitters" / "cuda").rglob("*.py"), *(ROOT / "emitters" / "hip").rglob("*.py")]:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module == "tracea.kernels.epilogue" and \
                    any(a.name == "statements" for a in node.names):
                found.append(f"{path.relative_to(ROOT).as_posix()}:{node.lineno}")
    assert not found, found


def test_the_direct_writer_lays_out_a_walk():
    from tracea.emitters.gpu_epilogue import Dest, Loop, Operands, Walk, direct_store

    walk = Walk((Loop("for (int i = 0; i < 2; ++i)", ("const int row = r0 + i;", "if (row >= M) continue;")),
                 Loop("for (int j = 0; j < 4; ++j)", ("const int col = c0 + 2 * j;", "float out[2];"))),
                ("float v = acc[i][2 * j + e];",), 2, "out")
    text = direct_store(walk, ("bias", "relu"), Operands("f(bias[col + e])", bias_guard="col + e < N"),
                        Dest("C[(size_t)row * N + {c}]", "g", vector="(C + (size_t)row * N + col)", aligned="(N & 1) == 0"))
    assert text == [
        "#pragma unroll", "for (int i = 0; i < 2; ++i) {", "  const int row = r0 + i;", "  if (row >= M) continue;",
        "  #pragma unroll", "  for (int j = 0; j < 4; ++j) {", "    const int col = c0 + 2 * j;", "    float out[2];",
        "    #pragma unroll", "    for (int e = 0; e < 2; ++e) {", "      float v = acc[i][2 * j + e];",
        "      const float bias_v = col + e < N ? f(bias[col + e]) : 0.0f;", "      v += bias_v;",
        "      v = v < 0.0f ? 0.0f : v;", "      out[e] = v;", "    }",
        "    if (col + 1 < N && (N & 1) == 0) {",
        "      *(uint32_t*)(C + (size_t)row * N + col) = (uint32_t)g(out[0]) | ((uint32_t)g(out[1]) << 16);",
        "    } else {", "      if (col < N) C[(size_t)row * N + col] = g(out[0]);",
        "      if (col + 1 < N) C[(size_t)row * N + col + 1] = g(out[1]);", "    }", "  }", "}"]
