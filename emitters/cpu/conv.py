"""Conv2d as implicit GEMM on the shared GEMM core: the packing routines gather input patches for the
block being packed, so no im2col buffer is ever built.

- NHWC: one GEMM per group, M = N*P*Q output pixels, N = K/groups channels, K = R*S*C/groups with
  kk = (r*S + s)*Cg + c (the filter's own order). A is gathered from the input (a run of Cg contiguous
  channels per filter tap); B is the filter in "col" layout; C is the output itself (ldc = K).
- NCHW: one GEMM per image and group, computed as W x patches: M = K/groups, N = P*Q, K = Cg*R*S with
  kk = (c*R + r)*S + s. A is the filter (row layout); B is gathered (with unit stride, a run of NR
  output pixels of one output row is a contiguous run of input pixels); C is the image's output plane
  (ldc = P*Q), bias per row.

fp32 NHWC with one group has two more forms, chosen per shape by the heuristic (``_form``) and offered
to the tuner beside the packed one: the direct path (``pack_a`` off, conv_direct.py: the input, or one
padded / im2col copy of it, read in place) and the small-M form (``pack_b`` off, conv_small.py: the
filter read in place). The packed path above renders as it always did.

Entry: ``int tracea_conv2d(void* const* bufs, const int64_t* dims, const double* fparams)`` with
bufs = {x, weight, out, bias}, dims = {n, c, h, w, k, r, s, sh, sw, ph, pw, dh, dw, groups, threads}.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from .conv_direct import check as direct_check
from .conv_direct import in_place, render_direct, unsupported
from .conv_small import render_small
from .conv_stem import refusal as stem_refusal
from .conv_stem import render_stem
from .conv_stem import tile as stem_tile
from .gemm import _pack_a, _pack_b
from .gemm_core import VEC_SUFFIX, CoreSpec, blocked_metadata, render_core
from .isa import CpuIsa
from .schedule import CpuSchedule
from .schedules import blocked_space, hero_schedule

ENTRY = "tracea_conv2d"
SMALL_CHANNELS = 16  # below this many input channels the direct path's run-merging gather pays

FIELDS = """    const in_t* xg;            /* input of this image / group (see the packing routines) */
    const in_t* wg;            /* filter of this group */
    long N, C, H, W, K, R, S, P, Q, sh, sw, ph, pw, dh, dw, G, Cg, Kg, Kdim;"""

NHWC_PACK_A = """    /* rows are output pixels, columns kk = (r*S + s)*Cg + c: runs of Cg contiguous input channels */
    for (int i = 0; i < mr; ++i) {
        const long pix = i0 + i, pq = pix % (J->P * J->Q), nimg = pix / (J->P * J->Q);
        const long ih0 = (pq / J->Q) * J->sh - J->ph, iw0 = (pq % J->Q) * J->sw - J->pw;
        const in_t* xn = J->xg + nimg * J->H * J->W * J->C;
        long c = p0 % J->Cg, rs = p0 / J->Cg;
        long s = rs % J->S, r = rs / J->S;
        int p = 0;
        while (p < kc) {
            const long h = ih0 + r * J->dh, w = iw0 + s * J->dw;
            const int run = (int)tr_min(J->Cg - c, kc - p);
            if (h >= 0 && h < J->H && w >= 0 && w < J->W) {
                const in_t* src = xn + (h * J->W + w) * J->C + c;
                for (int t = 0; t < run; ++t) dst[(long)(p + t) * MR + i] = IN2F(src[t]);
            } else {
                for (int t = 0; t < run; ++t) dst[(long)(p + t) * MR + i] = 0.0f;
            }
            p += run;
            c = 0;
            if (++s == J->S) { s = 0; ++r; }
        }
    }
    for (int i = mr; i < MR; ++i)
        for (int p = 0; p < kc; ++p) dst[(long)p * MR + i] = 0.0f;"""

NCHW_PACK_B = """    /* rows kk = (c*R + r)*S + s, columns are output pixels of this image */
    long ih0[NR], iw0[NR];
    for (int j = 0; j < nr; ++j) {
        const long pix = j0 + j;
        ih0[j] = (pix / J->Q) * J->sh - J->ph;
        iw0[j] = (pix % J->Q) * J->sw - J->pw;
    }
    /* unit stride and one output row: the NR pixels read a contiguous run of an input row */
    const int one_row = nr == NR && J->sw == 1 && j0 / J->Q == (j0 + NR - 1) / J->Q;
    const long RS = J->R * J->S, HW = J->H * J->W;
    long c = p0 / RS, rs = p0 % RS;
    long r = rs / J->S, s = rs % J->S;
    for (int p = 0; p < kc; ++p) {
        float* d = dst + (long)p * NR;
        const in_t* xc = J->xg + c * HW;
        const long dr = r * J->dh, ds = s * J->dw;
        if (one_row) {
            const long h = ih0[0] + dr, w0 = iw0[0] + ds;
            if (h < 0 || h >= J->H) {
                for (int j = 0; j < NR; j += VL) vf_store(d + j, vf_zero());
            } else if (w0 >= 0 && w0 + NR <= J->W) {
                const in_t* src = xc + h * J->W + w0;
                for (int j = 0; j < NR; j += VL) vf_store(d + j, LOAD_IN(src + j));
            } else {
                const in_t* src = xc + h * J->W;
                for (int j = 0; j < NR; ++j) {
                    const long w = w0 + j;
                    d[j] = w >= 0 && w < J->W ? IN2F(src[w]) : 0.0f;
                }
            }
        } else {
            int j = 0;
            for (; j < nr; ++j) {
                const long h = ih0[j] + dr, w = iw0[j] + ds;
                d[j] = h >= 0 && h < J->H && w >= 0 && w < J->W ? IN2F(xc[h * J->W + w]) : 0.0f;
            }
            for (; j < NR; ++j) d[j] = 0.0f;
        }
        if (++s == J->S) { s = 0; if (++r == J->R) { r = 0; ++c; } }
    }"""


def render_conv(op: Any, isa: CpuIsa, s: CpuSchedule, header: str) -> str:
    from .pool import pool_c

    if not s.pack_a and not s.pack_b:
        return render_stem(op, isa, s, header, ENTRY)
    if not s.pack_a:
        return render_direct(op, isa, s, header, ENTRY)
    if not s.pack_b:
        return render_small(op, isa, s, header, ENTRY, FIELDS, NHWC_PACK_A, _pack_a("row"))
    dtype = op.dtype.value
    nhwc = op.layout == "nhwc"
    # the filter as a GEMM operand: element (kk, j) of B at wg[j * Kdim + kk] (NHWC), element (i, kk) of
    # A at wg[i * Kdim + kk] (NCHW): the plain GEMM packing routines with J->b / J->a pointing at it
    spec = CoreSpec(
        dtype=dtype, epilogue=("bias",) if op.bias else (), bias_axis="col" if nhwc else "row",
        pack_a=NHWC_PACK_A if nhwc else _pack_a("row"),
        pack_b=_pack_b("col", dtype) if nhwc else NCHW_PACK_B,
        job_fields=FIELDS,
        helpers=f"#define LOAD_IN(p) vf_load{VEC_SUFFIX[dtype]}(p)\n",
    )
    return "\n".join([header, isa.prelude((dtype,)), pool_c(), f"#define NTHREADS {s.threads}",
                      render_core(isa, s, spec), _entry(isa, _group_loop(nhwc, dtype != "fp32"))])


def _group_loop(nhwc: bool, converts: bool) -> str:
    """The entry's loop over the groups (and, NCHW, the images): one ``tr_gemm`` each, on the GEMM core with
    the filter as B (NHWC) or A (NCHW); ``converts``: 16-bit out through the fp32 scratch ``J.c``."""
    if nhwc:
        return """    for (long g = 0; g < J.G && rc == 0; ++g) {
        J.m = J.N * J.P * J.Q; J.n = J.Kg; J.k = J.Kdim;
        J.xg = x + g * J.Cg;
        J.b = w + g * J.Kg * J.Kdim; J.ldb = J.Kdim;
        J.out = out + g * J.Kg; J.ldo = J.K;
        J.bias = bias ? bias + g * J.Kg : NULL;
        %s
        rc = tr_gemm(&J, threads);
    }""" % ("J.c = NULL;" if converts else "J.c = (float*)J.out; J.ldc = J.K;")
    else:
        return """    for (long img = 0; img < J.N && rc == 0; ++img)
        for (long g = 0; g < J.G && rc == 0; ++g) {
            J.m = J.Kg; J.n = J.P * J.Q; J.k = J.Kdim;
            J.xg = x + (img * J.C + g * J.Cg) * J.H * J.W;
            J.a = w + g * J.Kg * J.Kdim; J.lda = J.Kdim;
            J.out = out + (img * J.K + g * J.Kg) * J.P * J.Q; J.ldo = J.P * J.Q;
            J.bias = bias ? bias + g * J.Kg : NULL;
            %s
            rc = tr_gemm(&J, threads);
        }""" % ("J.c = NULL;" if converts else "J.c = (float*)J.out; J.ldc = J.P * J.Q;")


def _entry(isa: CpuIsa, loop: str) -> str:
    """The entry point: the job's shape from ``dims``, then ``loop`` under the call lock."""
    return f"""
{isa.kernel_prefix}int {ENTRY}(void* const* bufs, const int64_t* dims, const double* fparams) {{
    (void)fparams;
    tr_job J;
    memset(&J, 0, sizeof J);
    const in_t* x = (const in_t*)bufs[0];
    const in_t* w = (const in_t*)bufs[1];
    out_t* out = (out_t*)bufs[2];
    const in_t* bias = (const in_t*)bufs[3];
    J.N = (long)dims[0]; J.C = (long)dims[1]; J.H = (long)dims[2]; J.W = (long)dims[3];
    J.K = (long)dims[4]; J.R = (long)dims[5]; J.S = (long)dims[6];
    J.sh = (long)dims[7]; J.sw = (long)dims[8]; J.ph = (long)dims[9]; J.pw = (long)dims[10];
    J.dh = (long)dims[11]; J.dw = (long)dims[12]; J.G = (long)dims[13];
    J.P = (J.H + 2 * J.ph - J.dh * (J.R - 1) - 1) / J.sh + 1;
    J.Q = (J.W + 2 * J.pw - J.dw * (J.S - 1) - 1) / J.sw + 1;
    J.Cg = J.C / J.G; J.Kg = J.K / J.G; J.Kdim = J.Cg * J.R * J.S;
    J.alpha = 1.0f;
    const int threads = dims[14] > 0 ? (int)dims[14] : NTHREADS;
    int rc = 0;
    pthread_mutex_lock(&tr_call_mu);
{loop}
    pthread_mutex_unlock(&tr_call_mu);
    return rc;
}}
"""


