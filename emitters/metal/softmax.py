"""The Metal row softmax: fp32, fp16 or bf16 (stored as ``ushort`` bits) in and out, fp32 arithmetic, any rows
and cols.

A threadgroup holds ``rows`` rows and gives each ``simdgroups`` simdgroups: one simdgroup a row (several rows
a threadgroup) for short rows, a whole threadgroup a row for long ones; the general R x G form is one source.
Each lane walks its row ``32 * simdgroups`` columns apart keeping a running maximum and a sum rescaled to it
(the online form: one pass reads the row to reduce), the lanes' (max, sum) pairs are combined by ``simd_max``
and ``simd_sum``, the simdgroups' of a row through threadgroup memory, and a second pass writes
``exp(x - max) / sum``.

What the op's reference does (kernels/ops/softmax.py) the kernel does: a -inf entry gives 0; a row that is
-inf throughout gives NaN everywhere (the reference's ``x - max`` is NaN there, as torch.softmax's). No
infinity enters the arithmetic: the running maximum starts at the lowest finite float and -inf entries are
found by their bits, so the result does not hang on how Metal's fast math treats infinities.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tracea.doctor.errors import BadInputError, UnsupportedError

from ..schedule import positive_ints
from .core import KERNEL_BUILTINS, MAX_THREADS, SIMD_WIDTH, read_schedule, schedule_json

KIND = "metal-softmax"  # the schedule JSON's "kind"
KERNEL = "tr_metal_softmax"
STORE = {"fp32": "float", "fp16": "half", "bf16": "ushort"}  # a dtype's element type in device memory
MAX_OFFSET = 2**32 - 1  # the kernels index with 32-bit offsets

# Conversions between a storage type and float, and the constants the kernels share (attention.py uses them
# too). bf16 is the upper half of a float32; it is stored rounded to nearest even in integer arithmetic, a NaN
# kept a (quiet) NaN.
PRELUDE = """#include <metal_stdlib>
using namespace metal;

