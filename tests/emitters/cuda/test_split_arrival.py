"""Split-K's arrival at a tile is written once (emitters/cuda/split_arrival.py): the SIMT core's K split
(simt_split.py), its gemv form (simt_gemv.py) and the 16-bit gemv core (gemv.py) take it from there. A
substituted writer shows in all three renders (and leaves no ticket of their own), each kernel keeps the
order of its fences, barriers, ticket, reset and early return, and no other module spells a ticket anew."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from tracea.emitters import cuda
from tracea.emitters.cuda import gemv, simt, split_arrival
from tracea.emitters.cuda.arch import parse_arch
from tracea.emitters.cuda.render import CudaRenderer
from tracea.kernels import Gemm

ROOT = Path(__file__).resolve().parents[3]
TICKET = re.compile(r"atomicAdd\([^;]*\)\s*==")
# Modules that take a ticket on a counter of their own protocol, not this one: the split softmax's parts of a
# row meet at a grid-wide barrier (a generation counter each part waits on, no early return), and the
# Hopper split-K walk's fix-up runs on a pair of semaphores a tile with PTX release/acquire and a run-time
# split count; an FP8 C's amax is met by warps, not blocks, none waiting or leaving early (fp8_out.amax_arrival,
# the wgmma tiles' and the TMA gemv's).
OTHER_PROTOCOLS = {"emitters/cuda/softmax_split.py", "emitters/cuda/hopper/splitk.py", "emitters/cuda/hopper/fp8_out.py"}
KERNELS = ("emitters/cuda/simt_split.py", "emitters/cuda/simt_gemv.py", "emitters/cuda/gemv.py")


class Marked(CudaRenderer):
    barrier, fence = "TR_BARRIER();", "TR_FENCE();"


def _renders(r: CudaRenderer) -> dict[str, str]:
    """A split-K render of each of the three kernels (gemv on sm_80: the workspace, not a cluster)."""
    sm90, f32 = parse_arch("sm_90a"), Gemm(100, 300, 4096)
    tiled = dataclasses.replace(cuda.hero_schedule(f32, "cuda-simt.gemm", None), split_k=3)
    small = Gemm(8, 260, 300, epilogue=("residual", "scale"), alpha=0.5)
    bf16 = Gemm(4, 4096, 4096, "bf16", epilogue="bias")
    return {"simt": simt.render_simt(f32, tiled, sm90, r).source,
            "simt gemv": simt.render_simt(small, simt.gemv_schedule(small, 132, 3), sm90, r).source,
            "gemv": gemv.render_gemv(bf16, gemv.GemvSchedule(warps=8, splits=3, unroll=2), parse_arch("sm_80"),
                                     r).source}


def test_the_three_kernels_take_the_arrival_from_the_shared_writer(monkeypatch):
    """With the writer substituted, every render carries its marker around the kernel's own stores and sum,
    and none keeps a ticket, a flag or a counter of its own."""
    calls = []

    def last_block(r, counters, tile, parts, leader, parked, summed, *, word="uint32_t", reset_after_sum=False,
                   indent=""):
        calls.append((counters, tile, parts, leader, word, reset_after_sum))
        return ["/* TR_ARRIVAL */", *parked, "/* TR_ARRIVED */", *summed, "/* TR_SUMMED */"]

    monkeypatch.setattr(split_arrival, "last_block", last_block)
    for name, text in _renders(CudaRenderer()).items():
        assert text.count("/* TR_ARRIVAL */") == 1 and text.count("/* TR_SUMMED */") == 1, name
        assert "__ldcg(" in text.split("/* TR_ARRIVED */")[1].split("/* TR_SUMMED */")[0], name  # its sum
        assert "atomicAdd" not in text and "tr_last" not in text and "tr_count" not in text, name
    assert calls == [("W", "pid", 3, "tid == 0", "uint32_t", False), ("W", "pid", 3, "tid == 0", "uint32_t", False),
                     ("(ws + (size_t)3 * M * N)", "blockIdx.x", 3, "threadIdx.x == 0", "int", True)]


EVENTS = re.compile(r"TR_FENCE\(\);|TR_BARRIER\(\);|atomicAdd\(|tr_count\[[^]]+\] = 0u?;|return;|__ldcg\(")
NAMES = {"TR_FENCE();": "fence", "TR_BARRIER();": "barrier", "atomicAdd(": "ticket", "return;": "return",
         "__ldcg(": "sum"}
# The orders the kernels had before the writer was shared: the SIMT kernels reset the counter at the ticket,
# gemv.py once the last block has stored the sum.
ORDERS = {"simt": ["fence", "barrier", "ticket", "reset", "barrier", "return", "fence", "sum"],
          "simt gemv": ["fence", "barrier", "ticket", "reset", "barrier", "return", "fence", "sum"],
          "gemv": ["fence", "barrier", "ticket", "barrier", "return", "fence", "sum", "reset"]}


@pytest.mark.parametrize("kernel", ORDERS)
def test_each_kernel_keeps_its_order_of_fences_barriers_ticket_reset_and_return(kernel):
    text = _renders(Marked())[kernel]
    split = text[text.index("__shared__ int tr_last;"):]
    events = [NAMES.get(m, "reset") for m in EVENTS.findall(split)]
    events = [e for i, e in enumerate(events) if not (e == "sum" and events[i - 1] == "sum")]  # one sum loop
    assert events == ORDERS[kernel]
    assert text.count("atomicAdd(") == 1 and text.count("__shared__ int tr_last;") == 1


def test_the_writer_puts_the_reset_at_the_ticket_or_after_the_sum():
    r = Marked()
    at_ticket = split_arrival.last_block(r, "W", "pid", 4, "tid == 0", ["PARK;"], ["SUM;"])
    assert at_ticket == ["__shared__ int tr_last;", "uint32_t* tr_count = (uint32_t*)W;", "PARK;",
                         "TR_FENCE();", "TR_BARRIER();", "if (tid == 0) {",
                         "  tr_last = atomicAdd(tr_count + pid, 1u) == 3u;",
                         "  if (tr_last) tr_count[pid] = 0u;  /* at rest for the next launch */", "}",
                         "TR_BARRIER();", "if (!tr_last) return;", "TR_FENCE();", "SUM;"]
    after = split_arrival.last_block(r, "(ws + 8)", "blockIdx.x", 2, "threadIdx.x == 0", [], ["  SUM;"],
                                     word="int", reset_after_sum=True, indent="  ")
    assert after == ["  __shared__ int tr_last;", "  int* tr_count = (int*)(ws + 8);",
                     "  TR_FENCE();", "  TR_BARRIER();", "  if (threadIdx.x == 0) {",
                     "    tr_last = atomicAdd(tr_count + blockIdx.x, 1) == 1;", "  }",
                     "  TR_BARRIER();", "  if (!tr_last) return;", "  TR_FENCE();", "  SUM;",
                     "  if (threadIdx.x == 0) tr_count[blockIdx.x] = 0;  /* at rest for the next launch */"]


def test_no_other_module_spells_a_ticket():
    """The three kernels spell no atomicAdd at all; across emitters/, a ticket (``atomicAdd(..) ==``) is
    taken only by the shared writer and the modules of OTHER_PROTOCOLS (a new one fails here)."""
    for path in KERNELS:
        assert "atomicAdd" not in (ROOT / path).read_text(), path
    takers = {p.relative_to(ROOT).as_posix() for p in sorted((ROOT / "emitters").rglob("*.py"))
              if TICKET.search(p.read_text())}
    assert takers == {"emitters/cuda/split_arrival.py", *OTHER_PROTOCOLS}
