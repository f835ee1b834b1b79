"""What `tracea export` refuses, each as one line and an exit code: a bad --prefix, bad input (exit 2, nothing
written), and what cannot be exported yet or that an exported launcher cannot feed (exit 3, with a hint where
another variant can)."""

from __future__ import annotations

import json

import pytest
from export_packages import has_nvrtc, needs_nvrtc, one_line_exit, tracea


@pytest.mark.parametrize("bad", ["1gemm", "my-gemm", "int", "class", "_gemm", "a__b", "gemm_", "std", "tracea",
                                 "test", "x" * 49, "", "gemm kernel"])
def test_a_bad_prefix_is_one_line_and_exit_2(tmp_path, capsys, bad):
    from tracea.__main__ import main

    out = tmp_path / "pkg"
    code = main(["export", "gemm", "--m", "8", "--backend", "cpu", "--out", str(out), "--prefix", bad])
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert code == 2 and lines and lines[0].startswith("error:") and "--prefix" in lines[0], err
    assert all(ln.startswith(("error:", "hint:")) for ln in lines) and "Traceback" not in err, err
    assert not out.exists()


def test_bad_input_is_one_line_and_exit_2(tmp_path):
    gemm = ["gemm", "--m", "32", "--backend", "cpu"]
    one_line_exit(tracea("export", "gemmm", "--m", "4", "--out", str(tmp_path / "a")), 2, "No such command")
    one_line_exit(tracea("export", *gemm, "--out", str(tmp_path / "a"), "--bogus"), 2, "No such option")
    full = tmp_path / "full"
    full.mkdir()
    (full / "mine.txt").write_text("keep")
    one_line_exit(tracea("export", *gemm, "--out", str(full)), 2, "not empty.*--force")
    assert [p.name for p in full.iterdir()] == ["mine.txt"]
    r = tracea("export", *gemm, "--out", str(full), "--force")
    prefix = json.loads((full / "manifest.json").read_text())["prefix"]
    assert r.returncode == 0 and (full / "include" / prefix / "tracea.h").is_file() and (full / "mine.txt").is_file()
    blocker = tmp_path / "file"
    blocker.write_text("x")
    one_line_exit(tracea("export", *gemm, "--out", str(blocker / "sub")), 2, "cannot create")
    one_line_exit(tracea("export", *gemm, "--out", str(blocker)), 2, "not a folder")
    one_line_exit(tracea("export", *gemm, "--out", str(tmp_path / "b"), "--schedule", "{nope"), 2, "--schedule")
    one_line_exit(tracea("export", *gemm, "--out", str(tmp_path / "b"), "--schedule", '{"mr": "x"}'), 2, "")
    one_line_exit(tracea("export", *gemm, "--out", str(tmp_path / "b"), "--arch", "sm_80"), 2, "--arch")
    one_line_exit(tracea("export", *gemm, "--out", str(tmp_path / "b"), "--variant", "cpu-portable.softmax"), 2,
                   "computes softmax, not gemm")
    one_line_exit(tracea("export", *gemm, "--out", str(tmp_path / "b"), "--variant", "cuda-simt.gemm"), 2,
                   "cuda variant of gemm")
    assert not (tmp_path / "b").exists()  # nothing written for a refused command


def test_what_cannot_be_exported_is_refused_with_a_reason(tmp_path):
    r = tracea("export", "attention", "--heads", "2", "--seq", "64", "--head-dim", "64", "--block-mask", "0.5",
               "--block-size", "32", "--backend", "cpu", "--out", str(tmp_path / "a"))
    one_line_exit(r, 3, "block-mask cannot be exported yet")
    if has_nvrtc():  # the CUDA attention kernel's lse and tile lists are not in the ABI yet
        r = tracea("export", "attention", "--heads", "2", "--seq", "64", "--head-dim", "64", "--dtype", "bf16",
                   "--backend", "cuda", "--arch", "sm_80", "--out", str(tmp_path / "b"))
        one_line_exit(r, 3, "takes lse.*which exported launchers do not provide")
        # decode (the decode core: its key slices in the plan, a workspace) is refused the same way
        r = tracea("export", "attention", "--heads", "8", "--kv-heads", "2", "--seq", "1", "--seq-k", "1000",
                   "--head-dim", "64", "--dtype", "bf16", "--backend", "cuda", "--arch", "sm_90a",
                   "--out", str(tmp_path / "c"))
        one_line_exit(r, 3, "tracea_attn_decode.*takes lse.*which exported launchers do not provide")
    assert not any((tmp_path / n).exists() for n in "abc")


@needs_nvrtc
def test_hopper_kernels_the_launcher_cannot_feed_are_refused_with_a_hint(tmp_path):
    """The GEMM's rows must be TMA-addressable (16-byte multiples); the Hopper conv's maps (im2col) are
    not encoded by exported launchers."""
    r = tracea("export", "gemm", "--m", "256", "--n", "128", "--k", "100", "--dtype", "bf16", "--backend", "cuda",
               "--arch", "sm_90a", "--variant", "cuda-wgmma.gemm", "--out", str(tmp_path / "a"))
    one_line_exit(r, 3, "TMA needs a multiple of 16 B")
    assert "--variant cuda-mma-sync.gemm" in r.stderr
    r = tracea("export", "conv2d", "--c", "64", "--h", "14", "--w", "14", "--k", "64", "--dtype", "fp16",
               "--layout", "nhwc", "--backend", "cuda", "--arch", "sm_90a", "--variant", "cuda-wgmma.conv2d",
               "--out", str(tmp_path / "b"))
    one_line_exit(r, 3, "tensor maps that exported launchers encode for the GEMM only")
    assert "--variant cuda-mma-sync.conv2d" in r.stderr
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()
