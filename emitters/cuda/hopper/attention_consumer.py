"""The consumer warpgroups' work on one item of the Hopper attention kernel (``attention.py``): for each
k tile of the item's plan entries, S = Q K^T by wgmma, the mask and online softmax, P V, the ring's stage
waited on and released, the ping-pong turns between the consumers; ``loop_intra`` issues tile j + 1's S
with tile j's P V, ``loop_plain`` one tile at a time. Then ``store_rows``: O /= l and lse, 64 rows a
consumer. Both kernel forms (one block an item, persistent) open the consumers and call these.
"""

from __future__ import annotations

from typing import Any

from .attention_schedule import AttnWgmmaSchedule, smem_plan


def _pp(sched: AttnWgmmaSchedule, what: str, last: str = "false") -> str:
    """Ping-pong turn: wait for this warpgroup's turn (named barrier 1 + cw) / pass it to the next consumer in
    the round (the last consumer passes none after its last turn: consumer 0 has no turn left to wait for)."""
    if not sched.pingpong:
        return ""
    if what == "sync":
        return "tr_bar_sync(1 + cw, 256);"
    if sched.consumers == 2:
        return f"if (!(cw == 1 && ({last}))) tr_bar_arrive(2 - cw, 256);"
    n = sched.consumers
    return f"if (!(cw == {n - 1} && ({last}))) tr_bar_arrive(1 + (cw + 1) % {n}, 256);"


def pp_open(sched: AttnWgmmaSchedule) -> str:
    """The round's opening: the last consumer passes the first turn to consumer 0."""
    if not sched.pingpong:
        return ""
    return f"if (cw == {sched.consumers - 1}) tr_bar_arrive(1, 256);  /* consumer 0 issues first */"


def _softmax_step(sched: AttnWgmmaSchedule, e: str) -> str:
    """Mask (partial entries only) and softmax the S of plan entry ``e``."""
    return f"""{{
                const int ent = tile_idx[e0 + {e}];
                if (ent & 1) tr_mask(s, row0, (ent >> 1) * {sched.bk} + 2 * (lane % 4), seq_q, seq_k, diag, win_left,
                                     win_right, bmask, bm_cols, bm_bq, bm_bk);
            }}
            tr_softmax(s, m, l, corr, scale_log2);"""


def _waits(sched: AttnWgmmaSchedule, d: int) -> dict[str, Any]:
    S, sm = sched.stages, smem_plan(sched, d)
    return {
        "k": lambda st, ph: f"tr_mbar_wait(bars + 8u * {st}, {ph});",
        "v": lambda st, ph: f"tr_mbar_wait(bars + 8u * ({S} + {st}), {ph});",
        "ks": lambda st: f"kbase + {st} * {sm['stage']}u",
        "vs": lambda st: f"vbase + {st} * {sm['stage']}u",
        "release": lambda st: f"if (lane == 0) tr_mbar_arrive(bars + 8u * ({2 * S} + {st}));",
        "release_v": lambda st: f"if (lane == 0) tr_mbar_arrive(bars + 8u * ({3 * S} + {st}));",
    }


def _ring_start(persistent: bool) -> str:
    """The consumer's ring position: from stage 0 per block, or (persistent) carried across items."""
    return "" if persistent else """            int st = 0;
            uint32_t ph = 0;
"""


def _q_release(persistent: bool, cond: str) -> str:
    """Persistent: after the item's last S wgmma completed, Q's shared memory is released to the producer."""
    return f"\n            if ({cond} && lane == 0) tr_mbar_arrive(qfree);" if persistent else ""


