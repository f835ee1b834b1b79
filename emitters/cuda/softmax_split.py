"""Few long rows (vocabulary-sized): a row split over ``split`` blocks, so a handful of rows fills the GPU.

Block ``b`` takes part ``b % split`` of row ``b / split`` (a contiguous run of vectors), folds it into a
(max, sum) pair, and its thread 0 publishes the pair in the workspace ``W[row * split + part]`` and
arrives at the row's counter. The last block to arrive resets the counter and bumps the row's
generation; the others wait for that bump. Every block then folds the row's ``split`` pairs in the same
order (the result does not depend on which block came last, so it is deterministic) and writes its part.
With ``chunks`` > 0 the part stays in registers between the two steps (one read, one write); with 0 it is
read again, from L2 (2 reads, 1 write: the parts of a few rows fit in L2). Rows whose length the vector
does not divide are cut into parts of the slots they overlap (``softmax_parts.odd_row``).

Waiting on other blocks needs them all resident: the kernel is launched cooperatively (the driver
refuses a grid that cannot be co-resident, rather than letting it hang) and ``SplitKernel`` checks the
grid against the loaded kernel's occupancy first. The counters return to 0 after every launch.
"""

from __future__ import annotations

from typing import Any

from tracea.doctor.errors import LaunchError

from ..cstyle import Param
from .render import CudaRenderer, Rendered
from .runtime import BUFFERS, CudaKernel, _check
from .softmax_parts import block_merge, header, load_slot, odd_row, store_slot, vector_access


