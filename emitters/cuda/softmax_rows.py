"""Short rows: several rows per block, ``lanes`` threads per row (a power of two up to a warp).

A block of ``threads`` serves ``threads / lanes`` consecutive rows. Lane ``l`` of a row's group holds the
vectors ``j * lanes + l`` (``j < chunks``) in registers, so each load instruction of a warp covers whole
16-byte pieces of its rows. With the whole row in registers the form reduces twice instead of folding
(max, sum) pairs: the group's max, then the exponentials (kept in place: one ``__expf`` an element) and
their sum, each with ``__shfl_xor_sync`` over offsets below ``lanes`` (they stay inside the group): no
shared memory and no block barrier. Rows past the end (the last block) compute on -inf and store
nothing, so every lane reaches every shuffle. Each element is read once and written once. Rows whose
length the vector does not divide are held as the slots they overlap (``softmax_parts.odd_row``).
"""

from __future__ import annotations

from typing import Any

from .render import CudaRenderer, Rendered
from .softmax_parts import header, load_slot, odd_row, store_slot, vector_access


def rows_per_block(schedule: Any) -> int:
    return schedule.threads // schedule.lanes


def grid_rows(op: Any, schedule: Any) -> int:
    """Blocks to launch: one per group of ``threads / lanes`` rows."""
    return -(-op.rows // rows_per_block(schedule))


def _group(lanes: int, step: str) -> list[str]:
    """A reduction over the row's lane group: xor offsets below ``lanes`` stay inside it."""
    if lanes == 1:
        return []
    return [f"    #pragma unroll\n    for (int o = {lanes // 2}; o > 0; o >>= 1) {step}"]


def render_rows(op: Any, s: Any, arch: Any, r: CudaRenderer) -> Rendered:
    dtype = op.dtype.value
    vec, threads, chunks, lanes = s.vec, s.threads, s.chunks, s.lanes
    vtype, unpack, pack = vector_access(dtype, vec)
    name = f"tr_softmax_{dtype}_{s.name}"
    rpb = rows_per_block(s)
    odd = op.cols % vec != 0
    if odd:  # a row past the end has no elements: every slot reads -inf, none is written
        where = ["    const int n = live ? cols : 0;", *odd_row(vec, vtype, "live ? row : 0", "n", "    ")]
        load = load_slot(dtype, vec, vtype, unpack, "i", "__ldcs(xr + i)", "        ", "n")
        store = store_slot(dtype, vec, vtype, pack, "i", "            ", "n")
    else:
        where = ["    const size_t base = (size_t)(live ? row : 0) * (size_t)cols;",
                 f"    const {vtype}* xr = (const {vtype}*)(X + base);",
                 f"    {vtype}* yr = ({vtype}*)(Y + base);",
                 f"    const int nv = live ? cols / {vec} : 0;  /* cols is a multiple of vec */"]
        load = [f"        if (i < nv) {{ const {vtype} v = __ldcs(xr + i); {unpack} }}",
                f"        else {{\n            #pragma unroll\n            for (int e = 0; e < {vec}; ++e) f[e] = TR_NEG_INF;\n        }}"]
        store = [f"            {vtype} v; {pack}\n            __stcs(yr + i, v);"]
    src = [*header(r, dtype, name, threads, shared=False),
           f"    const int lane = threadIdx.x & {lanes - 1};",
           f"    const long long row = (long long)blockIdx.x * {rpb} + (threadIdx.x / {lanes});",
           "    const bool live = row < rows;",
           *where,
           f"    float xs[{chunks}][{vec}];",
           "    float m = TR_NEG_INF;",
           f"    #pragma unroll\n    for (int j = 0; j < {chunks}; ++j) {{",
           f"        const int i = j * {lanes} + lane;",
           f"        float f[{vec}];",
           *load,
           f"        #pragma unroll\n        for (int e = 0; e < {vec}; ++e) {{ xs[j][e] = f[e]; m = fmaxf(m, f[e]); }}",
           "    }",
           *_group(lanes, "m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));"),
           "    float s = 0.0f;  /* the row's exponentials stay in registers: one __expf an element */",
           f"    #pragma unroll\n    for (int j = 0; j < {chunks}; ++j) {{",
           f"        #pragma unroll\n        for (int e = 0; e < {vec}; ++e) {{ xs[j][e] = __expf(xs[j][e] - m); s += xs[j][e]; }}",
           "    }",
           *_group(lanes, "s += __shfl_xor_sync(0xffffffffu, s, o);"),
           "    const float inv = __frcp_rn(s);",
           f"    #pragma unroll\n    for (int j = 0; j < {chunks}; ++j) {{",
           f"        const int i = j * {lanes} + lane;",
           "        if (i < nv) {",
           f"            float f[{vec}];\n            #pragma unroll\n            for (int e = 0; e < {vec}; ++e) "
           "f[e] = xs[j][e] * inv;",
           *store,
           "        }",
           "    }",
           "}"]
    grid = grid_rows(op, s)
    meta = {"name": name, "tile": {"rows_per_block": rpb, "lanes": lanes, "threads": threads, "vec": vec,
                                   "chunks": chunks},
            "fragments": {"dtype_in": dtype, "dtype_acc": "fp32"},
            "launch": {"grid": [grid, 1, 1], "block": [threads, 1, 1], "dynamic_smem": 0},
            "passes_over_input": 1, "epilogue": []}
    return Rendered(name, name, "\n".join(src) + "\n", ("x", "out", "rows", "cols"), (grid, 1, 1),
                    (threads, 1, 1), 0, meta)
