"""``tracea doctor --tui`` driven headlessly (``App.run_test``) on recorded snapshots of real machines.

pytest-asyncio is not a dependency, so each test is a plain function that runs its scenario with
``asyncio.run``. Every snapshot in ``fixtures/snapshots`` is replayed, so a newly recorded machine
is covered without touching this file.
"""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("textual")  # an optional install (the GPU machine runs without it): skip, not a collection error

from textual.message import Message
from textual.notifications import Notify
from textual.pilot import Pilot
from textual.worker import WorkerState

from tracea.doctor.report import HostReport
from tracea.doctor.snapshot import build_report, load_snapshot, replay_raw
from tracea.doctor.sources.nvml import TELEMETRY_KEYS
from tracea.render import MARK_STYLE, amd_lines, apple_lines, ceiling_text, cpu_lines, gpu_lines
from tracea.tui.cpu_load import CpuLoad
from tracea.tui.details_panel import DetailsPanel
from tracea.tui.device_tree import DeviceTree
from tracea.tui.doctor_app import DoctorApp, snapshot_name
from tracea.tui.messages import ReportRefreshed, TelemetrySampled
from tracea.tui.telemetry_panel import TelemetryPanel

SNAPSHOTS = sorted((Path(__file__).parents[1] / "fixtures" / "snapshots").glob("*.json"))
SIZE = (160, 45)
FAST_POLL_S = 0.03


@pytest.fixture(params=SNAPSHOTS, ids=[p.stem for p in SNAPSHOTS])
def snapshot(request) -> tuple[HostReport, dict[str, Any] | None]:
    report = load_snapshot(request.param)
    return report, replay_raw(request.param)


class RecordedTelemetry:
    """Answers every poll with the NVML telemetry answers a snapshot recorded (no NVML involved)."""

    def __init__(self, raw: dict[str, Any] | None) -> None:
        devices = ((raw or {}).get("nvml") or {}).get("devices")
        self.samples = [
            {"index": d["index"], "calls": {k: v for k, v in d["calls"].items() if k in TELEMETRY_KEYS}}
            for d in (devices if isinstance(devices, list) else []) if "calls" in d
        ]
        self.polls = 0
        self.closed = False

    def poll(self) -> list[dict[str, Any]]:
        self.polls += 1
        return [dict(s) for s in self.samples]

    def close(self) -> None:
        self.closed = True


def drive(app: DoctorApp, scenario: Callable[[Pilot], Awaitable[None]]) -> list[Message]:
    """Run ``scenario`` against the app headlessly; return the messages the app posted."""
    posted: list[Message] = []

    async def main() -> None:
        async with app.run_test(size=SIZE, notifications=True, message_hook=posted.append) as pilot:
            await pilot.pause()
            await scenario(pilot)

    asyncio.run(main())
    return posted


