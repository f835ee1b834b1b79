"""The decode kernel's run-time slice rule (``ADAPT``) against its Python mirror, ``attention_decode.entry_slices``
(which the NumPy model walks): the rendered CUDA source's own lines (each entry's tile count, its key range, its
slice count) cut out, compiled by the host's C compiler in a harness that feeds them the lengths, and run. A GPU
test cannot tell the two apart (any count that a row tile's blocks agree on gives the right output), so this is
where a drift between them shows."""

from __future__ import annotations

import dataclasses
import re
import subprocess

import numpy as np
import pytest

from tracea.emitters import host_compiler
from tracea.emitters.cuda import attention_decode as D
from tracea.emitters.cuda.arch import parse_arch
from tracea.kernels.ops.attention import Attention

ARCH = dataclasses.replace(parse_arch("sm_90a"), sm_count=132)


def _cut(source: str, first: str, last: str | None, *, keep_last: bool = True) -> str:
    """The source's lines from the one holding ``first`` to the one holding ``last`` (or the first line only)."""
    lines = source.splitlines()
    i = next(n for n, x in enumerate(lines) if first in x)
    if last is None:
        return lines[i]
    j = next(n for n in range(i, len(lines)) if last in lines[n])
    return "\n".join(lines[i:j + 1] if keep_last else lines[i:j])


def _harness(source: str, op: Attention) -> str:
    """A C program printing the kernel's ``nsl`` for every entry of ``op`` (its lengths, windows and defines)."""
    defines = "\n".join(f"#define {k} {v}" for k, v in re.findall(r"^#define (BK|SPLITS|FULL|MIN_TILES|SLICE_TILES) "
                                                                   r"(\S+)$", source, re.M))
    sc = D.mask_scalars(op)
    tiles = _cut(source, "const int len = min(max(__ldg(seq_lens + i)", "tmax = max(tmax, n);")
    entry = _cut(source, "const int klen = min(max(__ldg(seq_lens + b)", None)
    keys = _cut(source, "const int lo = max(0, kdiag - win_left);", "const int t_lo = lo / BK")
    rule = _cut(source, "const int mine = t_hi - t_lo;", "if (split >= nsl) return;", keep_last=False)
    lens = ", ".join(str(int(x)) for x in op.seq_lens)
    return f"""#include <stdio.h>
static inline int min(int a, int b) {{ return a < b ? a : b; }}
static inline int max(int a, int b) {{ return a > b ? a : b; }}
#define __ldg(p) (*(p))
{defines}
int main(void) {{
    const int batch = {op.batch}, seq_q = {op.seq_q}, seq_k = {op.seq_k};
    const int win_left = {sc["win_left"]}, win_right = {sc["win_right"]};
    static const int seq_lens[] = {{{lens}}};
    int tsum = 0, tmax = 0;
    for (int i = 0; i < batch; ++i) {{
{tiles}
    }}
    const long long all = tsum;
    const int most = tmax;
    for (int b = 0; b < batch; ++b) {{
{entry}
{keys}
{rule}
        printf("%d\\n", nsl);
    }}
    return 0;
}}
"""


RNG = np.random.default_rng(35)
CASES = [  # (op, keys a warp of the schedule: 64- or 128-key tiles)
    (Attention(6, 8, 1, 64, seq_k=3000, kv_heads=2, dtype="bf16", seq_lens=(3000, 64, 0, 1500, 2999, 7),
               page_size=16), 1),
    (Attention(6, 8, 1, 64, seq_k=3000, kv_heads=2, dtype="bf16", seq_lens=(2900, 3000, 2950, 3000, 2990, 2980)), 1),
    # long entries past the launch's slices: the cap min(SPLITS, ...)
    (Attention(16, 32, 1, 128, seq_k=65536, kv_heads=8, dtype="bf16",
               seq_lens=(65536,) + tuple(int(x) for x in RNG.integers(0, 4096, 15)), page_size=16), 2),
    # several queries, causal, a window: key ranges that start past 0 (t_lo > 0)
    (Attention(5, 8, 4, 128, seq_k=20000, kv_heads=2, dtype="bf16", causal=True, window=(3000, 0),
               seq_lens=(20000, 3, 9000, 0, 15000)), 2),
    (Attention(32, 32, 1, 128, seq_k=4096, kv_heads=8, dtype="bf16",
               seq_lens=tuple(int(x) for x in RNG.integers(128, 4097, 32))), 2),
]


@pytest.mark.parametrize("case", range(len(CASES)))
def test_the_kernels_slice_rule_is_entry_slices(case, tmp_path):
    op, kw = CASES[case]
    s = D.AttentionDecodeSchedule(warps=4, kw=kw, stages=3)
    n, adapt = D.split_rule(op, s, ARCH.sm_count)
    assert adapt is not None, "lengths with an automatic split: the rule runs at run time"
    r, _ = D.render(op, s, ARCH)
    c = tmp_path / "slice_rule.c"
    c.write_text(_harness(r.source, op))
    cc = host_compiler.find_compiler(None)
    subprocess.run([cc.path, "-std=c11", "-O1", "-o", str(tmp_path / "rule"), str(c)], check=True,
                   capture_output=True, text=True)
    got = [int(x) for x in subprocess.run([str(tmp_path / "rule")], check=True, capture_output=True,
                                          text=True).stdout.split()]
    lens = np.array(op.seq_lens)
    want = [D.entry_slices(op, s.bk, lens, int(x), n, adapt) for x in op.seq_lens]
    assert got == want
    assert all(1 <= g <= n for g in got)


def test_the_rule_by_hand():
    """Hand-worked counts (64-key tiles, 1024 keys = 16 tiles a slice): an uneven batch's entries of 3000, 64, 0,
    1500, 2999 and 7 keys take 47 // 16 = 2, 1, 1, 24 // 16 = 1, 2 and 1 slices; about even lengths the capacity's
    plan, 2 slices of at least 4 tiles here."""
    op, _ = CASES[0]
    s = D.AttentionDecodeSchedule(warps=4, kw=1, stages=3)
    n, adapt = D.split_rule(op, s, ARCH.sm_count)
    assert adapt[2] == 16
    assert [D.entry_slices(op, s.bk, np.array(op.seq_lens), x, n, adapt) for x in op.seq_lens] == [2, 1, 1, 1, 2, 1]
    even, _ = CASES[1]
    n, adapt = D.split_rule(even, s, ARCH.sm_count)
    got = [D.entry_slices(even, s.bk, np.array(even.seq_lens), x, n, adapt) for x in even.seq_lens]
    assert got == [min(adapt[0], (x + 63) // 64 // 4) for x in even.seq_lens] and adapt[0] >= 1
