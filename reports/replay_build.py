"""The builds of a replay, one per mode (see replay.py): the backend's own build (the default), the
bundled source compiled (``--bundled-source``: the backend's ``build_from_source``), the bundled binary
loaded (``--binary``: its ``load_binary``). Each keeps the artifact it made in ``k.built``, so replay can
say afterwards what was compiled."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tracea.doctor.errors import UnsupportedError

from .bundle_check import shown

if TYPE_CHECKING:
    from .replay import Bundle, KernelPlan


def _keeping(k: KernelPlan, make: Any) -> Any:
    """``make`` (a backend's builder), keeping each artifact; the backend's refusals name the bundle's
    values terminal-safe."""
    def build(op: Any, variant: Any, schedule: Any, host: Any) -> Any:
        try:
            kernel = make(op, variant, schedule, host)
        except UnsupportedError as exc:
            raise UnsupportedError(shown(exc.message), exc.hint) from None
        k.built.append(kernel.artifact)
        return kernel

    return build


def builder(k: KernelPlan, bundle: Bundle) -> Any:
    """``build(op, variant, schedule, host)`` for ``bench``, as ``k.mode`` says."""
    from tracea.emitters import registry

    backend = registry.backend(k.backend)
    if k.mode == "own":
        return _keeping(k, backend.build)
    recorded = {**k.compile, "language": k.entry.get("language") or k.compile.get("language")}
    try:
        if k.mode == "binary":
            make = backend.load_binary(bundle.path(f"{k.dir}/{k.entry['binary']}"), k.entry.get("arch"),
                                       k.entry.get("name"), recorded, k.source or "")
        else:
            make = backend.build_from_source(k.source or "", k.entry.get("name"), k.flags, recorded)
    except UnsupportedError as exc:
        raise UnsupportedError(shown(exc.message), exc.hint) from None
    return _keeping(k, make)
