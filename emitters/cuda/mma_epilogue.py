"""How the mma.sync core's C leaves (``mma.py``): the IR's fused ops applied in fp32, then ``"direct"``
stores from the fragments (two elements per 32-bit store where the row allows; NCHW convs scatter by
channel) or, with ``epilogue="smem"``, ``staged_epilogue``: the accumulators through a shared staging
tile (``plan.CStage``) and out as 16-byte vectors, a warp writing 512 contiguous bytes.
"""

from __future__ import annotations

from typing import Any

from .epilogue import epilogue_lines


def direct_epilogue(op: Any, s: Any, epi: tuple[str, ...], to_f: str, from_f: str, conv: bool, mt: int, ntile: int) -> str:
    nchw = conv and op.layout == "nchw"
    lines = [f"#pragma unroll\nfor (int i = 0; i < {mt}; ++i) {{",
             "  #pragma unroll\n  for (int half = 0; half < 2; ++half) {",
             f"    const int row = m0 + warp_m * {s.wm} + i * 16 + (lane >> 2) + half * 8;",
             "    if (row >= M) continue;"]
    if nchw:
        lines += ["    const int img = tr_div(row, (uint32_t)PQ_mul, (uint32_t)PQ_shr), pq = row - img * P * Q;",
                  "    uint16_t* crow = Cout + (size_t)img * N * P * Q + pq;"]
    else:
        lines += ["    uint16_t* crow = Cout + (size_t)row * N;"]
    if "residual" in epi:
        lines += ["    const uint16_t* rrow = resid + (size_t)row * N;"]
    lines += [f"    #pragma unroll\n    for (int j = 0; j < {ntile}; ++j) {{",
              f"      const int col = n0 + warp_n * {s.wn} + j * 8 + (lane & 3) * 2;",
              "      float out2[2];",
              "      #pragma unroll\n      for (int e = 0; e < 2; ++e) {",
              "        float v = acc[i][j][half * 2 + e];",
              "        const int cc = col + e;"]
    if "bias" in epi:
        lines += [f"        const float bias_v = cc < N ? {to_f}(bias[cc]) : 0.0f;"]
    if "residual" in epi:
        lines += [f"        const float res_v = (cc < N) ? {to_f}(rrow[cc]) : 0.0f;"]
    lines += epilogue_lines(epi, "        ")
    lines += ["        out2[e] = v;", "      }"]
    if nchw:
        lines += [f"      if (col < N) crow[(size_t)col * P * Q] = {from_f}(out2[0]);",
                  f"      if (col + 1 < N) crow[(size_t)(col + 1) * P * Q] = {from_f}(out2[1]);"]
    else:
        lines += ["      if (col + 1 < N && (N & 1) == 0) {",
                  f"        *(uint32_t*)(crow + col) = (uint32_t){from_f}(out2[0]) | ((uint32_t){from_f}(out2[1]) << 16);",
                  "      } else {",
                  f"        if (col < N) crow[col] = {from_f}(out2[0]);",
                  f"        if (col + 1 < N) crow[col + 1] = {from_f}(out2[1]);",
                  "      }"]
    lines += ["    }", "  }", "}"]
    return "\n".join(lines)


def staged_epilogue(s: Any, cs: Any, epi: tuple[str, ...], to_f: str, from_f: str, n_vec: bool, nt: int) -> str:
    """C through the shared staging tile ``cs`` (``plan.CStage``), in ``cs.passes`` passes: the warps write
    fragment rows, a barrier, the block reads 8 columns per thread, applies the fused ops and stores 16 bytes
    (``n_vec``: N a multiple of 8, so every row starts on 16 bytes and a chunk is whole or wholly past N)
    or element by element; a barrier before the next pass overwrites the tile."""
    L = ["__syncthreads();  /* every warp is past its last ldmatrix: the pipeline's shared memory is free */",
         "float* cst = (float*)tr_smem;",
         f"#pragma unroll\nfor (int pass = 0; pass < {cs.passes}; ++pass) {{",
         *_stage_fragments(s, cs),
         "  __syncthreads();",
         *_read_chunk(s, cs, nt),
         *_chunk_ops(epi, to_f, n_vec),
         *_store_chunk(from_f, n_vec),
         "  }",
         f"  if (pass + 1 < {cs.passes}) __syncthreads();  /* the tile is read before the next pass writes it */",
         "}"]
    return "\n".join(ln for ln in L if ln.strip())