def resident(threads: int) -> int:
    """Blocks per SM the split form's launch bounds guarantee room for."""
    return max(1, 1024 // threads)


WORKSPACE = (Param("W", "float2", True, False, True), Param("G", "uint32_t", True, False, True))


def _arrive(split: int, r: CudaRenderer) -> list[str]:
    """Thread 0: publish this part's pair, wait for the row's other parts, fold them all in order."""
    return [
        "    if (tid == 0) {",
        f"        W[row * {split} + part] = make_float2(m, s);",
        "        volatile uint32_t* gen = G + rows + row;",
        "        const uint32_t g = *gen;  /* read before arriving: it changes only after every part has */",
        "        " + r.fence,
        f"        if (atomicAdd(G + row, 1u) == {split - 1}u) {{",
        "            atomicExch(G + row, 0u);",
        "            " + r.fence,
        "            atomicAdd((uint32_t*)gen, 1u);",
        "        } else {",
        "            while (*gen == g) __nanosleep(64);",
        "        }",
        "        " + r.fence,
        "        float tm = TR_NEG_INF, ts = 0.0f;",
        f"        for (int p = 0; p < {split}; ++p) {{ const float2 q = __ldcg(W + row * {split} + p); "
        "tr_fold(tm, ts, q.x, q.y); }",
        "        tot[0] = tm; tot[1] = ts;",
        "    }",
        "    " + r.barrier,
        "    m = tot[0]; s = tot[1];",
    ]


def _fold(vec: int, indent: str) -> list[str]:
    return [f"{indent}float cm = f[0];\n{indent}#pragma unroll\n{indent}for (int e = 1; e < {vec}; ++e) cm = fmaxf(cm, f[e]);",
            f"{indent}float cs = 0.0f;\n{indent}#pragma unroll\n{indent}for (int e = 0; e < {vec}; ++e) "
            "cs += (f[e] == TR_NEG_INF) ? 0.0f : __expf(f[e] - cm);",
            f"{indent}if (cm != TR_NEG_INF) tr_fold(m, s, cm, cs);"]


def _held_load(dtype: str, vec: int, odd: bool) -> list[str]:
    """Slot ``i`` of the part into ``f``: -inf past the part's end (``hi``)."""
    vtype, unpack, _ = vector_access(dtype, vec)
    pad = f"        else {{\n            #pragma unroll\n            for (int e = 0; e < {vec}; ++e) f[e] = TR_NEG_INF;\n        }}"
    if odd:
        return ["        if (i < hi) {", *load_slot(dtype, vec, vtype, unpack, "i", "__ldcs(xr + i)", "            "),
                "        }", pad]
    return [f"        if (i < hi) {{ const {vtype} v = __ldcs(xr + i); {unpack} }}", pad]


def render_split(op: Any, s: Any, arch: Any, r: CudaRenderer) -> Rendered:
    dtype = op.dtype.value
    vec, threads, chunks, split = s.vec, s.threads, s.chunks, s.split
    vtype, unpack, pack = vector_access(dtype, vec)
    warps = threads // 32
    name = f"tr_softmax_{dtype}_{s.name}"
    odd = op.cols % vec != 0
    # at most 64 registers a thread, so that 1024 threads of blocks share an SM (the co-residency the
    # hero counts on: rows * split <= SMs * (1024 / threads))
    src = [*header(r, dtype, name, threads, WORKSPACE, (threads, resident(threads))),
           "    __shared__ float tot[2];",
           "    const int tid = threadIdx.x;",
           f"    const int part = blockIdx.x % {split};",
           f"    const int row = blockIdx.x / {split};",
           *_slice(s, vtype, odd),
           "    float m = TR_NEG_INF, s = 0.0f;",
           *_reduce_pass(dtype, s, vtype, unpack, odd),
           *block_merge(warps, "    ", r.barrier),
           *_arrive(split, r),
           "    const float inv = __frcp_rn(s);",
           *_store_pass(dtype, s, vtype, unpack, pack, odd),
           "}"]
    grid = op.rows * split
    meta = {"name": name, "tile": {"rows_per_block": f"1/{split}", "split": split, "threads": threads, "vec": vec,
                                   "chunks": chunks},
            "fragments": {"dtype_in": dtype, "dtype_acc": "fp32"},
            "launch": {"grid": [grid, 1, 1], "block": [threads, 1, 1], "dynamic_smem": 0, "cooperative": True},
            "workspace_bytes": 8 * op.rows * split + 8 * op.rows,
            "passes_over_input": 1 if chunks else 2, "epilogue": []}
    return Rendered(name, name, "\n".join(src) + "\n", ("x", "out", "rows", "cols", "ws", "sem"), (grid, 1, 1),
                    (threads, 1, 1), 0, meta)


def _slice(s: Any, vtype: str, odd: bool) -> list[str]:
    """This block's part of the row: vectors ``lo .. hi`` of ``nv`` (and the row's pointers)."""
    vec, split = s.vec, s.split
    if odd:
        return [*odd_row(vec, vtype, "row", "cols", "    "),
                f"    const int per = (nv + {split - 1}) / {split};",
                "    const int lo = part * per, hi = min(nv, lo + per);"]
    return [f"    const int nv = cols / {vec};  /* cols is a multiple of vec */",
            f"    const int per = (nv + {split - 1}) / {split};",
            "    const int lo = part * per, hi = min(nv, lo + per);",
            f"    const {vtype}* xr = (const {vtype}*)(X + (size_t)row * (size_t)cols);",
            f"    {vtype}* yr = ({vtype}*)(Y + (size_t)row * (size_t)cols);"]


def _reduce_pass(dtype: str, s: Any, vtype: str, unpack: str, odd: bool) -> list[str]:
    """The part's maximum and sum: over values held in registers (``chunks``), or read in a loop."""
    vec, threads, chunks = s.vec, s.threads, s.chunks
    if chunks:
        return [f"    float xs[{chunks}][{vec}];",
                f"    #pragma unroll\n    for (int j = 0; j < {chunks}; ++j) {{",
                f"        const int i = lo + j * {threads} + tid;",
                f"        float f[{vec}];",
                *_held_load(dtype, vec, odd),
                f"        #pragma unroll\n        for (int e = 0; e < {vec}; ++e) xs[j][e] = f[e];",
                *_fold(vec, "        "),
                "    }"]
    return [f"    #pragma unroll 4\n    for (int i = lo + tid; i < hi; i += {threads}) {{",
            *([f"        float f[{vec}];", *load_slot(dtype, vec, vtype, unpack, "i", "xr[i]", "        ")] if odd
              else [f"        float f[{vec}];\n        const {vtype} v = xr[i]; {unpack}"]),
            *_fold(vec, "        "),
            "    }"]


def _store_pass(dtype: str, s: Any, vtype: str, unpack: str, pack: str, odd: bool) -> list[str]:
    """The part's exp(x - m) / sum stored: from the held registers, or read a second time."""
    vec, threads, chunks = s.vec, s.threads, s.chunks
    if chunks:
        return [f"    #pragma unroll\n    for (int j = 0; j < {chunks}; ++j) {{",
                f"        const int i = lo + j * {threads} + tid;",
                "        if (i < hi) {",
                f"            float f[{vec}];\n            #pragma unroll\n            for (int e = 0; e < {vec}; ++e) "
                "f[e] = __expf(xs[j][e] - m) * inv;",
                *(store_slot(dtype, vec, vtype, pack, "i", "            ") if odd else
                  [f"            {vtype} v; {pack}\n            __stcs(yr + i, v);"]),
                "        }",
                "    }"]
    return [f"    #pragma unroll 4\n    for (int i = lo + tid; i < hi; i += {threads}) {{",
            *([f"        float f[{vec}];", *load_slot(dtype, vec, vtype, unpack, "i", "__ldcs(xr + i)", "        ")]
              if odd else [f"        float f[{vec}];\n        {{ const {vtype} v = __ldcs(xr + i); {unpack} }}"]),
            f"        #pragma unroll\n        for (int e = 0; e < {vec}; ++e) f[e] = __expf(f[e] - m) * inv;",
            *(store_slot(dtype, vec, vtype, pack, "i", "        ") if odd else
              [f"        {vtype} v; {pack}\n        __stcs(yr + i, v);"]),
            "    }"]


class SplitKernel(CudaKernel):
    """The split-row softmax: a cooperative launch and two device buffers beside the op's, the pairs
    (8 bytes a part) and the counters and generations (zeroed once; every launch leaves them at rest)."""

    def __init__(self, op: Any, artifact: Any, rendered: Rendered, scalars: dict[str, float | int]) -> None:
        super().__init__(op, artifact, rendered, scalars)
        grid = rendered.grid[0]
        fit = self._resident_blocks(rendered.block[0])
        if fit is not None and grid > fit:
            raise LaunchError(f"the split softmax needs its {grid} blocks resident at once; this GPU holds {fit}",
                              "a smaller split (the hero schedule sizes it from this GPU's SM count)")
        self._cooperative = True  # cuLaunchCooperativeKernel: the driver refuses a grid that cannot be resident
        rows = op.rows
        self._ws = self._buffer("ws", 8 * rows * max(1, grid // rows))
        self._sem = self._buffer("sem", 8 * rows)
        _check(self._dev.driver.cuMemsetD8(self._sem.ptr, 0, self._sem.nbytes), "cuMemsetD8")

    def _resident_blocks(self, threads: int) -> int | None:
        """Blocks of this kernel the whole GPU holds at once, or None when cuda-core cannot say."""
        try:
            per_sm = int(self._kernel.occupancy.max_active_blocks_per_multiprocessor(threads, 0))
            sms = int(self._dev.dev.properties.multiprocessor_count)
        except Exception:  # noqa: BLE001 - an older cuda-core: the cooperative launch still refuses
            return None
        return per_sm * sms

    def _args(self) -> list[Any]:
        import numpy as np

        scratch = {"ws": self._ws, "sem": self._sem}
        args: list[Any] = []
        for p in self.rendered.params:
            if p in scratch or p in BUFFERS:
                buf = scratch.get(p) or self._dbuf.get(p)
                args.append(np.uint64(int(buf.ptr) if buf is not None else 0))
            else:
                args.append(np.int32(self._scalars[p]))
        return args


def split_kernel(op: Any, artifact: Any, rendered: Rendered, scalars: dict[str, Any]) -> Any:
    """The softmax core's kernel object: the split form's own, else the plain one."""
    if "ws" in rendered.params:
        return SplitKernel(op, artifact, rendered, scalars)
    return CudaKernel(op, artifact, rendered, scalars)
