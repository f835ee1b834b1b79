"""Snapshots replay to the report they were saved with; bad input is one line and exit 2; the JSON
schema stays stable; one failing source costs only its section."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tracea.doctor.errors import SnapshotError
from tracea.doctor.report import SCHEMA_VERSION, HostReport
from tracea.doctor.snapshot import build_report, load_snapshot

SNAPSHOTS = ["ci_vm.json", "h200_live.json", "h100_live.json", "h100_measured.json"]


def tracea(*args: str, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tracea", *args], capture_output=True, text=True, timeout=120, **kw)


def _without_origin(d: dict) -> dict:
    d = dict(d)
    d.pop("origin")
    return d


@pytest.mark.parametrize("name", SNAPSHOTS)
def test_recorded_snapshot_replays_to_the_saved_report(fixtures, name):
    path = fixtures / "snapshots" / name
    saved = json.loads(path.read_text())["report"]
    replayed = load_snapshot(path).to_json()
    assert _without_origin(replayed) == _without_origin(saved)


@pytest.mark.parametrize(("name", "gpu"), [("h100_live.json", "NVIDIA H100 80GB HBM3"), ("h200_live.json", "NVIDIA H200")])
def test_hopper_snapshots_report_the_hopper_facts(fixtures, name, gpu):
    g = load_snapshot(fixtures / "snapshots" / name).nvidia.devices[0]
    assert g.name == gpu
    assert g.sm_count == 132 and g.compute_capability == "9.0"
    assert g.shared_memory_per_block_optin_bytes == 232448
    assert {"bf16", "fp8"} <= set(g.precisions)


def test_h100_rendered_report_says_so(fixtures):
    out = tracea("doctor", "--input", str(fixtures / "snapshots" / "h100_live.json"), "--plain")
    assert out.returncode == 0, out.stderr
    for words in ("132 SMs", "compute capability 9.0", "227 KiB (232448 B)/block opt-in", "bf16", "fp8",
                  "replay:h100_live.json", "NVIDIA H100 80GB HBM3"):
        assert words in out.stdout


def test_measured_snapshot_shows_measured_beside_spec(fixtures):
    report = load_snapshot(fixtures / "snapshots" / "h100_measured.json")
    bw = next(c for c in report.ceilings if c.device == "cuda:0" and c.metric == "memory_bandwidth")
    assert bw.spec and bw.measured and 0.5 < bw.measured / bw.spec < 1.0
    mma = next(c for c in report.ceilings if c.device == "cuda:0" and c.metric == "bf16_tensor_flops")
    assert "verified" in mma.method and mma.measured < mma.spec


def test_json_output_is_the_versioned_report(fixtures):
    out = tracea("doctor", "--input", str(fixtures / "snapshots" / "h200_live.json"), "--json")
    doc = json.loads(out.stdout)
    assert doc["kind"] == "tracea-doctor-report" and doc["schema_version"] == SCHEMA_VERSION
    gpu = doc["nvidia"]["devices"][0]
    assert gpu["memory_total_bytes"] > 0 and gpu["sources"]["sm_count"] == "cuda-core"
    # null plus a reason: every null field of every section says why
    for section in (doc["cpu"], gpu, doc["host"], doc["python"]):
        for key, value in section.items():
            if value is None:
                assert key in section["unavailable"], key


def test_report_json_can_be_rendered_again(fixtures, tmp_path):
    out = tracea("doctor", "--input", str(fixtures / "snapshots" / "h200_live.json"), "--json")
    path = tmp_path / "report.json"
    path.write_text(out.stdout)
    again = tracea("doctor", "--input", str(path), "--plain")
    assert again.returncode == 0 and "132 SMs" in again.stdout
    resave = tracea("doctor", "--input", str(path), "--save", str(tmp_path / "x.json"))
    assert resave.returncode == 2 and "without raw answers" in resave.stderr


def test_schema_keys_are_stable(fixtures):
    """Renaming or removing a field is a schema change: bump SCHEMA_VERSION and regenerate
    fixtures/schema_v{N}_keys.json. Adding one is additive: add it there too."""
    expected = json.loads((fixtures / f"schema_v{SCHEMA_VERSION}_keys.json").read_text())
    report = load_snapshot(fixtures / "snapshots" / "h200_live.json").to_json()
    actual = {
        "report": sorted(report),
        "cpu": sorted(report["cpu"]),
        "nvidia": sorted(report["nvidia"]),
        "nvidia.device": sorted(report["nvidia"]["devices"][0]),
        "amd": sorted(report["amd"]),
        "apple": sorted(report["apple"]),
        "python": sorted(report["python"]),
        "host": sorted(report["host"]),
        "ceiling": sorted(report["ceilings"][0]),
        "check": sorted(report["checks"][0]),
        "tool": sorted(report["toolchains"][0]),
    }
    assert actual == expected


def test_round_trip_of_the_dataclasses(fixtures):
    report = load_snapshot(fixtures / "snapshots" / "h200_live.json")
    assert HostReport.from_json(report.to_json()) == report


@pytest.mark.parametrize(
    ("content", "words"),
    [
        (None, "not found"),
        ('{"kind": "tracea-doctor-snapshot", "schema_version": 1, "raw": {"cpu"', "not valid JSON"),
        ('{"kind": "tracea-doctor-snapshot", "schema_version": 99, "raw": {}}', "schema_version 99"),
        ('{"kind": "something-else", "schema_version": 1}', "not a Tracea doctor snapshot"),
        ("[1, 2, 3]", "not a JSON object"),
        ('{"kind": "tracea-doctor-snapshot", "schema_version": 1}', "no raw answers"),
        ("\x00\xff\xfe", "cannot read snapshot"),
    ],
)
def test_bad_snapshots_are_one_line_and_exit_2(tmp_path, content, words):
    path = tmp_path / "snap.json"
    if content is not None:
        path.write_bytes(content.encode("latin-1"))
    with pytest.raises(SnapshotError, match=words):
        load_snapshot(path)
    out = tracea("doctor", "--input", str(path))
    assert out.returncode == 2
    assert out.stderr.startswith("error: ") and words in out.stderr.splitlines()[0]
    assert "Traceback" not in out.stderr and len(out.stderr.splitlines()) <= 2
    assert out.stdout == ""


def test_truncated_real_snapshot(fixtures, tmp_path):
    text = (fixtures / "snapshots" / "h200_live.json").read_text()
    path = tmp_path / "cut.json"
    path.write_text(text[: len(text) // 2])
    out = tracea("doctor", "--input", str(path), "--json")
    assert out.returncode == 2 and "truncated" in out.stderr and "Traceback" not in out.stderr


@pytest.mark.parametrize("args", [["doctor", "--bogus"], ["--nope"], ["doctr"], ["doctor", "--input"]])
def test_unknown_flags_and_commands(args):
    out = tracea(*args)
    assert out.returncode == 2
    assert len(out.stderr.strip().splitlines()) == 1 and out.stderr.startswith("error: ")
    assert "Traceback" not in out.stderr


def test_debug_shows_the_traceback(tmp_path):
    out = tracea("--debug", "doctor", "--input", str(tmp_path / "missing.json"))
    assert out.returncode != 0 and "Traceback" in out.stderr and "SnapshotError" in out.stderr


def test_incompatible_options():
    out = tracea("doctor", "--input", "x.json", "--measure")
    assert out.returncode == 2 and "--measure" in out.stderr


def test_save_is_atomic_and_replayable(tmp_path):
    path = tmp_path / "deep" / "snap.json"
    out = tracea("doctor", "--save", str(path), "--json")
    assert out.returncode == 0, out.stderr
    assert [p.name for p in path.parent.iterdir()] == ["snap.json"]  # no temporary file left behind
    live = json.loads(out.stdout)
    replayed = load_snapshot(path).to_json()
    live.pop("kind")
    assert _without_origin(replayed) == _without_origin(live)


def test_a_failing_source_costs_only_its_section(fixtures):
    raw = json.loads((fixtures / "snapshots" / "h200_live.json").read_text())["raw"]
    raw["cpu"] = {"platform": {"machine": "x86_64"}, "proc_cpuinfo": 12345, "sysfs": "garbage"}
    report = build_report(raw)
    assert any(e.startswith("interpreting cpu") for e in report.errors)
    assert report.nvidia.devices[0].sm_count == 132
    assert report.toolchains and report.checks


def test_version_and_help():
    from importlib.metadata import version

    out = tracea("--version")
    assert out.returncode == 0 and out.stdout.strip() == f"tracea {version('tracea')}"
    helped = tracea("--help")
    assert helped.returncode == 0 and "doctor" in helped.stdout


def test_unwritable_save_path_is_bad_input(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    out = tracea("doctor", "--save", str(blocker / "snap.json"))
    assert out.returncode == 2 and out.stderr.startswith("error: cannot write snapshot")
    assert "Traceback" not in out.stderr


@pytest.mark.parametrize(
    ("edit", "words"),
    [
        (lambda d: d["checks"].append({"id": "x", "mark": "bogus", "message": "m"}), "Check.mark"),
        (lambda d: d["ceilings"][0].__setitem__("spec", "abc"), "Ceiling.spec"),
        (lambda d: d["cpu"].__setitem__("isa", "avx2"), "CpuInfo.isa"),
        (lambda d: d["nvidia"]["devices"][0].__setitem__("sm_count", "132"), "NvidiaGpu.sm_count"),
    ],
)
def test_hand_edited_report_files_are_bad_input(fixtures, tmp_path, edit, words):
    doc = json.loads(tracea("doctor", "--input", str(fixtures / "snapshots" / "h100_live.json"), "--json").stdout)
    edit(doc)
    path = tmp_path / "report.json"
    path.write_text(json.dumps(doc))
    out = tracea("doctor", "--input", str(path))
    assert out.returncode == 2 and words in out.stderr and "Traceback" not in out.stderr


def test_markup_in_a_file_name_is_printed_as_is(fixtures, tmp_path):
    path = tmp_path / "snap[red].json"
    path.write_text((fixtures / "snapshots" / "ci_vm.json").read_text())
    out = tracea("doctor", "--input", str(path), "--plain")
    assert out.returncode == 0 and "replay:snap[red].json" in out.stdout


def test_debug_anywhere_and_bare_commands():
    out = tracea("doctor", "--input", "/nonexistent.json", "--debug")
    assert "Traceback" in out.stderr and "SnapshotError" in out.stderr  # --debug after the command works too
    bare = tracea()
    assert bare.returncode == 0 and bare.stdout.startswith("Usage: tracea") and bare.stderr == ""
    group = tracea("plan")
    assert group.returncode == 0 and "gemm" in group.stdout


def test_a_closed_pipe_is_not_an_error(fixtures):
    cmd = f"{sys.executable} -m tracea doctor --input {fixtures / 'snapshots' / 'h100_live.json'} --plain | head -1"
    out = subprocess.run(["bash", "-o", "pipefail", "-c", cmd], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("Tracea doctor") and out.stderr == ""


def test_a_hung_source_costs_only_its_section(monkeypatch):
    import time as _time

    from tracea.doctor import snapshot

    monkeypatch.setattr(snapshot, "SOURCE_TIMEOUT_S", 1.0)
    monkeypatch.setattr(snapshot.amd, "collect", lambda: _time.sleep(30))  # a driver call that never returns
    t0 = _time.monotonic()
    raw = snapshot.collect_raw()
    assert _time.monotonic() - t0 < 10
    assert raw["amd"]["error"] == "Timeout"
    report = snapshot.build_report(raw)
    assert any("amd" in e and "did not answer" in e for e in report.errors)
    assert report.amd.devices == [] and "did not answer" in report.amd.reason
    assert report.cpu.logical_cores  # every other section is intact
