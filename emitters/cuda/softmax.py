"""Row softmax, the ``softmax`` core: three forms of one kernel, chosen by the schedule.

- A block per row (here): vectorised loads (16 bytes a lane), and an online
  max and sum: each thread folds its elements into a running (max, sum) pair, the block merges the pairs
  (m, s) (+) (m', s') = (max, s e^(m - max) + s' e^(m' - max)), then every element is written as
  e^(x - max) / sum. When the row fits in the block's registers (``chunks`` vectors a thread,
  ``threads * vec * chunks >= cols``) the kernel reads each element once and writes it once; otherwise
  (``chunks = 0``) it streams the row twice (reads 2x, writes 1x).
- Several rows per block, ``lanes`` threads a row, warp shuffles only (``softmax_rows.py``): short rows.
- A row split over ``split`` blocks (``softmax_split.py``): few long rows.

Rows whose length is not a multiple of the vector (50257, 32001, 1001) keep 16-byte accesses for their
aligned middle: each form walks the aligned slots the row overlaps and reads and writes the partial first
and last slot element by element (``softmax_parts.odd_row``). Rows shorter than 4 vectors stay scalar.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from .render import CudaRenderer, Rendered
from .schedule import CudaSchedule
from .softmax_parts import block_merge, load_slot, odd_row, row_vectors, store_slot, vector_access
from .softmax_parts import header as _header

SHORT = 1024  # rows up to this many elements: several rows per block (softmax_rows.py)
SPLIT_THREADS = 512  # the split form's block (softmax_split.py), two resident per SM


def _sms(host: Any) -> tuple[int, bool]:
    """The host GPU's SM count, and whether the report gave it (else an H100's 132 is assumed)."""
    gpus = getattr(getattr(host, "nvidia", None), "devices", None) or []
    n = int(getattr(gpus[0], "sm_count", 0) or 0) if gpus else 0
    return (n, True) if n else (132, False)


def _vec(op: Any) -> int:
    """16 bytes; scalar for a row of fewer than 4 vectors whose length the vector does not divide (its
    partial end slots would be most of it); narrower where a short row would not fit 32 elements a lane."""
    vec = 16 // op.dtype.itemsize
    if op.cols % vec == 0:
        return vec
    if op.cols < 4 * vec:
        return 1
    while op.cols <= SHORT and vec > 1 and -(-row_vectors(op.cols, vec) // 32) * vec > 32:
        vec //= 2
    return vec


def rows_schedule(op: Any, vec: int, sms: int, lanes: int = 0, threads: int = 0) -> CudaSchedule:
    """Rows per block: about 4 vectors a lane (``lanes`` = the row's vectors / 4, a power of two up to a
    warp), 128-thread blocks, smaller ones while the grid would leave SMs idle."""
    nv = row_vectors(op.cols, vec)
    if not lanes:
        lanes = 1
        while lanes < 32 and lanes * 4 < nv:
            lanes *= 2
    if not threads:
        threads = 128
        while threads > 32 and -(-op.rows * lanes // threads) < sms:
            threads //= 2
    return CudaSchedule("softmax", threads=threads, vec=vec, chunks=-(-nv // lanes), lanes=lanes)


def split_schedule(op: Any, vec: int, sms: int, threads: int = SPLIT_THREADS, split: int = 0,
                   known: bool = True) -> CudaSchedule | None:
    """A row over ``split`` blocks: given, or as many as the GPU holds at once (``resident`` a SM; one a SM
    where the SM count is assumed, a margin for a smaller GPU) but at least 4 vectors a thread each. The
    part is held in registers when it fits 8 vectors and 32 elements a thread. None: one block a row, or
    more blocks than the GPU surely holds at once."""
    from .softmax_split import resident

    cap = sms * resident(threads) // op.rows
    if not split:
        split = min(cap if known else sms // op.rows, -(-row_vectors(op.cols, vec) // (threads * 4)))
    if split < 2 or split > cap:
        return None
    per = -(-row_vectors(op.cols, vec) // split)  # vectors a part, as the kernel divides the row
    chunks = -(-per // threads)
    return CudaSchedule("softmax", threads=threads, vec=vec, chunks=chunks if chunks * vec <= 32 and chunks <= 8 else 0,
                        split=split)


def hero_schedule(op: Any, host: Any) -> CudaSchedule:
    """Short rows (up to 1024): several rows per block. Few long rows (fewer than SMs): a row split over
    blocks. Otherwise a block per row: 16-byte vectors (slots, for rows the vector does not divide), rows
    held in registers when they fit."""
    vec = _vec(op)
    sms, known = _sms(host)
    if op.cols <= SHORT:
        return rows_schedule(op, vec, sms)
    if op.rows < sms:
        split = split_schedule(op, vec, sms, known=known)
        if split is not None:
            return split
    threads = 512 if op.cols >= 8192 else 256 if op.cols >= 2048 else 128  # vec > 1: rows past SHORT
    chunks = -(-row_vectors(op.cols, vec) // threads)
    if op.cols >= 8192:
        # long rows: the two-pass form, whose second read of a row hits L2, ran at 0.93 of the copy
        # bandwidth at 8192 x 8192 fp32 against 0.70 for the rows held in registers
        # (docs/device-runs/h200-cuda-kernels-and-tuner/cuda/bench-table-and-search-space)
        chunks = 0
    return CudaSchedule("softmax", threads=threads, vec=vec, chunks=chunks if chunks <= 16 else 0)


def search_space(op: Any, hero: Any, arch: Any) -> list[CudaSchedule]:
    """128..1024 threads at the hero's vector width, two-pass or in registers, persistent grids; rows per
    block (1..32 lanes a row, 32..256 threads) for rows up to 1024 elements; split rows (2.. blocks a row,
    256..1024 threads) for fewer rows than the GPU holds blocks."""
    cands: list[CudaSchedule] = []
    for threads in (128, 256, 512, 1024):
        vec = hero.vec
        chunks = -(-row_vectors(op.cols, vec) // threads)
        for c in sorted({0, chunks if chunks <= 16 else 0}):
            cands.append(CudaSchedule("softmax", threads=threads, vec=vec, chunks=c))
            if c:
                cands += [CudaSchedule("softmax", threads=threads, vec=vec, chunks=c, persist=p) for p in (1, 2, 4)]
    sms = max(1, arch.sm_count)
    nv = row_vectors(op.cols, hero.vec)
    for lanes in (1, 2, 4, 8, 16, 32):
        if -(-nv // lanes) * hero.vec <= 32:
            cands += [rows_schedule(op, hero.vec, sms, lanes, threads) for threads in (32, 64, 128, 256)
                      if threads >= lanes]
    for threads in (256, 512, 1024):
        for split in (2, 4, 8, 16, 32, 64, 128, 256, 512, 1024):
            s = split_schedule(op, hero.vec, sms, threads, split)
            cands += [s, dataclasses.replace(s, chunks=0)] if s is not None else []
    return cands


def render(op: Any, schedule: Any, arch: Any) -> tuple[Rendered, dict[str, float | int]]:
    """The form the schedule names: rows per block, a split row, or a block per row."""
    scalars: dict[str, float | int] = {"rows": op.rows, "cols": op.cols}
    if schedule.lanes:
        from .softmax_rows import render_rows

        return render_rows(op, schedule, arch, CudaRenderer()), scalars
    if schedule.split:
        from .softmax_split import render_split

        return render_split(op, schedule, arch, CudaRenderer()), scalars
    return render_softmax(op, schedule, arch), scalars


def render_softmax(op: Any, schedule: Any, arch: Any, renderer: CudaRenderer | None = None) -> Rendered:
    r = renderer or CudaRenderer()
    s = schedule
    dtype = op.dtype.value
    vec, threads, chunks = s.vec, s.threads, s.chunks
    vtype, unpack, pack = vector_access(dtype, vec)
    name = f"tr_softmax_{dtype}_{s.name}"
    single = chunks > 0
    warps = threads // 32
    odd = op.cols % vec != 0
    if s.persist:
        return _render_persistent(r, op, s, arch, name, vtype, unpack, pack)
    src = [*_header(r, op.dtype.value, name, threads),
           "    const int tid = threadIdx.x;",
           "    const size_t row = blockIdx.x;"]
    if odd:
        src += odd_row(vec, vtype, "row", "cols", "    ")
    else:
        src += [f"    const {vtype}* xr = (const {vtype}*)(X + row * (size_t)cols);",
                f"    {vtype}* yr = ({vtype}*)(Y + row * (size_t)cols);",
                f"    const int nv = cols / {vec};  /* cols is a multiple of vec (the schedule chose vec so) */"]
    src.append("    float m = TR_NEG_INF, s = 0.0f;")
    src += _single_reads(dtype, vec, threads, chunks, odd) if single else _stream_reads(dtype, vec, threads, odd)
    # block reduction of the (m, s) pairs
    src.extend(block_merge(warps, "    ", r.barrier))
    src.append("    const float inv = __frcp_rn(s);")
    src += _single_writes(dtype, vec, threads, chunks, odd) if single else _stream_writes(dtype, vec, threads, odd)
    src.append("}")
    source = "\n".join(src) + "\n"
    passes = 1 if single else 2
    meta = {"name": name, "tile": {"rows_per_block": 1, "threads": threads, "vec": vec, "chunks": chunks},
            "fragments": {"dtype_in": dtype, "dtype_acc": "fp32"},
            "launch": {"grid": [op.rows, 1, 1], "block": [threads, 1, 1], "dynamic_smem": 0},
            "passes_over_input": passes, "epilogue": []}
    return Rendered(name, name, source, ("x", "out", "rows", "cols"), (op.rows, 1, 1), (threads, 1, 1), 0, meta)


def _single_reads(dtype: str, vec: int, threads: int, chunks: int, odd: bool) -> list[str]:
    """The row into ``xs`` (``chunks`` slots a thread, -inf past the row), folding each slot's pair."""
    vtype, unpack, _ = vector_access(dtype, vec)
    if odd:
        load = load_slot(dtype, vec, vtype, unpack, "i", "__ldcs(xr + i)", "        ")
    else:
        load = [f"        if (i < nv) {{ const {vtype} v = __ldcs(xr + i); {unpack} }}",
                f"        else {{\n            #pragma unroll\n            for (int e = 0; e < {vec}; ++e) f[e] = TR_NEG_INF;\n        }}"]
    return [f"    float xs[{chunks}][{vec}];",
            f"    #pragma unroll\n    for (int j = 0; j < {chunks}; ++j) {{",
            f"        const int i = j * {threads} + tid;",
            f"        float f[{vec}];",
            *load,
            f"        float cm = f[0];\n        #pragma unroll\n        for (int e = 1; e < {vec}; ++e) cm = fmaxf(cm, f[e]);",
            f"        float cs = 0.0f;\n        #pragma unroll\n        for (int e = 0; e < {vec}; ++e) {{ xs[j][e] = f[e]; "
            "cs += (f[e] == TR_NEG_INF) ? 0.0f : __expf(f[e] - cm); }",
            "        if (cm != TR_NEG_INF) tr_fold(m, s, cm, cs);",
            "    }"]