def _stage_fragments(s: Any, cs: Any) -> list[str]:
    """One pass's fragment rows of every warp, written to the staging tile as fp32 pairs."""
    per = cs.rows_per_warp
    return [f"  #pragma unroll\n  for (int ii = 0; ii < {per // 16}; ++ii)",
            "  #pragma unroll\n  for (int half = 0; half < 2; ++half) {",
            f"    const int line = warp_m * {per} + ii * 16 + (lane >> 2) + half * 8;",
            f"    #pragma unroll\n    for (int j = 0; j < {s.wn // 8}; ++j) {{",
            f"      const int col = warp_n * {s.wn} + j * 8 + (lane & 3) * 2;",
            f"      const float* a_ = acc[pass * {per // 16} + ii][j];",
            f"      *(float2*)(cst + {cs.c_offset('line', 'col')}) = make_float2(a_[half * 2], a_[half * 2 + 1]);",
            "    }",
            "  }"]


def _read_chunk(s: Any, cs: Any, nt: int) -> list[str]:
    """The block's walk over the staged tile: each thread's 8 columns of one row of C, read as two float4."""
    per, cpr = cs.rows_per_warp, s.bn // 8
    total = cs.lines * cpr
    iters = -(-total // nt)
    guard = "" if total % nt == 0 else f"if (c >= {total}) continue;"
    return [f"  #pragma unroll\n  for (int it = 0; it < {iters}; ++it) {{",
            f"    const int c = tid + it * {nt};",
            f"    {guard}",
            f"    const int line = c / {cpr}, ch = c % {cpr};",
            f"    const int row = m0 + (line / {per}) * {s.wm} + pass * {per} + line % {per}, col = n0 + ch * 8;",
            "    if (row >= M || col >= N) continue;",
            f"    const float4 x0 = *(const float4*)(cst + {cs.c_offset('line', 'ch * 8')});",
            f"    const float4 x1 = *(const float4*)(cst + {cs.c_offset('line', 'ch * 8 + 4')});",
            "    float v8[8] = {x0.x, x0.y, x0.z, x0.w, x1.x, x1.y, x1.z, x1.w};",
            "    uint16_t* crow = Cout + (size_t)row * N;"]


def _chunk_ops(epi: tuple[str, ...], to_f: str, n_vec: bool) -> list[str]:
    """The fused ops on the chunk's 8 values: bias and residual read as 16-byte vectors (``n_vec``) or
    element by element."""
    L: list[str] = []
    if n_vec:
        for name, src in (("bias", "bias + col"), ("residual", "resid + (size_t)row * N + col")):
            if name in epi:
                tag = name[:3]
                L += [f"    const uint4 {tag}q = *(const uint4*)({src});",
                      f"    const uint32_t {tag}w[4] = {{{tag}q.x, {tag}q.y, {tag}q.z, {tag}q.w}};"]
    L += ["    #pragma unroll\n    for (int e = 0; e < 8; ++e) {",
          "      float v = v8[e];"]
    if n_vec:
        if "bias" in epi:
            L += [f"      const float bias_v = {to_f}((uint16_t)(biaw[e >> 1] >> ((e & 1) * 16)));"]
        if "residual" in epi:
            L += [f"      const float res_v = {to_f}((uint16_t)(resw[e >> 1] >> ((e & 1) * 16)));"]
    else:
        if "bias" in epi:
            L += [f"      const float bias_v = col + e < N ? {to_f}(bias[col + e]) : 0.0f;"]
        if "residual" in epi:
            L += [f"      const float res_v = col + e < N ? {to_f}(resid[(size_t)row * N + col + e]) : 0.0f;"]
    L += epilogue_lines(epi, "      ")
    return L + ["      v8[e] = v;", "    }"]


def _store_chunk(from_f: str, n_vec: bool) -> list[str]:
    """The chunk to C: one 16-byte store (``n_vec``), or element by element up to N."""
    if n_vec:
        return ["    uint32_t o_[4];",
                "    #pragma unroll\n    for (int q = 0; q < 4; ++q)",
                f"      o_[q] = (uint32_t){from_f}(v8[2 * q]) | ((uint32_t){from_f}(v8[2 * q + 1]) << 16);",
                "    *(uint4*)(crow + col) = make_uint4(o_[0], o_[1], o_[2], o_[3]);"]
    return ["    #pragma unroll\n    for (int e = 0; e < 8; ++e)",
            f"      if (col + e < N) crow[col + e] = {from_f}(v8[e]);"]
