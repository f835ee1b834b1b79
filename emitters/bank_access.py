"""Warp-level shared-memory accesses: the instructions the bank-conflict simulator scores, their
validation, and generators that turn a ``TileLayout`` plus an access kind into the instructions that
cover the tile (an ldmatrix sweep, a 16-byte cp.async row copy, a 128-bit column read, ...).

One instruction is one warp's op, bytes per lane and 32 lane byte-addresses (``None`` = inactive lane).
Batches are kept as NumPy arrays (``AccessBatch``) so the simulator scores millions at once; the
CUDA emitter builds the same arrays from ``TileLayout.offset`` for its own access pattern.

Each instruction belongs to a ``model`` (``MODELS``): ``nvidia`` (a 32-lane warp, every op below) or
``cdna`` (a 64-lane AMD wavefront whose ``ld``/``st`` are ``ds_read``/``ds_write``; emitters/bank_cdna.py).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from tracea.doctor.errors import BadInputError

from .layout import TileLayout

WARP = 32
WAVEFRONT = 64  # an AMD CDNA wavefront
INACTIVE = -1

# op name -> (code, lanes whose address is used, allowed bytes per lane). ldmatrix/stmatrix read 16-byte
# rows: x1/x2/x4 use the first 8/16/32 lanes' addresses (PTX ISA, ldmatrix), whatever the others hold.
OPS: dict[str, tuple[int, int, tuple[int, ...]]] = {
    "ld": (0, WARP, (1, 2, 4, 8, 16)),
    "st": (1, WARP, (1, 2, 4, 8, 16)),
    "cp.async": (2, WARP, (4, 8, 16)),
    "ldmatrix.x1": (3, 8, (16,)),
    "ldmatrix.x2": (4, 16, (16,)),
    "ldmatrix.x4": (5, 32, (16,)),
    "stmatrix.x1": (6, 8, (16,)),
    "stmatrix.x2": (7, 16, (16,)),
    "stmatrix.x4": (8, 32, (16,)),
}
OP_NAMES: tuple[str, ...] = tuple(sorted(OPS, key=lambda k: OPS[k][0]))
MATRIX_OPS = frozenset(k for k in OPS if "matrix" in k)
STORE_OPS = frozenset({"st", "cp.async", "stmatrix.x1", "stmatrix.x2", "stmatrix.x4"})


@dataclass(frozen=True)
class Model:
    """A machine the simulator scores: lanes per instruction, what those lanes are called, its ops."""

    name: str
    lanes: int
    unit: str
    ops: tuple[str, ...]


MODELS: dict[str, Model] = {
    "nvidia": Model("nvidia", WARP, "warp", OP_NAMES),
    "cdna": Model("cdna", WAVEFRONT, "wavefront", ("ld", "st")),  # ds_read_bN / ds_write_bN
}


def model_of(name: object) -> Model:
    if not isinstance(name, str) or name not in MODELS:
        raise BadInputError(f"unknown bank model {name!r}", f"use one of {', '.join(MODELS)}")
    return MODELS[name]


def used_lanes(op: str, lanes: int) -> int:
    """Lanes whose address an op reads: all for ld/st/cp.async, the first 8/16/32 for ldmatrix/stmatrix."""
    return OPS[op][1] if op in MATRIX_OPS else lanes


@dataclass(frozen=True)
class Access:
    """One warp-wide shared-memory instruction; ``count`` weights it in totals (e.g. loop trips)."""

    op: str
    bytes_per_lane: int
    addresses: tuple[int | None, ...]
    count: int = 1
    name: str = ""
    model: str = "nvidia"

    def __post_init__(self) -> None:
        validate_access(self.op, self.bytes_per_lane, self.addresses, where=self.name or "instruction",
                        model=self.model)
        if isinstance(self.count, bool) or not isinstance(self.count, int) or self.count < 1:
            raise BadInputError(f"{self.name or 'instruction'}: count must be an integer >= 1, got {self.count!r}")

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {"op": self.op, "bytes_per_lane": self.bytes_per_lane, "addresses": list(self.addresses)}
        if self.count != 1:
            doc["count"] = self.count
        if self.name:
            doc["name"] = self.name
        if self.model != "nvidia":
            doc["model"] = self.model
        return doc


def validate_access(op: object, bytes_per_lane: object, addresses: object, where: str, model: str = "nvidia") -> None:
    """Raise BadInputError, naming ``where`` and the lane, for anything the hardware would not accept."""
    m = model_of(model)
    if not isinstance(op, str) or op not in m.ops:
        hint = f"use one of {', '.join(m.ops)}" + (" (ds_read / ds_write)" if m.name == "cdna" else "")
        raise BadInputError(f"{where}: unknown op {op!r}" + (f" for the {m.name} model" if op in OPS else ""), hint)
    _, _, widths = OPS[op]
    used = used_lanes(op, m.lanes)
    if op in MATRIX_OPS and bytes_per_lane is None:
        bytes_per_lane = 16
    if isinstance(bytes_per_lane, bool) or bytes_per_lane not in widths:
        raise BadInputError(f"{where}: bytes_per_lane {bytes_per_lane!r} is not valid for {op} "
                            f"(allowed: {', '.join(map(str, widths))})")
    if not isinstance(addresses, (list, tuple)) or len(addresses) != m.lanes:
        n = len(addresses) if isinstance(addresses, (list, tuple)) else type(addresses).__name__
        raise BadInputError(f"{where}: {n} addresses given, a {m.unit} needs {m.lanes} (null for an inactive lane)")
    for lane, a in enumerate(addresses):
        if a is None:
            if lane < used and op in MATRIX_OPS:
                raise BadInputError(f"{where}: lane {lane} is null, but {op} reads a row address from lanes "
                                    f"0-{used - 1} (.sync.aligned: every lane executes it)")
            continue
        if lane >= used:
            continue  # ignored by the hardware: x1/x2 read only the first 8/16 lanes
        if isinstance(a, bool) or not isinstance(a, (int, np.integer)) or not 0 <= a < 1 << 32:
            raise BadInputError(f"{where}: lane {lane} address {a!r} is not a byte offset in [0, 2^32)")
        if a % bytes_per_lane:
            raise BadInputError(f"{where}: lane {lane} address {a} is not aligned to the {bytes_per_lane}-byte access")


@dataclass(frozen=True, eq=False)
class AccessBatch:
    """Many instructions of one model as arrays: ``op`` (n,) codes, ``width`` (n,) bytes, ``addr``
    (n, lanes) int64 with ``INACTIVE`` (-1) for inactive or ignored lanes, ``count`` (n,) weights. Already
    validated."""

    op: np.ndarray
    width: np.ndarray
    addr: np.ndarray
    count: np.ndarray
    names: tuple[str, ...] = ()
    model: str = "nvidia"

    def __len__(self) -> int:
        return int(self.op.shape[0])

    @property
    def lanes(self) -> int:
        return int(self.addr.shape[1])

    @classmethod
    def from_accesses(cls, accesses: Sequence[Access]) -> AccessBatch:
        models = {a.model for a in accesses} or {"nvidia"}
        if len(models) > 1:
            raise BadInputError(f"one batch holds one model's instructions, not {', '.join(sorted(models))}")
        m = MODELS[models.pop()]
        n = len(accesses)
        addr = np.full((n, m.lanes), INACTIVE, dtype=np.int64)
        for i, a in enumerate(accesses):
            used = used_lanes(a.op, m.lanes)
            addr[i, :used] = [INACTIVE if x is None else x for x in a.addresses[:used]]
        return cls(op=np.array([OPS[a.op][0] for a in accesses], dtype=np.int8),
                   width=np.array([a.bytes_per_lane for a in accesses], dtype=np.int8),
                   addr=addr, count=np.array([a.count for a in accesses], dtype=np.int64),
                   names=tuple(a.name for a in accesses), model=m.name)

    @classmethod
    def uniform(cls, op: str, bytes_per_lane: int, addr: np.ndarray, names: Sequence[str] = (),
                model: str = "nvidia") -> AccessBatch:
        """Instructions of one kind from an (n, lanes) address array (INACTIVE for inactive lanes)."""
        m = model_of(model)
        if op not in m.ops:
            raise BadInputError(f"{op} is not an instruction of the {m.name} model (it has {', '.join(m.ops)})")
        addr = np.asarray(addr, dtype=np.int64).reshape(-1, m.lanes)
        code, _, widths = OPS[op]
        used = used_lanes(op, m.lanes)
        if bytes_per_lane not in widths:
            raise BadInputError(f"bytes_per_lane {bytes_per_lane} is not valid for {op}")
        active = addr[:, :used] != INACTIVE
        if op in MATRIX_OPS and not active.all():
            raise BadInputError(f"{op}: every one of lanes 0-{used - 1} needs an address")
        if (addr[:, :used][active] % bytes_per_lane).any() or (addr[:, :used][active] < 0).any():
            raise BadInputError(f"{op}: an address is negative or not aligned to the {bytes_per_lane}-byte access")
        if used < m.lanes:
            addr = addr.copy()
            addr[:, used:] = INACTIVE
        n = addr.shape[0]
        return cls(op=np.full(n, code, dtype=np.int8), width=np.full(n, bytes_per_lane, dtype=np.int8),
                   addr=addr, count=np.ones(n, dtype=np.int64), names=tuple(names), model=m.name)

    @staticmethod
    def concat(batches: Iterable[AccessBatch]) -> AccessBatch:
        bs = list(batches)
        models = {b.model for b in bs} or {"nvidia"}
        if len(models) > 1:
            raise BadInputError(f"one batch holds one model's instructions, not {', '.join(sorted(models))}")
        return AccessBatch(op=np.concatenate([b.op for b in bs]), width=np.concatenate([b.width for b in bs]),
                           addr=np.concatenate([b.addr for b in bs]), count=np.concatenate([b.count for b in bs]),
                           names=sum((b.names or ("",) * len(b) for b in bs), ()), model=models.pop())

    def op_name(self, i: int) -> str:
        return OP_NAMES[int(self.op[i])]

    def access(self, i: int) -> Access:
        addrs = tuple(None if a == INACTIVE else int(a) for a in self.addr[i])
        return Access(self.op_name(i), int(self.width[i]), addrs, int(self.count[i]),
                      self.names[i] if self.names else "", self.model)


# --- tile sweeps -------------------------------------------------------------------------------------

def _check_vector(layout: TileLayout, nbytes: int, what: str) -> None:
    if layout.swizzle.keeps_bytes_together < nbytes:
        raise BadInputError(f"{what}: {layout.swizzle.name} splits {nbytes}-byte units, so a {nbytes}-byte "
                            "access cannot be one instruction on this layout")
    if layout.pitch_bytes % nbytes or (layout.line_elems * layout.elem_bytes) % nbytes:
        raise BadInputError(f"{what}: the line ({layout.line_elems * layout.elem_bytes} B, pitch "
                            f"{layout.pitch_bytes} B) is not a multiple of the {nbytes}-byte access")


def _line_offsets(layout: TileLayout, line: np.ndarray, byte_along: np.ndarray) -> np.ndarray:
    along = byte_along // layout.elem_bytes
    row, col = (line, along) if layout.order == "row" else (along, line)
    return np.asarray(layout.offset(row, col), dtype=np.int64)


def matrix_sweep(layout: TileLayout, op: str = "ldmatrix.x4") -> AccessBatch:
    """ldmatrix/stmatrix instructions covering the tile, each matrix row a 16-byte piece of a line.

    x4 reads a 16-line x 2-chunk block as the mma.sync A fragment does (matrix j: lines +8*(j%2),
    chunk +j//2); x2 a 16-line x 1-chunk block; x1 8 lines x 1 chunk. Blocks go line-block-major.
    ``.trans`` moves no other bytes, so it has the same bank behaviour.
    """
    if op not in MATRIX_OPS:
        raise BadInputError(f"matrix_sweep needs an ldmatrix/stmatrix op, got {op!r}")
    _check_vector(layout, 16, op)
    num = int(op[-1])
    lines_per, chunks_per = {1: (8, 1), 2: (16, 1), 4: (16, 2)}[num]
    chunks = layout.line_elems * layout.elem_bytes // 16
    if layout.lines % lines_per or chunks % chunks_per:
        raise BadInputError(f"{op} covers {lines_per} lines x {chunks_per * 16} B blocks; the tile has "
                            f"{layout.lines} lines of {chunks * 16} B")
    lane = np.arange(WARP)
    j, r = lane // 8, lane % 8
    used = lane < 8 * num
    if num == 4:
        dl, dc = (j % 2) * 8 + r, j // 2
    else:
        dl, dc = j * 8 + r, np.zeros_like(lane)
    lb, cb = np.meshgrid(np.arange(layout.lines // lines_per), np.arange(chunks // chunks_per), indexing="ij")
    lb, cb = lb.reshape(-1, 1), cb.reshape(-1, 1)
    line = lb * lines_per + np.where(used, dl, 0)
    chunk = cb * chunks_per + np.where(used, dc, 0)
    addr = _line_offsets(layout, line, chunk * 16)
    addr[:, ~used] = INACTIVE
    return AccessBatch.uniform(op, 16, addr)


def vector_sweep(layout: TileLayout, op: str = "ld", bytes_per_lane: int = 16, direction: str = "row",
                 model: str = "nvidia") -> AccessBatch:
    """ld/st/cp.async instructions of ``bytes_per_lane`` covering the tile once.

    ``row``: lanes take consecutive pieces in storage order (lane i, piece i; a row copy of a
    row-major tile). ``column``: lane i takes line i at one piece (a column read of a row-major tile).
    A tail shorter than a warp (or a ``cdna`` model's 64-lane wavefront) leaves lanes inactive.
    """
    lanes = model_of(model).lanes
    if op not in ("ld", "st", "cp.async"):
        raise BadInputError(f"vector_sweep needs ld, st or cp.async, got {op!r}")
    if bytes_per_lane not in OPS[op][2]:
        raise BadInputError(f"{op} cannot move {bytes_per_lane} bytes a lane (allowed: "
                            f"{', '.join(map(str, OPS[op][2]))})")
    _check_vector(layout, bytes_per_lane, f"{op}.{bytes_per_lane * 8}")
    pieces = layout.line_elems * layout.elem_bytes // bytes_per_lane
    if direction in ("row", "contig"):
        q = np.arange(layout.lines * pieces)
        line, piece = q // pieces, q % pieces
    elif direction in ("column", "strided"):
        p, ln = np.meshgrid(np.arange(pieces), np.arange(-(-layout.lines // lanes) * lanes), indexing="ij")
        line, piece = ln.reshape(-1), p.reshape(-1)
    else:
        raise BadInputError(f"direction must be row or column, got {direction!r}")
    n = -(-line.size // lanes)
    valid = np.zeros(n * lanes, dtype=bool)
    valid[: line.size] = line < layout.lines
    line = np.pad(line, (0, n * lanes - line.size))
    piece = np.pad(piece, (0, n * lanes - piece.size))
    addr = _line_offsets(layout, np.where(valid, line, 0), piece * bytes_per_lane)
    addr = np.where(valid, addr, INACTIVE).reshape(n, lanes)
    return AccessBatch.uniform(op, bytes_per_lane, addr, model=model)


def parse_access(spec: str, model: str = "nvidia") -> tuple[str, int, str]:
    """``ldmatrix.x4``, ``stmatrix.x2``, ``ld.128.row``, ``st.32.column``, ``cp.async.128.row`` ->
    (op, bytes_per_lane, direction); the op must be one of ``model``'s (cdna: ``ld``/``st``, that is
    ds_read/ds_write)."""
    op, nbytes, direction = _parse_access(spec)
    m = model_of(model)
    if op not in m.ops:
        raise BadInputError(f"access {spec!r}: {op} is not an instruction of the {m.name} model",
                            f"use {' or '.join(o + '.BITS[.row|.column]' for o in m.ops)} (e.g. ld.64.column)")
    return op, nbytes, direction


def _parse_access(spec: str) -> tuple[str, int, str]:
    s = spec.strip().lower()
    if s in MATRIX_OPS:
        return s, 16, "row"
    head, _, rest = s.partition(".") if not s.startswith("cp.async") else ("cp.async", ".", s[len("cp.async."):])
    parts = rest.split(".") if rest else []
    if head in ("ld", "st", "cp.async") and parts and parts[0].isdigit():
        bits = int(parts[0])
        direction = parts[1] if len(parts) > 1 else "row"
        if bits % 8 or bits // 8 not in OPS[head][2] or len(parts) > 2:
            raise BadInputError(f"access {spec!r}: {head} moves {', '.join(str(8 * b) for b in OPS[head][2])} bits")
        if direction not in ("row", "column", "contig", "strided"):
            raise BadInputError(f"access {spec!r}: direction must be row or column")
        return head, bits // 8, direction
    raise BadInputError(f"unknown access {spec!r}",
                        "use ldmatrix.x1|x2|x4, stmatrix.x1|x2|x4, or ld|st|cp.async.BITS[.row|.column] "
                        "(e.g. ld.128.column, cp.async.128.row)")


def tile_sweep(layout: TileLayout, spec: str, model: str = "nvidia") -> AccessBatch:
    """The instructions of one access spec over the tile, as ``model``'s warps or wavefronts (the cdna
    model has ``ld.BITS`` and ``st.BITS``: ds_read_bBITS and ds_write_bBITS)."""
    op, nbytes, direction = parse_access(spec, model)
    if op in MATRIX_OPS:
        return matrix_sweep(layout, op)
    return vector_sweep(layout, op, nbytes, direction, model)
