"""Whether a tune's timings pause the dashboard's rendering (tracea_cli/tui/tune_app.needs_quiet_timing): asked of
the backend (``ON_DEVICE``), never of its name. A host backend's timings share the cores with the dashboard; a
device backend's do only on a machine of few cores; a simulated run times nothing; a pool times elsewhere."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from tracea.tui import tune_app


def _config(backend, simulate=False, workers=1, cluster=None):
    return SimpleNamespace(target=SimpleNamespace(backend=backend, simulate=simulate),
                           evaluation=SimpleNamespace(workers=workers, cluster=cluster))


@pytest.mark.parametrize("cores, cuda_quiet", [(2, True), (16, False)])
def test_quiet_timing_follows_where_the_backend_runs(monkeypatch, cores, cuda_quiet):
    monkeypatch.setattr(tune_app.os, "cpu_count", lambda: cores)
    assert tune_app.needs_quiet_timing(_config("cpu")) is True
    assert tune_app.needs_quiet_timing(_config(None)) is True  # the planner's choice: timed as on the host
    assert tune_app.needs_quiet_timing(_config("cuda")) is cuda_quiet
    assert tune_app.needs_quiet_timing(_config("hip")) is cuda_quiet
    assert tune_app.needs_quiet_timing(_config("cpu", simulate=True)) is False
    assert tune_app.needs_quiet_timing(_config("cpu", workers=2)) is False
