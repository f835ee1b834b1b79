"""Attention's baselines: torch's scaled_dot_product_attention in the op's own dtype (its CPU kernel on the
host; on a device the fastest of cuDNN, flash and efficient, ``torch_sdpa``), with an explicit boolean mask
for windows and block masks; on a device a window or a block mask gets FlexAttention with a BlockMask instead
(``torch_flex``: it skips empty tiles as Tracea does), SDPA with the mask timed beside it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from tracea.kernels import DType

from . import Baseline, TorchOut, torch_or_none


def _torch_version(torch: Any) -> tuple[int, int]:
    major, minor = (torch.__version__.split("+")[0].split(".") + ["0"])[:2]
    return int(major), int("".join(c for c in minor if c.isdigit()) or 0)


def _sdpa_mask(op: Any, torch: Any, device: Any) -> tuple[Any, bool, str]:
    """(attn_mask, is_causal, how) as a user writes them for SDPA: is_causal for the square causal case,
    causal_lower_right when seq_q < seq_k (the op aligns the diagonal bottom-right), else an explicit
    boolean mask (True keeps) for windows, block masks and causal rows that keep no key."""
    if op.window is None and op.block_mask is None and op.causal:
        if op.seq_q == op.seq_k:
            return None, True, "causal"
        if op.seq_q < op.seq_k and _torch_version(torch) >= (2, 3):
            from torch.nn.attention.bias import causal_lower_right

            return causal_lower_right(op.seq_q, op.seq_k), False, "causal_lower_right"
    if op.window is None and op.block_mask is None and not op.causal:
        return None, False, "no mask"
    keep = torch.from_numpy(op.keep_mask(0, op.seq_q)).to(device)
    return keep[None, None], False, "explicit boolean mask"


def _repeat_kv(op: Any, t: dict[str, Any]) -> tuple[Any, Any]:
    """K/V repeated per q head (once, outside the timed call): grouped-query heads for a torch whose SDPA
    has no enable_gqa (before 2.5), or whose mask type does not pass it on."""
    group = op.heads // op.kv_heads
    return t["k"].repeat_interleave(group, dim=1), t["v"].repeat_interleave(group, dim=1)


def _cuda_ms(torch: Any, run: Callable[[], Any], repeats: int = 5) -> float:
    for _ in range(2):
        run()
    times = []
    for _ in range(repeats):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        run()
        e.record()
        e.synchronize()
        times.append(s.elapsed_time(e))
    return sorted(times)[len(times) // 2]


def torch_sdpa(op: Any, t: dict[str, Any], torch: Any,
               masked: tuple[Any, bool, str] | None = None) -> tuple[str, Callable[[], Any]]:
    """(name, call) of scaled_dot_product_attention on the device of ``t``'s q, k, v (the op's layout and
    dtype). On CUDA each of cuDNN, flash and efficient that accepts the case is timed briefly and the
    fastest kept; on a CPU torch picks its own kernel. Rows that keep no key come out 0, as the reference's.
    ``masked``: (attn_mask, is_causal, how) in place of the op's own (``serving``'s per-entry lengths)."""
    import warnings

    sdpa = torch.nn.functional.scaled_dot_product_attention
    device = t["q"].device
    mask, is_causal, how = masked or _sdpa_mask(op, torch, device)
    q, k, v = t["q"], t["k"], t["v"]
    extra = {"enable_gqa": True} if op.kv_heads != op.heads and _torch_version(torch) >= (2, 5) else {}
    if op.kv_heads != op.heads and not extra:
        k, v = _repeat_kv(op, t)
    empty = None  # (a CausalBias is a tensor subclass without values: only an explicit mask is read)
    if how.startswith("explicit boolean mask") and not bool(mask.any(dim=-1).all()):
        empty = ~mask.any(dim=-1, keepdim=True)  # SDPA gives NaN there; a user zeroes them

    def call() -> Any:
        y = sdpa(q, k, v, attn_mask=mask, is_causal=is_causal, scale=op.scale, **extra)
        return y.masked_fill_(empty, 0) if empty is not None else y

    try:  # a case this torch cannot run fails here, not inside the timed loop
        call()
    except (TypeError, RuntimeError):
        if not extra:
            raise
        k, v = _repeat_kv(op, t)  # enable_gqa not taken with this mask: the heads repeated instead
        extra = {}
        call()
    dtype = op.dtype.value
    if device.type != "cuda":
        return f"scaled_dot_product_attention (CPU, {dtype}, {how})", call
    from torch.nn.attention import SDPBackend, sdpa_kernel

    timed: list[tuple[float, str, Any]] = []
    for name in ("CUDNN_ATTENTION", "FLASH_ATTENTION", "EFFICIENT_ATTENTION"):
        backend = getattr(SDPBackend, name, None)
        if backend is None:
            continue
        try:
            with warnings.catch_warnings(), sdpa_kernel(backend):
                warnings.simplefilter("ignore")
                timed.append((_cuda_ms(torch, call), name.split("_")[0].lower(), backend))
        except RuntimeError:  # "No available kernel": this backend does not take this case
            continue
    if not timed:
        return f"scaled_dot_product_attention (torch's choice, {dtype}, {how})", call
    ms, label, best = min(timed, key=lambda x: x[0])

    def fastest() -> Any:
        with sdpa_kernel(best):
            return call()

    others = ", ".join(f"{n} {m:.3g} ms" for m, n, _ in sorted(timed) if n != label)
    return f"scaled_dot_product_attention ({label}, the fastest{f'; {others}' if others else ''}; {dtype}, {how})", fastest


FLEX_BLOCK = 128  # FlexAttention's BlockMask tile (its default; the block-sparse case uses 128 too)


def masked_op(op: Any) -> bool:
    """A window or a block mask: the ops whose fair baseline skips empty tiles (FlexAttention), not SDPA."""
    return op.window is not None or op.block_mask is not None


def flex_mask_mod(op: Any, torch: Any, device: Any) -> Callable[..., Any]:
    """The op's keep rule (kernels/ops/attention.py) as FlexAttention's mask_mod(b, h, q_idx, kv_idx): the band
    -left <= d <= right around the diagonal aligned bottom-right, d = kv_idx - q_idx - (seq_k - seq_q)
    (causal: right <= 0), and the block mask's tile at (q_idx // bq, kv_idx // bk) of the op's block_size."""
    far = op.seq_q + op.seq_k
    left, right = op.window if op.window is not None else (far, far)
    right = min(right, 0) if op.causal else right
    off = op.seq_k - op.seq_q
    bm = op.block_mask_array()
    tiles = None if bm is None else torch.from_numpy(bm).to(device)
    bq, bk = op.block_size

    def mask_mod(b: Any, h: Any, q_idx: Any, kv_idx: Any) -> Any:
        d = kv_idx - q_idx - off
        keep = (d >= -left) & (d <= right)
        return keep if tiles is None else keep & tiles[q_idx // bq, kv_idx // bk]

    return mask_mod


def flex_available(torch: Any) -> str | None:
    """Why this torch has no FlexAttention (None: it has)."""
    try:
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention  # noqa: F401
    except ImportError:
        return f"torch {torch.__version__} has no torch.nn.attention.flex_attention (2.5 or later has)"
    return None


def torch_flex(op: Any, t: dict[str, Any], torch: Any, compiled: bool = True) -> tuple[str, Callable[[], Any]]:
    """(name, call) of FlexAttention on the device of ``t``'s q, k, v: a BlockMask of FLEX_BLOCK tiles from
    ``flex_mask_mod`` (tiles it leaves empty are skipped), grouped-query heads through enable_gqa, compiled
    with torch.compile (``compiled=False``: the eager, unfused form, for checking the mask on a CPU). The
    first call (the compilation) happens here. A row that keeps no key comes out 0, as the reference's."""
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    q, k, v = t["q"], t["k"], t["v"]
    block = create_block_mask(flex_mask_mod(op, torch, q.device), B=None, H=None, Q_LEN=op.seq_q,
                              KV_LEN=op.seq_k, device=q.device, BLOCK_SIZE=FLEX_BLOCK)
    flex = torch.compile(flex_attention, dynamic=False) if compiled else flex_attention
    extra = {"enable_gqa": True} if op.kv_heads != op.heads else {}

    def call() -> Any:
        return flex(q, k, v, block_mask=block, scale=op.scale, **extra)

    call()
    how = "compiled" if compiled else "eager"
    return (f"flex_attention ({how}, BlockMask {FLEX_BLOCK}x{FLEX_BLOCK}, "
            f"{1 - block.sparsity() / 100:.0%} of tiles; {op.dtype.value})"), call