def _stream_reads(dtype: str, vec: int, threads: int, odd: bool) -> list[str]:
    """The first of two passes: each slot folded into the thread's pair (plain loads: the row stays in L2
    for the second)."""
    vtype, unpack, _ = vector_access(dtype, vec)
    if odd:  # partial slots hold -inf: guarded as the single pass's
        return [f"    for (int i = tid; i < nv; i += {threads}) {{",
                f"        float f[{vec}];",
                *load_slot(dtype, vec, vtype, unpack, "i", "xr[i]", "        "),
                f"        float cm = f[0];\n        #pragma unroll\n        for (int e = 1; e < {vec}; ++e) cm = fmaxf(cm, f[e]);",
                f"        float cs = 0.0f;\n        #pragma unroll\n        for (int e = 0; e < {vec}; ++e) "
                "cs += (f[e] == TR_NEG_INF) ? 0.0f : __expf(f[e] - cm);",
                "        if (cm != TR_NEG_INF) tr_fold(m, s, cm, cs);",
                "    }"]
    return [f"    for (int i = tid; i < nv; i += {threads}) {{",
            f"        float f[{vec}];\n        const {vtype} v = xr[i]; {unpack}",
            f"        float cm = f[0];\n        #pragma unroll\n        for (int e = 1; e < {vec}; ++e) cm = fmaxf(cm, f[e]);",
            f"        float cs = 0.0f;\n        #pragma unroll\n        for (int e = 0; e < {vec}; ++e) cs += __expf(f[e] - cm);",
            "        tr_fold(m, s, cm, cs);",
            "    }"]


