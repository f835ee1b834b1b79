"""The fp32 GEMM of few rows (``form`` "gemv"): B streamed with 16-byte loads, once a group of rows.

The tiled core computes 8 rows or more a thread, so a 1-row product wastes most of its FMAs and, worse,
holds too few loads in flight to stream B at full bandwidth. Here a block of 8 warps owns 128 columns of
``bm`` (at most 48) rows of C (each lane 4 columns, one ``float4`` of a B row): warp ``w`` takes the k rows ``w, w + 8, ..`` of the block's
K range (a warp reads whole 512-byte runs of a row), every lane keeps all M rows' 4 sums in registers and
reads A's element of each row through L1 (the lanes of a warp read the same word). The warps' sums meet
in shared memory, 8 rows at a time, added in warp order; with ``split_k`` > 1 the blocks of a column tile meet in the
workspace like the tiled core's (the last to arrive adds the parts in order: deterministic). B row-major.
"""

from __future__ import annotations

from typing import Any

from ..cstyle import Param
from ..gpu_epilogue import Dest, Loop, Operands, Walk, direct_store
from . import split_arrival
from .render import CudaRenderer, Rendered

WARPS = 8
COLS = 128  # a block's columns: 32 lanes x 4
MAX_M = 48  # rows a block computes, a thread keeping 4 sums of each in registers (192 at 48)
CHUNK = 8  # rows the warps' sums meet in shared memory at a time


def smem_bytes(op_m: int) -> int:
    """The warps' partial sums of up to CHUNK rows: WARPS x rows x COLS floats."""
    return 4 * WARPS * max(1, min(CHUNK, op_m)) * COLS


