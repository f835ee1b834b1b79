"""``tracea.ops``: Tracea's kernels on your own arrays. NumPy arrays and torch tensors in, the same kind,
dtype and device out (docs/ops.md).

    y = tracea.ops.gemm(a, b, bias=bias, epilogue="bias,gelu")
    y = tracea.ops.conv2d(x, w, b, stride=2, padding=1)
    print(tracea.ops.explain(tracea.ops.conv2d, x, w, b, stride=2, padding=1))

Each call is routed (_engine.py): the backend of the data's device, the planner's variant, the tuned
schedule when the tuning database holds one for this environment (else the heuristic one), the kernel built
once and cached. What the kernels do not take runs the vendor call (torch's op; NumPy in float64), and
``explain`` says which path runs and why. torch is imported only by the PyTorch pieces (``TraceaConv2d``,
``patch_conv2d``) and never by ``import tracea``.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from . import _engine
from ._dispatch import EXPLAINING, last_route
from ._engine import Route
from ._functions import attention, conv2d, gemm, softmax

__all__ = ["gemm", "conv2d", "softmax", "attention", "explain", "allow_fallback", "clear_cache", "stats", "Route",
           "TraceaConv2d", "patch_conv2d", "unpatch_conv2d"]

_FUNCTIONS: dict[str, Callable[..., Any]] = {"gemm": gemm, "conv2d": conv2d, "softmax": softmax,
                                             "attention": attention}


def explain(fn: str | Callable[..., Any] | None = None, *args: Any, **kwargs: Any) -> Route:
    """Which path ``fn(*args, **kwargs)`` would take, and why, without running it (no kernel is built);
    ``fn``: an op's name ("conv2d"), the function (``tracea.ops.conv2d``), or a ``TraceaConv2d`` layer
    (then ``args`` is its input). With no ``fn``: the route of this thread's last call, which ran. The
    returned ``Route`` prints as text; its fields (``path``, ``reason``, ``variant``, ``schedule_source``,
    ``in_process``, ``build_cache_hit``, ...) are there for programs."""
    if fn is None:
        route = last_route()
        if route is None:
            from tracea.doctor.errors import BadInputError

            raise BadInputError("explain: no tracea.ops call has run in this thread yet",
                                "explain(tracea.ops.gemm, a, b) says what a call would do")
        return route
    target = _FUNCTIONS.get(fn) if isinstance(fn, str) else fn
    if target is None or not callable(target):
        from tracea.doctor.errors import BadInputError

        shown = repr(fn) if isinstance(fn, str) else type(fn).__name__
        raise BadInputError(f"explain: unknown op {shown[:60]}; known: {', '.join(_FUNCTIONS)}",
                            "pass the name, the function, or a TraceaConv2d layer")
    token = EXPLAINING.set(True)
    try:
        return target(*args, **kwargs)
    finally:
        EXPLAINING.reset(token)


def allow_fallback(flag: bool = True) -> None:
    """False: a call the kernels cannot take raises ``UnsupportedError`` (with the reason) instead of running
    the vendor call. Process-wide."""
    _engine.policy(flag)


def clear_cache() -> None:
    """Forget the in-process kernels and routing choices (the next call plans again and reads the tuning
    database again; the on-disk build cache still spares the compile) and reset ``stats()``."""
    _engine.clear()


def stats() -> dict[str, int]:
    """Counts since the last ``clear_cache``: ``builds`` (kernels built in this process), ``kernel_hits``
    (calls served by a kernel built earlier), ``tracea`` (calls that ran a Tracea kernel), ``fallbacks``."""
    return dict(_engine.STATS)


def __getattr__(name: str) -> Any:
    if name in ("TraceaConv2d", "patch_conv2d", "unpatch_conv2d"):
        from . import torch_nn

        return getattr(torch_nn, name)
    if name in ("register_compile_backend", "last_report"):  # torch.compile(backend="tracea"), compile_backend.py
        return getattr(importlib.import_module(f"{__name__}.compile_backend"), name)
    raise AttributeError(f"module 'tracea.ops' has no attribute {name!r}")
