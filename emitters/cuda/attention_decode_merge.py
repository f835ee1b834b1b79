"""The decode kernel's tail (issue 33): after the walk, a block's warps' (max, sum, O) combined in warp order;
with one slice written as O and the log-sum-exp, with several parked in the workspace, the last block of the
row tile to arrive combining every slice in slice order (``split_arrival.last_block``: the same bits whichever
block comes last). Only the tile's real rows (``rows - r0``, at most 16) are combined, parked and merged: a
GQA-4 decode tile has 4, an MHA one 1.
"""

from __future__ import annotations

from .render import CudaRenderer
from .split_arrival import last_block

# One block's (max, sum, O) of a tile row from its warps' partials, in warp order: M, L and the O element.
COMBINE_WARPS = r"""        float M = TR_NEG_INF;
        #pragma unroll
        for (int w = 0; w < WARPS; ++w) M = fmaxf(M, wm[w * 16 + row]);
        const float ms = M == TR_NEG_INF ? 0.f : M * scale_log2;
        float acc = 0.f, L = 0.f;
        #pragma unroll
        for (int w = 0; w < WARPS; ++w) {
            const float f = tr_dex2(wm[w * 16 + row] * scale_log2 - ms);
            acc += wo[(w * 16 + row) * HD + col] * f;
            L += wl[w * 16 + row] * f;
        }"""

# O / sum and the log-sum-exp of a real row (a row that keeps no key: 0 and -inf).
WRITE = r"""        if (r0 + row < rows) {
            out[(qrow0 + row) * HD + col] = tr_from_float(L > 0.f ? acc / L : 0.f);
            if (col == 0) lse[qrow0 + row] = L > 0.f ? (M * scale_log2 + log2f(L)) * TR_LN2 : TR_NEG_INF;
        }"""


def single() -> str:
    """One slice: the block's combination is the answer."""
    return f"""    const int nr = min(16, rows - r0);  /* the tile's real rows: only they are combined, parked and merged */
    if (SPLITS == 1) {{
        for (int x = tid; x < nr * HD; x += NT) {{
            const int row = x / HD, col = x % HD;
{COMBINE_WARPS}
{WRITE}
        }}
        return;
    }}
"""


def split(r: CudaRenderer, counters: int) -> str:
    """Several slices: park (M, L, O) in the workspace, arrive; the last block combines every slice in
    slice order. Workspace (floats): ``counters`` ints, then (M, L) [pair][slice][16][2], then O
    [pair][slice][16][HD]."""
    park = f"""    float* const ws_ml = workspace + {counters} + (size_t)pair * SPLITS * 32;
    float* const ws_o = workspace + {counters} + (size_t)gridDim.y * gridDim.z * row_tiles * SPLITS * 32
                        + (size_t)pair * SPLITS * 16 * HD;
    for (int x = tid; x < nr * HD; x += NT) {{
        const int row = x / HD, col = x % HD;
{COMBINE_WARPS}
        ws_o[(size_t)split * 16 * HD + x] = acc;
        if (col == 0) {{ ws_ml[(split * 16 + row) * 2] = M; ws_ml[(split * 16 + row) * 2 + 1] = L; }}
    }}"""
    summed = f"""    for (int x = tid; x < nr * HD; x += NT) {{
        const int row = x / HD, col = x % HD;
        float M = TR_NEG_INF;
        for (int s2 = 0; s2 < nsl; ++s2) M = fmaxf(M, __ldcg(ws_ml + (s2 * 16 + row) * 2));
        const float ms = M == TR_NEG_INF ? 0.f : M * scale_log2;
        float acc = 0.f, L = 0.f;
        for (int s2 = 0; s2 < nsl; ++s2) {{  /* slice order: the same sum whoever came last */
            const float f = tr_dex2(__ldcg(ws_ml + (s2 * 16 + row) * 2) * scale_log2 - ms);
            acc += __ldcg(ws_o + (size_t)s2 * 16 * HD + x) * f;
            L += __ldcg(ws_ml + (s2 * 16 + row) * 2 + 1) * f;
        }}
{WRITE}
    }}"""
    lines = last_block(r, "workspace", "pair", "nsl", "tid == 0", park.split("\n"), summed.split("\n"),
                       word="int", indent="    ")
    return "\n".join(lines) + "\n"


def tail(r: CudaRenderer, splits: int, counters: int) -> str:
    """Everything after the warps' partials, to the kernel's closing brace."""
    return single() + (split(r, counters) + "}\n" if splits > 1 else "}\n")