def workspace_bytes(tiles: int, split: int, rows: int) -> int:
    """One arrival counter per column tile (padded to 64 words), then ``split`` partials of rows x COLS."""
    return 4 * (-(-tiles // 64) * 64) + 4 * tiles * split * rows * COLS


def render(op: Any, s: Any, arch: Any, name: str, epi: tuple[str, ...], r: CudaRenderer | None = None) -> Rendered:
    r = r or CudaRenderer()
    mr, groups, cols = rows(op, s), -(-op.m // s.bm), -(-op.n // COLS)
    tiles = groups * cols
    params = [Param("A", "fp32", True, True, True), Param("B", "fp32", True, True, True),
              Param("Cout", "fp32", True, False, True), Param("bias", "fp32", True, True, True),
              Param("resid", "fp32", True, True, True), Param("M", "int"), Param("N", "int"), Param("K", "int"),
              Param("alpha", "float")] + ([Param("W", "fp32", True, False, True)] if s.split_k > 1 else [])
    sig = r.render_kernel_signature(name, params, launch_bounds=(32 * WARPS, 1))
    body = [r.prelude(1), sig + " {", *_head(op, s, groups, tiles), *_stream(op, s), *_reduce(op, s, tiles, r),
            *_epilogue(op, s, epi), "}"]
    grid = (tiles * s.split_k, 1, 1)
    meta: dict[str, Any] = {"name": name, "tile": {"M": mr, "N": COLS, "K": s.bk, "warps_over_k": WARPS},
                            "fragments": {"mma": "fma.rn.f32 (CUDA cores)", "dtype_in": "fp32", "dtype_acc": "fp32"},
                            "launch": {"grid": list(grid), "block": [32 * WARPS, 1, 1], "dynamic_smem": smem_bytes(mr)},
                            "epilogue": list(epi), "form": "gemv"}
    pnames = ("a", "b", "out", "bias", "residual", "M", "N", "K", "alpha") + (("workspace",) if s.split_k > 1 else ())
    if s.split_k > 1:
        meta["tile"]["split_k"] = s.split_k
        meta["workspace_bytes"] = workspace_bytes(tiles, s.split_k, mr)
        meta["reduction"] = "last block of each column tile, parts in order (deterministic)"
    return Rendered(name, name, "\n".join(body) + "\n", pnames, grid, (32 * WARPS, 1, 1), smem_bytes(mr), meta)


def rows(op: Any, s: Any) -> int:
    """Rows a block computes: ``bm``, or all of them where M is smaller."""
    return min(op.m, s.bm)


def _head(op: Any, s: Any, groups: int, tiles: int) -> list[str]:
    """The block's tile (column tile ``pid / groups``, row group ``pid % groups``: a column tile's row groups
    run side by side and share its B in L2), its split part, and its K range (the tiled core's even split of
    k tiles)."""
    out = ["extern __shared__ __align__(16) float tr_smem_f[];",
           "const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;"]
    if s.split_k == 1:
        out += ["const int pid = blockIdx.x;", "const int kb = 0, ke = K;"]
    else:
        out += [f"const int part = blockIdx.x / {tiles}, pid = blockIdx.x - part * {tiles};",
                f"const int kt_all = (K + {s.bk - 1}) / {s.bk};",
                f"const int kt0 = (int)(((long long)part * kt_all) / {s.split_k}), "
                f"kt1 = (int)(((long long)(part + 1) * kt_all) / {s.split_k});",
                f"const int kb = kt0 * {s.bk}, ke = min(K, kt1 * {s.bk});"]
    return out + [f"const int m0 = (pid % {groups}) * {s.bm}, n0 = (pid / {groups}) * {COLS}, col = n0 + lane * 4;"]


def unroll(op: Any, s: Any) -> int:
    """B rows a warp has in flight: bk / 2, fewer where each row's A elements and sums crowd the registers."""
    return max(1, min(s.bk // 2, 96 // (rows(op, s) + 4)))


def _stream(op: Any, s: Any) -> list[str]:
    """Warp ``warp``'s k rows of the range, ``unroll`` a step: B's float4 (or 4 guarded scalars
    where rows do not start on 16 bytes) and each row's A element, then 4 FMAs a row."""
    mr = rows(op, s)
    a_at = "(size_t)(m0 + {m}) * K + k" if op.layout_a == "row" else "(size_t)k * M + m0 + {m}"
    ragged = op.m % s.bm and op.m > s.bm  # the last row group is short: its missing rows read as 0
    if op.n % 4 == 0:
        load = ("const float4 b = col < N ? __ldg((const float4*)(B + (size_t)k * N + col)) : "
                "make_float4(0.f, 0.f, 0.f, 0.f);")
    else:
        el = ", ".join(f"col + {j} < N ? __ldg(B + (size_t)k * N + col + {j}) : 0.0f" for j in range(4))
        load = f"const float4 b = make_float4({el});"
    fma = " ".join(f"{{ const float a_ = {f'm0 + {m} < M ? ' if ragged else ''}__ldg(A + {a_at.format(m=m)})"
                   f"{' : 0.0f' if ragged else ''}; acc[{m}][0] = fmaf(a_, b.x, acc[{m}][0]); "
                   f"acc[{m}][1] = fmaf(a_, b.y, acc[{m}][1]); acc[{m}][2] = fmaf(a_, b.z, acc[{m}][2]); "
                   f"acc[{m}][3] = fmaf(a_, b.w, acc[{m}][3]); }}" for m in range(mr))
    return [f"float acc[{mr}][4];",
            f"#pragma unroll\nfor (int m = 0; m < {mr}; ++m) acc[m][0] = acc[m][1] = acc[m][2] = acc[m][3] = 0.0f;",
            f"#pragma unroll {unroll(op, s)}",
            f"for (int k = kb + warp; k < ke; k += {WARPS}) {{", f"  {load}", f"  {fma}", "}"]


def _reduce(op: Any, s: Any, tiles: int, r: CudaRenderer) -> list[str]:
    """Output ``o = tid + 256 j`` (row o / COLS, column o % COLS) summed over the warps in order, CHUNK
    rows at a time through shared memory; with a split, the part stored, the arrival counted
    (``split_arrival.last_block``), and the last block's sum of the parts in order."""
    mr, nt = rows(op, s), 32 * WARPS
    per = -(-mr * COLS // nt)
    out = [f"float v_[{per}];", "float* red = tr_smem_f;"]
    for c in range(-(-mr // CHUNK)):
        chunk = range(c * CHUNK, min(mr, (c + 1) * CHUNK))
        out += [r.barrier] if c else []
        out += [f"*(float4*)(red + (warp * {CHUNK} + {m - c * CHUNK}) * {COLS} + lane * 4) = "
                f"make_float4(acc[{m}][0], acc[{m}][1], acc[{m}][2], acc[{m}][3]);" for m in chunk]
        out.append(r.barrier)
        for j in range(c * CHUNK * COLS // nt, min(per, (c + 1) * CHUNK * COLS // nt)):
            o = f"tid + {j * nt - c * CHUNK * COLS}"
            out.append(f"{{ float t = 0.0f; if ({o} < {len(chunk) * COLS}) {{\n  #pragma unroll\n  for (int w = 0; w < "
                       f"{WARPS}; ++w) t += red[w * {CHUNK * COLS} + {o}];\n}} v_[{j}] = t; }}")
    if s.split_k == 1:
        return out
    S, words, slab = s.split_k, -(-tiles // 64) * 64, mr * COLS
    summed = [f"#pragma unroll\nfor (int j = 0; j < {per}; ++j) {{",
              f"  const int o = tid + j * {nt};",
              "  float t = 0.0f;",
              f"  if (o < {slab}) {{\n    #pragma unroll 4\n    for (int p = 0; p < {S}; ++p) t += __ldcg(tr_parts + p * {slab} + o);\n  }}",
              "  v_[j] = t;", "}"]
    parked = [f"float* tr_parts = W + {words} + (size_t)pid * {S * slab};",
              f"#pragma unroll\nfor (int j = 0; j < {per}; ++j) if (tid + j * {nt} < {slab}) "
              f"__stcg(tr_parts + part * {slab} + tid + j * {nt}, v_[j]);"]
    return out + split_arrival.last_block(r, "W", "pid", S, "tid == 0", parked, summed)


def _epilogue(op: Any, s: Any, epi: tuple[str, ...]) -> list[str]:
    """Each thread's reduced outputs ``v_`` to C (``gpu_epilogue.direct_store``), one element a store."""
    mr, nt = rows(op, s), 32 * WARPS
    per = -(-mr * COLS // nt)
    walk = Walk((Loop(f"for (int j = 0; j < {per}; ++j)",
                      (f"const int o = tid + j * {nt}, row = m0 + o / {COLS}, cc = n0 + o % {COLS};",
                       f"if (o >= {mr * COLS} || row >= M || cc >= N) continue;")),), ("float v = v_[j];",))
    return direct_store(walk, epi, Operands("bias[cc]", "resid[(size_t)row * N + cc]"), Dest("Cout[(size_t)row * N + cc]"))