def core_arguments(op: Any) -> tuple[tuple[int, ...], tuple[float, ...]]:
    return (op.n, op.c, op.h, op.w, op.k, op.r, op.s, *op.stride, *op.padding, *op.dilation, op.groups, 0), ()


def core_tag(op: Any) -> str:
    return op.layout + ("_bias" if op.bias else "")


def gemm_dims(op: Any) -> tuple[int, int, int]:
    """The implicit GEMM (rows of C, columns of C, reduction) of one group."""
    oh, ow = op.output_shape()[-2:] if op.layout == "nchw" else op.output_shape()[1:3]
    return op.n * oh * ow, op.k // op.groups, (op.c // op.groups) * op.r * op.s


def _micro_kernel(op: Any, s: CpuSchedule) -> CpuSchedule:
    """An NHWC conv's GEMM columns are its output channels, mostly powers of two: a 48-wide AVX-512
    micro-kernel leaves a third-full panel at 64 channels (2/3 of the FMAs useful), where 6x64 and
    14x32 fill every one. 6x64 where there are many pixels, 14x32 (fewer, taller tiles) where few
    (CI machine, 2026-11-25: ResNet-50 rows 64-256 channels at 56x56 1.2-1.6x faster than 8x48)."""
    m, n, _ = gemm_dims(op)
    if op.layout != "nhwc" or (s.mr, s.nr) != (8, 48) or n % 48 == 0 or n % 32:
        return s
    mr, nr = (6, 64) if m >= 512 and n % 64 == 0 else (14, 32)
    return dataclasses.replace(s, mr=mr, nr=nr, mc=max(mr, s.mc // mr * mr), nc=max(nr, s.nc // nr * nr))


def _small_m(op: Any, s: CpuSchedule) -> CpuSchedule:
    """The filter read in place (conv_small.py), with the micro-kernel whose width wastes the fewest
    columns on the output pixels (49 pixels: a 48-wide one computes 96)."""
    m = gemm_dims(op)[0]
    if (s.mr, s.nr) == (8, 48):
        mr, nr = min(((8, 48), (6, 64), (14, 32)), key=lambda t: (-(-m // t[1]) * t[1], -t[1]))
        s = dataclasses.replace(s, mr=mr, nr=nr, mc=max(mr, s.mc // mr * mr), nc=max(nr, s.nc // nr * nr))
    return dataclasses.replace(s, pack_b=False)


def core_hero(op: Any, v: Any, host: Any) -> CpuSchedule:
    """Per shape (CI machine, 2026-11-25, ResNet-50 rows at batch 1): the filter read in place
    (conv_small.py) where it outweighs the pixels 16 to 1 (2048 channels over 49 pixels: 1.3x the
    direct path); the direct path (conv_direct.py) where it reads the input in place, where few
    channels make the packed path's gather slow (the stem: 2x), where pixels are fewer than
    channels (1.3x the small-M form, 2-5x the packed path), or for strided filters off AMD hosts
    (``_strided_filter``), unless its rows alias (``_rows_alias``, AMD hosts); else the packed path. The micro-kernel's
    width fitted to the GEMM's columns."""
    return _form(op, hero_schedule(op, v, host), v.family, host)


def _form(op: Any, s: CpuSchedule, family: str, host: Any = None) -> CpuSchedule:
    if stem_refusal(op) is None:
        return stem_schedule(op, s, family)
    if unsupported(op):
        return _micro_kernel(op, s)
    m, n, _ = gemm_dims(op)
    if m * 16 <= n:
        return _small_m(op, s)
    if (in_place(op) or op.c < SMALL_CHANNELS or m < n or _strided_filter(op, host)) and not _rows_alias(op, host):
        return dataclasses.replace(_micro_kernel(op, s), pack_a=False)
    return _micro_kernel(op, s)


def stem_schedule(op: Any, s: CpuSchedule, family: str) -> CpuSchedule:
    """The direct small-channel form (conv_stem.py: neither operand packed) with its micro-kernel's tile. On a
    2-vCPU AMD EPYC (Zen 4) VM (2026-11-30, docs/cpu-runs/epyc-stem-direct/): ResNet-50's stem with 6 x 64 tiles
    in 1.29 ms against oneDNN's 1.32 at batch 1 (the GEMM path's patches: 2.2 ms, 0.75x), 44.3 against 85.9 ms at
    batch 32; a probe of the same loop on one thread ran at 94 GFLOP/s, the core's FMA peak."""
    mr, nr = stem_tile(family, op.k)
    return dataclasses.replace(s, mr=mr, nr=nr, mc=mr, nc=nr, kc=op.r * op.s * op.c, pack_a=False, pack_b=False,
                               small_m=False)  # the blocking fields: one tile, the whole reduction


def _strided_filter(op: Any, host: Any = None) -> bool:
    """A strided filter wider than 1x1: the direct path's patches copied once (im2col), then read in place, beat the
    packed path's gather of them block by block on every such shape timed on the CI-class Intel Xeon (2026-11-30,
    docs/cpu-runs/xeon-amx-cpu-suites/probe_strided_3x3.txt, nine 3x3 stride-2 shapes of 32-512 channels:
    1.13-2.10x; c128 56x56 k128 1.213 against 1.537 ms, c256 28x28 k128 0.771 against 1.618), where more pixels than
    output channels had kept it packed. Not on an AMD host, where it was not measured (the packed path stays)."""
    if getattr(getattr(host, "cpu", None), "vendor", None) == "AuthenticAMD":
        return False
    return max(op.stride) > 1 and op.r * op.s > 1


def _rows_alias(op: Any, host: Any = None) -> bool:
    """On an AMD host, a 1x1 stride-1 conv whose pixels lie a multiple of 4 KiB apart (1024 or 2048 fp32
    channels): the direct path's micro-kernel reads its rows in place at that pitch, and ran 1.7-1.9x slower than
    the packed path (an AMD EPYC VM, 2026-11-29, docs/cpu-runs/epyc-paired-rounds/probe_conv_pitch.txt: c1024
    14x14 k512 2.55 against 1.43 ms, k256 1.35 against 0.82, c2048 7x7 k512 2.44 against 1.33), where 1040 and
    1008 channels ran the direct path 1.1x faster. Stride 2 is left to the direct path (packed 1.0-1.1x there,
    within that machine's noise). On the CI-class Intel Xeon the direct path ran those three 1.6-1.8x faster than
    the packed one (2026-11-30, docs/cpu-runs/xeon-amx-cpu-suites/probe_conv_pitch.txt: 0.991 against 1.631,
    0.650 against 1.028, 1.085 against 1.917 ms): there, and on a host not known, the pitch changes nothing."""
    cpu = getattr(host, "cpu", None)
    if getattr(cpu, "vendor", None) != "AuthenticAMD":
        return False
    pitch = (op.c // op.groups) * op.dtype.itemsize
    return op.r == op.s == 1 and tuple(op.stride) == (1, 1) and pitch % 4096 == 0


def core_check(op: Any, v: Any, s: CpuSchedule, host: Any) -> None:
    s.validate(op, host, v)
    direct_check(op, s)


def core_space(op: Any, v: Any, host: Any) -> list[CpuSchedule]:
    """The packed core's candidates, hero first; where the direct path and the small-M form apply, each
    candidate also with the input, and with the filter, read in place; where the direct small-channel form
    applies (the hero then), it on one thread too."""
    packed = blocked_space(op, v, host, gemm_dims(op))  # the clamped hero first
    hero = _form(op, packed[0], v.family, host)
    if unsupported(op):
        return packed if hero == packed[0] else [hero, *packed]
    # the direct small-channel form (the hero where it applies) on one thread too, beside the other forms
    stems = [dataclasses.replace(hero, threads=1)] if stem_refusal(op) is None else []
    direct = [dataclasses.replace(s, pack_a=False) for s in packed]
    small = [dataclasses.replace(s, pack_b=False) for s in packed]
    out: list[CpuSchedule] = []
    for s in [hero, *stems, *direct, *small, *packed]:
        if s not in out:
            out.append(s)
    return out


def core_metadata(op: Any, isa: CpuIsa, s: CpuSchedule, name: str) -> dict[str, Any]:
    return blocked_metadata(op, isa, s, name, ["bias"] if op.bias else [], s.pack_a and s.pack_b)
