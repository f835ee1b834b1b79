"""Hostile bundles: every one is built for real with tarfile and must be refused with one clear line
(exit 2) by `tracea replay`, with nothing written outside the target folder and the target folder
itself left as it was."""

from __future__ import annotations

import gzip
import io
import json
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from tracea.doctor.errors import BadInputError
from tracea.reports.bundle import BUNDLE_KIND
from tracea.reports.safetar import safe_extract


def tracea(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tracea", *args], capture_output=True, text=True, timeout=120,
                          cwd=cwd, stdin=subprocess.DEVNULL)


def manifest(schema_version: int = 1, kind: str = BUNDLE_KIND) -> bytes:
    return json.dumps({"kind": kind, "schema_version": schema_version, "files": {}, "kernels": []}).encode()


def add_file(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    tar.addfile(info, io.BytesIO(data))


def add_link(tar: tarfile.TarFile, name: str, target: str, kind: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.linkname = target
    tar.addfile(info)


def build(path: Path, members: list) -> Path:
    with tarfile.open(path, "w:gz") as tar:
        for m in members:
            m(tar)
    return path


def file_(name: str, data: bytes = b"x") -> callable:
    return lambda tar: add_file(tar, name, data)


def link(name: str, target: str, kind: bytes = tarfile.SYMTYPE) -> callable:
    return lambda tar: add_link(tar, name, target, kind)


def device(name: str) -> callable:
    def add(tar: tarfile.TarFile) -> None:
        info = tarfile.TarInfo(name)
        info.type = tarfile.CHRTYPE
        info.devmajor, info.devminor = 1, 3
        tar.addfile(info)
    return add


GOOD = file_("b/manifest.json", manifest())

HOSTILE = {
    "dotdot": ([GOOD, file_("b/../../escaped.txt", b"pwned")], "climbs out of the folder"),
    "absolute": ([GOOD, file_("/tmp/tracea-absolute-escape.txt", b"pwned")], "absolute path"),
    "symlink_out": ([GOOD, link("b/evil", "/etc/passwd")], "symbolic link"),
    "symlink_then_write": ([GOOD, link("b/dir", ".."), file_("b/dir/escaped.txt", b"pwned")], "symbolic link"),
    "hardlink_out": ([GOOD, link("b/hard", "/etc/passwd", tarfile.LNKTYPE)], "hard link"),
    "device": ([GOOD, device("b/null")], "device, FIFO or other special file"),
    "duplicate": ([GOOD, file_("b/x", b"1"), file_("b/x", b"2")], "appears twice"),
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_hostile_member_refused_nothing_written(tmp_path, case):
    members, why = HOSTILE[case]
    outside = tmp_path / "outside"
    outside.mkdir()
    bundle = build(outside / "bundle.tar.gz", members)
    target = outside / "deep" / "target"
    before = sorted(p.name for p in outside.rglob("*"))
    out = tracea("replay", str(bundle), "--yes", "--into", str(target), cwd=outside)
    assert out.returncode == 2, (out.stdout, out.stderr)
    lines = out.stderr.strip().splitlines()
    assert lines[0].startswith("error: refusing bundle bundle.tar.gz:") and why in lines[0], out.stderr
    assert "Traceback" not in out.stderr
    assert sorted(p.name for p in outside.rglob("*")) == before  # no target, no escaped file
    assert not Path("/tmp/tracea-absolute-escape.txt").exists()
    assert not (tmp_path / "escaped.txt").exists()


def test_huge_member_refused_by_header_before_any_write(tmp_path):
    """A header claiming 300 MiB (above the 256 MiB member limit) is refused before its data is read;
    the archive need not even hold the data."""
    doc = manifest()
    first = tarfile.TarInfo("b/manifest.json")
    first.size = len(doc)
    info = tarfile.TarInfo("b/huge.bin")
    info.size = 300 << 20
    padded = doc + b"\0" * (-len(doc) % 512)
    data = first.tobuf() + padded + info.tobuf() + b"\0" * 4096  # a header that lies about its data
    bundle = tmp_path / "huge.tar.gz"
    bundle.write_bytes(gzip.compress(data))
    target = tmp_path / "t"
    out = tracea("replay", str(bundle), "--yes", "--into", str(target))
    assert out.returncode == 2 and "above the 268435456 byte limit" in out.stderr, out.stderr
    assert not target.exists()


def test_member_and_total_limits_count_real_bytes(tmp_path):
    bundle = build(tmp_path / "b.tar.gz", [GOOD, file_("b/big.bin", b"\1" * 5000)])
    with pytest.raises(BadInputError, match="above the 4096 byte limit"):
        safe_extract(bundle, tmp_path / "t1", max_member_bytes=4096)
    with pytest.raises(BadInputError, match="add up to more than 3000 bytes"):
        safe_extract(bundle, tmp_path / "t2", max_total_bytes=3000)
    assert not (tmp_path / "t1").exists() and not (tmp_path / "t2").exists()
    written = safe_extract(bundle, tmp_path / "t3")
    assert sorted(p.name for p in written) == ["big.bin", "manifest.json"]


@pytest.mark.parametrize("damage", ["truncated", "garbage", "flipped"])
def test_corrupted_archive_is_one_clear_line(tmp_path, damage):
    good = build(tmp_path / "good.tar.gz", [GOOD, file_("b/data.bin", bytes(range(256)) * 400)])
    data = good.read_bytes()
    if damage == "truncated":
        data = data[: len(data) // 2]
    elif damage == "garbage":
        data = b"this is not a tar.gz at all\n" * 10
    else:
        mid = len(data) // 2
        data = data[:mid] + bytes(b ^ 0xFF for b in data[mid:mid + 64]) + data[mid + 64:]
    bad = tmp_path / "bad.tar.gz"
    bad.write_bytes(data)
    target = tmp_path / "t"
    out = tracea("replay", str(bad), "--yes", "--into", str(target))
    assert out.returncode == 2, out.stderr
    assert out.stderr.startswith("error: bundle bad.tar.gz is corrupted"), out.stderr
    assert "Traceback" not in out.stderr
    assert not target.exists()


@pytest.mark.parametrize(("doc", "why"), [
    (manifest(schema_version=99), "schema_version 99; this Tracea reads 1"),
    (manifest(kind="something-else"), "not a Tracea repro bundle (manifest kind 'something-else')"),
    (b"[1, 2, 3]", "not a Tracea repro bundle"),
    (b"{not json", "bundle manifest is unreadable"),
])
def test_wrong_manifest_refused(tmp_path, doc, why):
    bundle = build(tmp_path / "b.tar.gz", [file_("b/manifest.json", doc)])
    out = tracea("replay", str(bundle), "--yes", "--into", str(tmp_path / "t"))
    assert out.returncode == 2 and why in out.stderr.splitlines()[0], out.stderr


def test_no_manifest_and_missing_file(tmp_path):
    bundle = build(tmp_path / "b.tar.gz", [file_("b/other.txt", b"hi")])
    out = tracea("replay", str(bundle), "--yes", "--into", str(tmp_path / "t"))
    assert out.returncode == 2 and "holds no Tracea bundle" in out.stderr, out.stderr
    out = tracea("replay", str(tmp_path / "absent.tar.gz"), "--yes")
    assert out.returncode == 2 and out.stderr.startswith("error: bundle not found"), out.stderr


def test_target_must_be_new_or_empty(tmp_path):
    bundle = build(tmp_path / "b.tar.gz", [GOOD])
    target = tmp_path / "t"
    target.mkdir()
    (target / "keep.txt").write_text("mine")
    with pytest.raises(BadInputError, match="is not empty"):
        safe_extract(bundle, target)
    assert [p.name for p in target.iterdir()] == ["keep.txt"]


@pytest.mark.parametrize("field", ["files", "kernels"])
def test_manifest_paths_cannot_leave_the_bundle(tmp_path, field):
    """A well-formed archive whose manifest points outside the bundle (a file list or a kernel folder
    with '..') is refused before anything is read from there."""
    secret = tmp_path / "secret.json"
    secret.write_text('{"op": "gemm"}')
    doc = {"kind": BUNDLE_KIND, "schema_version": 1, "files": {}, "kernels": []}
    if field == "files":
        doc["files"] = {"../../secret.json": {"size": 14, "sha256": "0" * 64}}
    else:
        doc["kernels"] = [{"dir": "../..", "variant": "cpu-avx2-fma.gemm", "backend": "cpu", "source": "secret.json"}]
    bundle = build(tmp_path / "b.tar.gz", [file_("b/manifest.json", json.dumps(doc).encode())])
    out = tracea("replay", str(bundle), "--yes", "--into", str(tmp_path / "t" / "u"))
    assert out.returncode == 2, out.stdout + out.stderr
    assert "outside the bundle" in out.stderr.splitlines()[0], out.stderr
