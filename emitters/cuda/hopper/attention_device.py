"""Device code of the Hopper attention kernel that does not depend on the walk: the two wgmma forms
(S = Q K^T from shared memory, O += P V with P in registers), named barriers, and one consumer
warpgroup's per-tile steps (issue, mask, online softmax, rescale, pack) as inline functions over
register arrays (every index a compile-time constant after unrolling, so they stay in registers).

Fragments (PTX ISA, wgmma m64nNk16): a consumer thread (warp w, lane) holds accumulator rows
``16 w + lane / 4`` and ``+ 8``, columns ``8 j + 2 (lane % 4)`` and ``+ 1`` in ``acc[4 j .. 4 j + 3]`` =
(r, c), (r, c + 1), (r + 8, c), (r + 8, c + 1). The register A fragment of a k16 step t holds (r, 2q..),
(r + 8, 2q..), (r, 8 + 2q..), (r + 8, 8 + 2q..), q = lane % 4: exactly S's columns 16 t .. 16 t + 15, so
P's k16 step t is ``pack(s[8t], s[8t+1]), pack(s[8t+2], s[8t+3]), pack(s[8t+4], s[8t+5]),
pack(s[8t+6], s[8t+7])`` with no data movement (``fragment_model`` in attention.py checks this in NumPy).
"""

from __future__ import annotations

from ...cstyle import CodeWriter
from .ptx import desc_name, swizzled_desc_lib

SWIZZLE_LINE = 128  # bytes of one 64-element 16-bit line of a 128B-swizzled TMA box


def head_chunk(d: int) -> int:
    """Elements of one head-dim chunk of a Q, K or V tile: a line of the widest TMA swizzle (128, 64 or 32
    bytes) that divides the head dim, so that boxes, descriptors and wgmma k steps cover whole lines (the
    canonical layouts of the PTX ISA's wgmma: 64 elements at 128B, 32 at 64B, 16 at 32B). A head dim of an odd
    number of 8s takes 16-element chunks, its last box half past the tensor map's head dim: TMA fills those
    8 columns with zeros (``padded_dim``)."""
    return next((c for c in (64, 32, 16) if d % c == 0), 16)


