"""The stem core on a GPU (skipped cleanly without one): every case verified against the float64
reference on fresh random inputs, the output poisoned first (every element must be written): ResNet's stem
at batch 1 and 2, 1, 3, 4 and 12 channels, odd sizes, strides 1 and 2, padding 0..3, dilation 2, bias and
relu, fp16 and bf16, and schedules of the space beside the hero (K split over warps, one patch stage)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from tracea.emitters.cuda import stem
from tracea.kernels import Conv2d, relative_error, tolerance
from tracea.kernels.dtypes import to_float64

pytestmark = pytest.mark.gpu

VARIANT = "cuda-mma-sync.conv2d"


class NoReport:
    nvidia = None


@dataclasses.dataclass(frozen=True)
class ConvBiasRelu(Conv2d):
    """A conv whose epilogue is bias then relu (the IR's Conv2d fuses bias alone)."""

    epilogue: tuple[str, ...] = ("bias", "relu")

    def reference(self, inputs):
        return np.maximum(super().reference(inputs), 0.0)


def conv(n=1, c=3, h=37, w=53, k=24, r=3, s=3, **kw):
    return Conv2d(n, c, h, w, k, r, s, layout="nhwc", dtype=kw.pop("dtype", "fp16"), **kw)


STEM = Conv2d(1, 3, 224, 224, 64, 7, 7, stride=2, padding=3, layout="nhwc", dtype="fp16")
CASES = [
    STEM, dataclasses.replace(STEM, n=2), dataclasses.replace(STEM, n=2, dtype="bf16", bias=True),
    conv(c=1), conv(c=3, stride=2, padding=3), conv(c=4, r=5, s=5, stride=2, padding=2, bias=True),
    conv(c=12, k=96, padding=1, dtype="bf16"), conv(n=2, c=3, dilation=2, padding=2, k=10),
    conv(c=5, k=7, r=2, s=4, stride=(2, 1), padding=(0, 3), dilation=(1, 2)),
    conv(n=3, c=2, h=9, w=5, k=130, padding=3, bias=True),  # K over two 64-channel blocks, tiny image
    conv(c=15, k=16, h=61, w=29, padding=0), conv(n=2, c=4, k=32, r=2, s=2, stride=2, dtype="bf16"),
    ConvBiasRelu(2, 3, 37, 53, 32, 7, 7, stride=2, padding=3, layout="nhwc", dtype="fp16", bias=True),
    ConvBiasRelu(1, 4, 40, 41, 64, 3, 3, padding=1, layout="nhwc", dtype="bf16", bias=True),
]


@pytest.fixture(autouse=True)
def _cache(kernel_home, monkeypatch):
    monkeypatch.setenv("TRACEA_HOME", str(kernel_home))


def check(op, sched, seed):
    from tracea.emitters import cuda

    k = cuda.build(op, VARIANT, sched, NoReport())
    inputs = op.random_inputs(np.random.default_rng(seed))
    out = np.full(op.output_shape(), np.nan if op.dtype.value != "bf16" else 0x7FC0, op.dtype.storage)
    k(inputs, out)
    err = relative_error(to_float64(out, op.dtype), op.reference(inputs))
    assert err <= tolerance(op), (sched, err)
    res = k.artifact.metadata["resources"]
    assert res["spills"] == 0, res
    return k, inputs


@pytest.mark.parametrize("op", CASES, ids=lambda o: o.signature[:56])
def test_hero_matches_the_reference(op):
    from tracea.emitters import cuda

    sched = cuda.hero_schedule(op, VARIANT, NoReport())
    assert isinstance(sched, stem.StemSchedule)
    k, inputs = check(op, sched, 16)
    t = k.time(inputs, warmup=1, repeats=5)
    assert 0 < t.min_ms <= t.p50_ms <= t.p95_ms and t.runs == 5


@pytest.mark.parametrize("sched", [stem.StemSchedule(pixels=64, warps=2, ksplit=2, stages=1),
                                   stem.StemSchedule(pixels=128, warps=8, ksplit=4, stages=2),
                                   stem.StemSchedule(pixels=384, warps=6, ksplit=2, stages=2),
                                   stem.StemSchedule(pixels=512, warps=8, ksplit=1, stages=1)],
                         ids=lambda s: s.name)
@pytest.mark.parametrize("op", [dataclasses.replace(STEM, n=2, bias=True), CASES[5], CASES[7]],
                         ids=lambda o: o.signature[:40])
def test_space_schedules_match_the_reference(op, sched):
    from tracea.doctor.errors import BadInputError
    from tracea.emitters import cuda

    try:  # on this GPU (its shared memory)
        cuda.validate_schedule(op, VARIANT, sched, NoReport())
    except BadInputError:
        pytest.skip(f"{sched.name} does not fit {op.signature}")
    check(op, sched, 17)
