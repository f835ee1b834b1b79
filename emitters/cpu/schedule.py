"""The CPU emitter's schedule: how a kernel is blocked, packed and threaded, as a frozen value (the
``Schedule`` contract of ``emitters/schedule.py``).

``CpuSchedule`` is the GEMM micro-kernel's (BLIS-style GEMM, and the implicit-GEMM convolution on the same
micro-kernel): an ``mr x nr`` register-blocked micro-kernel (``nr`` is the vectorised axis, ``mr``
rows of A broadcast against it), cache blocks ``mc``/``kc``/``nc`` (A block in L2, B panel in L3, one
B micro-panel in L1), packing of A and B, threads, the unroll of the k loop and the prefetch distance
(k steps ahead; 0 is off). Softmax reads only ``threads`` (it still carries the GEMM hero's other fields,
which its kernel's name and header print). The attention core has its own (``attention.py``).

``validate(op, host, variant)`` checks a schedule against what the host and the variant can do and
raises ``BadInputError`` naming the field. Its heuristic and search spaces are in ``schedules.py``. This
module imports neither NumPy nor the IR, so the planner and the CLI can read schedules cheaply.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from tracea.doctor.errors import BadInputError

from ..schedule import SCHEMA_VERSION, booleans, positive_ints, schedule_fields

# family -> (fp32 lanes per vector register, vector registers), the facts validation needs. The renderers
# in emitters/cpu/isa.py declare the same numbers; tests/emitters/cpu/test_cpu_schedule.py checks they agree.
FAMILY_REGISTERS: dict[str, tuple[int, int]] = {
    "cpu-avx512": (16, 32),
    "cpu-avx2-fma": (8, 16),
    "cpu-neon": (4, 32),
    "cpu-portable": (1, 32),
}
SIMD_FAMILY_TO_VARIANT = {"avx512": "cpu-avx512", "avx2-fma": "cpu-avx2-fma", "neon": "cpu-neon",
                          "portable": "cpu-portable"}
MAX_BLOCK_BYTES = 256 << 20  # one packed buffer; far beyond any cache, small enough to allocate


def check_threads(threads: int, host: Any) -> None:
    """A CPU schedule's ``threads``: at most the host's logical cores (where it says) and the runtime's 256."""
    cores = getattr(getattr(host, "cpu", None), "logical_cores", None)
    if cores and threads > cores:
        raise BadInputError(f"threads: {threads} is more than the {cores} logical cores of this host")
    if threads > 256:
        raise BadInputError(f"threads: {threads} is more than the 256 the runtime supports")


def family_of(variant: Any, host: Any = None) -> str:
    """The instruction family of ``variant`` (a Variant, its id, or a family name); without one, the
    family the doctor chose for ``host``'s CPU."""
    if variant is not None:
        family = getattr(variant, "family", None) or str(variant).split(".")[0]
        if family not in FAMILY_REGISTERS:
            raise BadInputError(f"variant: unknown CPU family {family!r}; known: {', '.join(FAMILY_REGISTERS)}")
        return family
    simd = getattr(getattr(host, "cpu", None), "simd_family", None) or "portable"
    return SIMD_FAMILY_TO_VARIANT.get(simd, "cpu-portable")