def padded_dim(d: int) -> int:
    """The head dim the kernel computes over: ``d`` rounded up to the wgmma k step (16). Q's and K's extra
    columns are TMA's zeros (their products add 0 to S); V's give O columns that are never stored."""
    return -(-d // 16) * 16


def tma_box(d: int) -> tuple[int, str]:
    """(elements, swizzle mode) of the head-dim side of a Q, K or V box for head dim ``d``: the kernel's chunk and
    swizzle, which are the padded dim's; the tensor map's extent stays ``d`` (TMA fills the rest with zeros)."""
    dp = padded_dim(d)
    return head_chunk(dp), swizzle_mode(dp)


def line_bytes(d: int) -> int:
    """Bytes of one swizzled line (a head-dim chunk of one row): 128 where the head dim is a multiple of 64."""
    return 2 * head_chunk(d)


def swizzle_mode(d: int) -> str:
    """The TMA swizzle mode of head dim ``d``'s tiles (``CU_TENSOR_MAP_SWIZZLE_<mode>``)."""
    return f"{line_bytes(d)}B"


def desc_fn(d: int) -> str:
    """The descriptor function for head dim ``d``'s tiles: ``tr_desc`` (128B) or ``desc_lib``'s."""
    return desc_name(line_bytes(d))


def desc_lib(d: int) -> str:
    """A descriptor function for the 64B or 32B swizzle (the shared ``tr_desc`` is 128B's); none at 128B."""
    return swizzled_desc_lib(line_bytes(d))


def wgmma_ss(n: int, ptx: str) -> str:
    """``tr_wgmma_qk(d, da, db, acc)``: m64n{n}k16, A and B K-major from shared memory; ``acc`` 0 overwrites d."""
    regs = ",".join(f"%{i}" for i in range(n // 2))
    outs = ", ".join(f'"+f"(d[{i}])' for i in range(n // 2))
    k = n // 2
    return f"""static __device__ __forceinline__ void tr_wgmma_qk(float* d, uint64_t da, uint64_t db, int acc) {{
    asm volatile("{{\\n.reg .pred p;\\nsetp.ne.b32 p, %{k + 2}, 0;\\n"
                 "wgmma.mma_async.sync.aligned.m64n{n}k16.f32.{ptx}.{ptx} "
                 "{{{regs}}}, %{k}, %{k + 1}, p, 1, 1, 0, 0;\\n}}\\n"
                 : {outs}
                 : "l"(da), "l"(db), "r"(acc));
}}
"""


def wgmma_rs(n: int, ptx: str) -> str:
    """``tr_wgmma_pv(d, a, db)``: m64n{n}k16 accumulating, A (4 registers of packed 16-bit pairs) from
    registers, B from shared memory MN-major (imm-trans-b 1: V's rows are keys, head dim contiguous)."""
    k = n // 2
    regs = ",".join(f"%{i}" for i in range(k))
    outs = ", ".join(f'"+f"(d[{i}])' for i in range(k))
    return f"""static __device__ __forceinline__ void tr_wgmma_pv(float* d, const uint32_t* a, uint64_t db) {{
    asm volatile("{{\\n.reg .pred p;\\nsetp.ne.b32 p, %{k + 5}, 0;\\n"
                 "wgmma.mma_async.sync.aligned.m64n{n}k16.f32.{ptx}.{ptx} "
                 "{{{regs}}}, {{%{k},%{k + 1},%{k + 2},%{k + 3}}}, %{k + 4}, p, 1, 1, 1;\\n}}\\n"
                 : {outs}
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(1));
}}
"""


MISC = r"""static __device__ __forceinline__ float tr_ex2(float x) {  /* 2^x; -inf gives +0 */
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}
static __device__ __forceinline__ void tr_bar_sync(int id, int count) {
    asm volatile("bar.sync %0, %1;\n" :: "r"(id), "r"(count) : "memory");
}
static __device__ __forceinline__ void tr_bar_arrive(int id, int count) {
    asm volatile("bar.arrive %0, %1;\n" :: "r"(id), "r"(count) : "memory");
}
"""


def tile_steps(d: int, bk: int, bq: int) -> str:
    """One consumer's steps on a tile, for head dim ``d``, ``bk`` keys, a ``bq``-row Q tile: ``d / head_chunk``
    chunks of ``head_chunk / 16`` k16 steps each, lines of ``line_bytes`` (1024 B, 8 lines, a swizzle period)."""
    chunks, line, desc = d // head_chunk(d), line_bytes(d), desc_fn(d)
    w = CodeWriter()
    if line != 128:
        w.extend(desc_lib(d))
    w.extend(f"""/* S = Q K^T: {chunks} head-dim chunk(s) of {line // 32} k16 steps; qs/ks: this warpgroup's Q rows, the K stage. */
static __device__ __forceinline__ void tr_issue_qk(float* s, uint32_t qs, uint32_t ks) {{
    TR_WGMMA_FENCE();
    #pragma unroll
    for (int c = 0; c < {chunks}; ++c) {{
        #pragma unroll
        for (int kk = 0; kk < {line // 32}; ++kk)
            tr_wgmma_qk(s, {desc}(qs + c * {bq * line}u + kk * 32u, {bq * line}u, {8 * line}u),
                        {desc}(ks + c * {bk * line}u + kk * 32u, {bk * line}u, {8 * line}u), c | kk);
    }}
    TR_WGMMA_COMMIT();
}}
/* O += P V: {bk // 16} k16 steps down the V stage's key lines; head-dim chunks {bk * line} B apart (LBO). */
static __device__ __forceinline__ void tr_issue_pv(float* o, const uint32_t* p, uint32_t vs) {{
    TR_WGMMA_FENCE();
    #pragma unroll
    for (int t = 0; t < {bk // 16}; ++t)
        tr_wgmma_pv(o, p + 4 * t, {desc}(vs + t * {16 * line}u, {bk * line}u, {8 * line}u));
    TR_WGMMA_COMMIT();
}}
/* The element test of a partial tile: keys col0 + 8 j + 2 (lane % 4) (+1) of rows row0 (+8). Rows past
   seq_q (never stored) keep nothing, so the block mask is never read past its last row. */
static __device__ __forceinline__ void tr_mask(float* s, int row0, int col0, int seq_q, int seq_k, int diag,
                                               int win_left, int win_right, const unsigned char* __restrict__ bmask,
                                               int bm_cols, int bm_bq, int bm_bk) {{
    #pragma unroll
    for (int j = 0; j < {bk // 8}; ++j) {{
        #pragma unroll
        for (int x = 0; x < 4; ++x) {{
            const int row = row0 + 8 * (x >> 1);
            if (row >= seq_q || !tr_attn_keep(row, col0 + 8 * j + (x & 1), seq_k, diag, win_left, win_right,
                                              bmask, bm_cols, bm_bq, bm_bk))
                s[4 * j + x] = TR_NEG_INF;
        }}
    }}
}}
""")
    w.extend(row_steps(d, bk))
    return w.render()


# Conditional rescaling (FlashAttention-4's), at head dim 256 only: there O is 128 registers a thread and its
# rescale a large part of a tile's non-MMA work. An H100 (2026-11-26, docs/device-runs/h100-attention-conditional-rescale/):
# d256 B16 S512 0.795x -> 0.827x cuDNN, d256 B1 S16384 causal 0.93x -> 1.00x; at head dim 64 the test and the
# branch cost more than the 32 multiplies they save (B16 S512 0.82x -> 0.78x), at 128 it was even.
RESCALE_SLACK = 8  # log2 units: P <= 2^8, exact in fp32 and in range in bf16 and fp16
_SLACK_NOTE = f""" A row keeps
   its reference maximum while the tile's exceeds it by at most {RESCALE_SLACK} (log2 units): P is then at most
   2^{RESCALE_SLACK}, O and l stay on the same reference, so the result is the same, and corr is exactly 1: O's
   rescale is skipped (FlashAttention-4's conditional rescaling)."""


def _new_max(d: int) -> str:
    if d < 256:
        return "const float mnew = fmaxf(m[r], mx * scale_log2);"
    return (f"const float mtile = fmaxf(m[r], mx * scale_log2);\n"
            f"        const float mnew = mtile - m[r] <= {RESCALE_SLACK}.0f ? m[r] : mtile;  /* -inf - -inf is NaN: taken */")


def row_steps(d: int, bk: int) -> str:
    """The per-row steps: online softmax, accumulator pins, O's rescale, P's packing."""
    return f"""/* Online softmax in the log2 domain: new row maxima m (of s * scale_log2), s := 2^(s * scale_log2 - m),
   l := l * corr + this thread's row sums, corr = 2^(m_old - m) (0 while a row has kept nothing).{_SLACK_NOTE if d >= 256 else ""} */
static __device__ __forceinline__ void tr_softmax(float* s, float* m, float* l, float* corr, float scale_log2) {{
    #pragma unroll
    for (int r = 0; r < 2; ++r) {{
        float mx = TR_NEG_INF;
        #pragma unroll
        for (int j = 0; j < {bk // 8}; ++j) mx = fmaxf(mx, fmaxf(s[4 * j + 2 * r], s[4 * j + 2 * r + 1]));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        {_new_max(d)}
        const float muse = mnew == TR_NEG_INF ? 0.0f : mnew;
        corr[r] = tr_ex2(m[r] - muse);
        float sum = 0.0f;
        #pragma unroll
        for (int j = 0; j < {bk // 8}; ++j) {{
            #pragma unroll
            for (int x = 0; x < 2; ++x) {{
                const float e = tr_ex2(fmaf(s[4 * j + 2 * r + x], scale_log2, -muse));
                s[4 * j + 2 * r + x] = e;
                sum += e;
            }}
        }}
        l[r] = l[r] * corr[r] + sum;
        m[r] = mnew;
    }}
}}
/* After a wgmma wait: pin the accumulators so that no read of them is scheduled before the wait. */
static __device__ __forceinline__ void tr_pin_s(float* s) {{
    #pragma unroll
    for (int i = 0; i < {bk // 2}; ++i) asm volatile("" : "+f"(s[i]) :: "memory");
}}
static __device__ __forceinline__ void tr_pin_o(float* o) {{
    #pragma unroll
    for (int i = 0; i < {d // 2}; ++i) asm volatile("" : "+f"(o[i]) :: "memory");
}}
static __device__ __forceinline__ void tr_rescale(float* o, const float* corr) {{
{"    if (corr[0] == 1.0f && corr[1] == 1.0f) return;  /* both rows kept their maxima (tr_softmax) */" + chr(10)
  if d >= 256 else ""}    #pragma unroll
    for (int j = 0; j < {d // 8}; ++j) {{
        o[4 * j] *= corr[0]; o[4 * j + 1] *= corr[0]; o[4 * j + 2] *= corr[1]; o[4 * j + 3] *= corr[1];
    }}
}}
/* P as wgmma's register A operand: S's accumulator fragment is already P's A fragment (module docstring). */
static __device__ __forceinline__ void tr_pack_p(uint32_t* p, const float* s) {{
    #pragma unroll
    for (int i = 0; i < {bk // 4}; ++i) p[i] = tr_pack2(s[2 * i], s[2 * i + 1]);
}}"""
