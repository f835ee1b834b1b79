"""Hostile unpacked folders: symbolic links (listed or not, to files or folders), unlisted files and
special files. No link is followed; a listed path through a link is refused; what the manifest does not
list is reported, a line per entry, and never read."""

from __future__ import annotations

import os
import shutil

import pytest


def test_unlisted_metrics_symlink_to_passwd_is_reported_not_read(hostile):
    """The issue's case: run/metrics.jsonl dropped from the manifest and made a link to /etc/passwd."""
    doc = hostile.manifest
    doc["files"].pop("run/metrics.jsonl")
    hostile.write_manifest(doc)
    metrics = hostile.root / "run" / "metrics.jsonl"
    metrics.unlink()
    metrics.symlink_to("/etc/passwd")
    out = hostile.replay("--yes")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "unlisted: run/metrics.jsonl: a symbolic link (to /etc/passwd); not followed" in out.stdout
    assert "root:" not in out.stdout  # nothing of the file reached the output
    assert out.stdout.index("unlisted:") < out.stdout.index("replay will")


@pytest.mark.parametrize("which", ["source", "op", "metrics"])
def test_listed_file_that_is_a_link_is_refused(hostile, which):
    """Even a link to a copy with the very bytes the manifest lists: replay follows no link."""
    kdir = hostile.kernel_dir
    path = {"source": kdir / "03_source.c", "op": kdir / "00_op.json",
            "metrics": hostile.root / "run" / "metrics.jsonl"}[which]
    copy = hostile.base / "elsewhere" / path.name
    copy.parent.mkdir()
    shutil.copy(path, copy)
    path.unlink()
    path.symlink_to(copy)
    out = hostile.replay("--yes")
    assert out.returncode == 2, out.stdout + out.stderr
    assert "is a symbolic link; replay follows none" in out.stderr.splitlines()[0], out.stderr


def test_folder_on_the_path_that_is_a_link_is_refused(hostile):
    run = hostile.root / "run"
    moved = hostile.base / "elsewhere-run"
    run.rename(moved)
    run.symlink_to(moved)
    out = hostile.replay("--yes")
    assert out.returncode == 2, out.stdout + out.stderr
    assert "bundle path run is a symbolic link" in out.stderr.splitlines()[0]


def test_manifest_that_is_a_link_is_not_a_bundle(hostile):
    manifest = hostile.root / "manifest.json"
    real = hostile.base / "real-manifest.json"
    manifest.rename(real)
    manifest.symlink_to(real)
    out = hostile.replay("--yes")
    assert out.returncode == 2 and "manifest.json is a symbolic link; replay follows none" in out.stderr, out.stderr


def test_unlisted_files_are_reported_one_line_each(hostile):
    (hostile.root / "evil.sh").write_text("#!/bin/sh\ntouch PWNED\n")
    (hostile.kernel_dir / "03_source_other.c").write_text("int main(void) { return 0; }\n")
    (hostile.root / "deep" / "er").mkdir(parents=True)
    (hostile.root / "deep" / "er" / "x.bin").write_bytes(b"\0")
    (hostile.root / "link-out").symlink_to("/")
    os.mkfifo(hostile.root / "fifo")
    out = hostile.replay("--yes")
    assert out.returncode == 0, out.stdout + out.stderr
    lines = [ln.strip() for ln in out.stdout.splitlines() if ln.strip().startswith("unlisted: ")]
    kdir = hostile.manifest["kernels"][0]["dir"]
    assert lines == sorted(lines) and len(lines) == 5, lines
    assert "unlisted: evil.sh: a file the manifest does not list" in lines
    assert f"unlisted: {kdir}/03_source_other.c: a file the manifest does not list" in lines
    assert "unlisted: deep/er/x.bin: a file the manifest does not list" in lines
    assert "unlisted: link-out: a symbolic link (to /); not followed" in lines
    assert "unlisted: fifo: a device, FIFO or socket" in lines
    assert "the bundle holds 5 entries its manifest does not list (ignored, never read):" in out.stdout


def test_unlisted_member_of_a_tar_is_reported(hostile):
    (hostile.root / "extra.txt").write_text("not in the manifest\n")
    out = hostile.replay("--yes", source=hostile.pack())
    assert out.returncode == 0, out.stdout + out.stderr
    assert "unlisted: extra.txt: a file the manifest does not list" in out.stdout


def test_the_untampered_bundle_replays_cleanly(hostile):
    """The control for this folder: the real bundle, unpacked, has nothing unlisted and replays."""
    out = hostile.replay("--yes")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "unlisted" not in out.stdout and "verified: rel err" in out.stdout
