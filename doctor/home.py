"""Where Tracea keeps its files: ``$TRACEA_HOME`` when set, else the platform's user folders.

Every layer asks here (the runs and the tuning database under the data folder, the compile caches under
the cache folder), so a ``TRACEA_HOME`` that points at a file or at a place that cannot be created is
one error naming the variable, wherever it is first needed.
"""

from __future__ import annotations

import os
from pathlib import Path

from .errors import BadInputError

HINT = "point TRACEA_HOME at a writable folder (it is created if missing), or unset it"


def _home() -> Path | None:
    raw = os.environ.get("TRACEA_HOME")
    if not raw:  # unset or empty: the platform's folders
        return None
    path = Path(raw).expanduser().absolute()
    for existing in (path, *path.parents):  # the nearest part that exists must be a folder
        if existing.exists():
            if not existing.is_dir():
                where = "" if existing == path else f" ({existing} is a file)"
                raise BadInputError(f"TRACEA_HOME={raw} is not a folder{where}", HINT)
            break
    return path  # absolute: a run records its paths, the same folder whatever the working directory  # a run records its paths: the same folder whatever the working directory


def tracea_dir(kind: str = "data", *parts: str, create: bool = True) -> Path:
    """The folder ``parts`` under Tracea's ``kind`` folder ("data": runs and the tuning database;
    "cache": compiled kernels and probe caches), created unless ``create`` is False."""
    home = _home()
    if home is not None:
        base = home / "cache" if kind == "cache" else home
    else:
        import platformdirs

        base = Path(platformdirs.user_cache_dir("tracea") if kind == "cache" else platformdirs.user_data_dir("tracea"))
    path = base.joinpath(*parts)
    if create:
        try:
            path.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            where = f"TRACEA_HOME={os.environ['TRACEA_HOME']}" if home is not None else str(path)
            raise BadInputError(f"{where}: cannot create {path} ({exc.strerror or exc})",
                                HINT if home is not None else "set TRACEA_HOME to a writable folder") from None
    return path