def _single_writes(dtype: str, vec: int, threads: int, chunks: int, odd: bool) -> list[str]:
    vtype, _, pack = vector_access(dtype, vec)
    store = (store_slot(dtype, vec, vtype, pack, "i", "            ") if odd
             else [f"            {vtype} v; {pack}\n            __stcs(yr + i, v);"])
    return [f"    #pragma unroll\n    for (int j = 0; j < {chunks}; ++j) {{",
            f"        const int i = j * {threads} + tid;",
            "        if (i < nv) {",
            f"            float f[{vec}];\n            #pragma unroll\n            for (int e = 0; e < {vec}; ++e) "
            "f[e] = __expf(xs[j][e] - m) * inv;",
            *store,
            "        }",
            "    }"]


def _stream_writes(dtype: str, vec: int, threads: int, odd: bool) -> list[str]:
    vtype, unpack, pack = vector_access(dtype, vec)
    if odd:
        load = load_slot(dtype, vec, vtype, unpack, "i", "__ldcs(xr + i)", "        ")
        store = store_slot(dtype, vec, vtype, pack, "i", "        ")
    else:
        load = [f"        {{ const {vtype} v = __ldcs(xr + i); {unpack} }}"]
        store = [f"        {vtype} v; {pack}\n        __stcs(yr + i, v);"]
    return [f"    for (int i = tid; i < nv; i += {threads}) {{",
            f"        float f[{vec}];",
            *load,
            f"        #pragma unroll\n        for (int e = 0; e < {vec}; ++e) f[e] = __expf(f[e] - m) * inv;",
            *store,
            "    }"]


