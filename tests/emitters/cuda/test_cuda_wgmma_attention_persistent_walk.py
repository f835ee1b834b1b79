"""The persistent Hopper attention kernel's walk without a GPU: ``walk_plan`` covers every (q tile, batch x
head) once and balances the blocks; and the kernel's own emitted body, compiled by g++ as a host program
(device calls stubbed to log lines, asm dropped), has its producer and consumer logs replayed against mbarrier
and named-barrier semantics: every (q tile, batch x head) stored once, the walk as specified, no deadlock,
every K/V stage and Q read only once loaded and overwritten only once read, the ring's stages and parities and
Q's parities agreeing across items (zero-tile items, tile counts that differ, GQA, windows, block masks). The
schedule: test_cuda_wgmma_attention_persistent_schedule.py; GPU runs: test_cuda_wgmma_attention_gpu.py."""

from __future__ import annotations

import dataclasses
import random
import re
import shutil
import subprocess

import numpy as np
import pytest

from tracea.emitters.cuda.attention_plan import tile_plan
from tracea.emitters.cuda.hopper import attention as A
from tracea.emitters.cuda.hopper.attention_schedule import AttnWgmmaSchedule, smem_plan
from tracea.kernels import Attention

PP = AttnWgmmaSchedule(stages=2, persistent=True)


HARNESS = r"""#include <cstdio>
#include <cstdint>
#include <cmath>
#include <vector>
#include <algorithm>
using std::min;
using std::max;
#define __device__
#define __forceinline__ inline
#define __restrict__
#define TR_NEG_INF (-INFINITY)
struct Dim { unsigned x; };
static Dim threadIdx, blockIdx, gridDim;
struct TrTensorMap { int which; };
static const TrTensorMap tmQ = {0}, tmK = {1}, tmV = {2};
static int g_log = 0;  /* 0: quiet; 1 + role (0 producer, 1 + cw consumer) */
#define LOG(...) do { if (g_log) { printf("%d ", g_log - 1); printf(__VA_ARGS__); printf("\n"); } } while (0)
static unsigned char tr_smem[1];
static uint32_t tr_smem_addr(const void*) { return 0; }
static void tr_prefetch_map(const TrTensorMap*) {}
static void __syncthreads() {}
static void tr_mbar_init(uint32_t bar, uint32_t count) { LOG("I %u %u", bar, count); }
static void tr_mbar_wait(uint32_t bar, uint32_t parity) { LOG("W %u %u", bar, parity); }
static void tr_mbar_arrive(uint32_t bar) { LOG("A %u", bar); }
static void tr_mbar_expect_tx(uint32_t bar, uint32_t bytes) { LOG("X %u %u", bar, bytes); }
static void tr_tma_load_3d(uint32_t dst, const TrTensorMap* map, int c0, int c1, int c2, uint32_t bar) {
    LOG("L %d %u %d %d %d %u", map->which, dst, c0, c1, c2, bar);
}
static void tr_bar_sync(int id, int count) { LOG("S %d %d", id, count); }
static void tr_bar_arrive(int id, int count) { LOG("B %d %d", id, count); }
static void tr_issue_qk(float*, uint32_t qs, uint32_t ks) { LOG("Q %u %u", qs, ks); }
static void tr_issue_pv(float*, const uint32_t*, uint32_t vs) { LOG("P %u", vs); }
#define TR_WGMMA_WAIT(n) LOG("G %d", n)
static void tr_mask(float*, int, int col0, int, int, int, int, int, const unsigned char*, int, int, int) {
    LOG("M %d", col0);
}
template <class... T> static void tr_softmax(T...) {}
template <class... T> static void tr_pin_s(T...) {}
template <class... T> static void tr_pin_o(T...) {}
template <class... T> static void tr_rescale(T...) {}
template <class... T> static void tr_pack_p(T...) {}
static uint32_t tr_pack2(float, float) { return 0; }
static float __shfl_xor_sync(unsigned, float v, int) { return v; }
#define __log2f log2f
struct LseRef { int* c; void operator=(float) { ++*c; } };
struct Lse { int* c; LseRef operator[](long long i) const { return {c + i}; } };
int main(void) {
    int batch, heads, kv_heads, seq_q, seq_k, grid, q_tiles, entries;
    if (scanf("%d %d %d %d %d %d %d %d", &batch, &heads, &kv_heads, &seq_q, &seq_k, &grid, &q_tiles,
              &entries) != 8) return 1;
    std::vector<int> ptr(q_tiles + 1), idx(entries + 1), wk;
    for (int& x : ptr) if (scanf("%d", &x) != 1) return 1;
    for (int j = 0; j < entries; ++j) if (scanf("%d", &idx[j]) != 1) return 1;
    for (int x; scanf("%d", &x) == 1;) wk.push_back(x);
    const int *tile_ptr = ptr.data(), *tile_idx = idx.data(), *walk = wk.data();
    std::vector<int> counts((size_t)batch * heads * seq_q);
    std::vector<uint16_t> out_v((size_t)batch * heads * seq_q * @D@);
    uint16_t* out = out_v.data();
    Lse lse = {counts.data()};
    const unsigned char* bmask = nullptr;
    const int diag = seq_k - seq_q, win_left = 0, win_right = 0, bm_cols = 1, bm_bq = 1, bm_bk = 1;
    const float scale_log2 = 1.0f;
    auto body = [&]() {
@BODY@
    };
    gridDim.x = grid;
    for (int b = 0; b < grid; ++b) {
        blockIdx.x = b;
        threadIdx.x = 0;
        g_log = 1;
        body();
        for (int cw = 0; cw < @CONSUMERS@; ++cw)
            for (int warp = 0; warp < 4; ++warp)
                for (int lane = 0; lane < 32; lane += 4) {
                    threadIdx.x = 128 * (1 + cw) + 32 * warp + lane;
                    g_log = warp == 0 && lane == 0 ? 2 + cw : 0;
                    body();
                }
        printf("end\n");
    }
    for (int c : counts) printf("%d ", c);
    printf("\n");
    (void)diag; (void)win_left; (void)win_right; (void)bm_cols; (void)bm_bq; (void)bm_bk; (void)scale_log2;
    (void)bmask; (void)out; (void)seq_k;
    return 0;
}
"""


