"""The environment fingerprint: what a measured result or a tuned schedule depends on. A change in any
part (device, driver, compiler, CPU flags, Tracea version) is a different fingerprint, so a stored
result is a miss, never a stale hit.

The doctor describes the host; the backend adds its own facts (its compiler, its devices: the backend's
``environment``, emitters/backend.py), so callers go through ``tracea.emitters.registry.fingerprint``,
which combines the two. The doctor sits below the emitters and never imports them."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

from .report import HostReport


def environment(host: HostReport, backend: str, facts: Mapping[str, Any]) -> dict[str, Any]:
    """The fields every backend shares, plus ``facts``: what backend ``backend`` adds about this host
    (required: a fingerprint without them would silently miss every stored result)."""
    cpu = host.cpu
    env: dict[str, Any] = {
        "tracea": host.tracea_version,
        "backend": backend,
        "cpu": cpu.model,
        "machine": cpu.architecture,
        "isa": cpu.isa,
    }
    clash = set(env) & set(facts)
    if clash:
        raise ValueError(f"backend {backend!r} facts overwrite the common fields {sorted(clash)}")
    env.update(facts)
    return env


def digest(env: Mapping[str, Any]) -> str:
    """The 16-hex-digit hash of an environment (keys sorted, values as JSON; anything else as text)."""
    blob = json.dumps(env, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def fingerprint(host: HostReport, backend: str, facts: Mapping[str, Any]) -> str:
    return digest(environment(host, backend, facts))
