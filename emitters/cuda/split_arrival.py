"""Split-K's arrival at a tile, written once for the CUDA kernels that split K over blocks and meet in a
global workspace: the SIMT core's K split (``simt_split.py``), its gemv form (``simt_gemv.py``) and the
16-bit gemv core (``gemv.py``).

Each block parks its partial sums in the workspace (the kernel's own layout and stores), then arrives:
fence (its parked stores visible device-wide), barrier (every thread's), and one thread, ``leader``, takes a
ticket on its tile's counter with ``atomicAdd``. The block whose ticket is ``parts - 1`` arrived last: every
other block returns; the last one fences again (the others' parts visible to its reads) and sums every part
in part order, with its kernel's loop (deterministic: the same bits whichever block arrives last), before
the epilogue. The last block also puts the counter back to 0 for the next launch: the leader, at its ticket
(before the sum) or, where the kernel resets once it is done, after the sum.

The flag is the block's ``__shared__ int tr_last``; the counters (zeroed once with the workspace, each launch
leaves them at 0) are ``tr_count``, words of ``word``: ``uint32_t`` (the SIMT kernels) or ``int`` (gemv.py).
Fences and barriers are the renderer's (``r.fence``, ``r.barrier``).
"""

from __future__ import annotations

from .render import CudaRenderer

SUFFIX = {"uint32_t": "u", "int": ""}  # a counter word's type -> its literals' suffix


def last_block(r: CudaRenderer, counters: str, tile: str, parts: int | str, leader: str, parked: list[str],
               summed: list[str], *, word: str = "uint32_t", reset_after_sum: bool = False,
               indent: str = "") -> list[str]:
    """The flag and the counters' base (``counters``: a pointer expression into the workspace, cast to
    ``word*`` as written), ``parked`` (the kernel's stores of its part), the arrival at ``tr_count[tile]``
    (``parts`` blocks a tile: a count, or an int expression every block of the tile computes alike;
    ``leader`` the condition of the thread that takes the ticket), ``summed`` (the
    kernel's sum of the parts in part order: run by the last block alone) and the counter's reset, at the
    ticket or (``reset_after_sum``) by the leader after ``summed``. ``indent`` prefixes this writer's lines,
    not the kernel's (``parked``, ``summed``)."""
    u = SUFFIX[word]
    reset = f"tr_count[{tile}] = 0{u};  /* at rest for the next launch */"
    ticket = [f"if ({leader}) {{",
              f"  tr_last = atomicAdd(tr_count + {tile}, 1{u}) == " + (
                  f"{parts - 1}{u};" if isinstance(parts, int) else f"({word})({parts}) - 1{u};"),
              *([] if reset_after_sum else [f"  if (tr_last) {reset}"]),
              "}"]
    head = ["__shared__ int tr_last;", f"{word}* tr_count = ({word}*){counters};"]
    arrive = [r.fence, r.barrier, *ticket, r.barrier, "if (!tr_last) return;", r.fence]
    after = [f"if ({leader}) {reset}"] if reset_after_sum else []
    return [*(indent + line for line in head), *parked, *(indent + line for line in arrive), *summed,
            *(indent + line for line in after)]
