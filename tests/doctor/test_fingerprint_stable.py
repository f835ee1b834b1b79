"""The environment fingerprint of each recorded snapshot, per backend, recorded before the backend protocol
took over the backend's part of it (tests/fixtures/fingerprints.json). A tuned schedule is stored under its
fingerprint: a changed value would make every stored result a miss, so the values stay byte-identical."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tracea.doctor.snapshot import load_snapshot

FIXTURES = Path(__file__).parents[1] / "fixtures"
RECORDED = json.loads((FIXTURES / "fingerprints.json").read_text())


@pytest.mark.parametrize("key", sorted(RECORDED))
def test_fingerprint_is_unchanged(key):
    from tracea.emitters.registry import environment, fingerprint

    machine, backend = key.split("/")
    host = load_snapshot(FIXTURES / "snapshots" / f"{machine}.json")
    assert json.loads(json.dumps(environment(host, backend), default=str)) == RECORDED[key]["environment"]
    assert fingerprint(host, backend) == RECORDED[key]["fingerprint"]
