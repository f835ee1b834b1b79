"""The Metal attention forward: O = softmax(scale Q K^T [+ causal mask]) V per head, FlashAttention-2's
online softmax (a running row maximum and sum, the accumulator rescaled when the maximum grows), grouped-query
heads, any seq_q and seq_k, head dims that are multiples of 8 (the op's), fp32, fp16 or bf16 in and out
(bf16 as ``ushort`` bits) with fp32 arithmetic throughout.

Tiling. A threadgroup takes ``8 * simdgroups`` query rows of one K/V head's group (grid: row blocks x
kv_heads x batch): the rows of the group's query heads one head after another (heads kvh * group to kvh *
group + group - 1 are adjacent in q and O, so row r is q's row r from the group's first), so that the heads
sharing a K/V head share its reads where a block spans them (a decode step: one block for the whole group);
each simdgroup takes 8 rows. Its Q rows (scaled by scale * log2(e), so the exponentials are ``exp2``) live in
registers as head_dim / 8 ``simdgroup_float8x8`` matrices beside the head_dim / 8 of its O accumulator. The
keys go ``bk`` a step: each step's K block and V block are converted to float into threadgroup memory
(``kv_tiles`` = 2: K and V each their tile, loaded together, two barriers a step; 1: one tile, V loaded over K
once the scores are made, four barriers a step, about half the memory); all of it within 32 KiB. Q is
staged through the V tile (the one tile) before the loop. S = Q K^T takes ``simdgroup_load`` of K with
``transpose = true`` (the block's transpose, as Apple's MSL specification defines the flag; llama.cpp's Metal
flash attention loads K^T so); P V multiplies the probabilities in place in S's matrices by V's blocks.

Row strides, under the bank model tg_banks.py assumes for Apple GPUs (NVIDIA's 32 banks of 4 bytes: an
assumption, no public measurement exists) and MLX's element placement below: a transposed K load reads, in
one 4-byte access a lane, the words c * ld + r (r < 8, c in 0, 2, 4, 6), distinct banks when ld is 4 mod 8,
so K rows take head_dim + 4 floats (``k_stride``); a V (or Q) load reads a lane's pair as one 8-byte access,
half a simdgroup 4 rows x 8 words, distinct banks when ld is 8 mod 16, so V rows take the head dim padded
to 8 mod 16 (``v_stride``). The one-tile form writes each at its own stride.

The softmax runs on S's matrices in registers through ``thread_elements()``: a lane holds elements (r, c)
and (r, c + 1) of each 8 x 8 matrix, r = (qid & 4) + (lane / 2) % 4 and c = (qid & 2) * 2 + (lane % 2) * 2
with qid = lane / 4 (MLX's layout, mlx/backend/metal/kernels/steel/attn/mma.h ``get_coord``; Apple does not
document it), so a row's 8 columns sit on the 4 lanes that differ in lane bits 0 and 3, and its maximum and
sum are two ``simd_shuffle_xor`` steps (masks 1 and 8). The same layout scales O's rows.

Masks, as the op's reference (kernels/ops/attention.py): key j of query i is kept when j < seq_k and, causal,
j <= i + (seq_k - seq_q) (the diagonal aligned bottom-right); the causal key loop ends at the diagonal of
the block's last query (of seq_q's last where the block spans two heads). A row that keeps no key writes 0. No infinity enters the arithmetic (masked scores are the
lowest finite float, probabilities of masked keys are set to 0 by a test), so the result does not hang on how
Metal's fast math treats infinities. Keys past seq_k and queries past seq_q are zero rows in the tiles.

Refused with one line (``check_attention``): sliding windows, block masks and the serving forms (per-entry
seq_lens, paged K/V, packed entries); they run on the CPU backend.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from tracea.doctor.errors import BadInputError, UnsupportedError

from ..schedule import positive_ints
from .core import KERNEL_BUILTINS, SIMD_WIDTH, THREADGROUP_MEMORY, read_schedule, schedule_json
from .softmax import MAX_OFFSET, PRELUDE, STORE

KIND = "metal-attention"  # the schedule JSON's "kind"
KERNEL = "tr_metal_attention"
SIMDGROUPS = (1, 2, 4, 8)  # 8 query rows each
BKS = (8, 16, 32, 64)
KV_TILES = (1, 2)
CPU_HINT = "it runs on the CPU backend (--backend cpu)"


def k_stride(head_dim: int) -> int:
    """Floats a K row takes in threadgroup memory: head_dim + 4, 4 mod 8 (the module docstring says why)."""
    return head_dim + 4


def v_stride(head_dim: int) -> int:
    """Floats a V (or staged Q) row takes: the head dim padded to 8 mod 16."""
    return head_dim + (8 if head_dim % 16 == 0 else 0)


def tile_floats(head_dim: int, bk: int, kv_tiles: int) -> tuple[int, int]:
    """(K tile, V tile) floats: one tile holds K, then V, then is as long as the longer; two are each theirs."""
    k, v = bk * k_stride(head_dim), bk * v_stride(head_dim)
    return (k, v) if kv_tiles == 2 else (max(k, v), 0)


@dataclass(frozen=True)
class MetalAttentionSchedule:
    """``simdgroups`` simdgroups of 8 query rows a threadgroup, ``bk`` keys a step, ``kv_tiles`` threadgroup
    tiles for K and V (1: shared, 2: one each)."""

    simdgroups: int = 4
    bk: int = 32
    kv_tiles: int = 2

    @property
    def bq(self) -> int:
        return 8 * self.simdgroups

    @property
    def threads(self) -> int:
        return SIMD_WIDTH * self.simdgroups

    @property
    def name(self) -> str:
        return f"attn_q{self.bq}_k{self.bk}_t{self.kv_tiles}"

    def threadgroup_bytes(self, head_dim: int) -> int:
        return 4 * sum(tile_floats(head_dim, self.bk, self.kv_tiles))

    def to_json(self) -> dict[str, Any]:
        return schedule_json(self, KIND)

    @staticmethod
    def from_json(d: dict[str, Any]) -> MetalAttentionSchedule:
        return read_schedule(MetalAttentionSchedule, d, KIND)  # type: ignore[no-any-return]

    def features(self, op: Any) -> dict[str, float]:
        """Threads and threadgroup memory at ``op``'s head dim, and the query blocks that cover it."""
        return {"threads": float(self.threads), "threadgroup_bytes": float(self.threadgroup_bytes(op.head_dim)),
                "query_blocks": float(-(-op.seq_q // self.bq) * op.heads * op.batch)}

    def validate(self, op: Any = None, target: Any = None) -> None:
        """The fields; with ``op``, what the kernel computes and the tiles' threadgroup memory at its head dim."""
        positive_ints(self, ("simdgroups", "bk", "kv_tiles"))
        for name, allowed in (("simdgroups", SIMDGROUPS), ("bk", BKS), ("kv_tiles", KV_TILES)):
            if getattr(self, name) not in allowed:
                raise BadInputError(f"{name}: expected one of {', '.join(map(str, allowed))}, got "
                                    f"{getattr(self, name)}")
        if op is None:
            return
        check_attention(op)
        used = self.threadgroup_bytes(op.head_dim)
        if used > THREADGROUP_MEMORY:
            raise BadInputError(f"bk/kv_tiles: {self.kv_tiles} tile(s) of {self.bk} keys at head dim {op.head_dim} "
                                f"are {used} B of threadgroup memory, over Metal's {THREADGROUP_MEMORY} B")


def check_attention(op: Any) -> None:
    """``UnsupportedError`` (one line, a hint) for an attention the kernel does not compute."""
    if getattr(op, "serving", False):
        raise UnsupportedError("the Metal attention does not compute serving forms (per-entry seq_lens, paged K/V, "
                               "packed entries)", CPU_HINT)
    if op.window is not None:
        raise UnsupportedError("the Metal attention does not compute sliding windows", CPU_HINT)
    if op.block_mask is not None:
        raise UnsupportedError("the Metal attention does not compute block masks", CPU_HINT)
    if op.dtype.value not in STORE:
        raise UnsupportedError(f"the Metal attention computes fp32, fp16 or bf16, not {op.dtype.value}")
    if op.head_dim % 8:
        raise UnsupportedError(f"head_dim: the Metal attention takes multiples of 8 (8 x 8 simdgroup matrices), "
                               f"not {op.head_dim}")
    if max(op.batch * op.heads * op.seq_q, op.batch * op.kv_heads * op.seq_k) * op.head_dim > MAX_OFFSET:
        raise UnsupportedError(f"the Metal attention indexes with 32-bit offsets: q or k is over {MAX_OFFSET} "
                               "elements", "split the batch over several calls")


def _load(tile: str, src: str, ld: int, s: MetalAttentionSchedule, d: int) -> str:
    """Keys j0.. j0 + bk - 1 of ``src`` (K or V of this head) as float into ``tile`` at ``ld`` floats a row;
    rows past seq_k zero."""
    return f"""        for (uint e = tidx; e < {s.bk * d}u; e += {s.threads}u) {{
            const uint j = uint(j0) + e / {d}u;
            {tile}[(e / {d}u) * {ld}u + e % {d}u] = j < nk ? tr_in({src}[j * {d}u + e % {d}u]) : 0.0f;
        }}
"""


def _stage_q(s: MetalAttentionSchedule, d: int) -> str:
    """Q's rows, scaled, into each simdgroup's matrices through the V tile (the one tile), min(bq, bk) rows at a
    time at V's stride."""
    ch, ld, tile = min(s.bq, s.bk), v_stride(d), "vt" if s.kv_tiles == 2 else "kt"
    return f"""    for (uint c0 = 0; c0 < {s.bq}u; c0 += {ch}u) {{
        threadgroup_barrier(mem_flags::mem_threadgroup);
        for (uint e = tidx; e < {ch * d}u; e += {s.threads}u) {{
            const uint r = r0 + c0 + e / {d}u;
            {tile}[(e / {d}u) * {ld}u + e % {d}u] = r < rows ? tr_in(qg[r * {d}u + e % {d}u]) * scale : 0.0f;
        }}
        threadgroup_barrier(mem_flags::mem_threadgroup);
        if (sgid * 8u >= c0 && sgid * 8u < c0 + {ch}u) {{
            for (uint i = 0; i < {d // 8}u; ++i)
                simdgroup_load(qm[i], {tile} + (sgid * 8u - c0) * {ld}u + i * 8u, {ld});
        }}
    }}
"""


def _scores(s: MetalAttentionSchedule, d: int) -> str:
    """S = Q K^T for the step's keys: bk / 8 matrices, K's blocks loaded transposed."""
    ld = k_stride(d)
    return f"""        for (uint n = 0; n < {s.bk // 8}u; ++n) {{
            sm[n] = make_filled_simdgroup_matrix<float, 8, 8>(0.0f);
            for (uint i = 0; i < {d // 8}u; ++i) {{
                simdgroup_float8x8 km;
                simdgroup_load(km, kt + n * {8 * ld}u + i * 8u, {ld}, ulong2(0, 0), true);
                simdgroup_multiply_accumulate(sm[n], qm[i], km, sm[n]);
            }}
        }}
"""


def _online_softmax(s: MetalAttentionSchedule, d: int) -> str:
    """The mask, the rows' new maximum and sum, S's matrices turned into P, O's rows rescaled."""
    return f"""        float bm = TR_LOWEST;
        for (uint n = 0; n < {s.bk // 8}u; ++n) {{
            for (uint t = 0; t < 2u; ++t) {{
                const int j = j0 + int(n * 8u + fc + t);
                const bool keep = j < seq_k && (causal == 0 || j <= qi + shift);
                const float x = keep ? sm[n].thread_elements()[t] : TR_LOWEST;
                sm[n].thread_elements()[t] = x;
                bm = max(bm, x);
            }}
        }}
        bm = max(bm, simd_shuffle_xor(bm, 1));
        bm = max(bm, simd_shuffle_xor(bm, 8));
        const float mn = max(m, bm), alpha = exp2(m - mn);
        float rs = 0.0f;
        for (uint n = 0; n < {s.bk // 8}u; ++n) {{
            for (uint t = 0; t < 2u; ++t) {{
                const float x = sm[n].thread_elements()[t];
                const float p = x > TR_LOWEST ? exp2(x - mn) : 0.0f;
                sm[n].thread_elements()[t] = p;
                rs += p;
            }}
        }}
        rs += simd_shuffle_xor(rs, 1);
        rs += simd_shuffle_xor(rs, 8);
        l = l * alpha + rs;
        m = mn;
        for (uint i = 0; i < {d // 8}u; ++i) {{
            om[i].thread_elements()[0] *= alpha;
            om[i].thread_elements()[1] *= alpha;
        }}
"""


def _step(s: MetalAttentionSchedule, d: int) -> str:
    """One step of bk keys: K (and V) in, S, the softmax, O += P V."""
    vtile = "vt" if s.kv_tiles == 2 else "kt"
    sync = "        threadgroup_barrier(mem_flags::mem_threadgroup);\n"
    ld = v_stride(d)
    loads = _load("kt", "kh", k_stride(d), s, d) + (_load("vt", "vh", ld, s, d) if s.kv_tiles == 2 else "")
    v_over_k = "" if s.kv_tiles == 2 else sync + _load("kt", "vh", ld, s, d) + sync
    return f"""    for (int j0 = 0; j0 < kend; j0 += {s.bk}) {{
{sync}{loads}{sync}{_scores(s, d)}{v_over_k}{_online_softmax(s, d)}        for (uint i = 0; i < {d // 8}u; ++i) {{
            for (uint n = 0; n < {s.bk // 8}u; ++n) {{
                simdgroup_float8x8 vm;
                simdgroup_load(vm, {vtile} + n * {8 * ld}u + i * 8u, {ld});
                simdgroup_multiply_accumulate(om[i], sm[n], vm, om[i]);
            }}
        }}
    }}
"""


def render(dtype: str, head_dim: int, s: MetalAttentionSchedule) -> str:
    """The kernel's MSL for ``dtype`` and ``head_dim``: q, k, v in, o out, then seq_q, seq_k, heads, kv_heads,
    causal (``constant int``) and scale * log2(e) (``constant float``)."""
    if dtype not in STORE:
        raise BadInputError(f"dtype: the Metal attention takes fp32, fp16 or bf16, not {dtype}")
    s.validate()
    d, t = head_dim, STORE[dtype]
    if d % 8 or not 8 <= d or s.threadgroup_bytes(d) > THREADGROUP_MEMORY:
        raise BadInputError(f"head_dim: {d} does not fit {s.name} (a multiple of 8 whose tiles fit 32 KiB)")
    k_floats, v_floats = tile_floats(d, s.bk, s.kv_tiles)
    vt = f"    threadgroup float vt[{v_floats}];\n" if s.kv_tiles == 2 else ""
    builtins = ",\n        ".join(KERNEL_BUILTINS)
    return PRELUDE + f"""
// {s.name}, head_dim {d}: {s.bq} query rows of a K/V head's group a threadgroup ({s.simdgroups} simdgroups of 8),
// {s.bk} keys a step,
// {"K and V each their tile" if s.kv_tiles == 2 else "K and V in turn in one tile"}; rows of {k_stride(d)} floats (K),
// {v_stride(d)} (V, Q)
kernel void {KERNEL}(device const {t}* q [[buffer(0)]], device const {t}* k [[buffer(1)]],
        device const {t}* v [[buffer(2)]], device {t}* o [[buffer(3)]],
        constant int& seq_q [[buffer(4)]], constant int& seq_k [[buffer(5)]], constant int& heads [[buffer(6)]],
        constant int& kv_heads [[buffer(7)]], constant int& causal [[buffer(8)]], constant float& scale [[buffer(9)]],
        {builtins}) {{
    threadgroup float kt[{k_floats}];
{vt}    const uint kvh = tgid.y, group = uint(heads / kv_heads), nq = uint(seq_q), nk = uint(seq_k);
    const uint rows = group * nq, r0 = tgid.x * {s.bq}u;  // the group's query rows, head after head; ours from r0
    const uint head0 = (tgid.z * uint(heads) + kvh * group) * nq * {d}u;  // its first head's first row
    device const {t}* qg = q + head0;
    device const {t}* kh = k + (tgid.z * uint(kv_heads) + kvh) * nk * {d}u;
    device const {t}* vh = v + (tgid.z * uint(kv_heads) + kvh) * nk * {d}u;
    const uint fr = ((lane >> 2) & 4u) | ((lane >> 1) & 3u);  // the lane's row in an 8 x 8 matrix (MLX's layout)
    const uint fc = (lane & 8u) / 2u + (lane & 1u) * 2u;      // and its first column
    const uint row = r0 + sgid * 8u + fr;                      // the lane's row of the group
    const int qi = int(row % nq), shift = seq_k - seq_q;       // its query; the causal diagonal aligned bottom-right
    simdgroup_float8x8 qm[{d // 8}], om[{d // 8}], sm[{s.bk // 8}];
    for (uint i = 0; i < {d // 8}u; ++i) om[i] = make_filled_simdgroup_matrix<float, 8, 8>(0.0f);
{_stage_q(s, d)}    const uint last = min(r0 + {s.bq}u, rows) - 1u;  // the causal keys end at the block's last query's diagonal
    const int qlast = int(r0 / nq == last / nq ? last % nq : nq - 1u);  // (any query, where two heads share it)
    const int kend = causal != 0 ? min(max(qlast + 1 + shift, 0), seq_k) : seq_k;
    float m = TR_LOWEST, l = 0.0f;
{_step(s, d)}    if (row < rows) {{
        const float inv = l > 0.0f ? 1.0f / l : 0.0f;  // a row that keeps no key: 0
        device {t}* orow = o + head0 + row * {d}u + fc;
        for (uint i = 0; i < {d // 8}u; ++i) {{
            orow[i * 8u] = tr_out_{t}(om[i].thread_elements()[0] * inv);
            orow[i * 8u + 1u] = tr_out_{t}(om[i].thread_elements()[1] * inv);
        }}
    }}
}}
"""


def grid(op: Any, s: MetalAttentionSchedule) -> tuple[int, int, int]:
    return (-(-group_rows(op) // s.bq), op.kv_heads, op.batch)


def group_rows(op: Any) -> int:
    """The query rows a K/V head serves: its group's heads' rows, one head after another."""
    return op.heads // op.kv_heads * op.seq_q


def scale_log2(op: Any) -> float:
    """The kernel's Q scale: the op's scale times log2(e), so that exp(x) is exp2 of the scaled x."""
    return float(op.scale) * math.log2(math.e)
