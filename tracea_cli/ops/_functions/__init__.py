"""The op functions of ``tracea.ops``, one file per op in this folder (``gemm.py``, ``conv2d.py``, ...): each
checks its arguments, makes the IR value of its call and names its vendor fallback; the routing is
_dispatch's. A file offers its function by its ``__all__`` and takes its place among the others by its
``ORDER``, and names its PyTorch pieces (``TORCH_PIECES``, held by ``_torch/<op>.py``); ``tracea.ops``
offers every name gathered here (``from ._functions import *``), so a new op's
function is its file here and nothing else lists it.

Each op function makes its call's key and goes through _dispatch.prepared: a signature prepared by an earlier
call runs its launch at once; any other call takes the slow path below it (every check, the route, the
kernel), which prepares the key where the kernel ran (MISS) or prepares nothing (RETRY)."""

from __future__ import annotations

from typing import Any

from tracea.emitters.core import ordered_modules

_MODULES = ordered_modules(__name__, __path__)

# every op function of this folder's files, in their ORDER
FUNCTIONS: dict[str, Any] = {name: getattr(m, name) for m in _MODULES for name in m.__all__}
# the names of the ops' PyTorch pieces -> the module of _torch/ that holds each (imported on first use)
TORCH_PIECES: dict[str, str] = {name: f"_torch.{m.__name__.rsplit('.', 1)[1]}" for m in _MODULES
                                for name in m.TORCH_PIECES}
globals().update(FUNCTIONS)
__all__ = list(FUNCTIONS)
