"""Attention forward on the CPU (issue 17), FlashAttention style: one task per (batch, head, block of bq
query rows), threads taking tasks from a shared counter. A task packs its Q block (scaled, fp32), then
streams the K/V blocks of bk keys that the mask keeps any pair of (whole blocks outside the causal band,
the window or the block mask are never loaded), packs K transposed and V in fp32, computes S = Q K^T
with broadcast FMAs (4 rows x 2 key vectors of accumulators), masks the band's edge, and folds the block
into the online softmax (running max m and sum l per row, the accumulator rescaled by exp(m_old - m_new)),
O += P V. At the end O /= l and lse = m + ln l; a row that kept no key gets O = 0 and lse = -inf.

16-bit inputs are converted to fp32 while packing (fp32 softmax and accumulation), the output rounded back.

Entry: ``int tracea_attention(void* const* bufs, const int64_t* dims, const double* fparams)`` with
bufs = {q, k, v, out, lse, mask, stats} (lse, mask and stats may be NULL: ``AttentionKernel`` gives them),
dims = {batch, heads, kv_heads, seq_q, seq_k, left, right, threads}, fparams = {scale}; head_dim, bq and
bk are compiled in.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from tracea.doctor.errors import BadInputError

from ..schedule import SCHEMA_VERSION, schedule_fields
from .cores import Core
from .gemm_core import IN_CONVERT
from .isa import CpuIsa
from .schedules import thread_counts, valid_unique

ENTRY = "tracea_attention"
BUFFERS = ("q", "k", "v", "out", "lse", "mask", "stats")
ROWS = 8  # query rows are padded to a multiple of the S micro-tile's (RS: 8 or 4)
PV_ROWS = 4  # query rows of the P V micro-tile
MAX_WORKSPACE_BYTES = 16 << 20  # one thread's packed blocks
PREPACK_MAX_BYTES = 256 << 20  # K^T (and converted V) of the whole call, packed once; beyond, per task
BQ_VALUES = (16, 32, 64, 128, 256)
BK_VALUES = (32, 64, 128, 256)


def _up(x: int, to: int) -> int:
    return -(-x // to) * to


@dataclass(frozen=True)
class AttentionSchedule:
    """The attention kernel's tiling: ``bq`` query rows per task, ``bk`` keys per streamed K/V block."""

    bq: int
    bk: int
    threads: int = 1

    @property
    def mr(self) -> int:  # the kernel name's tile (render.kernel_name)
        return self.bq

    @property
    def nr(self) -> int:
        return self.bk

    @property
    def name(self) -> str:
        return f"bq{self.bq}_bk{self.bk}_t{self.threads}"

    def workspace_floats(self, head_dim: int, lanes: int) -> int:
        dp, qr, bkp = _up(head_dim, lanes), _up(self.bq, ROWS), _up(self.bk, 2 * lanes)
        return qr * dp + head_dim * bkp + self.bk * dp + qr * bkp + qr * dp + 3 * qr

    def validate(self, op: Any, host: Any, variant: Any = None) -> None:
        for name in ("bq", "bk", "threads"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise BadInputError(f"{name}: expected a positive integer, got {value!r}")
        if self.bq > 1024 or self.bk > 4096:
            raise BadInputError(f"bq/bk: at most 1024 query rows and 4096 keys a block, got {self.bq} x {self.bk}")
        block = getattr(op, "block_size", None)
        if getattr(op, "block_mask", None) is not None and (self.bq, self.bk) != tuple(block):
            raise BadInputError(f"bq/bk: a block mask tiles by its block_size {tuple(block)}, got ({self.bq}, {self.bk})")
        if 4 * self.workspace_floats(getattr(op, "head_dim", 256), 16) > MAX_WORKSPACE_BYTES:
            raise BadInputError(f"bq/bk: a thread's packed blocks exceed {MAX_WORKSPACE_BYTES} B")
        cores = getattr(getattr(host, "cpu", None), "logical_cores", None)
        if cores and self.threads > cores:
            raise BadInputError(f"threads: {self.threads} is more than the {cores} logical cores of this host")
        if self.threads > 256:
            raise BadInputError(f"threads: {self.threads} is more than the 256 the runtime supports")

    def to_json(self) -> dict[str, Any]:
        return {"schema_version": SCHEMA_VERSION, "backend": "cpu", **dataclasses.asdict(self)}

    @staticmethod
    def from_json(d: dict[str, Any]) -> AttentionSchedule:
        return AttentionSchedule(**schedule_fields(d, AttentionSchedule, "cpu", "CPU", ("bq", "bk")))


def hero_schedule(op: Any, variant: Any, host: Any) -> AttentionSchedule:
    """bq 128 x bk 64 (64 x 64 where 128-row blocks give fewer than 4 tasks a thread; the block mask's
    tiles where there is one), clamped to the sequences; all cores. Measured (2-core AVX-512 machine,
    1 x 8 heads x 2048 x 64 fp32): 128 x 64 ahead of 64 x 64, 64 x 128, 32 x 64 by 3 to 8 %."""
    cores = max(1, getattr(getattr(host, "cpu", None), "logical_cores", None) or 1)
    if op.block_mask is not None:
        return AttentionSchedule(*op.block_size, threads=cores)
    bq = 128 if op.batch * op.heads * -(-op.seq_q // 128) >= 4 * cores else 64
    return AttentionSchedule(min(bq, _up(op.seq_q, ROWS)), min(64, _up(op.seq_k, 16)), threads=cores)


def attention_space(op: Any, v: Any, host: Any) -> list[AttentionSchedule]:
    hero = hero_schedule(op, v, host)
    blocks = [(hero.bq, hero.bk)] if op.block_mask is not None else \
        [(min(bq, _up(op.seq_q, ROWS)), min(bk, _up(op.seq_k, 16))) for bq in BQ_VALUES for bk in BK_VALUES]
    return valid_unique(op, v, host, [hero] + [AttentionSchedule(bq, bk, t) for bq, bk in blocks
                                               for t in thread_counts(host)])


def _check(op: Any, variant: Any, schedule: Any, host: Any) -> None:
    schedule.validate(op, host, variant)


TASK_C = r"""
static inline void at_range(const at_job* J, long i, long* lo, long* hi) {
    const long diag = i + J->SK - J->SQ;
    long a = diag - J->left, b = diag + J->right + 1;
    a = a < 0 ? 0 : (a > J->SK ? J->SK : a);
    b = b < 0 ? 0 : (b > J->SK ? J->SK : b);
    *lo = a < b ? a : b;
    *hi = b;
}

/* S[QR][BKP] = Qs Kt over the first D rows of Kt: RS rows x 2 key vectors of accumulators. */
static void at_scores(const float* restrict qs, const float* restrict kt, float* restrict s) {
    for (long i = 0; i < QR; i += RS) {
        for (long j = 0; j < BKP; j += 2 * VL) {
            vf a0[RS], a1[RS];
#pragma GCC unroll 16
            for (int r = 0; r < RS; ++r) { a0[r] = vf_zero(); a1[r] = vf_zero(); }
            const float* q0 = qs + i * DP;
#pragma GCC unroll 2
            for (long d = 0; d < D; ++d) {
                const vf k0 = vf_load(kt + d * BKP + j), k1 = vf_load(kt + d * BKP + j + VL);
#pragma GCC unroll 16
                for (int r = 0; r < RS; ++r) {
                    const vf b = vf_bcast(q0 + r * DP + d);
                    a0[r] = vf_fma(b, k0, a0[r]);
                    a1[r] = vf_fma(b, k1, a1[r]);
                }
            }
#pragma GCC unroll 16
            for (int r = 0; r < RS; ++r) {
                vf_store(s + (i + r) * BKP + j, a0[r]);
                vf_store(s + (i + r) * BKP + j + VL, a1[r]);
            }
        }
    }
}

/* One row of S (keys [a, e) kept) into the online softmax: P in place (0 outside [a, e)), m and l
   updated, the factor the row's accumulator must be rescaled by in *alpha. */
static void at_softmax_row(float* restrict sr, float* m, float* l, float* alpha, long a, long e) {
    for (long j = 0; j < a; ++j) sr[j] = -INFINITY;
    for (long j = e; j < BKP; ++j) sr[j] = -INFINITY;
    vf vm = vf_set1(-INFINITY);
    for (long j = 0; j < BKP; j += VL) vm = vf_max(vm, vf_load(sr + j));
    const float mx = vf_hmax(vm), mnew = mx > *m ? mx : *m;
    *alpha = expf(*m - mnew);
    const vf vmax = vf_set1(mnew);
    vf vs = vf_zero();
    for (long j = 0; j < BKP; j += VL) {
        const vf p = vf_exp(vf_sub(vf_load(sr + j), vmax));
        vf_store(sr + j, p);
        vs = vf_add(vs, p);
    }
    float drop = 0.0f;  /* exp's clamp leaves ~1e-38 where the score was -inf: zeroed, and out of the sum */
    for (long j = 0; j < a; ++j) { drop += sr[j]; sr[j] = 0.0f; }
    for (long j = e; j < BKP; ++j) { drop += sr[j]; sr[j] = 0.0f; }
    *l = *l * *alpha + (vf_hsum(vs) - drop);
    *m = mnew;
}

/* O[RP rows] = O * alpha + P V over keys [j0, j1): RP rows x OC vectors of accumulators a pass. */
static void at_pv(const float* restrict p, const float* restrict vs, float* restrict o, const float* alpha,
                  long j0, long j1) {
    for (long d0 = 0; d0 < DP; d0 += OC * VL) {
        vf acc[RP][OC];
#pragma GCC unroll 16
        for (int r = 0; r < RP; ++r) {
            const vf va = vf_set1(alpha[r]);
#pragma GCC unroll 16
            for (int c = 0; c < OC; ++c) acc[r][c] = vf_mul(vf_load(o + r * DP + d0 + c * VL), va);
        }
        for (long j = j0; j < j1; ++j) {
            vf vv[OC];
#pragma GCC unroll 16
            for (int c = 0; c < OC; ++c) vv[c] = vf_load(vs + j * DP + d0 + c * VL);
#pragma GCC unroll 16
            for (int r = 0; r < RP; ++r) {
                const vf pb = vf_bcast(p + r * BKP + j);
#pragma GCC unroll 16
                for (int c = 0; c < OC; ++c) acc[r][c] = vf_fma(pb, vv[c], acc[r][c]);
            }
        }
#pragma GCC unroll 16
        for (int r = 0; r < RP; ++r)
#pragma GCC unroll 16
            for (int c = 0; c < OC; ++c) vf_store(o + r * DP + d0 + c * VL, acc[r][c]);
    }
}

/* K^T of keys [c0, c0 + nc) into kt (zero past nc); V into vs in fp32 with rows of DP when it cannot be
   read in place (16-bit, or a head_dim that is no multiple of the lanes). */
static const float* at_pack(const in_t* kg, const in_t* vg, long c0, long nc, float* kt, float* vs) {
    for (long j = 0; j < nc; ++j) {
        const in_t* kr = kg + (c0 + j) * D;
        for (long d = 0; d < D; ++d) kt[d * BKP + j] = IN2F(kr[d]);
    }
    for (long d = 0; d < D; ++d) for (long j = nc; j < BKP; ++j) kt[d * BKP + j] = 0.0f;
#if PACK_V
    for (long j = 0; j < nc; ++j) {
        const in_t* vr = vg + (c0 + j) * D;
        float* vo = vs + j * DP;
        for (long d = 0; d < D; ++d) vo[d] = IN2F(vr[d]);
        for (long d = D; d < DP; ++d) vo[d] = 0.0f;
    }
    return vs;
#else
    (void)vs;
    return (const float*)(vg + c0 * D);
#endif
}

/* The q blocks' key ranges: [lo, hi) of the union of rows [r0, r1) (lo and hi grow with the row). */
static void at_block_range(const at_job* J, long qb, long* lo, long* hi) {
    const long r0 = qb * BQ, r1 = r0 + BQ < J->SQ ? r0 + BQ : J->SQ;
    long x;
    at_range(J, r0, lo, &x);
    at_range(J, r1 - 1, &x, hi);
}

/* Does any q block compute K/V block kb? (A block none needs is never packed.) */
static int at_block_used(const at_job* J, long kb) {
    const long nkb = (J->SK + BK - 1) / BK;
    for (long qb = 0; qb < J->nqb; ++qb) {
        long lo, hi;
        at_block_range(J, qb, &lo, &hi);
        if (lo < hi && kb >= lo / BK && kb <= (hi - 1) / BK && (!J->mask || J->mask[qb * nkb + kb])) return 1;
    }
    return 0;
}

/* Pre-pack task t of B x KVH x nkb: K^T (and V where it is converted) of one block, once for every q block. */
static void at_prepack(const at_job* J, long t) {
    const long nkb = (J->SK + BK - 1) / BK, kb = t % nkb, bkv = t / nkb;
    if (!at_block_used(J, kb)) return;
    const long c0 = kb * BK, c1 = c0 + BK < J->SK ? c0 + BK : J->SK;
    at_pack(J->k + bkv * J->SK * D, J->v + bkv * J->SK * D, c0, c1 - c0, J->kp + t * KBLK, J->vp + t * VBLK);
}

static long at_task(const at_job* J, long task, float* ws) {
    const long qb = task % J->nqb, bh = task / J->nqb, h = bh % J->H, b = bh / J->H;
    const long kvh = h / (J->H / J->KVH);
    const long r0 = qb * BQ, r1 = r0 + BQ < J->SQ ? r0 + BQ : J->SQ, nr = r1 - r0;
    float *qs = ws, *kt = qs + QR * DP, *vs = kt + D * BKP, *s = vs + BK * DP, *o = s + QR * BKP;
    float *m = o + QR * DP, *l = m + QR, *alpha = l + QR;
    const in_t* qg = J->q + ((b * J->H + h) * J->SQ + r0) * D;
    const in_t* kg = J->k + (b * J->KVH + kvh) * J->SK * D;
    const in_t* vg = J->v + (b * J->KVH + kvh) * J->SK * D;
    long lo0, hi1, tiles = 0;
    at_block_range(J, qb, &lo0, &hi1);
    for (long i = 0; i < QR; ++i) { m[i] = -INFINITY; l[i] = 0.0f; }
    memset(o, 0, sizeof(float) * QR * DP);
    if (lo0 < hi1) {
        const float scale = J->scale;
        for (long i = 0; i < QR; ++i)
            for (long d = 0; d < DP; ++d) qs[i * DP + d] = (i < nr && d < D) ? IN2F(qg[i * D + d]) * scale : 0.0f;
        const long nkb = (J->SK + BK - 1) / BK;
        for (long kb = lo0 / BK; kb <= (hi1 - 1) / BK; ++kb) {
            if (J->mask && !J->mask[qb * nkb + kb]) continue;
            const long c0 = kb * BK, c1 = c0 + BK < J->SK ? c0 + BK : J->SK;
            ++tiles;
            const long pt = (b * J->KVH + kvh) * nkb + kb;  /* the pre-packed block, when there are */
            const float* kb_t = J->kp ? J->kp + pt * KBLK : kt;
            const float* vb = J->kp ? (PACK_V ? J->vp + pt * VBLK : (const float*)(vg + c0 * D))
                                    : at_pack(kg, vg, c0, c1 - c0, kt, vs);
            at_scores(qs, kb_t, s);
            for (long g = 0; g < nr; g += RP) {  /* rows past nr: zero scores, alpha 1, never written out */
                long j0 = BKP, j1 = 0;
                for (long i = g; i < g + RP; ++i) {
                    alpha[i] = 1.0f;
                    if (i >= nr) continue;
                    long lo, hi;
                    at_range(J, r0 + i, &lo, &hi);
                    const long a = (lo > c0 ? lo : c0) - c0, e = (hi < c1 ? hi : c1) - c0;
                    if (a < e) {
                        at_softmax_row(s + i * BKP, m + i, l + i, alpha + i, a, e);
                        j0 = a < j0 ? a : j0;
                        j1 = e > j1 ? e : j1;
                    } else {
                        memset(s + i * BKP, 0, sizeof(float) * BKP);
                    }
                }
                if (j0 < j1) at_pv(s + g * BKP, vb, o + g * DP, alpha + g, j0, j1);
            }
        }
    }
    in_t* og = J->out + ((b * J->H + h) * J->SQ + r0) * D;
    for (long i = 0; i < nr; ++i) {
        const float inv = l[i] > 0.0f ? 1.0f / l[i] : 0.0f;
        for (long d = 0; d < D; ++d) og[i * D + d] = F2OUT(o[i * DP + d] * inv);
        if (J->lse) J->lse[(b * J->H + h) * J->SQ + r0 + i] = l[i] > 0.0f ? m[i] + logf(l[i]) : -INFINITY;
    }
    return tiles;
}

static void at_worker(void* arg, int tid, int nthreads) {
    at_job* J = (at_job*)arg;
    (void)nthreads;
    float* ws = J->ws + (size_t)tid * WS;
    long tiles = 0;
    if (J->kp) {
        for (;;) {
            const long t = __atomic_fetch_add(&J->next_pack, 1, __ATOMIC_RELAXED);
            if (t >= J->pack_tasks) break;
            at_prepack(J, t);
        }
        int sense = 0;
        tr_barrier_wait(&J->bar, &sense);
    }
    for (;;) {
        const long t = __atomic_fetch_add(&J->next, 1, __ATOMIC_RELAXED);
        if (t >= J->tasks) break;
        tiles += at_task(J, t, ws);
    }
    if (J->stats) __atomic_fetch_add(J->stats, (int64_t)tiles, __ATOMIC_RELAXED);
}

static tr_buf at_ws_buf, at_pack_buf;
"""


def render_attention(op: Any, isa: CpuIsa, s: AttentionSchedule, header: str) -> str:
    from .pool import pool_c

    dtype = op.dtype.value
    lanes, d = isa.lanes, op.head_dim
    dp = _up(d, lanes)
    pack_v = dtype != "fp32" or d % lanes != 0
    to_out = {"fp32": "(x)", "fp16": "tr_f2h(x)", "bf16": "tr_f2bf(x)"}[dtype]
    consts = f"""
#define NTHREADS {s.threads}
#define D {d}
#define DP {dp}
#define BQ {s.bq}
#define BK {s.bk}
#define QR {_up(s.bq, ROWS)}
#define BKP {_up(s.bk, 2 * lanes)}
#define RS {8 if isa.vregs >= 32 and lanes > 1 else 4}
#define RP {PV_ROWS}
#define OC {max(c for c in (1, 2, 4, 8) if (dp // lanes) % c == 0 and PV_ROWS * c + c + 1 <= isa.vregs)}
#define PACK_V {int(pack_v)}
#define KBLK {d * _up(s.bk, 2 * lanes)}
#define VBLK {s.bk * dp if pack_v else 0}
#define PREPACK_MAX {PREPACK_MAX_BYTES}
#define WS {_up(s.workspace_floats(d, lanes), 16)}
#define IN2F(x) {IN_CONVERT[dtype].format(x='(x)')}
#define F2OUT(x) {to_out}
typedef {isa.ctype(dtype)} in_t;
typedef struct {{
    const in_t *q, *k, *v; in_t* out; float* lse; const uint8_t* mask; int64_t* stats; float *ws, *kp, *vp;
    long B, H, KVH, SQ, SK, left, right, nqb, tasks, next, pack_tasks, next_pack; float scale;
    tr_barrier bar;
}} at_job;
"""
    entry = f"""
{isa.kernel_prefix}int {ENTRY}(void* const* bufs, const int64_t* dims, const double* fparams) {{
    at_job J;
    J.q = (const in_t*)bufs[0]; J.k = (const in_t*)bufs[1]; J.v = (const in_t*)bufs[2];
    J.out = (in_t*)bufs[3]; J.lse = (float*)bufs[4]; J.mask = (const uint8_t*)bufs[5]; J.stats = (int64_t*)bufs[6];
    J.B = (long)dims[0]; J.H = (long)dims[1]; J.KVH = (long)dims[2]; J.SQ = (long)dims[3]; J.SK = (long)dims[4];
    J.left = (long)dims[5]; J.right = (long)dims[6];
    J.scale = (float)fparams[0];
    J.nqb = (J.SQ + BQ - 1) / BQ;
    J.tasks = J.B * J.H * J.nqb;
    J.next = 0;
    int t = dims[7] > 0 ? (int)dims[7] : NTHREADS;
    if ((long)t > J.tasks) t = (int)J.tasks;
    if (t < 1) t = 1;
    pthread_mutex_lock(&tr_call_mu);
    t = tr_pool_ensure(t);
    J.ws = (float*)tr_reserve(&at_ws_buf, sizeof(float) * (size_t)WS * (size_t)t);
    /* K^T (and converted V) packed once for all q blocks when several share it and it fits PREPACK_MAX */
    J.pack_tasks = J.B * J.KVH * ((J.SK + BK - 1) / BK);
    J.next_pack = 0;
    const size_t pack_bytes = sizeof(float) * (size_t)J.pack_tasks * (size_t)(KBLK + VBLK);
    J.kp = (J.nqb > 1 && pack_bytes <= (size_t)PREPACK_MAX) ? (float*)tr_reserve(&at_pack_buf, pack_bytes) : NULL;
    J.vp = J.kp ? J.kp + J.pack_tasks * KBLK : NULL;
    if (J.kp) tr_barrier_init(&J.bar, t);
    int rc = 0;
    if (J.ws == NULL) {{ rc = 1; tr_pool_release(); }}
    else tr_parallel(at_worker, &J, t);
    if (J.kp) tr_barrier_destroy(&J.bar);
    pthread_mutex_unlock(&tr_call_mu);
    return rc;
}}
"""
    return "\n".join([header, isa.prelude((dtype,)), pool_c(), consts, TASK_C, entry])


def bounds(op: Any) -> tuple[int, int]:
    """(left, right) key offsets kept around the aligned diagonal (the IR's rule; unbounded: seq_q + seq_k)."""
    far = op.seq_q + op.seq_k
    left, right = op.window if op.window is not None else (far, far)
    return left, (min(right, 0) if op.causal else right)


def _arguments(op: Any) -> tuple[tuple[int, ...], tuple[float, ...]]:
    left, right = bounds(op)
    return (op.batch, op.heads, op.kv_heads, op.seq_q, op.seq_k, left, right, 0), (op.scale,)


def _metadata(op: Any, isa: CpuIsa, s: AttentionSchedule, name: str) -> dict[str, Any]:
    dtype = op.dtype.value
    return {
        "name": name, "tile": {"M": s.bq, "N": s.bk, "K": op.head_dim, "stages": 1},
        "fragments": {"mma": isa.mma, "dtype_in": dtype, "dtype_acc": "fp32", "vector": isa.vtype,
                      "lanes": isa.lanes},
        "resources": {"regs_per_thread": None, "smem_per_cta": None, "packed_a_bytes": 0, "packed_b_bytes": 0,
                      "scratch_bytes_per_thread": 4 * s.workspace_floats(op.head_dim, isa.lanes)},
        "launch": {"grid": None, "block": None, "threads": s.threads},
        "epilogue": ["online softmax", "O / l", "lse"] + ([] if dtype == "fp32" else [f"round to {dtype}"]),
    }


def _kernel(kernel: Any) -> Any:
    from .attention_runtime import AttentionKernel  # numpy: only where a kernel is built

    return AttentionKernel(kernel)


CORE = Core(kind="attention", render=render_attention, space=attention_space, entry=ENTRY, buffers=BUFFERS,
            arguments=_arguments, tag=lambda op: f"d{op.head_dim}", shape_free=("dtype", "head_dim"),
            metadata=_metadata, schedule=AttentionSchedule, heuristic=hero_schedule, check=_check,
            kernel=_kernel)