def host(op: Any, inputs: dict[str, np.ndarray]) -> Baseline:
    torch = torch_or_none()
    if torch is None:
        return Baseline("torch scaled_dot_product_attention", None, "torch is not installed (pip install 'tracea[torch]')")

    def tensor(x: np.ndarray) -> Any:
        x = np.ascontiguousarray(x)
        if op.dtype is DType.BF16 and x.dtype == np.uint16:
            return torch.from_numpy(x.view(np.int16)).view(torch.bfloat16)
        return torch.from_numpy(x)

    try:
        t = {k: tensor(x) for k, x in inputs.items()}
        name, call = (serving(op, t, torch) if op.serving else torch_sdpa(op, t, torch))[:2]
    except (RuntimeError, TypeError) as exc:  # an old torch without a needed argument or kernel
        return Baseline("torch scaled_dot_product_attention", None,
                        f"torch {torch.__version__} cannot run this case: {str(exc).splitlines()[0][:120]}")

    def run() -> Any:
        with torch.no_grad():
            y = call()
        return y.numpy() if op.dtype is DType.FP32 else TorchOut(y)

    return Baseline(f"torch {torch.__version__} {name}", run)


def serving(op: Any, t: dict[str, Any], torch: Any) -> tuple[Any, ...]:
    """(name, call) for an op with per-entry lengths or a paged pool: SDPA's fastest backend over the padded
    batch as a user without a paged kernel runs it: the pages gathered into contiguous (batch, kv_heads, seq_k,
    head_dim) K and V once, before the timed call, and the lengths (with the causal band or window, each entry's
    diagonal at its own length) as an explicit boolean mask over the padding."""
    import dataclasses

    if op.packed:
        return _packed(op, t, torch)
    k, v = t["k"], t["v"]
    if op.page_size:  # (pages, page, kv_heads, d)[table] -> (batch, cols * page, kv_heads, d) -> the op's layout
        table = t["block_table"].long().clamp(min=0)  # an unused entry (-1) gathers page 0, masked below
        k, v = ((x[table].reshape(op.batch, -1, op.kv_heads, op.head_dim)[:, :op.seq_k].permute(0, 2, 1, 3)
                 .contiguous()) for x in (k, v))
    plain = dataclasses.replace(op, seq_lens=None, page_size=None, pages=None)
    padded = {"q": t["q"], "k": k, "v": v}
    pages = f", the {op.page_size}-key pages gathered to contiguous K/V before timing" if op.page_size else ""
    if op.seq_lens is None:
        name, call = torch_sdpa(plain, padded, torch)
        return f"{name} [padded batch{pages}]", call
    dev = t["q"].device
    lens = torch.as_tensor(op.seq_lens, device=dev)[:, None, None, None]
    i = torch.arange(op.seq_q, device=dev)[None, None, :, None]
    j = torch.arange(op.seq_k, device=dev)[None, None, None, :]
    left, right = op._bounds()
    d = j - i - (lens - op.seq_q)
    keep = (j < lens) & (d >= -left) & (d <= right)
    name, call = torch_sdpa(plain, padded, torch, (keep, False, "explicit boolean mask of the entries' lengths"))
    return f"{name} [padded batch{pages}]", call


