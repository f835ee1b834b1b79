"""``tracea VERB attention``: its flags, its help line, the design documents' spellings of its name, and the
flags as text (``--window L,R``, ``--block-size BQ[,BK]``, ``--block-mask FILE|DENSITY``, ``--seq-lens
L1,L2,...``) turned into the
values ``kernels.Attention`` takes (op_options.py finds this module by its name). Every bad value is a
BadInputError naming its flag (one line, exit 2). Only Typer is imported here; NumPy only when a block mask
is asked for.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from .op_options import DTYPE, option
from .validate import FINITE, NON_NEGATIVE, SIZE

ORDER = 4  # its commands' place among the ops' in a verb's help
HELP = "Fused scaled dot-product attention (FlashAttention-style), softmax(Q K^T * scale + mask) V."
# The design documents' spellings, as the op's ``aliases`` has them (kernels.OP_ALIASES; spelt out here: the
# app loads no NumPy, so no kernels/; tests/cli/test_attention_cli.py checks the two agree). Hidden commands.
ALIASES = ("flash_attention_2", "flash-attention-2", "flash_attention")
PARAMS = [
    option("batch", int, 1, "--batch", help="Batch size.", domain=SIZE),
    option("heads", int, ..., "--heads", help="Query heads.", domain=SIZE),
    option("seq", int, ..., "--seq", help="Query length (seq_q).", domain=SIZE),
    option("head_dim", int, ..., "--head-dim", help="Head dimension: a multiple of 8 up to 256 (CUDA prefill "
                                                   "kernels: from 32; decode: multiples of 16; CPU: any).", domain=SIZE),
    option("kv_heads", int | None, None, "--kv-heads", help="Key/value heads, dividing --heads (grouped-query; "
           "default: --heads).", domain=SIZE),
    option("seq_k", int | None, None, "--seq-k", help="Key length (default: --seq); the causal diagonal is "
           "aligned bottom-right.", domain=SIZE),
    option("causal", bool, False, "--causal/--no-causal", help="Mask keys after each query's diagonal."),
    option("window", str | None, None, "--window", help="Sliding window L,R: keep keys from L before to R after "
           "the diagonal (or N for N,N)."),
    option("block_mask", str | None, None, "--block-mask", help="A .npy file of booleans (q blocks x k blocks), or "
           "a density in (0, 1]: a seeded random map that keeps every diagonal block."),
    option("block_size", str, "128", "--block-size", help="The block mask's tile: BQ or BQ,BK."),
    option("mask_seed", int, 0, "--mask-seed", help="Seed of a density --block-mask.", domain=NON_NEGATIVE),
    option("scale", float | None, None, "--scale", help="Softmax scale (default: 1/sqrt(head dim)).", domain=FINITE),
    option("seq_lens", str | None, None, "--seq-lens", help="Key lengths L1,L2,... one per batch entry (a serving "
           "batch: each entry's diagonal at its own length; --seq-k defaults to the longest)."),
    option("page_size", int | None, None, "--page-size", help="Paged KV cache: K and V in pages of N keys, dealt to "
           "the entries in a random order through a block table.", domain=SIZE),
    option("packed", bool, False, "--packed/--no-packed", help="Variable-length prefill: the --seq-lens entries' "
           "tokens packed one after another (cumulative offsets), each entry's queries and keys its length; --seq "
           "is the longest an entry may be."),
    DTYPE,
]

MASK_SEED = 0  # a density mask is the same map on every run (and machine) unless --mask-seed says otherwise


def _bad(message: str) -> Exception:
    from tracea.doctor.errors import BadInputError

    return BadInputError(message)


def _ints(flag: str, text: str, low: int, what: str) -> tuple[int, int]:
    """'A,B' (or 'A', meaning A,A) as two integers >= ``low``."""
    parts = [p.strip() for p in str(text).split(",")]
    try:
        if len(parts) not in (1, 2):
            raise ValueError
        values = [int(p) for p in parts]
    except ValueError:
        raise _bad(f"{flag}: expected {what}, got {text!r}") from None
    if any(v < low for v in values):
        raise _bad(f"{flag}: expected {what}, got {text!r}")
    return (values[0], values[-1])


def parse_window(text: str | None) -> tuple[int, int] | None:
    """``--window L,R``: keys kept from L before to R after the (bottom-right aligned) diagonal."""
    return None if text is None else _ints("--window", text, 0, "L,R (keys left and right of the diagonal, integers >= 0)")


def parse_block_size(text: str) -> tuple[int, int]:
    return _ints("--block-size", text, 1, "BQ or BQ,BK (the block mask's tile, positive integers)")


def _density(text: str) -> float | None:
    """The density when ``text`` reads as a number, else None (then it names a file)."""
    try:
        value = float(text)
    except ValueError:
        return None
    if not math.isfinite(value) or not 0 < value <= 1:
        raise _bad(f"--block-mask: a density must be in (0, 1], got {text!r}")
    return value


def diagonal_blocks(shape: Any) -> Any:
    """The (q block, k block) tiles that hold some row's own diagonal key (aligned bottom-right, as the
    op's mask is), as a boolean map: a mask that keeps them leaves no row without a key that causal or a
    window keeps."""
    import numpy as np

    bq, bk = shape.block_size
    rows = np.arange(shape.seq_q)
    diag = rows + (shape.seq_k - shape.seq_q)
    ok = (diag >= 0) & (diag < shape.seq_k)
    keep = np.zeros(shape.grid(), dtype=bool)
    keep[rows[ok] // bq, diag[ok] // bk] = True
    return keep


def random_block_mask(shape: Any, density: float, seed: int = MASK_SEED) -> Any:
    """A seeded map keeping ceil(density x tiles) tiles (at least the diagonal ones, see diagonal_blocks)."""
    import numpy as np

    keep = diagonal_blocks(shape)
    want = min(keep.size, max(math.ceil(density * keep.size), int(keep.sum())))
    free = np.flatnonzero(~keep.ravel())
    extra = np.random.default_rng(seed).choice(free, size=want - int(keep.sum()), replace=False)
    keep.ravel()[extra] = True
    return keep


def load_block_mask(text: str) -> Any:
    """A .npy file of booleans (q blocks x k blocks); the op checks its shape against the grid."""
    import numpy as np

    path = Path(text)
    if not path.is_file():
        raise _bad(f"--block-mask: {text!r} is neither a density in (0, 1] nor an existing .npy file")
    try:
        mask = np.load(path, allow_pickle=False)
    except (ValueError, OSError, EOFError) as exc:
        raise _bad(f"--block-mask: {text} is not a NumPy .npy array ({str(exc).splitlines()[0][:80]})") from None
    if not isinstance(mask, np.ndarray):  # a .npz archive of arrays: which one is the mask is not said
        mask.close()
        raise _bad(f"--block-mask: {text} is a .npz archive of several arrays; save the one mask with np.save")
    if mask.dtype != np.bool_:
        raise _bad(f"--block-mask: {text} holds {mask.dtype}, expected booleans (np.save(path, mask.astype(bool)))")
    return mask


def parse_seq_lens(text: str | None, batch: int) -> tuple[int, ...] | None:
    """``--seq-lens L1,L2,...``: one key length (an integer >= 0) per batch entry."""
    if text is None:
        return None
    try:
        lens = tuple(int(p.strip()) for p in str(text).split(","))
    except ValueError:
        raise _bad(f"--seq-lens: expected key lengths L1,L2,... (integers >= 0), got {text!r}") from None
    if any(n < 0 for n in lens):
        raise _bad(f"--seq-lens: expected key lengths L1,L2,... (integers >= 0), got {text!r}")
    if len(lens) != batch:
        raise _bad(f"--seq-lens: {len(lens)} lengths for --batch {batch}: give one per batch entry")
    if max(lens) == 0:
        raise _bad("--seq-lens: every entry is empty; give at least one key")
    return lens


def make_op(values: dict[str, Any]) -> Any:
    """The Attention IR value from the parsed flags (``--seq`` is seq_q; ``--seq-k`` defaults to it, or to the
    longest of ``--seq-lens``)."""
    from tracea.doctor.errors import BadInputError
    from tracea.kernels.ops.attention import Attention

    lens = parse_seq_lens(values.get("seq_lens"), values["batch"])
    packed = bool(values.get("packed"))
    if packed and lens is None:
        raise _bad("--packed: give the entries' lengths with --seq-lens L1,L2,...")
    seq_k = values["seq_k"] if values["seq_k"] is not None or lens is None else values["seq"] if packed else max(lens)
    args = {"batch": values["batch"], "heads": values["heads"], "seq_q": values["seq"], "head_dim": values["head_dim"],
            "seq_k": seq_k, "kv_heads": values["kv_heads"], "dtype": values["dtype"],
            "causal": values["causal"], "scale": values["scale"], "window": parse_window(values["window"]),
            "block_size": parse_block_size(values["block_size"]), "seq_lens": lens,
            "page_size": values.get("page_size"), "packed": packed}
    spec = values["block_mask"]
    if spec is None:
        return Attention(**args)
    shape = Attention(**args)  # the grid a mask must fill, and every other field checked first
    density = _density(spec)
    mask = random_block_mask(shape, density, values["mask_seed"]) if density is not None else load_block_mask(spec)
    try:
        return Attention(**args, block_mask=mask)
    except BadInputError as exc:
        raise _bad(f"--block-mask {spec}: {exc.args[0]}") from None
