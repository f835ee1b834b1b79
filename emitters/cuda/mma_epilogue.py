"""How the mma.sync core's C leaves (``mma.py``): the IR's fused ops applied in fp32, then ``"direct"``
stores from the fragments (two elements per 32-bit store where the row allows; NCHW convs scatter by
channel) or, with ``epilogue="smem"``, ``staged_epilogue``: the accumulators through a shared staging
tile (``plan.CStage``) and out as 16-byte vectors, a warp writing 512 contiguous bytes.
"""

from __future__ import annotations

from typing import Any

from ..gpu_epilogue import Dest, Loop, Operands, Staging, Walk, direct_store, row_pointer, staged_store


def direct_epilogue(op: Any, s: Any, epi: tuple[str, ...], to_f: str, from_f: str, conv: bool, mt: int, ntile: int) -> str:
    """The fragments to C (``gpu_epilogue.direct_store``): thread (warp, lane) holds rows ``lane / 4`` (+8)
    of each 16-row slice, columns ``2 * (lane % 4)`` (+1) of each 8-column one, a pair of columns a store."""
    nchw = conv and op.layout == "nchw"
    rows, element = row_pointer("uint16_t", nchw)
    walk = Walk((Loop(f"for (int i = 0; i < {mt}; ++i)"),
                 Loop("for (int half = 0; half < 2; ++half)",
                      (f"const int row = m0 + warp_m * {s.wm} + i * 16 + (lane >> 2) + half * 8;",
                       "if (row >= M) continue;", *rows,
                       *(["const uint16_t* rrow = resid + (size_t)row * N;"] if "residual" in epi else []))),
                 Loop(f"for (int j = 0; j < {ntile}; ++j)",
                      (f"const int col = n0 + warp_n * {s.wn} + j * 8 + (lane & 3) * 2;", "float out2[2];"))),
                ("float v = acc[i][j][half * 2 + e];", "const int cc = col + e;"), 2, "out2")
    ops = Operands(f"{to_f}(bias[cc])", f"{to_f}(rrow[cc])", "cc < N", "(cc < N)")
    dest = Dest(element, from_f, vector="" if nchw else "(crow + col)", aligned="(N & 1) == 0")
    return "\n".join(direct_store(walk, epi, ops, dest))


def staged_epilogue(s: Any, cs: Any, epi: tuple[str, ...], to_f: str, from_f: str, n_vec: bool, nt: int,
                    barrier: str) -> str:
    """C through the shared staging tile ``cs`` (``plan.CStage``; ``gpu_epilogue.staged_store``): the warps
    write fragment rows, the block reads 8 columns per thread, bias and residual read as 16-byte vectors
    (``n_vec``) or element by element."""
    vector: list[str] = []
    if n_vec:
        for name, src in (("bias", "bias + col"), ("residual", "resid + (size_t)row * N + col")):
            if name in epi:
                tag = name[:3]
                vector += [f"const uint4 {tag}q = *(const uint4*)({src});",
                           f"const uint32_t {tag}w[4] = {{{tag}q.x, {tag}q.y, {tag}q.z, {tag}q.w}};"]
        ops = Operands(f"{to_f}((uint16_t)(biaw[e >> 1] >> ((e & 1) * 16)))",
                       f"{to_f}((uint16_t)(resw[e >> 1] >> ((e & 1) * 16)))", before=tuple(vector))
    else:
        ops = Operands(f"{to_f}(bias[col + e])", f"{to_f}(resid[(size_t)row * N + col + e])", "col + e < N", "col + e < N")
    tile = Staging(_stage_fragments(s, cs), _read_chunk(s, cs, nt), cs.passes,
                   "every warp is past its last ldmatrix: the pipeline's shared memory is free")
    return "\n".join(staged_store(tile, epi, ops, from_f, n_vec, barrier))


def _stage_fragments(s: Any, cs: Any) -> tuple[str, ...]:
    """One pass's fragment rows of every warp, written to the staging tile as fp32 pairs."""
    per = cs.rows_per_warp
    return (f"  #pragma unroll\n  for (int ii = 0; ii < {per // 16}; ++ii)",
            "  #pragma unroll\n  for (int half = 0; half < 2; ++half) {",
            f"    const int line = warp_m * {per} + ii * 16 + (lane >> 2) + half * 8;",
            f"    #pragma unroll\n    for (int j = 0; j < {s.wn // 8}; ++j) {{",
            f"      const int col = warp_n * {s.wn} + j * 8 + (lane & 3) * 2;",
            f"      const float* a_ = acc[pass * {per // 16} + ii][j];",
            f"      *(float2*)(cst + {cs.c_offset('line', 'col')}) = make_float2(a_[half * 2], a_[half * 2 + 1]);",
            "    }",
            "  }")


def _read_chunk(s: Any, cs: Any, nt: int) -> tuple[str, ...]:
    """The block's walk over the staged tile: each thread's 8 columns of one row of C, read as two float4."""
    per, cpr = cs.rows_per_warp, s.bn // 8
    total = cs.lines * cpr
    iters = -(-total // nt)
    guard = "" if total % nt == 0 else f"if (c >= {total}) continue;"
    return (f"  #pragma unroll\n  for (int it = 0; it < {iters}; ++it) {{",
            f"    const int c = tid + it * {nt};",
            f"    {guard}",
            f"    const int line = c / {cpr}, ch = c % {cpr};",
            f"    const int row = m0 + (line / {per}) * {s.wm} + pass * {per} + line % {per}, col = n0 + ch * 8;",
            "    if (row >= M || col >= N) continue;",
            f"    const float4 x0 = *(const float4*)(cst + {cs.c_offset('line', 'ch * 8')});",
            f"    const float4 x1 = *(const float4*)(cst + {cs.c_offset('line', 'ch * 8 + 4')});",
            "    float v8[8] = {x0.x, x0.y, x0.z, x0.w, x1.x, x1.y, x1.z, x1.w};",
            "    uint16_t* crow = Cout + (size_t)row * N;")