#define TR_LOWEST (-3.40282347e38f)
static inline float tr_in(float x) { return x; }
static inline float tr_in(half x) { return float(x); }
static inline float tr_in(ushort x) { return as_type<float>(uint(x) << 16); }
static inline float tr_out_float(float y) { return y; }
static inline half tr_out_half(float y) { return half(y); }
static inline ushort tr_out_ushort(float y) {
    const uint u = as_type<uint>(y);
    if ((u & 0x7fffffffu) > 0x7f800000u) return ushort((u >> 16) | 0x40u);
    return ushort((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
"""


@dataclass(frozen=True)
class MetalSoftmaxSchedule:
    """``rows`` rows a threadgroup, ``simdgroups`` simdgroups (32 lanes each) a row."""

    rows: int = 4
    simdgroups: int = 1

    @property
    def threads(self) -> int:
        return SIMD_WIDTH * self.rows * self.simdgroups

    @property
    def threadgroup_bytes(self) -> int:
        """Two floats a simdgroup where a row has several (none where a simdgroup holds a row)."""
        return 0 if self.simdgroups == 1 else 2 * 4 * self.rows * self.simdgroups

    @property
    def name(self) -> str:
        return f"softmax_r{self.rows}_s{self.simdgroups}"

    def to_json(self) -> dict[str, Any]:
        return schedule_json(self, KIND)

    @staticmethod
    def from_json(d: dict[str, Any]) -> MetalSoftmaxSchedule:
        return read_schedule(MetalSoftmaxSchedule, d, KIND)  # type: ignore[no-any-return]

    def features(self, op: Any) -> dict[str, float]:
        """Threads a threadgroup and the columns each lane walks."""
        lanes = SIMD_WIDTH * self.simdgroups
        return {"threads": float(self.threads), "columns_per_lane": float(-(-op.cols // lanes))}

    def validate(self, op: Any = None, target: Any = None) -> None:
        """The fields (and ``op``'s dtype where one is given); the target does not enter."""
        positive_ints(self, ("rows", "simdgroups"))
        for name in ("rows", "simdgroups"):
            value = getattr(self, name)
            if value & (value - 1):
                raise BadInputError(f"{name}: expected a power of two, got {value}")
        if self.threads > MAX_THREADS:
            raise BadInputError(f"rows x simdgroups: {self.rows} x {self.simdgroups} simdgroups of 32 lanes is "
                                f"{self.threads} threads, over Metal's {MAX_THREADS} a threadgroup")
        if op is not None:
            check_softmax(op)


def check_softmax(op: Any) -> None:
    """``UnsupportedError`` for a softmax the kernel does not compute."""
    if op.dtype.value not in STORE:
        raise UnsupportedError(f"the Metal softmax computes fp32, fp16 or bf16, not {op.dtype.value}")
    if max(op.rows, op.cols) > (1 << 31) - 1:
        raise UnsupportedError(f"the Metal softmax takes rows and columns as 32-bit ints: {op.rows} x {op.cols}",
                               "split the rows over several calls")
    if op.rows * op.cols > MAX_OFFSET:
        raise UnsupportedError(f"the Metal softmax indexes with 32-bit offsets: {op.rows} x {op.cols} is over "
                               f"{MAX_OFFSET} elements", "split the rows over several calls")


def _reduce(s: MetalSoftmaxSchedule) -> str:
    """The row's (max, sum) from the lanes' ``m``, ``s``: within the simdgroup, then across its simdgroups."""
    lanes = """    const float sm = simd_max(m);
    const float ss = simd_sum(s * exp(m - sm));
"""
    if s.simdgroups == 1:
        return lanes + "    const float rm = sm, rs = ss;\n"
    g = s.simdgroups
    return lanes + f"""    if (lane == 0) {{ part_m[sgid] = sm; part_s[sgid] = ss; }}
    threadgroup_barrier(mem_flags::mem_threadgroup);
    const uint g0 = sgid - sgid % {g};
    float rm = TR_LOWEST, rs = 0.0f;
    for (uint i = 0; i < {g}; ++i) rm = max(rm, part_m[g0 + i]);
    for (uint i = 0; i < {g}; ++i) rs += part_s[g0 + i] * exp(part_m[g0 + i] - rm);
"""


def render(dtype: str, s: MetalSoftmaxSchedule) -> str:
    """The kernel's MSL: ``x`` (rows x cols) in, ``y`` out, ``rows`` and ``cols`` as ``constant int``."""
    if dtype not in STORE:
        raise BadInputError(f"dtype: the Metal softmax takes fp32, fp16 or bf16, not {dtype}")
    s.validate()
    t = STORE[dtype]
    g, stride = s.simdgroups, SIMD_WIDTH * s.simdgroups
    shared = "" if g == 1 else (f"    threadgroup float part_m[{s.rows * g}];\n"
                                f"    threadgroup float part_s[{s.rows * g}];\n")
    builtins = ",\n        ".join(KERNEL_BUILTINS)
    return PRELUDE + f"""
// {s.name}: {s.rows} row(s) a threadgroup, {g} simdgroup(s) a row; lanes {stride} columns apart
kernel void {KERNEL}(device const {t}* x [[buffer(0)]], device {t}* y [[buffer(1)]],
        constant int& rows [[buffer(2)]], constant int& cols [[buffer(3)]],
        {builtins}) {{
{shared}    const uint row = tgid.x * {s.rows} + sgid / {g};
    const bool live = row < uint(rows);
    const uint n = uint(cols), first = (sgid % {g}) * 32 + lane;
    device const {t}* xr = x + (live ? row : 0u) * n;
    float m = TR_LOWEST, s = 0.0f;
    if (live) {{
        for (uint c = first; c < n; c += {stride}) {{
            const float v = tr_in(xr[c]);
            if (v > m) {{ s = s * exp(m - v) + 1.0f; m = v; }}
            else if (as_type<uint>(v) != 0xff800000u) {{ s += exp(v - m); }}
        }}
    }}
{_reduce(s)}    if (!live) return;
    device {t}* yr = y + row * n;
    if (rs > 0.0f) {{
        const float inv = 1.0f / rs;
        for (uint c = first; c < n; c += {stride}) {{
            const float v = tr_in(xr[c]);
            yr[c] = tr_out_{t}(as_type<uint>(v) == 0xff800000u ? 0.0f : exp(v - rm) * inv);
        }}
    }} else {{  // -inf throughout (or a NaN): NaN, as the reference
        for (uint c = first; c < n; c += {stride}) yr[c] = tr_out_{t}(as_type<float>(0x7fc00000u));
    }}
}}
"""


def grid(rows: int, s: MetalSoftmaxSchedule) -> tuple[int, int, int]:
    return (-(-rows // s.rows), 1, 1)
