"""The decode attention core (issue 33, sm_80+): flash-decoding for short query lengths, an alternate core of
both CUDA attention families. Its kernel is attention_decode_kernel.py; this module holds its schedule, its
split plan, hero, search space, checks, render, its host object and a NumPy model of the kernel's indexing
(slices, warps' keys, the merge) that CI checks against the float64 reference without a GPU.

The planner prefers it where the rows that share a kv head (``heads / kv_heads`` x ``seq_q``) fill at most
``PREFER_ROWS`` rows and ``seq_q`` is at most ``PREFER_QUERIES``: there the prefill kernels give a block a
q tile of mostly padding and too few blocks to read K and V at the device's bandwidth.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import numpy as np

from tracea.doctor.errors import BadInputError, LaunchError, UnsupportedError

from . import attention_decode_tma as tma
from .attention_decode_kernel import kernel_source
from .attention_plan import PARAMS, mask_scalars, read_schedule, schedule_json
from .attention_runtime import AttentionKernel
from .render import CudaRenderer, Rendered
from .schedule import tile_features

SCHEMA_VERSION = 1
CORE = "attention-decode"
WARPS = (2, 4, 8)
KWS = (1, 2, 4)  # k16 key groups a warp takes of each K/V tile
STAGES = (2, 3, 4, 6)
MAX_SPLITS = 64
# after attention's PARAMS: the kernel's workspace, then the serving inputs (pointer 0 where the op has none)
SERVING_PARAMS = ("workspace", "block_table", "seq_lens", "table_cols", "pages")
MIN_TILES = 4  # K/V tiles a slice keeps at least, when the split is automatic (its ring's ramp is paid once)
PREFER_ROWS = 64
PREFER_QUERIES = 16
DTYPES = ("bf16", "fp16")


@dataclass(frozen=True)
class AttentionDecodeSchedule:
    """``warps`` a block, each taking ``kw`` x 16 keys of every K/V tile (the tile: ``16 kw warps`` keys),
    ``stages`` tiles in the ring, ``split`` key slices a row tile (0: enough to fill the GPU); on sm_90
    ``bulk`` fills the ring by TMA on mbarriers instead of every thread's ``cp.async``
    (attention_decode_tma.py); ``ctas``: the blocks an SM the automatic split fills (2: twice the slices, two
    blocks resident an SM, for loads whose latency one block's ring does not cover: pages smaller than a tile)."""

    core: str = CORE
    warps: int = 4
    kw: int = 1
    stages: int = 3
    split: int = 0
    bulk: bool = False
    ctas: int = 1

    @property
    def bk(self) -> int:
        return 16 * self.kw * self.warps

    @property
    def threads(self) -> int:
        return 32 * self.warps

    @property
    def block_threads(self) -> int:
        return self.threads

    @property
    def bm(self) -> int:  # the tuner's block-tile features (build.tuning_features)
        return 16

    @property
    def bn(self) -> int:
        return self.bk

    @property
    def name(self) -> str:
        return (f"w{self.warps}_k{self.bk}_s{self.stages}" + (f"_sp{self.split}" if self.split else "")
                + ("_tma" if self.bulk else "") + (f"_b{self.ctas}" if self.ctas != 1 else ""))

    def smem_bytes(self, head_dim: int) -> int:
        """Q's 16 padded rows and ``stages`` K and V tiles; after the walk the ring's memory holds the warps'
        partial O, maxima and sums (fp32), whichever is larger. TMA loads: the ring's rows unpadded, 1024 bytes
        of slack to align it (the swizzle's period), and a barrier a slot."""
        row = 2 * head_dim + 16
        partials = self.warps * 16 * (head_dim + 2) * 4
        if self.bulk:
            return 1024 + max(2 * self.stages * self.bk * head_dim * 2, partials) + 16 * row + 8 * self.stages
        return 16 * row + max(2 * self.stages * self.bk * row, partials)

    def validate(self, op: Any = None, arch: Any = None) -> None:
        if self.core != CORE:
            raise BadInputError(f"core: an AttentionDecodeSchedule runs the {CORE} core, not {self.core!r}")
        for name, allowed in (("warps", WARPS), ("kw", KWS), ("stages", STAGES)):
            value = getattr(self, name)
            if isinstance(value, bool) or value not in allowed:
                raise BadInputError(f"{name}: expected one of {', '.join(map(str, allowed))}, got {value!r}")
        if isinstance(self.split, bool) or not isinstance(self.split, int) or not 0 <= self.split <= MAX_SPLITS:
            raise BadInputError(f"split: expected 0 (fill the GPU) or 1..{MAX_SPLITS} key slices, got {self.split!r}")
        if not isinstance(self.bulk, bool):
            raise BadInputError(f"bulk: expected true or false, got {self.bulk!r}")
        if type(self.ctas) is not int or self.ctas not in (1, 2):
            raise BadInputError(f"ctas: expected 1 or 2 blocks an SM, got {self.ctas!r}")
        if self.ctas == 2 and self.split:
            raise BadInputError("ctas: 2 blocks an SM is a target of the automatic split, not of a fixed one", "split: 0")
        if arch is not None and self.bulk and arch.cc < (9, 0):
            raise BadInputError(f"bulk: TMA loads need sm_90, not {arch.name}")
        if op is None:
            return
        if getattr(op, "kind", None) != "attention":
            raise BadInputError(f"core: {CORE} computes attention, not {getattr(op, 'kind', op)}")
        if op.head_dim % 16 or not 16 <= op.head_dim <= 256:
            raise UnsupportedError(f"head_dim: the decode kernel takes multiples of 16 up to 256, not {op.head_dim}",
                                   "use --backend cpu")
        if op.block_mask is not None:
            raise UnsupportedError(f"{CORE}: a block mask runs on the prefill kernels", "drop --core attention-decode")
        if self.kw > max(1, 256 // op.head_dim):
            raise BadInputError(f"kw: head dim {op.head_dim} takes at most {max(1, 256 // op.head_dim)} x 16 keys a "
                                f"warp (S, P and O beside Q spill), got {self.kw}")
        why = tma.refusal(op, self.bk) if self.bulk else None
        if why:
            raise BadInputError(f"bulk: {why}")
        if self.ctas == 2 and (self.warps > 4 or op.head_dim > 128):
            raise BadInputError(f"ctas: 2 blocks an SM take at most 4 warps and head dim 128 (the kernel's launch "
                                f"bounds), not {self.warps} warps at head dim {op.head_dim}", "ctas: 1")
        smem = self.smem_bytes(op.head_dim)
        if arch is not None and smem > arch.smem_optin:
            raise BadInputError(f"stages: {smem} B of shared memory exceeds {arch.name}'s {arch.smem_optin} B a block")
        # an SM holds the opt-in limit plus the 1 KiB each block reserves (sm_80: 164 KiB, sm_90: 228 KiB)
        if arch is not None and self.ctas * (smem + 1024) > arch.smem_optin + 1024:
            raise BadInputError(f"ctas: {self.ctas} blocks of {smem} B of shared memory do not fit one {arch.name} "
                                "SM", "fewer stages or ctas: 1")

    def to_json(self) -> dict[str, Any]:
        """The fields; ``ctas`` only when not 1, so that earlier schedules' JSON stays as it was."""
        d = schedule_json(self, SCHEMA_VERSION)
        if self.ctas == 1:
            del d["ctas"]
        return d

    @staticmethod
    def from_json(d: dict[str, Any]) -> AttentionDecodeSchedule:
        return read_schedule(AttentionDecodeSchedule, d, SCHEMA_VERSION)

    def features(self, op: Any) -> dict[str, float]:
        """Warps and shared memory at ``op``'s head dim over the 16 x bk tile, and the key slices."""
        return {**tile_features(op, self.warps, self.smem_bytes(op.head_dim), self.bm, self.bn),
                "split": float(self.split), "ctas": float(self.ctas) if type(self.ctas) is int else 1.0}


# ------------------------------------------------------------------------------------------ where and how

def rows(op: Any) -> int:
    """The query rows that share one kv head: the group's heads times the queries."""
    return op.heads // op.kv_heads * op.seq_q


def row_tiles(op: Any) -> int:
    """The 16-row tiles those rows take."""
    return -(-rows(op) // 16)


def prefers(op: Any) -> bool:
    """Short queries over a kv head (decode, speculative decode, a chunk of GQA rows), no block mask; and
    every short-query op in a serving form (lengths, pages), which no prefill core computes."""
    return applies(op) and (rows(op) <= PREFER_ROWS or op.serving)


def applies(op: Any) -> bool:
    """Where it may run and is searched: any attention it can compute with at most 16 queries (not packed
    entries, whose queries are their keys: the Hopper prefill kernel takes those at any length)."""
    return (getattr(op, "kind", None) == "attention" and op.seq_q <= PREFER_QUERIES and op.block_mask is None
            and op.head_dim % 16 == 0 and op.head_dim <= 256 and not getattr(op, "packed", False))


def key_tiles(op: Any, bk: int, klen: int | None = None) -> tuple[int, int]:
    """[first, last) K/V tiles some row keeps (the kernel's ``t_lo``, ``t_hi``) in an entry of ``klen`` keys
    (default seq_k, the capacity the split plan is made for)."""
    sc = mask_scalars(op)
    klen = op.seq_k if klen is None else klen
    diag = klen - op.seq_q
    lo = max(0, diag - sc["win_left"])
    hi = min(klen, op.seq_q + diag + sc["win_right"])
    return lo // bk, (-(-hi // bk) if hi > lo else lo // bk)


def splits(op: Any, s: AttentionDecodeSchedule, sm_count: int) -> int:
    """Key slices a row tile: the schedule's, or (0) the fewest that give the SMs ``ctas`` blocks each as evenly
    as any count does (blocks over whole waves within 5 % of the best), each slice keeping ``MIN_TILES`` tiles
    at least; never more than the tiles. One block a SM, not as many as fit, unless the schedule says 2: on an
    H200 (bf16, d128) b8 h32/8 k8192 ran in 0.086 ms with 2 slices (128 blocks) against 0.090 with 4, b1 k131072
    in 0.153 ms with 16 against 0.177 with 33 (docs/device-runs/h200-attention-decode/)."""
    t0, t1 = key_tiles(op, s.bk)
    tiles = max(1, t1 - t0)
    if s.split:
        return min(s.split, tiles)
    pairs, slots = op.batch * op.kv_heads * row_tiles(op), sm_count * s.ctas
    most = max(1, min(tiles // MIN_TILES, MAX_SPLITS))
    fill = {n: pairs * n / (-(-pairs * n // slots) * slots) for n in range(1, most + 1)}
    best = max(fill.values())
    return min(n for n, f in fill.items() if f >= best - 0.05)


RAGGED_WAVES = 4  # blocks an SM that the grid of an uneven launch makes room for, twice over
RAGGED_SLICE_KEYS = 1024  # keys a slice of an uneven launch keeps at least


def split_rule(op: Any, s: AttentionDecodeSchedule, sm_count: int) -> tuple[int, tuple[int, int, int] | None]:
    """(slices the launch has room for, the run-time rule's constants or None). Lengths that come with the
    call (``seq_lens``, automatic split): the kernel reads every entry's length and picks each entry's slices
    itself (attention_decode_kernel.py, ``ADAPT``): about even lengths take the capacity's plan (``splits``);
    uneven ones each take the launch's slices (room for ``RAGGED_WAVES`` blocks a SM, twice over), as many as
    keep ``RAGGED_SLICE_KEYS`` keys (and ``MIN_TILES`` tiles) a slice, so the longest entries do not run alone
    and the short ones are not cut into slivers. On an H200 (bf16, d128 unless said, grids of 6-10 slices; medians
    of 15, docs/device-runs/h200-ragged-decode-slices/), against slices in proportion to each entry's length (the
    rule before) and the launch's slices of 4 tiles at least: 16 entries of 1k-16k keys 0.1793 ms (0.1781, 0.1822),
    paged by 16 0.1873 (0.1971, 0.1879); 32 entries of 128-4096 keys 0.0869 (0.0896, 0.0985), paged by 16
    0.0910 (0.0958, 0.0995); head dim 64 (MHA) 0.1753 (0.1828, 0.1757), paged 0.1813 (0.1928, 0.1815); one
    32k entry and 15 of 1k paged by 16 0.0858 (0.0846, 0.0832)."""
    auto = splits(op, s, sm_count)
    if op.seq_lens is None or s.split:
        return auto, None
    t0, t1 = key_tiles(op, s.bk)
    pairs = op.batch * op.kv_heads * row_tiles(op)
    most = max(1, min((t1 - t0) // MIN_TILES, MAX_SPLITS))
    n = min(most, max(auto, 2 * -(-RAGGED_WAVES * sm_count // pairs)))
    return (n, (auto, MIN_TILES, max(MIN_TILES, RAGGED_SLICE_KEYS // s.bk))) if n > 1 else (auto, None)


def entry_slices(op: Any, bk: int, lens: np.ndarray, klen: int, n: int, adapt: tuple[int, int, int] | None) -> int:
    """The slices an entry of ``klen`` keys takes in a launch over ``lens`` (the kernel's ``nsl``, in the same
    integer arithmetic)."""
    t0, t1 = key_tiles(op, bk, klen)
    if adapt is None:
        return n
    full, min_tiles, slice_tiles = adapt
    tiles = [max(0, b - a) for a, b in (key_tiles(op, bk, int(x)) for x in lens)]
    total, most = sum(tiles), max(tiles)
    mine = t1 - t0
    if 5 * total >= 4 * most * op.batch:
        return min(full, max(1, mine // min_tiles))
    return min(n, max(1, mine // slice_tiles))


def hero_schedule(op: Any, host: Any) -> AttentionDecodeSchedule:
    """On sm_90 (not later chips: not measured there) at head dims 64 and 128 (where TMA boxes tile the pages, if
    any): TMA loads, 8 warps of 16 keys (128-key tiles) and 3 stages at d128, 4 warps of 16 keys and 4 stages at
    d64. On an H200 against the
    ``cp.async`` hero: b8 h32/8 k8192 d128 0.0813 ms against 0.0856, b1 k131072 0.1481 against 0.1560, b8 k65536
    d64 0.2618 against 0.2931, paged by 16 0.0867 against 0.0918; each within 2 % of the best of the space on
    its row (docs/device-runs/h200-decode-tma/decode_space_tma.txt). A paged cache with per-entry lengths whose
    pages are under 128 keys takes 4 warps of 64-key tiles at d128 too: on an H200, 16 entries of 1k-16k keys
    paged by 16, 0.1865 ms against the wide tile's 0.2044, both with the run-time slice rule; paged by 64 0.1817
    against 0.1815 (docs/device-runs/h200-ragged-decode-slices/decode_space_ragged_paged_tiles.txt).

    Elsewhere: 4 warps of 16 keys (64-key tiles), 3 stages (2 over head dim 128, whose rows are twice as long);
    on an H200 the space's best was within 2 % of this on four decode rows
    (docs/device-runs/h200-attention-decode/decode_space.txt). A paged cache over head dim 64 up to 128 without
    per-entry lengths takes 32 keys a warp (128-key tiles: twice the pages' lookups in flight a tile): on an
    H200 0.95-0.98x its contiguous twin on the d128 rows against 0.93-0.95x with 64-key tiles; not at d64 (0.94x
    against 0.96x) nor with lengths, whose slices per entry are then fewer tiles (the ragged row 0.93-0.94x
    against 0.96x; docs/device-runs/h200-paged-decode/paged_table_k128_tiles.txt and paged_table_k128_hero.txt).
    The split gives each SM a block."""
    cc, smem_optin = _target(host)
    if op.head_dim in (64, 128) and cc == (9, 0):  # measured on sm_90 only
        wide = op.head_dim == 128 and not (op.seq_lens is not None and 0 < (op.page_size or 0) < 128)
        tma_hero = AttentionDecodeSchedule(warps=8 if wide else 4, kw=1, stages=3 if op.head_dim == 128 else 4,
                                           bulk=True)
        if tma.refusal(op, tma_hero.bk) is None and tma_hero.smem_bytes(op.head_dim) <= smem_optin:
            return tma_hero
    plain = AttentionDecodeSchedule(warps=4, kw=1, stages=3 if op.head_dim <= 128 else 2)
    if not (getattr(op, "page_size", None) and op.seq_lens is None and 64 < op.head_dim <= 128):
        return plain
    wide = dataclasses.replace(plain, kw=2)  # 213 KB at d128: more than sm_80's opt-in; the target's own, not assumed
    return wide if wide.smem_bytes(op.head_dim) <= smem_optin else plain


def _target(host: Any) -> tuple[tuple[int, int], int]:
    """(compute capability, shared memory a block may opt into) of the host's (or the planned target's) GPU;
    ((0, 0), 0) where none is described (rendering without one: the plain hero)."""
    from .arch import arch_of_host

    try:
        arch = arch_of_host(host)
    except UnsupportedError:
        return (0, 0), 0
    return arch.cc, arch.smem_optin


def search_space(op: Any, hero: Any, arch: Any) -> list[AttentionDecodeSchedule]:
    """Warps, keys a warp and stages (validate drops what does not fit), each with the automatic split, then
    the hero with fixed splits around it, TMA loads on sm_90, and each automatic form of at most 4 warps aiming at
    two blocks an SM."""
    out = [AttentionDecodeSchedule(warps=w, kw=kw, stages=st) for w in WARPS for kw in KWS for st in STAGES]
    auto = splits(op, hero, getattr(arch, "sm_count", 0) or 132)
    out += [dataclasses.replace(hero, split=n) for n in sorted({max(1, auto // 2), auto * 2}) if n <= MAX_SPLITS]
    if arch is not None and arch.cc >= (9, 0):  # TMA loads over every warps x keys x stages
        out += [dataclasses.replace(s, bulk=True) for s in out if not s.split]
    out += [dataclasses.replace(s, ctas=2) for s in out if not s.split and s.warps <= 4]  # validate drops the rest
    return list(dict.fromkeys(out))


def check(op: Any, v: Any, schedule: Any, arch: Any) -> None:
    if not isinstance(schedule, AttentionDecodeSchedule):
        raise BadInputError(f"schedule: {v.id} runs AttentionDecodeSchedule here, got {type(schedule).__name__}")
    if op.dtype.value not in DTYPES:
        raise UnsupportedError(f"{v.id} computes bf16 or fp16, not {op.dtype.value}", "use --backend cpu for fp32")
    if arch.cc < (8, 0):
        raise UnsupportedError(f"{CORE} needs sm_80 or later (mma.sync m16n8k16, cp.async), not {arch.name}")
    if op.seq_q > PREFER_QUERIES:
        raise UnsupportedError(f"{CORE} runs at most {PREFER_QUERIES} queries, not {op.seq_q}",
                               "the prefill cores take longer query sequences")
    schedule.validate(op, arch)


def workspace(op: Any, n_splits: int) -> tuple[int, int]:
    """(counter floats, workspace bytes): a counter a row tile (padded to 64), then each slice's (max, sum)
    and unnormalised O for its 16 rows."""
    pairs = op.batch * op.kv_heads * row_tiles(op)
    counters = -(-pairs // 64) * 64
    if n_splits == 1:
        return counters, 0
    return counters, 4 * (counters + pairs * n_splits * 16 * (op.head_dim + 2))


def render(op: Any, s: AttentionDecodeSchedule, arch: Any) -> tuple[Rendered, dict[str, float | int]]:
    """The kernel source, its launch (slices x row tiles, kv heads, batch) and its scalars."""
    dt = op.dtype.value
    n, adapt = split_rule(op, s, getattr(arch, "sm_count", 0) or 132)
    counters, ws_bytes = workspace(op, n)
    masked = op.causal or op.window is not None
    ragged, page = op.seq_lens is not None, op.page_size or 0
    name = f"tracea_attn_decode_{dt}_d{op.head_dim}_{s.name}_x{n}" + ("a" if adapt else "") + ("_m" if masked else "") + \
        ("_r" if ragged else "") + (f"_p{page}" if page else "")
    r = CudaRenderer()
    lib = ""
    if s.bulk:  # mbarriers and the 3-d TMA load
        from .hopper.ptx import DEVICE_LIB, GATHER_LIB
        lib = DEVICE_LIB + GATHER_LIB
    source = r.prelude() + r.tensor_prelude(dt) + lib + kernel_source(
        r, name, dt, head_dim=op.head_dim, bk=s.bk, warps=s.warps, stages=s.stages, splits=n, masked=masked,
        counters=counters, ragged=ragged, page=page, adapt=adapt, bulk=s.bulk)
    grid = (n * row_tiles(op), op.kv_heads, op.batch)
    smem = s.smem_bytes(op.head_dim)
    meta = {"name": name, "core": CORE, "tile": {"bq": 16, "bk": s.bk, "stages": s.stages, "warps": s.warps},
            "key_slices": {"splits": n, "rows": rows(op), "row_tiles": row_tiles(op),
                           **({"at_run_time": dict(zip(("full", "min_tiles", "slice_tiles"), adapt, strict=True))}
                              if adapt else {})},
            "fragments": {"dtype_in": dt, "dtype_acc": "fp32", "mma": "m16n8k16"},
            "loads": "TMA (bulk)" if s.bulk else "cp.async",
            "launch": {"grid": list(grid), "block": [s.threads, 1, 1], "dynamic_smem": smem},
            "workspace_bytes": ws_bytes, "epilogue": []}
    if ragged or page:
        meta["serving"] = {"seq_lens": ragged, "page_size": page}
    scalars = {**mask_scalars(op), "table_cols": op.table_cols, "pages": op.pages or 1}
    params = PARAMS + SERVING_PARAMS + (tma.MAP_PARAMS if s.bulk else ())
    return Rendered(name, name, source, params, grid, (s.threads, 1, 1), smem, meta), scalars


class DecodeKernel(AttentionKernel):
    """The decode kernel's host object: attention's (``AttentionKernel``), with its workspace (parked slices and
    the row tiles' counters, zeroed once; each launch leaves them at zero) and no tile plan: it walks the kept
    keys itself. With TMA loads (``bulk``) each upload makes the K and V maps over the buffers of that launch
    (the caller's, in a ``launch_ptrs`` preparation, where the recorded launch keeps them)."""

    _maps: list[Any] | None = None

    def upload_plan(self, op: Any, rendered: Any) -> int:
        return op.tile_counts((16, int(rendered.metadata["tile"]["bk"])))[1] // (op.batch * op.heads)

    def upload(self, inputs: dict[str, np.ndarray]) -> None:
        """Attention's, the lengths and the block table checked first (kernels/ops/attention.py): a length past
        the capacity or a used table entry outside the pool stops here, before any launch."""
        if self.op.serving and not self._borrowing:
            self.op.check_serving_inputs(inputs)
        super().upload(inputs)
        if self.rendered.params[-len(tma.MAP_PARAMS):] == tma.MAP_PARAMS:  # TMA loads: maps over this launch's K, V
            self._maps = tma.maps(self.op, int(self.rendered.metadata["tile"]["bk"]), int(self._dbuf["k"].ptr),
                                  int(self._dbuf["v"].ptr))

    def _args(self, params: Any = None) -> list[Any]:
        """Attention's, then (TMA loads) the K and V maps by value, made by the last upload."""
        n = len(tma.MAP_PARAMS)
        if params is not None or self.rendered.params[-n:] != tma.MAP_PARAMS:
            return super()._args(params)
        if self._maps is None:
            raise LaunchError(f"{self.rendered.name}: launch before upload (no tensor maps yet)")
        return super()._args(self.rendered.params[:-n]) + list(self._maps)


def decode_kernel(op: Any, artifact: Any, rendered: Any, scalars: dict[str, Any]) -> DecodeKernel:
    return DecodeKernel(op, artifact, rendered, scalars)


# ------------------------------------------------------------------------------- the kernel's indexing, in NumPy

def model(op: Any, s: AttentionDecodeSchedule, n_splits: int, inputs: dict[str, np.ndarray],
          adapt: tuple[int, int, int] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(O, lse) in float64 computed the way the kernel walks: rows packed per kv head in 16-row tiles, key
    tiles [t_lo, t_hi) cut into ``n_splits`` slices of ``per`` tiles, each tile's keys dealt to the warps
    (16 kw keys each), every warp's online softmax, the warps combined in order, then the slices (the
    block's element test: past seq_k, outside the band). ``adapt``: the run-time slice rule's constants
    (``split_rule``): each entry's slices then come from every entry's length (``entry_slices``). Checks the
    index arithmetic, not rounding."""
    from tracea.kernels.dtypes import to_float64

    q = to_float64(inputs["q"], op.dtype)
    nrows = rows(op)
    lens = op.check_serving_inputs(inputs)[0] if op.serving else np.full(op.batch, op.seq_k)
    out = np.zeros(op.output_shape())
    lse = np.full(op.lse_shape(), -np.inf)
    qr = q.reshape(op.batch, op.kv_heads, nrows, op.head_dim)  # row r: head r // seq_q of the group, query r % seq_q
    for b in range(op.batch):
        klen = int(lens[b])  # the entry's keys: its own diagonal, its own tiles (the kernel's klen, kdiag)
        k, v = _kernel_rows(op, inputs, b, klen)
        sc = {**mask_scalars(op), "diag": klen - op.seq_q}
        t_lo, t_hi = key_tiles(op, s.bk, klen)
        nsl = entry_slices(op, s.bk, lens, klen, n_splits, adapt)
        per = -(-(t_hi - t_lo) // nsl) if t_hi > t_lo else 0
        for h in range(op.kv_heads):
            qi = np.arange(nrows) % op.seq_q
            parts = []
            for sp in range(nsl):
                e0 = min(t_lo + sp * per, t_hi)
                e1 = min(e0 + per, t_hi)
                warps = [_walk(qr[b, h], k[h], v[h], qi, [(e * s.bk + w * 16 * s.kw, 16 * s.kw)
                                                          for e in range(e0, e1)], sc, klen, op.scale)
                         for w in range(s.warps)]
                parts.append(_combine(warps, op.scale))
            m, l_, o = _combine(parts, op.scale)
            good = l_ > 0
            res = np.where(good[:, None], o / np.where(good, l_, 1)[:, None], 0.0)
            lres = np.where(good, m * op.scale + np.log(np.where(good, l_, 1)), -np.inf)
            out.reshape(op.batch, op.kv_heads, nrows, op.head_dim)[b, h] = res
            lse.reshape(op.batch, op.kv_heads, nrows)[b, h] = lres
    return out, lse


def _kernel_rows(op: Any, inputs: dict[str, np.ndarray], b: int, klen: int) -> tuple[np.ndarray, np.ndarray]:
    """Entry b's K and V rows (kv_heads, klen, head_dim) in float64, found as the kernel finds them: the flat
    offset of key t at kv head h is ((page * PAGE + t % PAGE) * kv_heads + h) * HD with page = the table's
    entry t / PAGE clamped into the pool; contiguous: ((b * kv_heads + h) * seq_k + t) * HD."""
    from tracea.kernels.dtypes import to_float64

    t = np.arange(klen)
    h = np.arange(op.kv_heads)[:, None]
    if op.page_size:
        table = np.asarray(inputs["block_table"], dtype=np.int64)[b]
        page = np.clip(table[t // op.page_size], 0, op.pages - 1)
        row = ((page * op.page_size + t % op.page_size)[None, :] * op.kv_heads + h) * op.head_dim
    else:
        row = ((b * op.kv_heads + h) * op.seq_k + t[None, :]) * op.head_dim
    idx = row[..., None] + np.arange(op.head_dim)
    return tuple(to_float64(np.asarray(inputs[n]).reshape(-1)[idx], op.dtype) for n in ("k", "v"))  # type: ignore[return-value]


def _walk(q: np.ndarray, k: np.ndarray, v: np.ndarray, qi: np.ndarray, spans: list[tuple[int, int]],
          sc: dict[str, Any], klen: int, scale: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One warp's online softmax over its key spans of an entry of ``klen`` keys: (max of raw scores, sum,
    unnormalised O) per row."""
    m = np.full(len(qi), -np.inf)
    l_ = np.zeros(len(qi))
    o = np.zeros((len(qi), q.shape[1]))
    for j0, n in spans:
        cols = np.arange(j0, j0 + n)
        inside = cols < klen
        kk = np.where(inside[:, None], k[np.minimum(cols, klen - 1)], 0.0)
        vv = np.where(inside[:, None], v[np.minimum(cols, klen - 1)], 0.0)
        s = q @ kk.T
        d = cols[None, :] - qi[:, None] - sc["diag"]
        keep = inside[None, :] & (d >= -sc["win_left"]) & (d <= sc["win_right"])
        s = np.where(keep, s, -np.inf)
        new = np.maximum(m, s.max(axis=1))
        base = np.where(np.isinf(new), 0.0, new)
        alpha = np.exp((m - base) * scale)
        p = np.exp((s - base[:, None]) * scale)
        l_ = l_ * alpha + p.sum(axis=1)
        o = o * alpha[:, None] + p @ vv
        m = new
    return m, l_, o


def _combine(parts: list[tuple[np.ndarray, np.ndarray, np.ndarray]],
             scale: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(max, sum, O) of several partials over disjoint keys, in their order (the warps', then the slices')."""
    m = np.max([p[0] for p in parts], axis=0)
    base = np.where(np.isinf(m), 0.0, m)
    f = [np.exp((p[0] - base) * scale) for p in parts]
    return m, sum(p[1] * w for p, w in zip(parts, f, strict=True)), sum(p[2] * w[:, None] for p, w in zip(parts, f, strict=True))
