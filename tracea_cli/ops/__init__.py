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
import importlib.util
import inspect
import sys
from collections.abc import Callable
from typing import Any

import numpy as np

from tracea.doctor.errors import BadInputError, ToolchainMissingError

from . import _engine, _functions, _prepared
from ._arrays import shown as _shown
from ._dispatch import EXPLAINING
from ._dispatch import last_route as _last_route
from ._engine import Route
from ._functions import *  # noqa: F403 - the op functions, named in _functions.__all__

# The PyTorch pieces, loaded on first use (each module imports torch), by the module that holds them: each
# op's (its nn.Module stand-in, named by its file in _functions/, held in _torch/) and the compile backend's.
_TORCH_PIECES = {**_functions.TORCH_PIECES, "register_compile_backend": "compile_backend",
                 "last_report": "compile_backend", "format_report": "compile_backend"}

# Without torch the PyTorch pieces are not offered: ``from tracea.ops import *`` and help(tracea.ops) read
# every name here (find_spec looks for torch without importing it).
__all__: list[str] = []
__all__ += _functions.__all__  # the op functions (gemm, conv2d, ...), each offered where it is written
__all__ += ["explain", "allow_fallback", "clear_cache", "stats", "Route"]
if importlib.util.find_spec("torch") is not None:
    __all__ += list(_TORCH_PIECES)

_FUNCTIONS: dict[str, Callable[..., Any]] = {name: getattr(_functions, name) for name in _functions.__all__}


def _explainable(fn: Any) -> Callable[..., Any] | None:
    """The op function ``fn`` names or is, or a conv layer whose forward is Tracea's (a ``TraceaConv2d``, or
    any ``nn.Conv2d`` while ``patch_conv2d()`` holds); None for anything else, which explain must not call."""
    if isinstance(fn, str):
        return _FUNCTIONS.get(fn)
    if any(fn is f for f in _FUNCTIONS.values()):
        return fn
    pieces = sys.modules.get(f"{__name__}._torch")
    if pieces is not None and getattr(type(fn), "forward", None) in pieces.FORWARDS:
        return fn
    return None


def explain(fn: str | Callable[..., Any] | None = None, *args: Any, **kwargs: Any) -> Route:
    """Which path ``fn(*args, **kwargs)`` would take, and why, without running it (no kernel is built);
    ``fn``: an op's name ("conv2d"), the function (``tracea.ops.conv2d``), or a ``TraceaConv2d`` or
    ``TraceaLinear`` layer (then ``args`` is its input). With no ``fn``: the route of this thread's last call, which ran. The
    returned ``Route`` prints as text; its fields (``path``, ``reason``, ``variant``, ``schedule_source``,
    ``in_process``, ``build_cache_hit``, ...) are there for programs."""
    if fn is None:
        if args or kwargs:
            raise BadInputError("explain: arguments were given but no op", "explain(tracea.ops.gemm, a, b)")
        route = _last_route()
        if route is None:
            raise BadInputError("explain: no tracea.ops call has run in this thread yet",
                                "explain(tracea.ops.gemm, a, b) says what a call would do")
        return route
    target = _explainable(fn)
    if target is None:
        what = (_shown(fn, 40) if isinstance(fn, str) else f"{fn.__name__}()" if inspect.isroutine(fn)
                else type(fn).__name__)
        raise BadInputError(f"explain: unknown op {what}; known: {', '.join(_FUNCTIONS)}",
                            "pass the name, the function, or a TraceaConv2d or TraceaLinear layer")
    try:  # the call's arguments as the op takes them: a missing or unknown one is said, not a TypeError
        inspect.signature(target).bind(*args, **kwargs)
    except TypeError as exc:
        raise BadInputError(f"explain: {getattr(target, '__name__', type(target).__name__)}: {exc}",
                            "explain(fn, *args, **kwargs) takes the arguments of fn itself") from None
    token = EXPLAINING.set(True)
    try:
        return target(*args, **kwargs)
    finally:
        EXPLAINING.reset(token)


def allow_fallback(flag: bool = True) -> None:
    """False: a call the kernels cannot take raises ``UnsupportedError`` (with the reason) instead of running
    the vendor call. Process-wide."""
    if not isinstance(flag, (bool, np.bool_)):
        raise BadInputError(f"allow_fallback: expected True or False, got {_shown(flag)}",
                            "allow_fallback(False) makes a fallback an UnsupportedError")
    _engine.policy(bool(flag))


def clear_cache() -> None:
    """Forget the in-process kernels and routing choices (the next call plans again and reads the tuning
    database again; the on-disk build cache still spares the compile) and reset ``stats()``. A kernel that a
    captured CUDA graph launches keeps its scratch (split-K workspace, semaphores) until the process ends, so a
    graph captured before still replays correctly."""
    _engine.clear()
    _prepared.clear()


def stats() -> dict[str, int]:
    """Counts since the last ``clear_cache``: ``builds`` (kernels built in this process), ``kernel_hits``
    (calls served by a kernel built earlier), ``tracea`` (calls that ran a Tracea kernel), ``fallbacks``,
    ``slow_path`` (calls that ran every check and the routing) and ``fast_path`` (calls of a signature an
    earlier call prepared: the launch alone, docs/ops.md "Host time")."""
    got = dict(_engine.STATS)
    fast = got.get("fast_path", 0)
    if fast:  # a prepared call ran a kernel built earlier: counted once, where the call is cheapest
        got["kernel_hits"] = got.get("kernel_hits", 0) + fast
        got["tracea"] = got.get("tracea", 0) + fast
    return got


def __getattr__(name: str) -> Any:
    where = _TORCH_PIECES.get(name)
    if where is None:
        raise AttributeError(f"module 'tracea.ops' has no attribute {name!r}")
    try:
        module = importlib.import_module(f"{__name__}.{where}")
    except ModuleNotFoundError as exc:
        if exc.name != "torch" and not (exc.name or "").startswith("torch."):
            raise
        raise ToolchainMissingError(f"tracea.ops.{name} needs PyTorch, which is not installed here",
                                    "pip install 'tracea[torch]'") from exc
    return getattr(module, name)