def _host_body(src: str) -> str:
    """The kernel's body as host C++: the shared-memory declaration and the asm statements (setmaxnreg, the
    mbarrier-init fence) dropped; every device call is one of the harness's logging stubs."""
    body = src.split("const __grid_constant__ TrTensorMap tmV) {\n", 1)[1].rstrip()
    assert body.endswith("}")
    body = body[:-1].replace("extern __shared__ __align__(1024) unsigned char tr_smem[];", "")
    return re.sub(r'asm volatile\("[^"]*"[^;]*\);', ";", body)


def _run_harness(tmp_path, op, sched, grid):
    """(per-block logs: role -> list of (op, args)), per-row store counts) of the compiled body."""
    cxx = shutil.which("g++") or shutil.which("c++")
    if cxx is None:
        pytest.skip("no C++ compiler")
    src = A.render_source(op, sched)
    prog = (HARNESS.replace("@BODY@", _host_body(src))
            .replace("@D@", str(op.head_dim)).replace("@CONSUMERS@", str(sched.consumers)))
    cc, exe = tmp_path / f"{sched.name}.cc", tmp_path / sched.name
    cc.write_text(prog)
    subprocess.run([cxx, "-std=c++17", "-O1", "-w", "-o", str(exe), str(cc)], check=True)
    plan = tile_plan(op, sched.bq, sched.bk)
    walk = A.walk_plan(op, sched, grid)
    stdin = " ".join(str(x) for x in (op.batch, op.heads, op.kv_heads, op.seq_q, op.seq_k, grid, plan.q_tiles,
                                       len(plan.idx), *plan.ptr, *plan.idx, *walk))
    out = subprocess.run([str(exe)], input=stdin, capture_output=True, text=True, check=True).stdout
    *blocks, counts = out.split("end\n")
    logs = []
    for text in blocks:
        per: dict[int, list] = {}
        for line in text.splitlines():
            role, kind, *args = line.split()
            per.setdefault(int(role), []).append((kind, [int(a) for a in args]))
        logs.append(per)
    return plan, walk, logs, np.array(counts.split(), np.int64)


