"""What a dispatch of a ``Launch`` needs on any runner, without Metal: the arguments packed in
``[[buffer(i)]]`` order (storage arrays and the ``constant`` scalars' bytes), the launch held to what its
pipeline and the GPU take, GPU seconds summarized as a ``Timing``. Metal through PyObjC (runtime.py) and
PyTorch's MPS shader library (ops_mps.py) both use them; tests check them with NumPy on any machine."""

from __future__ import annotations

import statistics
from typing import Any

import numpy as np

from tracea.doctor.errors import BadInputError, LaunchError

from ..timing import Timing, _p95
from .core import MAX_THREADS, SIMD_WIDTH, Launch

# Apple publishes no size of its chips' system-level cache; 256 MiB is far past any on-chip cache, so each
# timed sample starts from memory, as device_baselines.py's flush of twice the L2 does on CUDA
FLUSH_BYTES = 256 << 20
SCALARS = {"i32": np.int32, "u32": np.uint32, "f32": np.float32}
STORAGE_KINDS = "fiu"  # float, signed and unsigned integer arrays (bf16 is uint16 bits); not float64


def scalar_array(kind: str, value: Any) -> np.ndarray:
    """A ``constant`` scalar argument as the one-element array of its MSL type (int, uint, float): its bytes
    are what ``setBytes`` passes. ``BadInputError`` for another kind or a value its type cannot hold."""
    t = SCALARS.get(kind)
    if t is None:
        raise BadInputError(f"launch argument kind {kind!r} is not one of in, out, {', '.join(SCALARS)}")
    if kind != "f32":
        info = np.iinfo(t)
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or not info.min <= value <= info.max:
            raise BadInputError(f"{kind} argument {value!r} is not an integer from {info.min} to {info.max}")
    return np.array([value], dtype=t)


def pack(launch: Launch, buffers: dict[str, np.ndarray], out: np.ndarray) -> list[tuple[int, str, Any]]:
    """``launch.args`` in ``[[buffer(i)]]`` order as (i, "buffer", array) or (i, "bytes", bytes): the inputs by
    name from ``buffers``, the output ``out``, the scalars' bytes. Arrays are C-contiguous in a storage dtype
    (fp32 float32, fp16 float16, bf16 uint16 bits; integer index arrays); ``BadInputError`` otherwise, and
    for a missing input or a launch without exactly one output."""
    outs = sum(1 for kind, _ in launch.args if kind == "out")
    if outs != 1:
        raise BadInputError(f"{launch.name}: a launch writes one output, this one names {outs}")
    packed: list[tuple[int, str, Any]] = []
    for i, (kind, value) in enumerate(launch.args):
        if kind == "in":
            if value not in buffers:
                raise BadInputError(f"{launch.name}: no input {value!r} (given: {', '.join(sorted(buffers)) or 'none'})")
            packed.append((i, "buffer", _storage(str(value), buffers[value])))
        elif kind == "out":
            arr = _storage("out", out)
            if not arr.flags.writeable:
                raise BadInputError(f"{launch.name}: the output array is read-only")
            packed.append((i, "buffer", arr))
        else:
            packed.append((i, "bytes", scalar_array(kind, value).tobytes()))
    return packed


def _storage(name: str, arr: Any) -> np.ndarray:
    if not isinstance(arr, np.ndarray) or arr.dtype.kind not in STORAGE_KINDS or arr.dtype.itemsize > 4:
        what = f"{arr.dtype} array" if isinstance(arr, np.ndarray) else type(arr).__name__
        raise BadInputError(f"{name}: a {what} is not a storage array (fp32 float32, fp16 float16, bf16 uint16 bits)")
    if not arr.flags.c_contiguous:
        raise BadInputError(f"{name}: the array is not C-contiguous")
    return arr


def check_launch(launch: Launch, max_threads: int, max_memory: int, static_memory: int = 0) -> None:
    """The launch within what its pipeline and the device take: threads per threadgroup a multiple of the
    SIMD width and at most ``max_threads`` (the pipeline's own limit, which registers can make lower than
    1024), threadgroup memory at most ``max_memory``; ``LaunchError`` in one line otherwise (a schedule the
    planner let through that this GPU refuses is a failed run, not bad input)."""
    if any(int(d) < 1 for d in (*launch.grid, *launch.block)):
        raise BadInputError(f"{launch.name}: grid {launch.grid} and block {launch.block} must be positive")
    threads = launch.threads
    if threads % SIMD_WIDTH:
        raise LaunchError(f"{launch.name}: {threads} threads per threadgroup is not a multiple of {SIMD_WIDTH}")
    limit = min(int(max_threads), MAX_THREADS)
    if threads > limit:
        raise LaunchError(f"{launch.name}: {threads} threads per threadgroup, its pipeline takes at most {limit}")
    memory = max(int(static_memory), launch.threadgroup_bytes)
    if memory > int(max_memory):
        raise LaunchError(f"{launch.name}: {memory} bytes of threadgroup memory, the GPU gives at most {max_memory}")


def timing_of(seconds: list[float]) -> Timing:
    """Median, p95 and fastest of GPU times in seconds, in milliseconds; ``LaunchError`` where the GPU
    reported no time (a command buffer that did not run)."""
    if not seconds or not all(s > 0 for s in seconds):
        raise LaunchError("the GPU reported no time for a timed command buffer")
    ms = sorted(s * 1e3 for s in seconds)
    return Timing(statistics.median(ms), _p95(ms), ms[0], len(ms))
