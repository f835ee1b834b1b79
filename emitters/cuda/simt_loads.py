"""The SIMT core's loaders: an operand tile from global memory into registers (``load``) and from there
into the shared tiles (``store``): float4 where rows start on 16 bytes, lane-contiguous scalars where they
do not, and the convolution's gathered A tile (simt.py's kernels use them; split out for size)."""

from __future__ import annotations

from typing import Any

from .conv import k_decompose, k_offset
from .plan import simt_smem_bytes


def operand(which: str, kmaj: bool, contiguous_len: int, s: Any, nt: int,
             packed: bool = True) -> tuple[str, str, int, int]:
    """(load code, store code, registers, vector width) for operand ``which`` of a plain GEMM, k-major or
    not, whose global rows hold ``contiguous_len`` elements. Each thread moves 4 elements along the
    contiguous dimension: one 16-byte load where the rows start on 16 bytes, else (odd leading dimensions)
    ``_lane_scalars``; ``packed`` False: one scalar a thread (the conv's filters)."""
    if which == "a":
        mn0, mn_total, ext = "m0", "M", s.bm
    else:
        mn0, mn_total, ext = "n0", "N", s.bn
    ld = "K" if kmaj else mn_total
    vec = 4 if contiguous_len % 4 == 0 else 1
    if vec == 1 and packed:
        return _lane_scalars(which, kmaj, s, nt, (mn0, mn_total, ext, ld))
    w = 4 if packed else vec  # elements a thread moves per slot
    along = s.bk if kmaj else ext  # elements along the contiguous dimension within the tile
    per_line = along // w
    total = (ext * s.bk) // w
    iters = -(-total // nt)
    reg = f"r{which}"
    P = which.upper()
    smem = "As" if which == "a" else "Bs"
    load, store = [], []
    for i in range(iters):
        e = f"(tid + {i * nt})"
        guard = "" if total % nt == 0 or (i + 1) * nt <= total else f"if ({e} < {total}) "
        if kmaj:
            coords = f"const int kk = ({e} % {per_line}) * {w}, mm = {e} / {per_line};"
            g = f"(size_t)({mn0} + mm) * {ld} + k0 + kk"
            line_ok, along_ok = f"{mn0} + mm < {mn_total}", "k0 + kk{} < K"
        else:
            coords = f"const int mm = ({e} % {per_line}) * {w}, kk = {e} / {per_line};"
            g = f"(size_t)(k0 + kk) * {ld} + {mn0} + mm"
            line_ok, along_ok = "k0 + kk < K", f"{mn0} + mm{{}} < {mn_total}"
        if vec == 4:
            load.append(f"{guard}{{ {coords} {reg}[{i}] = ({line_ok} && {along_ok.format('')}) ? "
                        f"*(const float4*)({P} + {g}) : make_float4(0.f, 0.f, 0.f, 0.f); }}")
        elif not packed:
            load.append(f"{guard}{{ {coords} {reg}[{i}].x = ({line_ok} && {along_ok.format('')}) ? {P}[{g}] : 0.0f; }}")
        else:
            el = " ".join(f"{reg}[{i}].{c} = ok_ && {along_ok.format(f' + {j}' if j else '')} ? p_[{j}] : 0.0f;"
                          for j, c in enumerate("xyzw"))
            load.append(f"{guard}{{ {coords} const float* p_ = {P} + {g}; const bool ok_ = {line_ok}; {el} }}")
        comps = "xyzw"[:w]
        if kmaj:
            st = " ".join(f"{smem}[buf][kk + {j}][mm] = {reg}[{i}].{c};" for j, c in enumerate(comps))
        else:
            st = " ".join(f"{smem}[buf][kk][mm + {j}] = {reg}[{i}].{c};" for j, c in enumerate(comps))
        store.append(f"{guard}{{ {coords} {st} }}")
    return "\n".join(load), "\n".join(store), iters, vec


def _lane_scalars(which: str, kmaj: bool, s: Any, nt: int, dims: tuple[str, str, int, str]) -> tuple[str, str, int, int]:
    """The loader of an operand whose rows do not start on 16 bytes (odd leading dimensions): scalar loads
    with neighbouring lanes on neighbouring elements of a row, so that a warp's load covers one or two
    runs of 32 or 16 floats (4-5 sectors) instead of 4 loads a thread at a 16-byte stride (about four
    times the sectors, which the shared-memory reads of the inner loop also queue for: 1000x999x1001 ran
    at 0.84x cuBLAS with those against 1.02x at 1000x1000x1000, H100, docs/device-runs/h100-splitk-simt-attention/).
    Element ``tid + (4 i + c) nt`` of the tile sits in component c of register slot i (as many registers
    as the float4 path); where the block's threads cover whole lines (``nt`` a multiple of the line), a
    thread keeps one column and one base pointer, and its elements are whole lines apart (constant
    offsets: no per-element index arithmetic, which cost more than it saved, 0.76x)."""
    mn0, mn_total, ext, ld = dims
    reg, P = f"r{which}", which.upper()
    smem = "As" if which == "a" else "Bs"
    line = s.bk if kmaj else ext  # elements of a tile line along the contiguous dimension
    total = ext * s.bk
    iters = -(-total // (4 * nt))
    if nt % line:
        return _lane_scalars_any(which, kmaj, s, nt, dims)
    if kmaj:  # lines are the tile's rows (m), the thread's column kk
        head = (f"const int kk = tid % {line}, mm = tid / {line}; const bool col_ok = k0 + kk < K; "
                f"const float* p_ = {P} + (size_t)({mn0} + mm) * {ld} + k0 + kk;")
        line_ok, dst = f"{mn0} + mm + {{r}} < {mn_total}", f"{smem}[buf][kk][mm + {{r}}]"
    else:  # lines are the tile's k rows, the thread's column mm
        head = (f"const int mm = tid % {line}, kk = tid / {line}; const bool col_ok = {mn0} + mm < {mn_total}; "
                f"const float* p_ = {P} + (size_t)(k0 + kk) * {ld} + {mn0} + mm;")
        line_ok, dst = "k0 + kk + {r} < K", f"{smem}[buf][kk + {{r}}][mm]"
    load, store = ["{ " + head], ["{ " + head.split(";")[0] + ";"]
    for i in range(iters):
        for j, c in enumerate("xyzw"):
            first = (4 * i + j) * nt
            if first >= total:
                load.append(f"  {reg}[{i}].{c} = 0.0f;")
                continue
            r = first // line  # lines from the thread's first
            part = "" if first + nt <= total else f"tid < {total - first} && "
            load.append(f"  {reg}[{i}].{c} = ({part}col_ok && {line_ok.format(r=r)}) ? p_[(size_t){r} * {ld}] : 0.0f;")
            store.append(f"  {'if (' + part[:-4] + ') ' if part else ''}{dst.format(r=r)} = {reg}[{i}].{c};")
    return "\n".join(load + ["}"]), "\n".join(store + ["}"]), iters, 1


def _lane_scalars_any(which: str, kmaj: bool, s: Any, nt: int, dims: tuple[str, str, int, str]) -> tuple[str, str, int, int]:
    """``_lane_scalars`` where the threads do not cover whole lines: each element's own coordinates."""
    mn0, mn_total, ext, ld = dims
    reg, P = f"r{which}", which.upper()
    smem = "As" if which == "a" else "Bs"
    total = ext * s.bk
    iters = -(-total // (4 * nt))
    load, store = [], []
    for i in range(iters):
        for j, c in enumerate("xyzw"):
            first = (4 * i + j) * nt
            if first >= total:
                load.append(f"{reg}[{i}].{c} = 0.0f;")
                continue
            e = f"(tid + {first})"
            guard = "" if first + nt <= total else f"if ({e} < {total}) "
            if kmaj:
                coords = f"const int kk = {e} % {s.bk}, mm = {e} / {s.bk};"
                g = f"(size_t)({mn0} + mm) * {ld} + k0 + kk"
            else:
                coords = f"const int mm = {e} % {ext}, kk = {e} / {ext};"
                g = f"(size_t)(k0 + kk) * {ld} + {mn0} + mm"
            load.append(f"{guard}{{ {coords} {reg}[{i}].{c} = ({mn0} + mm < {mn_total} && k0 + kk < K) ? "
                        f"{P}[{g}] : 0.0f; }}")
            store.append(f"{guard}{{ {coords} {smem}[buf][kk][mm] = {reg}[{i}].{c}; }}")
    return "\n".join(load), "\n".join(store), iters, 1


def conv_operand(op: Any, s: Any, nt: int, hoist: bool, barrier: str) -> tuple[str, str, str, int]:
    """The gathered A tile of the convolution: (prologue, load, store, registers); the k table, where it is
    hoisted, published by the renderer's ``barrier``."""
    vec = 4 if op.layout == "nhwc" and op.c % 4 == 0 else 1
    per_line = s.bk // vec
    total = (s.bm * s.bk) // vec
    iters = -(-total // nt)
    pro = [f"int px_base[{iters}], px_h[{iters}], px_w[{iters}];"]
    for i in range(iters):
        pro.append(f"{{ const int m = m0 + (tid + {i * nt}) / {per_line};")
        pro.append("  const int img = tr_div(m, (uint32_t)PQ_mul, (uint32_t)PQ_shr), pq = m - img * P * Q;")
        pro.append("  const int p = tr_div(pq, (uint32_t)Qd_mul, (uint32_t)Qd_shr), q = pq - p * Q;")
        pro.append(f"  px_h[{i}] = p * SH - PH; px_w[{i}] = q * SW - PW;")
        if op.layout == "nhwc":
            pro.append(f"  px_base[{i}] = ((img * H + px_h[{i}]) * W + px_w[{i}]) * C;")
        else:
            pro.append(f"  px_base[{i}] = (img * C * H + px_h[{i}]) * W + px_w[{i}];")
        pro.append(f"  if (m >= M) {{ px_h[{i}] = -(1 << 28); px_base[{i}] = 0; }} }}")
    if hoist:
        pro.append(f"int2* ktab = (int2*)(tr_smem_f + {simt_smem_bytes(s) // 4});")
        pro.append(f"for (int k = tid; k < K; k += {nt}) {{")
        pro.append("  " + k_decompose(op, "k"))
        pro.append(f"  ktab[k] = make_int2({k_offset(op)}, ((kr * DH) << 16) | (ks * DW));")
        pro.append("}")
        pro.append(barrier)
    if hoist:
        look = "const int2 t_ = ktab[kx]; const int koff = t_.x, dh_ = t_.y >> 16, dw_ = t_.y & 0xffff;"
    else:
        look = k_decompose(op, "kx") + f" const int koff = {k_offset(op)}, dh_ = kr * DH, dw_ = ks * DW;"
    load, store = [], []
    for i in range(iters):
        e = f"(tid + {i * nt})"
        guard = "" if total % nt == 0 or (i + 1) * nt <= total else f"if ({e} < {total}) "
        coords = f"const int kk = ({e} % {per_line}) * {vec}, mm = {e} / {per_line};"
        zero = "make_float4(0.f, 0.f, 0.f, 0.f)"
        load.append(f"{guard}{{ {coords} const int kx = k0 + kk; ra[{i}] = {zero};")
        load.append(f"  if (kx < K) {{ {look}")
        load.append(f"    const int h = px_h[{i}] + dh_, w = px_w[{i}] + dw_;")
        load.append("    if ((unsigned)h < (unsigned)H && (unsigned)w < (unsigned)W) {")
        if vec == 4:
            load.append(f"      ra[{i}] = *(const float4*)(A + px_base[{i}] + koff); }} }} }}")
        else:
            load.append(f"      ra[{i}].x = A[px_base[{i}] + koff]; }} }} }}")
        comps = ("x", "y", "z", "w")[:vec]
        st = " ".join(f"As[buf][kk + {j}][mm] = ra[{i}].{c};" for j, c in enumerate(comps))
        store.append(f"{guard}{{ {coords} {st} }}")
    return "\n".join(pro), "\n".join(load), "\n".join(store), iters
