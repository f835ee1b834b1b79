"""The HIP row softmax (issue 19): fp32, bf16 or fp16 in and out, fp32 arithmetic, any rows and cols.

``rows_per_group`` rows per workgroup, one wavefront (64 lanes) a row: each lane walks its row 64 columns
apart keeping a running maximum and a sum rescaled to it (the online form: one pass to reduce), the 64
partial (max, sum) pairs are combined through LDS (no cross-lane shuffles, so the body is the same on a
64-lane wavefront and on the NVIDIA prelude's two warps), and a second pass writes exp(x - max) / sum.
A row's elements a lane reads are consecutive across the wavefront, so a load is one 64-element stretch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tracea.doctor.errors import BadInputError

from .render import HipRenderer
from .schedule import kind_fields

KIND = "hip-softmax"  # the schedule JSON's "kind"
KERNEL = "tr_hip_softmax"
STORE = {"fp32": "float", "bf16": "unsigned short", "fp16": "unsigned short"}


@dataclass(frozen=True)
class HipSoftmaxSchedule:
    rows_per_group: int = 4

    @property
    def threads(self) -> int:
        return 64 * self.rows_per_group

    @property
    def name(self) -> str:
        return f"softmax_r{self.rows_per_group}"

    def to_json(self) -> dict[str, int | str]:
        return {"kind": KIND, "rows_per_group": self.rows_per_group}

    @staticmethod
    def from_json(d: dict[str, Any]) -> HipSoftmaxSchedule:
        return HipSoftmaxSchedule(**kind_fields(d, KIND, HipSoftmaxSchedule))

    def features(self, op: Any) -> dict[str, float]:
        """None beside the fields (``Schedule``)."""
        return {}

    def validate(self, op: Any = None, target: Any = None) -> None:
        """The fields; neither the op nor the target enters."""
        if not 1 <= self.rows_per_group <= 15:
            raise BadInputError(f"rows_per_group: {self.rows_per_group} is outside 1..15 (a wavefront a row)")


def render(dtype: str, sched: HipSoftmaxSchedule, target: str) -> str:
    if dtype not in STORE:
        raise BadInputError(f"dtype: the HIP softmax takes fp32, bf16 or fp16, not {dtype}")
    sched.validate()
    t = STORE[dtype]
    load = "x" if dtype == "fp32" else "tr_to_float(x)"
    save = "y" if dtype == "fp32" else "tr_from_float(y)"
    sig = HipRenderer().kernel(KERNEL, sched.threads, (("X", False), ("Y", True)), ("rows", "cols"))
    return HipRenderer().prelude(target, dtype, sched.rows_per_group) + f"""
#define TR_NEG_INF __int_as_float(0xff800000)
typedef {t} T;
__device__ __forceinline__ float tr_in(const T x) {{ return {load}; }}
__device__ __forceinline__ T tr_out(const float y) {{ return {save}; }}
{sig}
  __shared__ float part_m[{sched.rows_per_group}][64];
  __shared__ float part_s[{sched.rows_per_group}][64];
  const int lane = TR_LANE, wave = TR_WAVE_ID;
  const long long row = (long long)blockIdx.x * {sched.rows_per_group} + wave;
  const bool live = row < rows;
  const {t}* x = X + (live ? row : 0) * (long long)cols;
  float m = TR_NEG_INF, s = 0.0f;
  if (live) {{
    for (int c = lane; c < cols; c += 64) {{
      const float v = tr_in(x[c]);
      if (v > m) {{ s = s * expf(m - v) + 1.0f; m = v; }} else if (v != TR_NEG_INF) {{ s += expf(v - m); }}
    }}
  }}
  part_m[wave][lane] = m;
  part_s[wave][lane] = s;
  TR_SYNC();
  float rm = TR_NEG_INF, rs = 0.0f;
  for (int i = 0; i < 64; ++i) rm = fmaxf(rm, part_m[wave][i]);
  for (int i = 0; i < 64; ++i) {{
    const float pm = part_m[wave][i];
    if (pm != TR_NEG_INF) rs += part_s[wave][i] * expf(pm - rm);
  }}
  if (!live) return;
  const float inv = 1.0f / rs;
  {t}* y = Y + row * (long long)cols;
  for (int c = lane; c < cols; c += 64) y[c] = tr_out(expf(tr_in(x[c]) - rm) * inv);
}}
"""


def grid(rows: int, sched: HipSoftmaxSchedule) -> tuple[int, int, int]:
    return ((rows + sched.rows_per_group - 1) // sched.rows_per_group, 1, 1)