def _render_persistent(r: CudaRenderer, op: Any, s: Any, arch: Any, name: str, vtype: str, unpack: str,
                       pack: str) -> Rendered:
    """The single-pass kernel on a grid of ``persist`` blocks per SM, each taking every gridDim-th row and
    issuing the loads of its next row before reducing and writing the current one, so reads stay in
    flight through the reduction and the writes (software pipelining across rows)."""
    vec, threads, chunks = s.vec, s.threads, s.chunks
    warps = threads // 32
    grid = max(1, min(op.rows, arch.sm_count * s.persist))
    odd = op.cols % vec != 0
    src = [*_header(r, op.dtype.value, name, threads),
           "    const int tid = threadIdx.x;",
           *([] if odd else [f"    const int nv = cols / {vec};"]),
           f"    float xs[{chunks}][{vec}], xn[{chunks}][{vec}];",
           "    int row = blockIdx.x;",
           "    if (row >= rows) return;",
           _row_loads(op, s, vtype, unpack, "xs", "row"),
           "    for (; row < rows; row += gridDim.x) {",
           "        const int next = row + gridDim.x;",
           "        if (next < rows) {", _row_loads(op, s, vtype, unpack, "xn", "next"), "        }",
           *_row_reduce(s),
           *block_merge(warps, "        ", r.barrier),
           f"        {r.barrier}  /* red_m/red_s are written again for the next row */",
           *_row_store(op, s, vtype, pack),
           f"        #pragma unroll\n        for (int j = 0; j < {chunks}; ++j)\n        #pragma unroll\n"
           f"        for (int e = 0; e < {vec}; ++e) xs[j][e] = xn[j][e];",
           "    }",
           "}"]
    meta = {"name": name, "tile": {"rows_per_block": "every gridDim-th", "threads": threads, "vec": vec,
                                   "chunks": chunks, "persist": s.persist},
            "fragments": {"dtype_in": op.dtype.value, "dtype_acc": "fp32"},
            "launch": {"grid": [grid, 1, 1], "block": [threads, 1, 1], "dynamic_smem": 0},
            "passes_over_input": 1, "epilogue": []}
    return Rendered(name, name, "\n".join(src) + "\n", ("x", "out", "rows", "cols"), (grid, 1, 1),
                    (threads, 1, 1), 0, meta)


