"""The operations, one file each: a module here defines an op (a frozen dataclass, subclass of ``Op``) and
registers it (``@register``), with its suites of shapes where it has them. Every module in this folder is
imported when ``tracea.kernels`` is, so a new op is one new file here: nothing else lists it (``OPS``,
``Op.from_json``, the CLI's ``op_options`` and the suites find it), and its class is offered as
``tracea.kernels.<ClassName>`` and ``tracea.kernels.ops.<ClassName>``."""

from __future__ import annotations

import importlib
import pkgutil

from ..op import OP_ALIASES, OPS, Op, canonical_op_name, register, relative_error, tolerance


def _import_op_files() -> dict[str, type]:
    """Import every op file of this folder (in name order; ``OPS`` keeps the ops' own ``order``) and return
    the classes they registered, by class name."""
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda i: i.name):
        importlib.import_module(f"{__name__}.{info.name}")
    return {cls.__name__: cls for cls in OPS.values()}


CLASSES = _import_op_files()
globals().update(CLASSES)

__all__ = ["OPS", "OP_ALIASES", "Op", "canonical_op_name", "register", "relative_error", "tolerance", *CLASSES]
