"""The PyTorch pieces of ``tracea.ops``, one file per op in this folder: each registers its custom ops for
``torch.compile(backend="tracea")`` (``compile_choice.custom_op``, torch's own op beside each), says how the
backend finds the op's torch calls in a graph (``MATCHES``) and holds the ``nn.Module`` Tracea stands in for,
if torch has one (``PIECES``: ``TraceaConv2d``, ``patch_conv2d``, ...; ``FORWARDS``, what makes a layer
Tracea's for ``explain``). Read in the files' ``ORDER``; the folder is the list, so an op's PyTorch pieces are
its file here and nothing else lists them. Importing this package imports torch."""

from __future__ import annotations

from typing import Any

from tracea.emitters.core import ordered_modules

_MODULES = ordered_modules(__name__, __path__)

MATCHES: tuple[Any, ...] = tuple(m for mod in _MODULES for m in mod.MATCHES)
PIECES: dict[str, Any] = {name: piece for mod in _MODULES for name, piece in mod.PIECES.items()}
FORWARDS: tuple[Any, ...] = tuple(f for mod in _MODULES for f in mod.FORWARDS)
