"""The small-channel convolution (C < 16, an image network's stem), NHWC, on ``mma.sync.m16n8k16``.

The reduction runs over k = (r, s, c) packed densely (7 * 7 * 3 = 147 for ResNet's stem) and padded once
to a multiple of 16 with zero filter columns, instead of padding each tap's channels to 8 (392 for 147).
A block owns ``rows`` whole output rows of one image (``pixels`` // Q of them) and up to 64 output
channels, and walks such tiles persistently:

- the filter's K x (r, s, c) slice stays in shared memory for the whole block (64 x 160 fp16: 20 KB),
  read by ``ldmatrix`` as the mma's B operand;
- the input rows a tile needs, whole, are copied once by 16-byte ``cp.async`` into a shared patch whose
  row stride is congruent to W * C modulo 8, so every row keeps its global 16-byte alignment (a per-tile
  shift of 0..7 elements); the padding columns and rows are zeros. ``stages`` = 2 copies the next tile
  while this one multiplies;
- the mma's A fragments are gathered from the patch: A[m][k] = patch[row_base(m) + k_offset(k)], the
  pixel's base fixed per thread for every tile, the tap's offset from a table; both tables are baked
  into the source from ``row_base`` and ``fragment_table``, the functions the NumPy model checks;
- warps split the pixels and, with ``ksplit``, the k steps (partials summed in shared memory in order);
- the epilogue (emitters/gpu_epilogue.py's) runs in fp32 on the fragments, which are rounded
  into a shared output tile that the block stores as 16-byte vectors: a tile's output is contiguous.

The schedule is baked into the source with the shape (one binary per shape, like gemv).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from tracea.doctor.errors import BadInputError, UnsupportedError
from tracea.kernels.epilogue import VOCABULARY

from .schedule import tile_features

SCHEMA_VERSION = 1
MAX_C = 15
BN = 64  # output channels per block (fewer when K is smaller: a multiple of 16)
MAX_MT = 4  # m16 tiles per warp (16 fp32 accumulators each per thread and n8 tile)
PIXELS = (64, 128, 192, 256, 384, 512)  # the search space's budgets (any 1..MAX_PIXELS validates)
MAX_PIXELS = 2048
SPLIT_SMEM = 99 * 1024  # the smallest opt-in shared memory of an sm_80+ GPU (sm_86, sm_89): a k split's bound
WARPS = (1, 2, 3, 4, 5, 6, 7, 8)
KSPLITS = (1, 2, 4)
STAGES = (1, 2)
DTYPES = ("bf16", "fp16")
# every op of the epilogue vocabulary but those that read an m x n operand (residual): the stem fuses
# per-channel and element-wise ops only
EPILOGUE = tuple(name for name, e in VOCABULARY.items() if e.operand != "residual")


@dataclass(frozen=True)
class StemSchedule:
    """``pixels``: output pixels a block aims at (it takes max(1, pixels // Q) whole output rows);
    ``warps`` per block, ``ksplit`` of them splitting the k steps; ``stages``: input patches in flight."""

    core: str = "stem"
    pixels: int = 128
    warps: int = 4
    ksplit: int = 1
    stages: int = 2

    @property
    def bm(self) -> int:  # the nominal block tile the tuner's features see (whole rows: geometry())
        return self.pixels

    @property
    def bn(self) -> int:
        return BN

    @property
    def block_threads(self) -> int:
        return 32 * self.warps

    @property
    def name(self) -> str:
        return f"stem_p{self.pixels}_w{self.warps}_k{self.ksplit}_s{self.stages}"

    def validate(self, op: Any = None, arch: Any = None) -> None:
        if self.core != "stem":
            raise BadInputError(f"core: a StemSchedule runs the stem core, not {self.core!r}")
        if isinstance(self.pixels, bool) or not isinstance(self.pixels, int) or not 1 <= self.pixels <= MAX_PIXELS:
            raise BadInputError(f"pixels: expected an integer in 1..{MAX_PIXELS}, got {self.pixels!r}")
        for name, allowed in (("warps", WARPS), ("ksplit", KSPLITS), ("stages", STAGES)):
            v = getattr(self, name)
            if isinstance(v, bool) or v not in allowed:
                raise BadInputError(f"{name}: expected one of {', '.join(map(str, allowed))}, got {v!r}")
        if self.warps % self.ksplit:
            raise BadInputError(f"ksplit: {self.ksplit} does not divide warps={self.warps}")
        if op is None:
            return
        why = unsupported(op)
        if why:
            raise BadInputError(f"core: the stem core {why}", "the mma core (cuda-mma-sync) runs it")
        g = geometry(op, self)
        if g.mt > MAX_MT:
            raise BadInputError(f"pixels: {g.rows} output rows of {op.q} pixels need {g.mt} m16 tiles a warp "
                                f"over {g.wm} warps (at most {MAX_MT})")
        budget = getattr(arch, "smem_optin", None)
        if budget is not None and g.smem > budget:
            raise BadInputError(f"pixels: the stem kernel needs {g.smem} B of shared memory, {arch.name} has {budget}")

    def to_json(self) -> dict[str, Any]:
        return {"schema_version": SCHEMA_VERSION, "backend": "cuda", **dataclasses.asdict(self)}

    @staticmethod
    def from_json(d: dict[str, Any]) -> StemSchedule:
        from ..schedule import schedule_fields

        s = StemSchedule(**schedule_fields(d, StemSchedule, "cuda", "CUDA", ("core",), SCHEMA_VERSION))
        s.validate()
        return s

    def features(self, op: Any) -> dict[str, float]:
        """Warps and the kernel's shared memory over the nominal tile (``tile_features``)."""
        return tile_features(op, self.warps, geometry(op, self).smem, self.bm, self.bn)


def unsupported(op: Any) -> str | None:
    """Why the stem core cannot run ``op`` (None: it can)."""
    if getattr(op, "kind", None) != "conv2d":
        return f"computes conv2d, not {getattr(op, 'kind', op)}"
    if op.c > MAX_C:
        return f"takes fewer than 16 input channels, not {op.c}"
    if op.groups != 1:
        return "computes ungrouped convolutions only"
    if op.layout != "nhwc":
        return "reads NHWC only"
    if op.dtype.value not in DTYPES:
        return f"computes bf16 or fp16, not {op.dtype.value}"
    if op.n * op.h * op.w * op.c >= 2**31 or op.n * op.p * op.q * op.k >= 2**31:
        return "indexes tensors of fewer than 2^31 elements"
    extra = [e for e in epilogue(op) if e not in EPILOGUE]
    if extra:
        return f"fuses {', '.join(EPILOGUE)}, not {', '.join(extra)}"
    return None


def epilogue(op: Any) -> tuple[str, ...]:
    return tuple(getattr(op, "epilogue", ())) or (("bias",) if getattr(op, "bias", False) else ())


@dataclass(frozen=True)
class Geometry:
    """Every size of one (op, schedule) kernel, in elements unless named bytes."""

    rows: int  # output rows per tile
    bm: int  # output pixels per tile (rows * Q)
    wm: int  # warps along the pixels
    mt: int  # m16 tiles per warp
    bn: int  # output channels per block
    ntiles: int  # blocks along K
    rsc: int  # the packed reduction
    kp: int  # rsc padded to a multiple of 16
    ih: int  # patch rows
    iw: int  # patch columns a tile reads (padding included)
    iws: int  # patch row stride
    padl: int  # patch elements before row 0's data (a multiple of 8)
    nch: int  # 16-byte chunks copied per input row
    patch: int  # patch elements per stage (a multiple of 8)
    tiles: int  # tiles along the pixels (images x row groups)
    smem: int  # dynamic shared memory, bytes
    offsets: dict[str, int]  # byte offsets of the shared regions

    @property
    def steps(self) -> int:
        return self.kp // 16

    @property
    def nt(self) -> int:
        return self.bn // 8

    @property
    def wstride(self) -> int:  # filter row stride: 8 * (2j + 1) 16-byte words apart, ldmatrix conflict-free
        return self.kp + 8

    @property
    def sstride(self) -> int:  # output tile row stride
        return self.bn + 8


def _up(x: int, m: int) -> int:
    return -(-x // m) * m


def geometry(op: Any, s: StemSchedule) -> Geometry:
    (sh, sw), (_, pw), (dh, dw) = op.stride, op.padding, op.dilation
    rows = max(1, min(s.pixels // op.q, op.p))
    bm = rows * op.q
    wm = s.warps // s.ksplit
    mt = -(-_up(bm, 16) // (16 * wm))
    bn = min(BN, _up(op.k, 16))
    rsc = op.r * op.s * op.c
    kp = _up(rsc, 16)
    ih = (rows - 1) * sh + (op.r - 1) * dh + 1
    iw = (op.q - 1) * sw + (op.s - 1) * dw + 1
    wc = op.w * op.c
    nch = -(-(wc + 7) // 8)
    padl = _up(max(pw * op.c, 8), 8)
    # rows apart by more than any row's chunks or logical columns (no copy of one row lands in another);
    # the stride keeps W * C's residue modulo 8 so every row keeps its global 16-byte phase
    need = max(8 * nch + pw * op.c, iw * op.c) + 8
    iws = need + (wc - need) % 8
    patch = _up(padl + (ih - 1) * iws + 8 + max(8 * nch, (iw - pw) * op.c) + 8, 8)
    offs: dict[str, int] = {}
    at = 0
    for name, nbytes in (("w", bn * (kp + 8) * 2), ("ktab", kp * 4), ("bias", bn * 4), ("patch", s.stages * patch * 2),
                         ("stage", wm * mt * 16 * (bn + 8) * 2),
                         ("red", (s.ksplit - 1) * wm * mt * (bn // 8) * 4 * 32 * 4)):
        offs[name] = at
        at += _up(nbytes, 16)
    tiles = op.n * -(-op.p // rows)
    return Geometry(rows, bm, wm, mt, bn, -(-op.k // bn), rsc, kp, ih, iw, iws, padl, nch, patch, tiles, at, offs)


# ------------------------------------------------------------------------------------- the index math
def k_offsets(op: Any, g: Geometry) -> list[int]:
    """The patch offset of each packed k = (r * S + s) * C + c relative to a pixel's base; the padded k
    (>= R*S*C, zero filter columns) read the pixel's own first element (finite, multiplied by 0)."""
    out = []
    for k in range(g.kp):
        if k >= g.rsc:
            out.append(0)
            continue
        r, rem = divmod(k, op.s * op.c)
        s, c = divmod(rem, op.c)
        out.append(r * op.dilation[0] * g.iws + s * op.dilation[1] * op.c + c)
    return out


def fragment_table(op: Any, g: Geometry) -> list[tuple[int, int, int, int]]:
    """``k_offsets`` in the order a thread reads them: entry [step][q] holds the offsets of k = 16 * step
    + 2q, 2q + 1, 2q + 8, 2q + 9 (the A fragment's columns of lane q of each quad)."""
    off = k_offsets(op, g)
    return [tuple(off[16 * st + 2 * q + d] for d in (0, 1, 8, 9)) for st in range(g.steps) for q in range(4)]


def row_base(op: Any, g: Geometry, m: int) -> int:
    """The patch offset of tile pixel ``m``'s first tap (0 past the tile: read, never stored)."""
    if m >= g.bm:
        return 0
    pr, ql = divmod(m, op.q)
    return pr * op.stride[0] * g.iws + ql * op.stride[1] * op.c


def patch_model(op: Any, g: Geometry, x: Any, tile: int) -> tuple[Any, int]:
    """What the kernel's copies leave in one patch stage for ``tile`` (x: N x H x W x C), and the logical
    origin of row 0 (the column w = -PW): the chunks as copied (16-byte phase kept), then the zeros."""
    import numpy as np

    flat = np.asarray(x).reshape(-1)
    wc = op.w * op.c
    img, pb = divmod(tile, -(-op.p // g.rows))
    h0 = pb * g.rows * op.stride[0] - op.padding[0]
    e0 = (img * op.h + h0) * wc
    shift = e0 & 7
    buf = np.full(g.patch, np.nan)
    pwc = op.padding[1] * op.c
    for ih in range(g.ih):
        d = g.padl + ih * g.iws + shift
        if not 0 <= h0 + ih < op.h:
            buf[d - pwc: d - pwc + g.iw * op.c] = 0.0
            continue
        er = e0 + ih * wc
        for j in range(g.nch):
            gs, cs = (er & ~7) + 8 * j, (d & ~7) + 8 * j
            n = max(0, min(8, er + wc - gs, flat.size - gs))
            buf[cs: cs + 8] = 0.0
            buf[cs: cs + n] = flat[gs: gs + n]
        buf[d & ~7: d] = 0.0  # the head chunk's owner zeroes what precedes the row
        buf[d - pwc: d] = 0.0
        buf[d + wc: d - pwc + g.iw * op.c] = 0.0
    return buf, g.padl + shift - pwc


def gather_model(op: Any, g: Geometry, x: Any, tile: int) -> Any:
    """A[m][k] of one tile (bm x kp) as the kernel's fragments read it from ``patch_model``."""
    import numpy as np

    buf, origin = patch_model(op, g, x, tile)
    off = np.asarray(k_offsets(op, g))
    base = np.asarray([row_base(op, g, m) for m in range(g.bm)])
    return buf[origin + base[:, None] + off[None, :]]


# ------------------------------------------------------------------------------- registry functions
def sm_count(host: Any) -> int:
    gpus = getattr(getattr(host, "nvidia", None), "devices", None) or []
    return int(getattr(gpus[0], "sm_count", 0) or 132) if gpus else 132


def applies(op: Any) -> bool:
    """Whether the stem core can run ``op`` and is searched: the hero fits an sm_80's shared memory."""
    return unsupported(op) is None and _fits(op, _hero(op, 132))


def prefers(op: Any) -> bool:
    return applies(op)


def _fits(op: Any, s: StemSchedule) -> bool:
    g = geometry(op, s)
    return g.mt <= MAX_MT and g.smem <= 166912


def _hero(op: Any, sms: int) -> StemSchedule:
    """Whole output rows up to 256 pixels while the tiles still fill two blocks an SM (else one row), a
    warp per two m16 tiles (one where the tiles leave SMs idle), the next patch copied during the mmas.
    Blocks left with fewer than 4 warps split a long reduction's k steps over 2 or 4 times as many
    (``ksplit``): the n4 c12 96^2 k32 5x5 stride-2 conv (19 k steps, 48 pixels a block) went from 0.65x
    cuDNN with 2 warps to 1.23x with 8 splitting k 4 ways (docs/device-runs/h100-splitk-tail-and-suite/stem)."""
    rows = max(1, min(256 // op.q, op.p))
    ntiles = -(-op.k // BN)
    while rows > 1 and op.n * -(-op.p // rows) * ntiles < 2 * sms:
        rows -= 1
    mtiles = -(-rows * op.q // 16)
    few = op.n * -(-op.p // rows) * ntiles < sms
    warps = min(8, mtiles if few else -(-mtiles // 2))
    base = StemSchedule(pixels=rows * op.q, warps=warps, ksplit=1, stages=2)
    if warps >= 4:
        return base
    ksteps = -(-op.r * op.s * op.c // 16)
    for k in (4, 2):  # the split's partial sums take shared memory: only where every sm_80+ GPU has it
        split = dataclasses.replace(base, warps=warps * k, ksplit=k)
        if ksteps >= 4 * k and warps * k <= 8 and geometry(op, split).smem <= SPLIT_SMEM:
            return split
    return base


def hero_schedule(op: Any, host: Any) -> StemSchedule:
    return _hero(op, sm_count(host))


def search_space(op: Any, hero: Any, arch: Any) -> list[StemSchedule]:
    """Whole output rows per block (budgets of 64..512 pixels, each as rows * Q: one schedule a kernel),
    2..8 warps, K split over 1..4 warps, 1 or 2 patch stages (checked by build)."""
    if not applies(op):
        return []
    budgets = sorted({max(1, min(p // op.q, op.p)) * op.q for p in PIXELS})
    return [StemSchedule(pixels=p, warps=w, ksplit=k, stages=st)
            for p in budgets for w in (2, 4, 6, 8) for k in KSPLITS for st in STAGES if w % k == 0]


def check(op: Any, v: Any, schedule: Any, arch: Any) -> None:
    """A StemSchedule for a small-channel NHWC 16-bit conv, on the variant's targets (sm_80+)."""
    if not isinstance(schedule, StemSchedule):
        raise BadInputError(f"schedule: the stem core takes a StemSchedule, got {type(schedule).__name__}")
    if op.dtype.value not in v.precisions:
        raise UnsupportedError(f"{v.id} computes {', '.join(v.precisions)}, not {op.dtype.value}")
    lo, hi = v.requirements.min_compute_capability, v.requirements.max_compute_capability
    if arch.cc < max(lo, (8, 0)) or (hi is not None and arch.cc > hi):
        raise UnsupportedError(f"{v.id} with the stem core does not run on {arch.name}")
    schedule.validate(op, arch)


def blocks_per_sm(g: Geometry, s: StemSchedule, arch: Any) -> int:
    """Resident blocks an SM (launch bounds too): shared memory, and at most 16 warps (<= 128 registers a
    thread), 8 where a warp holds more than two m16 tiles of accumulators."""
    by_smem = max(1, (arch.smem_optin + 1024) // (g.smem + 1024))
    return max(1, min(by_smem, (16 if g.mt <= 2 else 8) // s.warps, 8))