def _packed(op: Any, t: dict[str, Any], torch: Any) -> tuple[Any, ...]:
    """Packed entries as a user without a varlen kernel runs them: padded into one (batch, heads, seq, head_dim)
    batch before the timed call, SDPA's fastest backend over it, and the entries' rows taken back out inside the
    call (a gather). Causal entries (whose rows never reach their padding) and entries that all fill the capacity
    take no mask,
    others their lengths (and window) as an explicit boolean mask. Also timed: SDPA alone, its output left padded
    (benchmarks/gpu/attention_packed.py's baseline)."""
    import dataclasses

    dev, n = t["q"].device, op.seq_q
    lens = torch.as_tensor(op.key_lens, device=dev)
    starts = torch.as_tensor(np.concatenate([[0], np.cumsum(op.key_lens)[:-1]]), device=dev)
    pos = torch.arange(n, device=dev)
    valid = pos[None, :] < lens[:, None]  # (batch, seq): the padded slots that hold a token
    rows = (starts[:, None] + pos[None, :])[valid]  # each token's packed row, in (entry, position) order

    def padded(x: Any) -> Any:
        out = x.new_zeros((op.batch, n, *x.shape[1:]))
        out[valid] = x[rows]
        return out.permute(0, 2, 1, 3).contiguous()

    plain = dataclasses.replace(op, seq_lens=None, packed=False)
    batch = {"q": padded(t["q"]), "k": padded(t["k"]), "v": padded(t["v"])}
    if (op.causal and op.window is None) or set(op.key_lens) == {n}:  # no row reaches padding
        name, call = torch_sdpa(plain, batch, torch)
    else:
        i, j = pos[None, None, :, None], pos[None, None, None, :]
        left, right = op._bounds()
        keep = (j < lens[:, None, None, None]) & (j - i >= -left) & (j - i <= right)
        name, call = torch_sdpa(plain, batch, torch, (keep, False, "explicit boolean mask of the entries' lengths"))

    def unpadded() -> Any:
        return call().permute(0, 2, 1, 3)[valid]

    return (f"{name} [the packed entries padded to one batch before timing, gathered back in the call]", unpadded,
            ((f"{name} [the padded batch alone, output left padded]", call),))


def device(op: Any, t: dict[str, Any], torch: Any) -> tuple[Any, ...]:
    """Dense and causal attention: SDPA's fastest backend. A window or a block mask: FlexAttention with a
    BlockMask (compiled; it skips empty tiles, as Tracea does), and SDPA with the explicit boolean mask (what a
    user writes without it) timed in the same run beside it. Without FlexAttention here: SDPA, saying why.
    Lengths and pages: ``serving``."""
    if op.serving:
        return serving(op, t, torch)
    if not masked_op(op):
        return torch_sdpa(op, t, torch)
    sdpa_name, sdpa = torch_sdpa(op, t, torch)
    why = flex_available(torch)
    if why is None:
        try:
            name, flex = torch_flex(op, t, torch)
        except Exception as exc:  # noqa: BLE001 - a compiler or kernel failure: SDPA stays the baseline
            why = f"FlexAttention failed here: {type(exc).__name__}: {str(exc).splitlines()[0][:120]}"
        else:
            return name, flex, ((sdpa_name, sdpa),)
    return f"{sdpa_name} [no FlexAttention: {why}]", sdpa