def block_items(walk: np.ndarray, q_tiles: int, b: int) -> list[tuple[int, int]]:
    """(q tile, batch x head) of block b's items, in its order, from ``walk_plan``'s array."""
    return [(int(x % q_tiles), int(x // q_tiles)) for x in walk[walk[1 + b]:walk[2 + b]]]


class Sim:
    """mbarriers (count, arrivals, tx bytes, completed phases) and named barriers (256 threads, 128 a
    consumer) as PTX defines them; TMA completes at once. Replays one block's logs in a random order of
    whichever role can go on, checking each read and each overwrite against the expected tile sequence."""

    def __init__(self, op, sched, plan, walk, logs, seed):
        self.sched, self.rng = sched, random.Random(seed)
        self.sm = smem_plan(sched, op.head_dim)
        self.logs, self.pos = logs, {r: 0 for r in logs}
        self.mbar: dict[int, list[int]] = {}  # addr -> [count, arrivals, tx, completed]
        self.named: dict[int, list] = {}  # id -> [threads, contributors, generation]
        self.waiting: dict[int, int] = {}  # role -> generation its bar.sync waits past
        group = op.heads // op.kv_heads
        self.items = [(qt, bh) for qt, bh in walk if plan.ptr[qt + 1] > plan.ptr[qt]]
        self.tiles = [(qt, bh, kt, partial, (bh // op.heads) * op.kv_heads + (bh % op.heads) // group)
                      for qt, bh in self.items for kt, partial in plan.entries(qt)]
        self.cum = np.cumsum([0] + [plan.ptr[qt + 1] - plan.ptr[qt] for qt, _ in self.items])
        self.content = {}  # ("K"|"V", stage) or ("Q", chunk) -> (version, c1, c2)
        self.loads = {"K": 0, "V": 0, "Q": 0}
        self.pending = {c: [] for c in range(1, 1 + sched.consumers)}  # role -> groups in flight, oldest first
        self.done = {c: {"Q": 0, "P": 0} for c in self.pending}
        self.issued = {c: {"Q": 0, "P": 0} for c in self.pending}

    def _complete(self, addr):
        b = self.mbar[addr]
        if b[1] == b[0] and b[2] == 0:
            b[1], b[3] = 0, b[3] + 1

    def _can(self, role, kind, args):
        if kind == "W":
            return (self.mbar[args[0]][3] & 1) != args[1]
        if kind == "S" and role in self.waiting:
            return self.named[args[0]][2] > self.waiting[role]
        return True

    def _named(self, role, nid):
        n = self.named.setdefault(nid, [0, [], 0])
        assert role not in n[1], f"role {role} reaches named barrier {nid} twice in one generation"
        n[0] += 128
        n[1].append(role)
        gen = n[2]
        if n[0] == 256:
            n[0], n[1], n[2] = 0, [], n[2] + 1
        return gen

    def _step(self, role, kind, args):
        """Run one op; False while a bar.sync still waits (its arrival made)."""
        s = self.sched
        if kind == "S":
            if role not in self.waiting:
                self.waiting[role] = self._named(role, args[0])
                if self.named[args[0]][2] <= self.waiting[role]:
                    return False
            del self.waiting[role]
        elif kind == "B":
            self._named(role, args[0])
        elif kind == "I":
            self.mbar[args[0]] = [args[1], 0, 0, 0]
        elif kind == "X":
            self.mbar[args[0]][1] += 1
            self.mbar[args[0]][2] += args[1]
            self._complete(args[0])
        elif kind == "A":
            self.mbar[args[0]][1] += 4  # every warp of the consumer warpgroup
            self._complete(args[0])
        elif kind == "L":
            self._load(*args)
        elif kind in "QP":
            self._read(role, kind, args)
        elif kind == "G":
            while len(self.pending[role]) > args[0]:
                done = self.pending[role].pop(0)
                self.done[role][done] += 1
        elif kind == "M":
            qt, bh, kt, partial, _ = self.tiles[self.issued[role]["Q"] - 1]
            assert partial and args[0] == kt * s.bk, "the element test of another tile"
        return True

    def _load(self, which, dst, c0, c1, c2, bar):
        s, sm = self.sched, self.sm
        rows = s.bq if which == 0 else s.bk
        name = "QKV"[which]
        if name == "Q":
            buf, chunk = divmod(dst, s.bq * self.op_d * 2)
            chunk //= s.bq * 128
            assert c0 == 64 * chunk
            if c0 == 0:
                j = self.loads["Q"]
                assert buf == j % s.q_buffers, "the producer's Q buffer sequence"
                if j >= s.q_buffers:  # every S wgmma of the buffer's last item completed, by every consumer
                    for c in self.pending:
                        assert self.done[c]["Q"] >= self.cum[j - s.q_buffers + 1], \
                            f"Q buffer {buf} overwritten before consumer {c} is done with it"
                self.loads["Q"] += 1
            j = self.loads["Q"] - 1
            qt, bh = self.items[j]
            assert (c1, c2) == (qt * s.bq, bh), "the producer loads another Q than the walk's"
            self.content[("Q", buf, chunk)] = (j, c1, c2)
        else:
            base = sm["k"] if name == "K" else sm["v"]
            stage, within = divmod(dst - base, sm["stage"])
            assert 0 <= stage < s.stages and within == c0 // 64 * s.bk * 128
            if c0 == 0:
                g = self.loads[name]
                assert stage == g % s.stages, "the producer's stage sequence"
                if g >= s.stages:  # the tile this overwrites was read, to completion, by every consumer
                    for c in self.pending:
                        assert self.done[c]["Q" if name == "K" else "P"] >= g - s.stages + 1, \
                            f"{name} stage {stage} overwritten before consumer {c} finished tile {g - s.stages}"
                self.loads[name] += 1
            g = self.loads[name] - 1
            _, _, kt, _, kvb = self.tiles[g]
            assert (c1, c2) == (kt * s.bk, kvb), "the producer loads another tile than the plan's"
            self.content[(name, stage, c0)] = (g, c1, c2)
        self.mbar[bar][2] -= 64 * rows * 2
        self._complete(bar)

    def _read(self, role, kind, args):
        s, sm = self.sched, self.sm
        g = self.issued[role][kind]
        assert g < len(self.tiles), "more tiles than the plan's"
        self.issued[role][kind] += 1
        qt, bh, kt, _, kvb = self.tiles[g]
        base, addr = (sm["k"], args[1]) if kind == "Q" else (sm["v"], args[0])
        stage, within = divmod(addr - base, sm["stage"])
        assert stage == g % s.stages and within == 0, f"consumer {role} reads stage {stage} for tile {g}"
        for c0 in range(0, self.op_d, 64):
            assert self.content.get(("K" if kind == "Q" else "V", stage, c0)) == (g, kt * s.bk, kvb), \
                f"consumer {role} reads stage {stage} before tile {g} is there"
        if kind == "Q":
            item = int(np.searchsorted(self.cum, g, side="right")) - 1
            buf = item % s.q_buffers
            assert args[0] == buf * s.bq * self.op_d * 2 + (role - 1) * 64 * 128, "another buffer's or consumer's Q"
            for c in range(self.op_d // 64):
                assert self.content.get(("Q", buf, c)) == (item, qt * s.bq, bh), f"consumer {role}: Q of another item"
        self.pending[role].append(kind)

    def run(self, op_d):
        self.op_d = op_d
        prod = self.logs.get(0, [])
        while self.pos.get(0, 0) < len(prod) and prod[self.pos[0]][0] == "I":  # the barriers' init, before __syncthreads
            self._step(0, *prod[self.pos[0]])
            self.pos[0] += 1
        while True:
            live = [r for r in self.logs if self.pos[r] < len(self.logs[r])]
            if not live:
                break
            ready = [r for r in live if self._can(r, *self.logs[r][self.pos[r]])]
            assert ready, "deadlock: " + ", ".join(f"role {r} at {self.logs[r][self.pos[r]]}" for r in live)
            r = self.rng.choice(ready)
            if self._step(r, *self.logs[r][self.pos[r]]):
                self.pos[r] += 1
        for role in self.pending:
            assert self.issued[role] == {"Q": len(self.tiles), "P": len(self.tiles)}
            assert self.done[role] == self.issued[role] and not self.pending[role]
        assert self.loads == {"K": len(self.tiles), "V": len(self.tiles), "Q": len(self.items)}
        assert all(b[1] == 0 and b[2] == 0 for b in self.mbar.values()), "a barrier phase left half done"
        assert all(n[0] == 0 for n in self.named.values()), "a named barrier left half arrived"


def _mask(rows: int, cols: int, seed: int) -> tuple[str, ...]:
    rng = np.random.default_rng(seed)
    m = rng.random((rows, cols)) < 0.4
    m[0, :] = False  # a q block that keeps nothing: items with zero tiles
    return tuple("".join("1" if b else "0" for b in r) for r in m)


WALK_CASES = [
    (Attention(2, 3, 700, 64, dtype="bf16", causal=True), 7),  # 6 q tiles of 1..6 tiles, 36 items, 7 blocks
    (Attention(1, 8, 300, 64, kv_heads=2, seq_k=900, dtype="bf16", window=(200, 30)), 5),  # GQA, window
    (Attention(1, 2, 777, 64, seq_k=200, dtype="bf16", causal=True), 4),  # early q tiles keep nothing
    (Attention(1, 3, 700, 128, seq_k=650, dtype="bf16", block_size=(96, 80), block_mask=_mask(8, 9, 1)), 6),
    (Attention(2, 4, 17, 64, dtype="fp16"), 132),  # one item a block (grid = items = 8)
    (Attention(3, 5, 300, 256, dtype="bf16", causal=True), 11),  # hg 3 of 15 heads: a short last group
    (Attention(1, 6, 1000, 64, dtype="bf16", window=(0, 0)), 3),  # one tile an item: the producer runs ahead
]
SCHEDS = [AttnWgmmaSchedule(stages=2, persistent=True), AttnWgmmaSchedule(stages=3, intra=False, persistent=True),
          AttnWgmmaSchedule(stages=2, pingpong=False, persistent=True),
          AttnWgmmaSchedule(stages=2, persistent=True, q_buffers=2),
          AttnWgmmaSchedule(stages=2, intra=False, persistent=True, q_buffers=2),
          AttnWgmmaSchedule(bk=64, stages=3, consumers=1, pingpong=False, persistent=True)]


@pytest.mark.parametrize("sched", SCHEDS, ids=lambda s: s.name)
@pytest.mark.parametrize("case", WALK_CASES, ids=lambda c: c[0].signature[:40] + f"-G{c[1]}")
def test_compiled_walk_and_barriers(tmp_path, case, sched):
    op, sms = case
    if op.head_dim == 256:
        sched = dataclasses.replace(sched, bk=64, stages=2, q_buffers=1)
    grid = A.grid_blocks(op, sched, sms)
    plan, walk, logs, counts = _run_harness(tmp_path, op, sched, grid)
    # every (batch x head, row) stored exactly once, over the whole grid
    assert counts.shape == (op.batch * op.heads * op.seq_q,) and np.all(counts == 1)
    bhs = op.batch * op.heads
    assert walk[0] == grid == len(logs) and walk[1] == grid + 2 and walk[grid + 1] == len(walk)
    seen = np.zeros((plan.q_tiles, bhs), np.int64)
    for b, per in enumerate(logs):
        items = block_items(walk, plan.q_tiles, b)
        for qt, bh in items:
            seen[qt, bh] += 1
        # the producer's Q loads are the block's items with tiles, in order
        q_loads = [(a[3], a[4]) for k, a in per.get(0, []) if k == "L" and a[0] == 0 and a[2] == 0]
        assert q_loads == [(qt * sched.bq, bh) for qt, bh in items if plan.ptr[qt + 1] > plan.ptr[qt]]
        for seed in range(3):
            Sim(op, sched, plan, items, per, seed).run(op.head_dim)
    assert np.all(seen == 1)


@pytest.mark.parametrize("op", [Attention(16, 32, 512, 64, dtype="bf16", causal=True),
                                Attention(1, 32, 16384, 128, dtype="bf16", causal=True),
                                Attention(4, 32, 2048, 128, kv_heads=8, dtype="bf16", causal=True),
                                Attention(2, 4, 700, 64, dtype="bf16", block_size=(96, 80),
                                          block_mask=_mask(8, 9, 3))],
                         ids=lambda op: op.signature[:50])
@pytest.mark.parametrize("sms", [132, 114, 7])
def test_walk_plan_covers_every_item_once_and_balances(op, sms):
    """Every (q tile, batch x head) once; the slowest block's work (a tile 1, an item 1 more) exceeds the
    average by less than the longest item (list scheduling's bound); the first items of the blocks (the
    first wave) span at most two groups of heads."""
    sched = dataclasses.replace(PP, stages=4)
    plan = tile_plan(op, sched.bq, sched.bk)
    grid = A.grid_blocks(op, sched, sms)
    walk = A.walk_plan(op, sched, grid)
    bhs, cost = op.batch * op.heads, np.diff(plan.ptr) + 1
    per = [block_items(walk, plan.q_tiles, b) for b in range(grid)]
    flat = sorted(x for items in per for x in items)
    assert flat == sorted((qt, bh) for qt in range(plan.q_tiles) for bh in range(bhs))
    loads = np.array([sum(cost[qt] for qt, _ in items) for items in per])
    assert loads.max() - loads.mean() < cost.max()
    first = {bh for items in per for _, bh in items[:1]}
    assert len(first) <= 2 * max(1, grid // plan.q_tiles)  # the first wave: one group of heads and a bit