def _row_loads(op: Any, s: Any, vtype: str, unpack: str, arr: str, row: str) -> str:
    """The persistent kernel's loads of row ``row`` into the registers ``arr`` (streaming: ``__ldcs``)."""
    vec, threads, chunks = s.vec, s.threads, s.chunks
    if op.cols % vec != 0:
        return _odd_load(op.dtype.value, s, vtype, unpack, arr, row)
    return "\n".join([
        f"        {{ const {vtype}* xr = (const {vtype}*)(X + (size_t)({row}) * (size_t)cols);",
        f"        #pragma unroll\n        for (int j = 0; j < {chunks}; ++j) {{",
        f"            const int i = j * {threads} + tid;",
        f"            float f[{vec}];",
        f"            if (i < nv) {{ const {vtype} v = __ldcs(xr + i); {unpack} }}",
        f"            else {{\n                #pragma unroll\n                for (int e = 0; e < {vec}; ++e) "
        "f[e] = TR_NEG_INF;\n            }",
        f"            #pragma unroll\n            for (int e = 0; e < {vec}; ++e) {arr}[j][e] = f[e];",
        "        } }"])


def _row_reduce(s: Any) -> list[str]:
    """A thread's running maximum and sum over its chunks of the current row (``xs``)."""
    vec, chunks = s.vec, s.chunks
    return ["        float m = TR_NEG_INF, s = 0.0f;",
            f"        #pragma unroll\n        for (int j = 0; j < {chunks}; ++j) {{",
            f"            float cm = xs[j][0];\n            #pragma unroll\n            for (int e = 1; e < {vec}; ++e) "
            "cm = fmaxf(cm, xs[j][e]);",
            "            if (cm == TR_NEG_INF) continue;",
            f"            float cs = 0.0f;\n            #pragma unroll\n            for (int e = 0; e < {vec}; ++e) "
            "cs += (xs[j][e] == TR_NEG_INF) ? 0.0f : __expf(xs[j][e] - cm);",
            "            tr_fold(m, s, cm, cs);",
            "        }"]


def _row_store(op: Any, s: Any, vtype: str, pack: str) -> list[str]:
    """The current row's exp(x - m) / sum stored (streaming: ``__stcs``; element by element where the
    columns are not a multiple of the vector)."""
    vec, threads, chunks = s.vec, s.threads, s.chunks
    odd = op.cols % vec != 0
    return ["        const float inv = __frcp_rn(s);",
            *(["        {", *odd_row(vec, vtype, "row", "cols", "        ")] if odd else
              [f"        {vtype}* yr = ({vtype}*)(Y + (size_t)row * (size_t)cols);"]),
            f"        #pragma unroll\n        for (int j = 0; j < {chunks}; ++j) {{",
            f"            const int i = j * {threads} + tid;",
            "            if (i < nv) {",
            f"                float f[{vec}];\n                #pragma unroll\n                for (int e = 0; e < {vec}; ++e) "
            "f[e] = __expf(xs[j][e] - m) * inv;",
            *(store_slot(op.dtype.value, vec, vtype, pack, "i", "                ") if odd else
              [f"                {vtype} v; {pack}\n                __stcs(yr + i, v);"]),
            "            }",
            "        }",
            *(["        }"] if odd else [])]


def _odd_load(dtype: str, s: Any, vtype: str, unpack: str, arr: str, row: str) -> str:
    """The persistent form's read of row ``row`` into ``arr`` when rows start mid-vector."""
    return "\n".join([
        "        {", *odd_row(s.vec, vtype, row, "cols", "        "),
        f"        #pragma unroll\n        for (int j = 0; j < {s.chunks}; ++j) {{",
        f"            const int i = j * {s.threads} + tid;",
        f"            float f[{s.vec}];",
        *load_slot(dtype, s.vec, vtype, unpack, "i", "__ldcs(xr + i)", "            "),
        f"            #pragma unroll\n            for (int e = 0; e < {s.vec}; ++e) {arr}[j][e] = f[e];",
        "        } }"])