def loop_intra(sched: AttnWgmmaSchedule, d: int) -> str:
    """Tile j + 1's S issued with tile j's P V; its softmax while P V runs; O rescaled after P V is done."""
    S, x, pe = sched.stages, _waits(sched, d), sched.persistent
    return f"""{_ring_start(pe)}            {x['k']('st', 'ph')}
            {_pp(sched, 'sync')}
            tr_issue_qk(s, qs, {x['ks']('st')});
            {_pp(sched, 'arrive')}
            TR_WGMMA_WAIT(0);
            tr_pin_s(s);{_q_release(pe, 'n == 1')}
            {_softmax_step(sched, '0')}
            tr_pack_p(p, s);
            for (int e = 1; e < n; ++e) {{
                const int sp = st;
                const uint32_t pp = ph;
                if (++st == {S}) {{ st = 0; ph ^= 1u; }}
                {x['k']('st', 'ph')}
                {_pp(sched, 'sync')}
                tr_issue_qk(s, qs, {x['ks']('st')});
                {x['v']('sp', 'pp')}
                tr_issue_pv(o, p, {x['vs']('sp')});
                {_pp(sched, 'arrive')}
                TR_WGMMA_WAIT(1);
                tr_pin_s(s);{_q_release(pe, 'e == n - 1').replace(chr(10), chr(10) + '    ')}
                {_softmax_step(sched, 'e')}
                TR_WGMMA_WAIT(0);
                tr_pin_o(o);
                {x['release']('sp')}
                tr_rescale(o, corr);
                tr_pack_p(p, s);
            }}
            {x['v']('st', 'ph')}
            {_pp(sched, 'sync')}
            tr_issue_pv(o, p, {x['vs']('st')});
            {_pp(sched, 'arrive', 'true')}
            TR_WGMMA_WAIT(0);
            tr_pin_o(o);
            {x['release']('st')}{_ring_next(sched) if pe else ""}
        }}"""


def _ring_next(sched: AttnWgmmaSchedule) -> str:
    """Persistent, intra: past the item's last stage, so that the next item starts on the next one."""
    return f"\n            if (++st == {sched.stages}) {{ st = 0; ph ^= 1u; }}"


def loop_plain(sched: AttnWgmmaSchedule, d: int) -> str:
    """S, softmax, rescale, P V, one tile at a time (the overlap comes from the other warpgroup)."""
    S, x, pe = sched.stages, _waits(sched, d), sched.persistent
    k_free = f"\n                {x['release']('st')}  /* K read: the producer may load the next K */" if sched.split_kv else ""
    return f"""{_ring_start(pe)}            for (int e = 0; e < n; ++e) {{
                {x['k']('st', 'ph')}
                {_pp(sched, 'sync')}
                tr_issue_qk(s, qs, {x['ks']('st')});
                {_pp(sched, 'arrive')}
                TR_WGMMA_WAIT(0);
                tr_pin_s(s);{_q_release(pe, 'e == n - 1').replace(chr(10), chr(10) + '    ')}{k_free}
                {_softmax_step(sched, 'e')}
                tr_rescale(o, corr);
                tr_pack_p(p, s);
                {x['v']('st', 'ph')}
                {_pp(sched, 'sync')}
                tr_issue_pv(o, p, {x['vs']('st')});
                {_pp(sched, 'arrive', 'e == n - 1')}
                TR_WGMMA_WAIT(0);
                tr_pin_o(o);
                {x['release_v' if sched.split_kv else 'release']('st')}
                if (++st == {S}) {{ st = 0; ph ^= 1u; }}
            }}
        }}"""


PLAIN_ADDRESSING = {"out": "((long long)bh * seq_q + row)", "lse": "(long long)bh * seq_q + row"}


def store_rows(d: int, pack: str, at: dict[str, str] | None = None) -> str:
    """The consumer's store of its 64 rows (``attention._store`` without the closing braces): ``d`` the op's
    head dim (O's columns past it, a padded head dim's, are not stored); ``at``: the element offsets of a row of
    O (times the head dim) and of its lse (the packed form's differ)."""
    at = at or PLAIN_ADDRESSING
    return f"""        #pragma unroll
        for (int r = 0; r < 2; ++r) {{
            float t = l[r];
            t += __shfl_xor_sync(0xffffffffu, t, 1);
            t += __shfl_xor_sync(0xffffffffu, t, 2);
            const int row = row0 + 8 * r;
            if (row >= seq_q) continue;
            const float inv = t > 0.0f ? 1.0f / t : 0.0f;
            const long long base = {at['out']} * {d};
            #pragma unroll
            for (int j = 0; j < {d // 8}; ++j)
                *(uint32_t*)(out + base + 8 * j + 2 * (lane % 4)) =
                    {pack}(o[4 * j + 2 * r] * inv, o[4 * j + 2 * r + 1] * inv);
            if (lane % 4 == 0)
                lse[{at['lse']}] = t > 0.0f ? (m[r] + __log2f(t)) * 0.6931471805599453f : TR_NEG_INF;
        }}"""
