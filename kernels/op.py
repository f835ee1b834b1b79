"""What every operation is: a frozen value, validated at construction, with FLOP and byte counts, fresh
random inputs (never zeros), a float64 NumPy reference and the same reference in plain C (an exported
package's check); the registry of operations (``OPS``, filled by the op files of ``kernels/ops/``); the
named suites of shapes users bring (``Suite``); the error measure and tolerance every kernel is held to.

A bad size raises ``BadInputError`` naming the field (fields.py), so ``tracea bench gemm --m 0`` stops with one
line before anything is built.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from typing import Any, ClassVar, TypeVar

import numpy as np

from tracea.doctor.errors import BadInputError

from .dtypes import DType

SCHEMA_VERSION = 1


TARGETS = ("host", "device")  # what a suite sizes its shapes and dtypes for: a CPU backend, a GPU backend


@dataclass(frozen=True)
class Suite:
    """A named set of one op's shapes as users bring them (``tracea bench --suite NAME``). ``build(target,
    quick)``: its ops for a backend of ``target`` (one of ``TARGETS``: "host" for a CPU backend, "device" for
    a GPU one; the dtypes and sizes users of such a machine run), ``quick`` a few rows of them, seconds on a
    2-core CI machine. ``summary``: a line for ``tracea bench --list``."""

    name: str
    summary: str
    build: Callable[[str, bool], list[Any]]

    def ops(self, target: str, quick: bool = False) -> list[Any]:
        if target not in TARGETS:
            raise BadInputError(f"suite {self.name}: no target {target!r}; choose from {', '.join(TARGETS)}")
        return self.build(target, quick)



class Op:
    """Common behaviour of the operations (frozen dataclasses). Beside its counts and references, an op
    answers how it is shown: its case in a few characters (``case_label``), a metrics row's shape
    (``shape_label``), its marker on the roofline plot (``plot_marker``) and the Tessera phase its kernel
    runs in (``phase``, one of emitters/nvtx.py's PHASES). ``default_shape``: the fields ``tracea.Context``
    assumes when a caller names the op without them; ``aliases``: other spellings of its name (``register``
    adds them to ``OP_ALIASES``); ``order``: its place among the ops (``OPS``, the CLI, the suites);
    ``suites``: its named suites of shapes (``Suite``), if any."""

    kind: ClassVar[str]
    plot_marker: ClassVar[str] = "o"
    phase: ClassVar[str] = "host"
    default_shape: ClassVar[dict[str, Any]] = {}
    aliases: ClassVar[tuple[str, ...]] = ()
    order: ClassVar[int] = 100
    suites: ClassVar[tuple[Suite, ...]] = ()

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)  # type: ignore[call-overload]
        for k, v in d.items():
            if isinstance(v, DType):
                d[k] = v.value
            elif isinstance(v, tuple):
                d[k] = list(v)
        return {"op": self.kind, "schema_version": SCHEMA_VERSION, **d}

    @staticmethod
    def from_json(data: dict[str, Any]) -> Op:
        """The op of ``data`` (from a bundle, a recorded space or a database: untrusted), validated."""
        if not isinstance(data, dict):
            raise BadInputError(f"op: expected an object, got {type(data).__name__}")
        data = dict(data)
        kind = data.pop("op", None)
        if data.pop("schema_version", SCHEMA_VERSION) != SCHEMA_VERSION:
            raise BadInputError("op: unsupported schema_version")
        cls = OPS.get(canonical_op_name(kind)) if isinstance(kind, str) else None
        if cls is None:
            raise BadInputError(f"op: unknown operation {kind!r}; known: {', '.join(OPS)}")
        for k, v in data.items():
            if isinstance(v, list):
                data[k] = tuple(v)
        try:
            return cls(**data)
        except TypeError as exc:
            raise BadInputError(f"{kind}: {exc}") from None

    @property
    def signature(self) -> str:
        """A stable one-line key for caches and databases."""
        parts = [f"{k}={v.value if isinstance(v, DType) else v}" for k, v in asdict(self).items()]  # type: ignore[call-overload]
        return f"{self.kind}(" + ",".join(parts) + ")"

    def case_label(self) -> str:
        """A case in a few characters, for a suite's table and progress line: the signature unless the
        op says it shorter."""
        return self.signature

    @classmethod
    def shape_label(cls, shape: dict[str, Any]) -> str:
        """A short label for a metrics row's shape (the op's fields but ``dtype``, as JSON holds them; a
        field may be missing): its scalar fields unless the op says it shorter."""
        return ",".join(f"{k}={v}" for k, v in sorted(shape.items()) if not isinstance(v, (list, dict)))

    def extent(self) -> str:
        """The op's size in a few characters, for an exported package's default prefix: its output's shape
        unless the op says it otherwise."""
        return "x".join(map(str, self.output_shape()))  # type: ignore[attr-defined]

    @property
    def output_dtype(self) -> DType:
        """The type of the op's output: its ``dtype`` unless the op says otherwise (a scaled GEMM's
        ``out_dtype``). What a kernel's output buffer holds (``.storage``) and how it is read back
        (``to_float64``)."""
        return self.dtype  # type: ignore[attr-defined, no-any-return]

    def tolerance_bound(self) -> float:
        """Relative-error bound for a correct kernel (``tolerance``): the output's own rounding plus accumulation,
        unless the op says otherwise. Attention shares it: a 16-bit kernel rounds P before P @ V and then O,
        about 2u in all, inside 8u."""
        dtype: DType = self.dtype  # type: ignore[attr-defined]
        if dtype is DType.FP32:
            return 1e-4
        return 8 * dtype.unit_roundoff  # output rounding dominates: ~3e-2 bf16, ~4e-3 fp16

    def input_dtype(self, name: str) -> np.dtype:
        """The storage dtype of input ``name`` (a key of ``shapes()``): the op's own, unless the op says
        otherwise (attention's int32 block table and lengths)."""
        return self.dtype.storage  # type: ignore[attr-defined]

    def side_outputs(self) -> dict[str, tuple[int, ...]]:
        """Buffers a kernel writes beside its output, passed among the inputs (keys of ``shapes()``, their contents
        on entry ignored): an FP8 scaled GEMM's amax. Empty unless the op says so."""
        return {}

    def side_reference(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """What ``side_outputs`` should hold after a call on ``inputs``; empty unless the op says so."""
        return {}

    def side_problem(self, inputs: dict[str, np.ndarray]) -> str | None:
        """What is wrong with the ``side_outputs`` a call left in ``inputs`` against the op's ``side_reference``
        (each within the bound of an fp32 result of the op's accumulation), or None."""
        if not self.side_outputs():
            return None
        want = self.side_reference(inputs)
        bound = self.side_tolerance()
        for name, ref in want.items():
            err = relative_error(np.asarray(inputs[name], dtype=np.float64), ref)
            if not err <= bound:
                return f"{name}: {np.asarray(inputs[name]).ravel()[:4]} against {ref.ravel()[:4]} (relative error " \
                       f"{err:.3g} exceeds {bound:.1g})"
        return None

    def side_tolerance(self) -> float:
        return 1e-4

    def c_reference(self, epilogue: Mapping[str, str]) -> str | None:
        """The op's reference in plain C, for an exported package's example (naive loops, double
        accumulation): the body of a function of double arrays named as its buffers that fills ``ref``, its
        lines after the first indented as example.c's function body holds them (the package's bytes).
        ``epilogue``: the C statement of each fused-epilogue step (emitters/cstyle.py's ``C_REFERENCE``).
        None: the op has none, so a package cannot check it, and export refuses it."""
        return None


OPS: dict[str, type] = {}  # kind -> class, by ``order`` (kernels/ops/__init__.py imports the ops' files)
# Other spellings of an op's name (its ``aliases``): the design documents write
# ctx.plan_kernel("flash_attention_2", precision="BF16").
OP_ALIASES: dict[str, str] = {}
OpT = TypeVar("OpT", bound=Op)


def register(cls: type[OpT]) -> type[OpT]:
    """Make ``cls`` an op: ``Op.from_json``, the CLI's IR and the reports find it in ``OPS`` by its kind,
    and by its aliases through ``canonical_op_name``. Each op's file registers its class (``@register``);
    ``OPS`` stays in the ops' ``order``."""
    OPS[cls.kind] = cls
    ordered = sorted(OPS.items(), key=lambda kv: (kv[1].order, kv[0]))
    OPS.clear()
    OPS.update(ordered)
    OP_ALIASES.update(dict.fromkeys(cls.aliases, cls.kind))
    return cls



def canonical_op_name(name: str) -> str:
    """The IR kind (a key of OPS) for a user's op name; a name that is no alias comes back lower-cased,
    for the caller's "unknown operation" message."""
    key = str(name).strip().lower()
    return OP_ALIASES.get(key, key)


def relative_error(out: np.ndarray, ref: np.ndarray) -> float:
    """||out - ref|| / ||ref|| in float64; NaN or a shape mismatch is an infinite error."""
    out = np.asarray(out, dtype=np.float64)
    if out.shape != ref.shape or not np.all(np.isfinite(out)):
        return math.inf
    denom = float(np.linalg.norm(ref))
    return float(np.linalg.norm(out - ref)) / (denom if denom > 0 else 1.0)


def tolerance(op: Op) -> float:
    """Relative-error bound for a correct kernel of ``op`` (its ``tolerance_bound``)."""
    return op.tolerance_bound()