async def wait_until(pilot: Pilot, condition: Callable[[], bool], timeout_s: float = 30.0) -> None:
    """Poll until ``condition`` holds: the timeout catches a hang, not slowness (a loaded 2-core machine)."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        await pilot.pause(0.02)


def notices(posted: list[Message]) -> list[str]:
    return [m.notification.message for m in posted if isinstance(m, Notify)]


def expected_keys(report: HostReport) -> list[str]:
    keys = ["host", "cpu", "nvidia"]
    keys += [f"nvidia:{i}" for i in range(len(report.nvidia.devices))]
    keys += ["amd"] + [f"amd:{i}" for i in range(len(report.amd.devices))]
    keys += ["apple"] + [f"apple:{i}" for i in range(len(report.apple.devices))]
    return keys + ["toolchains", "python", "ceilings", "checks"]


async def select(pilot: Pilot, key: str) -> DetailsPanel:
    """Put the cursor on ``key`` and wait for the details to show it. The move is made again while the cursor is
    elsewhere: on a loaded machine the tree's first layout (its lines, and the cursor it places on the host node
    after that refresh, ``DeviceTree.show``) can land after this move and undo it."""
    tree = pilot.app.query_one(DeviceTree)
    details = pilot.app.query_one(DetailsPanel)

    def placed() -> bool:
        if tree.cursor_key != key:
            tree.move_cursor(tree.node_for(key))
        return details.node_key == key

    await wait_until(pilot, placed)
    return details


def test_tree_has_a_node_per_section_and_device(snapshot) -> None:
    report, raw = snapshot

    async def scenario(pilot: Pilot) -> None:
        tree = pilot.app.query_one(DeviceTree)
        assert tree.keys == expected_keys(report)
        assert [str(c.label) for c in tree.root.children][0].startswith("CPU")
        for i, g in enumerate(report.nvidia.devices):
            assert f"GPU {g.cuda_index} · {g.name}" == str(tree.node_for(f"nvidia:{i}").label)
        if not report.nvidia.devices:
            assert str(tree.node_for("nvidia").label) == "NVIDIA GPUs (none)"

    drive(DoctorApp(report, raw, live=False), scenario)


def test_selecting_a_node_shows_what_tracea_doctor_says(snapshot) -> None:
    report, raw = snapshot
    expected: dict[str, list[tuple[str, str]]] = {"cpu": list(cpu_lines(report))}
    expected |= {f"nvidia:{i}": list(gpu_lines(g)) for i, g in enumerate(report.nvidia.devices)}
    expected |= {f"amd:{i}": list(amd_lines(g)) for i, g in enumerate(report.amd.devices)}
    expected |= {f"apple:{i}": list(apple_lines(g)) for i, g in enumerate(report.apple.devices)}

    async def scenario(pilot: Pilot) -> None:
        details = pilot.app.query_one(DetailsPanel)
        assert details.node_key == "host"
        host_text = details.plain
        await pilot.press("down")  # the keyboard path: Host -> CPU
        await wait_until(pilot, lambda: details.node_key == "cpu")
        assert details.plain != host_text
        for key, rows in expected.items():
            details = await select(pilot, key)
            assert details.rows == rows
            for _label, text in rows:
                assert text in details.plain
        for i, g in enumerate(report.nvidia.devices):
            details = await select(pilot, f"nvidia:{i}")
            assert f"{g.sm_count} SMs" in details.plain
            assert g.name in details.plain
        details = await select(pilot, "ceilings")
        for c in report.ceilings:
            assert ceiling_text(c)[0] in details.plain
        details = await select(pilot, "nvidia")
        if not report.nvidia.devices:
            assert report.nvidia.reason in details.plain

    drive(DoctorApp(report, raw, live=False), scenario)


def test_checks_panel_shows_each_mark_coloured_with_its_hint(snapshot) -> None:
    report, raw = snapshot

    async def scenario(pilot: Pilot) -> None:
        text = pilot.app.query_one("#checks").content
        for check in report.checks:
            symbol, colour = MARK_STYLE[check.mark]
            assert f"{symbol} {check.message}" in text.plain
            if check.hint:
                assert f"hint: {check.hint}" in text.plain
            start = text.plain.index(f"{symbol} {check.message}")
            assert any(colour in str(span.style) for span in text.spans if span.start == start)
        for error in report.errors:
            assert f"probe error: {error}" in text.plain

    drive(DoctorApp(report, raw, live=False), scenario)


def test_s_saves_a_snapshot_that_reads_back_to_the_same_report(snapshot, tmp_path: Path) -> None:
    report, raw = snapshot
    if raw is None:
        pytest.skip("a report without raw answers cannot be re-saved")
    app = DoctorApp(report, raw, live=False, save_dir=tmp_path)

    async def scenario(pilot: Pilot) -> None:
        await pilot.press("s")
        await pilot.press("s")  # a second save in the same second must not overwrite the first
        await wait_until(pilot, lambda: len(app.saved) == 2)

    posted = drive(app, scenario)
    first, second = app.saved
    assert first != second and {p.parent for p in app.saved} == {tmp_path}
    assert re.fullmatch(r"tracea-doctor-\d{8}-\d{6}\.json", first.name)
    assert any(str(first) in n for n in notices(posted))
    for path in app.saved:
        a, b = report.to_json(), load_snapshot(path).to_json()
        a.pop("origin"), b.pop("origin")
        assert json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


def test_snapshot_name_is_timestamped() -> None:
    import datetime as dt

    assert snapshot_name(dt.datetime(2026, 1, 2, 3, 4, 5)) == "tracea-doctor-20260102-030405.json"


def test_s_without_raw_answers_says_it_cannot_save(tmp_path: Path) -> None:
    report = load_snapshot(SNAPSHOTS[0])
    app = DoctorApp(report, None, live=False, save_dir=tmp_path)

    async def scenario(pilot: Pilot) -> None:
        await pilot.press("s")
        await pilot.pause()

    posted = drive(app, scenario)
    assert any("without raw answers" in n and "cannot be saved" in n for n in notices(posted))
    assert list(tmp_path.iterdir()) == []


def test_replay_does_not_poll_and_says_so(snapshot) -> None:
    report, raw = snapshot
    source = RecordedTelemetry(raw)
    app = DoctorApp(report, raw, live=False, telemetry=source, poll_interval_s=FAST_POLL_S)

    async def scenario(pilot: Pilot) -> None:
        await pilot.pause(FAST_POLL_S * 5)
        note = str(pilot.app.query_one("#telemetry-note").content)
        name = report.origin.partition(":")[2]
        assert f"replay of {name}, no live telemetry" in note
        for g in report.nvidia.devices:
            assert dict(gpu_lines(g))["telemetry"] in note  # the recorded values, in render's words
        if not report.nvidia.devices:
            assert report.nvidia.reason in note
        assert not pilot.app.query(CpuLoad)

    posted = drive(app, scenario)
    assert source.polls == 0 and app.telemetry_worker is None
    assert not any(isinstance(m, TelemetrySampled) for m in posted)


def test_r_in_replay_re_renders_in_place(snapshot) -> None:
    report, raw = snapshot

    async def scenario(pilot: Pilot) -> None:
        details = await select(pilot, "cpu")
        before = details.plain
        await pilot.press("r")
        await pilot.pause()
        tree = pilot.app.query_one(DeviceTree)
        assert tree.keys == expected_keys(report)
        await wait_until(pilot, lambda: tree.cursor_key == "cpu")
        assert details.node_key == "cpu" and details.plain == before

    posted = drive(DoctorApp(report, raw, live=False), scenario)
    assert any("re-rendered" in n for n in notices(posted))


def test_q_quits() -> None:
    report = load_snapshot(SNAPSHOTS[0])
    app = DoctorApp(report, replay_raw(SNAPSHOTS[0]), live=False)

    async def scenario(pilot: Pilot) -> None:
        await pilot.press("q")
        await wait_until(pilot, lambda: not app.is_running)

    drive(app, scenario)
    assert app.return_code == 0


def test_footer_shows_the_bindings() -> None:
    report = load_snapshot(SNAPSHOTS[0])
    app = DoctorApp(report, None, live=False)

    async def scenario(pilot: Pilot) -> None:
        shown = {b.key: b.description for _, b, enabled, _ in app.screen.active_bindings.values() if b.show}
        assert {"q": "Quit", "r": "Refresh", "s": "Save snapshot"}.items() <= shown.items()

    drive(app, scenario)


def test_live_telemetry_grows_then_stops_on_quit(snapshot) -> None:
    report, raw = snapshot
    source = RecordedTelemetry(raw)
    app = DoctorApp(report, raw, live=True, telemetry=source, poll_interval_s=FAST_POLL_S)

    async def scenario(pilot: Pilot) -> None:
        panel = pilot.app.query_one(TelemetryPanel)
        cpu = pilot.app.query_one(CpuLoad)
        await wait_until(pilot, lambda: app.polls >= 1)
        seen = app.polls
        first = len(cpu.sparkline.data or [])
        first_gpu = {i: len(g.cells["utilization_gpu"].sparkline.data or []) for i, g in panel.gpus.items()}
        await wait_until(pilot, lambda: app.polls >= seen + 3)
        assert len(cpu.sparkline.data) > first >= 1
        assert len(cpu.percents) > 0
        assert set(panel.gpus) == {d["index"] for d in source.samples}
        for g in report.nvidia.devices:
            widget = panel.gpus[g.nvml_index]
            assert f"GPU {g.cuda_index} · {g.name}" == widget.heading
            for key, cell in widget.cells.items():
                if widget.last[key].value is not None:
                    assert len(cell.sparkline.data) > first_gpu[g.nvml_index]
            util = widget.last["utilization_gpu"].value
            assert util == g.utilization_gpu_percent  # the recorded answer, drawn unchanged
            assert widget.last["power"].value == pytest.approx(g.power_draw_w)
        note = pilot.app.query_one("#telemetry-note")
        if not source.samples:
            assert f"no GPU telemetry: {report.nvidia.reason}" in str(note.content)
        await pilot.press("q")
        await wait_until(pilot, lambda: not app.is_running)

    drive(app, scenario)
    worker = app.telemetry_worker
    assert worker is not None and worker.state in (WorkerState.CANCELLED, WorkerState.SUCCESS)
    assert source.closed  # the worker's finally ran: the thread left its loop
    polls = source.polls
    time.sleep(FAST_POLL_S * 5)
    assert source.polls == polls


def test_r_live_reprobes_in_a_worker_and_keeps_the_selection(snapshot) -> None:
    report, raw = snapshot
    if raw is None:
        pytest.skip("needs raw answers to re-interpret")
    probes: list[float] = []

    def probe() -> tuple[dict[str, Any], HostReport]:
        probes.append(time.monotonic())
        return raw, build_report(raw)

    app = DoctorApp(report, raw, live=True, telemetry=RecordedTelemetry(raw), poll_interval_s=60, probe=probe)

    async def scenario(pilot: Pilot) -> None:
        await select(pilot, "cpu")
        await pilot.press("r")
        await wait_until(pilot, lambda: not app.refreshing and len(probes) == 1)
        tree = pilot.app.query_one(DeviceTree)
        await wait_until(pilot, lambda: tree.cursor_key == "cpu")
        assert tree.keys == expected_keys(report)
        assert pilot.app.query_one(DetailsPanel).rows == list(cpu_lines(report))

    posted = drive(app, scenario)
    assert sum(isinstance(m, ReportRefreshed) for m in posted) >= 1
    assert any("probed this machine again" in n for n in notices(posted))


def test_a_failing_probe_keeps_the_old_report() -> None:
    report = load_snapshot(SNAPSHOTS[0])

    def probe() -> tuple[dict[str, Any], HostReport]:
        raise RuntimeError("sysfs went away")

    app = DoctorApp(report, None, live=True, telemetry=RecordedTelemetry(None), poll_interval_s=60, probe=probe)

    async def scenario(pilot: Pilot) -> None:
        await pilot.press("r")
        await wait_until(pilot, lambda: not app.refreshing)
        assert app.report is report

    posted = drive(app, scenario)
    assert any("probe failed: RuntimeError: sysfs went away" in n for n in notices(posted))


def test_textual_loads_only_when_the_tui_opens() -> None:
    """``tracea --help`` must not pay for Textual; the TUI's plain-value modules must not need it."""
    code = ("import sys, tracea.app, tracea.tui.model, tracea.tui.samples; "
            "sys.exit('textual' in sys.modules)")
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0