@dataclass(frozen=True)
class CpuSchedule:
    mr: int
    nr: int
    mc: int
    kc: int
    nc: int
    threads: int = 1
    unroll: int = 4
    prefetch: int = 0
    pack_a: bool = True
    pack_b: bool = True
    small_m: bool = False  # the small-M GEMM path (emitters/cpu/gemv.py): no packing, B streamed once

    def validate(self, op: Any, host: Any, variant: Any = None) -> None:
        """Raise ``BadInputError`` naming the first field that cannot work for ``op`` on ``host`` with
        ``variant`` (default: the host's own SIMD family)."""
        positive_ints(self, ("mr", "nr", "mc", "kc", "nc", "threads", "unroll"))
        if isinstance(self.prefetch, bool) or not isinstance(self.prefetch, int) or not 0 <= self.prefetch <= 1024:
            raise BadInputError(f"prefetch: expected a distance in k steps from 0 (off) to 1024, got {self.prefetch!r}")
        booleans(self, ("pack_a", "pack_b", "small_m"))
        family = family_of(variant, host)
        lanes, vregs = FAMILY_REGISTERS[family]
        if self.nr % lanes:
            raise BadInputError(f"nr: {self.nr} is not a multiple of the {lanes} fp32 lanes of {family}")
        vectors = self.nr // lanes
        # accumulators + one register per B vector + one broadcast of A
        if self.mr * vectors + vectors + 1 > vregs:
            raise BadInputError(
                f"mr: a {self.mr} x {self.nr} micro-kernel needs {self.mr * vectors} accumulators + {vectors + 1} "
                f"operand registers, more than the {vregs} vector registers of {family}")
        if self.mr > 32:
            raise BadInputError(f"mr: {self.mr} rows is beyond the micro-kernel generator (at most 32)")
        if self.mc % self.mr:
            raise BadInputError(f"mc: {self.mc} is not a multiple of mr={self.mr}")
        if self.nc % self.nr:
            raise BadInputError(f"nc: {self.nc} is not a multiple of nr={self.nr}")
        if self.unroll > 16:
            raise BadInputError(f"unroll: {self.unroll} is more than 16 k steps")
        for name, size in (("mc", self.mc * self.kc), ("nc", self.nc * self.kc)):
            if size * 4 > MAX_BLOCK_BYTES:
                raise BadInputError(f"{name}: the packed block ({size * 4} B) exceeds {MAX_BLOCK_BYTES} B")
        check_threads(self.threads, host)
        kind = getattr(op, "kind", None)
        dtype = getattr(getattr(op, "dtype", None), "value", None)
        if self.small_m and kind != "gemm":
            raise BadInputError(f"small_m: only a gemm has the small-M path, not {kind}")
        in_place = kind == "gemm" or (kind == "conv2d" and getattr(op, "layout", None) == "nhwc")  # conv_direct.py
        if not self.pack_a and (not in_place or dtype != "fp32"):
            raise BadInputError(f"pack_a: only an fp32 gemm or NHWC conv2d reads A unpacked ({kind} {dtype} gathers "
                                "or converts while packing)")
        row_b = kind == "gemm" and getattr(op, "layout_b", None) == "row"
        if not self.pack_b and (dtype != "fp32" or not (row_b or (in_place and kind == "conv2d"))):
            raise BadInputError("pack_b: only an fp32 gemm with B in row layout (its nr columns must be contiguous) "
                                "or an NHWC conv2d (the filter as the broadcast operand) reads B unpacked")

    def to_json(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        if not self.small_m:
            del d["small_m"]  # the blocked path's schedules read (and hash) as before the field existed
        return {"schema_version": SCHEMA_VERSION, "backend": "cpu", **d}

    @staticmethod
    def from_json(d: dict[str, Any]) -> CpuSchedule:
        return CpuSchedule(**schedule_fields(d, CpuSchedule, "cpu", "CPU", ("mr", "nr", "mc", "kc", "nc")))

    @property
    def name(self) -> str:
        """A short readable label: 14x32_mc336_kc256_nc4096_t2_u4_p0."""
        tag = f"{self.mr}x{self.nr}_mc{self.mc}_kc{self.kc}_nc{self.nc}_t{self.threads}_u{self.unroll}_p{self.prefetch}"
        return (("sm_" if self.small_m else "") + tag + ("" if self.pack_a else "_nopa")
                + ("" if self.pack_b else "_nopb"))

    def features(self, op: Any) -> dict[str, float]:
        """None beside the fields: the CPU's tuner sees the blocking itself."""
        return {}
