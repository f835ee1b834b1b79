"""Attention forward on the CPU (issue 17), FlashAttention style: one task per (batch, head, block of bq
query rows), threads taking tasks from a shared counter (the last q blocks first: under a causal mask they
hold the most keys). A task packs its Q block transposed and scaled by scale * log2(e), then streams the
K/V blocks of bk keys that the mask keeps any pair of (whole blocks outside the causal band, the window or
the block mask are never loaded). Scores are held transposed, S^T = K Q^T, so one vector is VL query rows
of one key: the online softmax (running max m and sum l per row, the accumulator rescaled by
2^(m_old - m_new), P = 2^(S - m_new) by a polynomial) is elementwise over row vectors, with no horizontal
reduction, and the accumulator is O^T += V^T P^T, the same register tile as S^T (row vectors of P^T times
broadcast V values). Only blocks on the band's edge are masked element by element. At the end
O = O^T^T / l and lse = m ln 2 + ln l; a row that kept no key gets O = 0 and lse = -inf. The C is in
attention_c.py.

16-bit inputs are converted to fp32 once (K and V pre-packed per call where it fits, else per block),
fp32 softmax and accumulation, the output rounded back; fp32 K and V are read in place.

Serving forms (the op's ``seq_lens`` and ``page_size``): batch entry b's length (the seq_lens input, clamped
to [0, seq_k]) takes seq_k's place in its ranges, so its diagonal is aligned at its own length and its keys
past it are never loaded (an entry of no keys: O = 0, lse = -inf). A paged kernel (``AT_PAGED``, compiled in:
the contiguous one stays as it was) gathers each K/V block through the block table into fp32 rows, whatever
the dtype (the pre-pack gathers too): key t of entry b is row t % page_size of page block_table[b][t /
page_size], the page clamped into the pool so that an unchecked table never reads outside it.

Packed entries (the op's ``packed``: FlashAttention's varlen prefill) are a third build (``AT_PACKED``): entry
b's queries and keys are tokens [cu[b], cu[b + 1]) of the token-major q (tokens, heads, head_dim), k and v
(tokens, kv_heads, head_dim), its length n = cu[b + 1] - cu[b] taking seq_q's and seq_k's place (the
diagonal aligned, d = j - i), O token-major as q, lse (heads, tokens). The offsets are clamped into
[0, tokens] and the lengths into [0, seq_k], so unchecked offsets read and write nothing outside the arrays
(rows no entry holds are left as they were). One task per (entry, head, q block of the entry's own rows):
none past an entry's length, however large the capacity seq_q. K and V are gathered into fp32 rows (rows
are kv_heads x head_dim apart), per block, or pre-packed once into head-major fp32 (kv_heads, tokens,
head_dim) where several tasks read a block (an entry of several q blocks, or grouped heads) and it fits; every
token is packed then, since each key is kept by its own query.

Entry: ``int tracea_attention(void* const* bufs, const int64_t* dims, const double* fparams)`` with
bufs = {q, k, v, out, lse, mask, stats, block_table, seq_lens, cu_seqlens} (lse, mask and stats may be NULL:
``AttentionKernel`` gives them; block_table (int32, batch x table_cols) is read by a paged kernel only,
seq_lens (int32, batch) where it is not NULL, cu_seqlens (int32, batch + 1) by a packed kernel only),
dims = {batch, heads, kv_heads, seq_q, seq_k, left, right, page_size, table_cols, pages, tokens, threads}
(the three paging dims 0 for contiguous K/V, tokens 0 unless packed), fparams = {scale}; head_dim, bq, bk
and whether K/V are paged or packed are compiled in.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from tracea.doctor.errors import BadInputError

from ..schedule import SCHEMA_VERSION, positive_ints, schedule_fields
from .attention_c import TASK_C
from .gemm_core import IN_CONVERT
from .isa import CpuIsa
from .schedule import check_threads
from .schedules import thread_counts, valid_unique

ENTRY = "tracea_attention"
BUFFERS = ("q", "k", "v", "out", "lse", "mask", "stats", "block_table", "seq_lens", "cu_seqlens")
ROWS = 8  # the schedule's query rows are clamped to the sequence rounded up to this
MAX_WORKSPACE_BYTES = 16 << 20  # one thread's packed blocks
PREPACK_MAX_BYTES = 256 << 20  # K^T (and converted V) of the whole call, packed once; beyond, per task
BQ_VALUES = (16, 32, 64, 128, 256)
BK_VALUES = (32, 64, 128, 256)


def _up(x: int, to: int) -> int:
    return -(-x // to) * to


def s_tile(bq: int, lanes: int, vregs: int) -> tuple[int, int]:
    """(row vectors, keys) of the S^T micro-tile's accumulators (the P V tile's too, with head-dim columns for
    keys): up to 4 row vectors x 6 keys with 32 registers, 2 x 6 with 16, no more row vectors than bq holds.
    Measured (2-core AVX-512 machine, 1 x 8 heads x 2048 x 64): 4 x 6 ahead of 4 x 4 by 3 to 4 %, 4 x 8 (32
    accumulators: spills) 25 % behind; AVX2: 2 x 6 ahead of 2 x 4 by 9 %."""
    rv, rk = (4, 6) if vregs >= 32 else (2, 6)
    return max(1, min(rv, bq // lanes)), rk


def _qr(bq: int, lanes: int, vregs: int = 32) -> int:
    """Query rows a task holds: bq rounded up to the S^T micro-tile's rows."""
    return _up(bq, s_tile(bq, lanes, vregs)[0] * lanes)


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

    def workspace_floats(self, head_dim: int, lanes: int, pack: bool = True) -> int:
        """Q^T, the converted K and V blocks (where packed), S^T, O^T and seven row vectors."""
        qr = _qr(self.bq, lanes)
        return 2 * head_dim * qr + (2 * self.bk * head_dim if pack else 0) + self.bk * qr + 7 * qr

    def validate(self, op: Any, host: Any, variant: Any = None) -> None:
        positive_ints(self, ("bq", "bk", "threads"))
        if self.bq > 1024 or self.bk > 4096:
            raise BadInputError(f"bq/bk: at most 1024 query rows and 4096 keys a block, got {self.bq} x {self.bk}")
        block = getattr(op, "block_size", None)
        if getattr(op, "block_mask", None) is not None and (self.bq, self.bk) != tuple(block):
            raise BadInputError(f"bq/bk: a block mask tiles by its block_size {tuple(block)}, got ({self.bq}, {self.bk})")
        if 4 * self.workspace_floats(getattr(op, "head_dim", 256), 16) > MAX_WORKSPACE_BYTES:
            raise BadInputError(f"bq/bk: a thread's packed blocks exceed {MAX_WORKSPACE_BYTES} B")
        check_threads(self.threads, host)

    def to_json(self) -> dict[str, Any]:
        return {"schema_version": SCHEMA_VERSION, "backend": "cpu", **dataclasses.asdict(self)}

    @staticmethod
    def from_json(d: dict[str, Any]) -> AttentionSchedule:
        return AttentionSchedule(**schedule_fields(d, AttentionSchedule, "cpu", "CPU", ("bq", "bk")))

    def features(self, op: Any) -> dict[str, float]:
        """None beside the fields (``Schedule``)."""
        return {}


