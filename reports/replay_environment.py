"""What a pack-repro bundle recorded of the machine it ran on, against this one: the backends' fingerprinted
environments, Python, NumPy and the installed distributions (``tracea replay`` prints them before anything
runs; reports/replay.py opens and checks the bundle)."""

from __future__ import annotations

import json
import sys
from typing import Any

from tracea.doctor.errors import BadInputError

from .replay import Bundle


def current_environment(host: Any) -> dict[str, Any]:
    from tracea.emitters import registry

    return registry.environments(host)


def env_differences(bundle: Bundle, host: Any) -> list[tuple[str, Any, Any]]:
    """(field, recorded, now) for every fingerprinted field that differs, plus Python and NumPy."""
    recorded = bundle.manifest.get("env") or {}
    now = current_environment(host)
    out: list[tuple[str, Any, Any]] = []
    for backend, rec in recorded.items():
        cur = now.get(backend)
        if cur is None:
            out.append((f"{backend}", "present", "absent on this host"))
            continue
        r_env, c_env = rec.get("environment") or {}, cur.get("environment") or {}
        for key in sorted(set(r_env) | set(c_env)):
            if json.dumps(r_env.get(key), default=str) != json.dumps(c_env.get(key), default=str):
                out.append((f"{backend}.{key}", r_env.get(key), c_env.get(key)))
    if bundle.manifest.get("python") and bundle.manifest["python"] != sys.version.split()[0]:
        out.append(("python", bundle.manifest["python"], sys.version.split()[0]))
    packages = recorded_packages(bundle)
    from importlib.metadata import PackageNotFoundError, version

    for name in ("numpy",):  # the reference and the baseline run on it
        try:
            mine = version(name)
        except PackageNotFoundError:
            mine = None
        if packages.get(name) and packages[name] != mine:
            out.append((name, packages[name], mine))
    return out


def package_differences(bundle: Bundle) -> list[tuple[str, str | None, str | None]]:
    """(name, recorded version, installed version) for every distribution that differs."""
    from .bundle import installed_packages

    recorded = recorded_packages(bundle)
    if not recorded:
        return []
    now = {p["name"].lower(): p["version"] for p in installed_packages()}
    return [(n, recorded.get(n), now.get(n)) for n in sorted(set(recorded) | set(now)) if recorded.get(n) != now.get(n)]


def recorded_packages(bundle: Bundle) -> dict[str, str]:
    """packages.json as {name: version}; empty when absent or not of that shape."""
    try:
        rows = bundle.json("packages.json") if bundle.has("packages.json") else []
        return {p["name"].lower(): p["version"] for p in rows
                if isinstance(p.get("name"), str) and isinstance(p.get("version"), str)}
    except (BadInputError, TypeError, AttributeError):
        return {}