def hero_schedule(op: Any, variant: Any, host: Any) -> AttentionSchedule:
    """bq 128 x bk 64 (64 x 64 where 128-row blocks give fewer than 4 tasks a thread; the block mask's
    tiles where there is one), clamped to the sequences; all cores. Measured (2-core AVX-512 machine,
    1 x 8 heads x 2048 x 64 fp32, min of 8 rounds): 128 x 64 and 64 x 64 within 3 % of each other, ahead of
    256 x 64, 128 x 128 and 32 x 128 by 3 to 12 %."""
    cores = max(1, getattr(getattr(host, "cpu", None), "logical_cores", None) or 1)
    if op.block_mask is not None:
        return AttentionSchedule(*op.block_size, threads=cores)
    bq = 128 if op.heads * sum(-(-n // 128) for n in op.query_lens) >= 4 * cores else 64  # packed: each entry's
    return AttentionSchedule(min(bq, _up(op.seq_q, ROWS)), min(64, _up(op.seq_k, 16)), threads=cores)


def attention_space(op: Any, v: Any, host: Any) -> list[AttentionSchedule]:
    hero = hero_schedule(op, v, host)
    blocks = [(hero.bq, hero.bk)] if op.block_mask is not None else \
        [(min(bq, _up(op.seq_q, ROWS)), min(bk, _up(op.seq_k, 16))) for bq in BQ_VALUES for bk in BK_VALUES]
    return valid_unique(op, v, host, [hero] + [AttentionSchedule(bq, bk, t) for bq, bk in blocks
                                               for t in thread_counts(host)])


def core_check(op: Any, variant: Any, schedule: Any, host: Any) -> None:
    schedule.validate(op, host, variant)


def render_attention(op: Any, isa: CpuIsa, s: AttentionSchedule, header: str) -> str:
    from .pool import pool_c

    dtype = op.dtype.value
    return "\n".join([header, isa.prelude((dtype,)), pool_c(), _defines(op, isa, s), TASK_C, _entry(isa)])


def _defines(op: Any, isa: CpuIsa, s: AttentionSchedule) -> str:
    """The kernel's constants (tile sizes, register blocking, packing, workspace), types and job struct."""
    dtype = op.dtype.value
    lanes, d = isa.lanes, op.head_dim
    paged = bool(op.page_size)
    pack = dtype != "fp32" or paged or op.packed  # 16-bit K/V converted once, paged/packed gathered; fp32 in place
    rv, rk = s_tile(s.bq, lanes, isa.vregs)
    packed_fields = "    const int32_t* cu; long T, *tb;  /* offsets, tokens, each entry's q blocks before it */\n" \
        if op.packed else ""
    to_out = {"fp32": "(x)", "fp16": "tr_f2h(x)", "bf16": "tr_f2bf(x)"}[dtype]
    return f"""
#define NTHREADS {s.threads}
#define D {d}
#define BQ {s.bq}
#define BK {s.bk}
#define QR {_qr(s.bq, lanes, isa.vregs)}
#define RV {rv}
#define RK {rk}
#define AT_SCALEF {int(isa.family == "cpu-avx512")}
{"#define AT_PAGED 1" if paged else "#define AT_PAGED 0"}
#define AT_PACKED {int(op.packed)}
#define PACK_K {int(pack)}
#define PACK_V {int(pack)}
#define KBLK {s.bk * d if pack else 0}
#define VBLK {s.bk * d if pack else 0}
#define PREPACK_MAX {PREPACK_MAX_BYTES}
#define WS {_up(s.workspace_floats(d, lanes, pack), 16)}
#define IN2F(x) {IN_CONVERT[dtype].format(x='(x)')}
#define F2OUT(x) {to_out}
typedef {isa.ctype(dtype)} in_t;
typedef struct {{
    const in_t *q, *k, *v; in_t* out; float* lse; const uint8_t* mask; int64_t* stats; float *ws, *kp, *vp;
    const int32_t *table, *lens;
    long B, H, KVH, SQ, SK, left, right, P, cols, pages, nqb, tasks, next, pack_tasks, next_pack; float scale;
{packed_fields}    tr_barrier bar;
}} at_job;
"""


def _entry(isa: CpuIsa) -> str:
    """The entry point: the job from the buffers and dims, the workspace and the K/V prepack, the pool's run."""
    return f"""
{isa.kernel_prefix}int {ENTRY}(void* const* bufs, const int64_t* dims, const double* fparams) {{
    at_job J;
    J.q = (const in_t*)bufs[0]; J.k = (const in_t*)bufs[1]; J.v = (const in_t*)bufs[2];
    J.out = (in_t*)bufs[3]; J.lse = (float*)bufs[4]; J.mask = (const uint8_t*)bufs[5]; J.stats = (int64_t*)bufs[6];
    J.B = (long)dims[0]; J.H = (long)dims[1]; J.KVH = (long)dims[2]; J.SQ = (long)dims[3]; J.SK = (long)dims[4];
    J.left = (long)dims[5]; J.right = (long)dims[6];
    J.table = (const int32_t*)bufs[7]; J.lens = (const int32_t*)bufs[8];
    J.P = (long)dims[7]; J.cols = (long)dims[8]; J.pages = (long)dims[9];
    J.scale = (float)fparams[0];
#if AT_PACKED  /* each entry's own q blocks (nqb: the most an entry has) */
    J.cu = (const int32_t*)bufs[9]; J.T = (long)dims[10];
    J.tasks = J.H * at_packed_blocks(&J, NULL, &J.nqb);
#else
    J.nqb = (J.SQ + BQ - 1) / BQ;
    J.tasks = J.B * J.H * J.nqb;
#endif
    J.next = 0;
    int t = dims[11] > 0 ? (int)dims[11] : NTHREADS;
    if ((long)t > J.tasks) t = (int)J.tasks;
    if (t < 1) t = 1;
    pthread_mutex_lock(&tr_call_mu);
    t = tr_pool_ensure(t);
    J.ws = (float*)tr_reserve(&at_ws_buf, sizeof(float) * (size_t)WS * (size_t)t);
#if AT_PACKED
    J.tb = (long*)tr_reserve(&at_blocks_buf, sizeof(long) * (size_t)(J.B + 1));
    if (J.tb) J.tasks = J.H * at_packed_blocks(&J, J.tb, &J.nqb);  /* the blocks as tb has them */
    else J.ws = NULL;  /* out of memory: the call fails as without a workspace */
    /* K and V converted into head-major fp32 once for all tasks when several share a block (an entry of several
       q blocks, or a kv head's group) and they fit PREPACK_MAX */
    J.pack_tasks = (J.T + BK - 1) / BK;
    J.next_pack = 0;
    const size_t pack_bytes = sizeof(float) * 2 * (size_t)(J.KVH * J.T * D);
    J.kp = ((J.nqb > 1 || J.H > J.KVH) && pack_bytes <= (size_t)PREPACK_MAX)
           ? (float*)tr_reserve(&at_pack_buf, pack_bytes) : NULL;
    J.vp = J.kp ? J.kp + J.KVH * J.T * D : NULL;
#else
    /* K and V converted once for all q blocks (where they are not read in place) when several q blocks share
       them and they fit PREPACK_MAX */
    J.pack_tasks = J.B * J.KVH * ((J.SK + BK - 1) / BK);
    J.next_pack = 0;
    const size_t pack_bytes = sizeof(float) * (size_t)J.pack_tasks * (size_t)(KBLK + VBLK);
    J.kp = (KBLK + VBLK > 0 && J.nqb > 1 && pack_bytes <= (size_t)PREPACK_MAX)
           ? (float*)tr_reserve(&at_pack_buf, pack_bytes) : NULL;
    J.vp = J.kp ? J.kp + J.pack_tasks * KBLK : NULL;
#endif
    if (J.kp) tr_barrier_init(&J.bar, t);
    int rc = 0;
    if (J.ws == NULL) {{ rc = 1; tr_pool_release(); }}
    else tr_parallel(at_worker, &J, t);
    if (J.kp) tr_barrier_destroy(&J.bar);
    pthread_mutex_unlock(&tr_call_mu);
    return rc;
}}
"""


def bounds(op: Any) -> tuple[int, int]:
    """(left, right) key offsets kept around the aligned diagonal (the IR's rule; unbounded: seq_q + seq_k)."""
    far = op.seq_q + op.seq_k
    left, right = op.window if op.window is not None else (far, far)
    return left, (min(right, 0) if op.causal else right)


def core_arguments(op: Any) -> tuple[tuple[int, ...], tuple[float, ...]]:
    left, right = bounds(op)
    paging = (op.page_size, op.table_cols, op.pages) if op.page_size else (0, 0, 0)
    tokens = op.shapes()["q"][0] if op.packed else 0
    return (op.batch, op.heads, op.kv_heads, op.seq_q, op.seq_k, left, right, *paging, tokens, 0), (op.scale,)


def core_tag(op: Any) -> str:
    """The kernel name's part for the op: its head dim, and whether K/V are paged or packed (the source differs)."""
    return f"d{op.head_dim}" + ("_paged" if op.page_size else "") + ("_packed" if op.packed else "")


def core_metadata(op: Any, isa: CpuIsa, s: AttentionSchedule, name: str) -> dict[str, Any]:
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


def core_kernel(kernel: Any) -> Any:
    from .attention_runtime import AttentionKernel  # numpy: only where a kernel is built

    return AttentionKernel(kernel)
