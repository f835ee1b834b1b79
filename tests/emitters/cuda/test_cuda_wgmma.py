"""The Hopper GEMM (cuda-wgmma): its 128B swizzle in the layout algebra against the TMA/wgmma pattern,
its schedule value, and NVRTC compiles for sm_90a over a sample of schedules (no GPU needed; a register
spill in the hero schedule fails). The GPU run itself is benchmarks/gpu/wgmma_run.py (test at the end,
gpu marker).
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tracea.doctor.errors import BadInputError
from tracea.emitters.cuda import hopper as W
from tracea.emitters.layout import TileLayout, TmaSwizzle
from tracea.kernels import Gemm

ROOT = Path(__file__).resolve().parents[3]


# ------------------------------------------------------------------------------------------ swizzle


def tma_128b_pattern(addr: np.ndarray) -> np.ndarray:
    """The PTX ISA's 128-byte swizzle, written from its definition rather than from CUTLASS: within each
    1024-byte block, the 16-byte chunk index of a 128-byte row (address bits 4..6) is XORed with the
    row's index in the block (bits 7..9); bits 0..3 and 10.. are untouched."""
    chunk = (addr >> 4) & 7
    row = (addr >> 7) & 7
    return (addr & ~np.int64(0x70)) | ((chunk ^ row) << 4)


def test_tma_128b_swizzle_in_the_algebra_is_the_hardware_pattern():
    addr = np.arange(0, 64 * 1024, dtype=np.int64)
    np.testing.assert_array_equal(TmaSwizzle("128B").apply(addr), tma_128b_pattern(addr))
    # And as a tile: element (r, c) of a 64 x 64 16-bit box sits in row r, chunk (c // 8) ^ (r % 8).
    lay = TileLayout(64, 64, 2, "row", swizzle=TmaSwizzle("128B"))
    for r in range(64):
        for c in range(64):
            assert lay.offset(r, c) == r * 128 + (((c // 8) ^ (r % 8)) * 16) + (c % 8) * 2


def test_recorded_gpu_probe_agrees_with_the_layout():
    """benchmarks/gpu/wgmma_run.py --phase probe TMA-loaded a tile on an H200 and compared every
    element's place with TileLayout(TmaSwizzle("128B")); the committed record must say all 4096 matched."""
    rec = json.loads((ROOT / "docs/device-runs/h200-cuda-kernels-and-tuner/wgmma/direct-stores-tma-probe/probe.json").read_text())
    assert rec["head"]["device"].startswith("NVIDIA H")
    assert rec["records"]["elements"] == 4096
    assert rec["records"]["mismatches_vs_layout"] == 0
    assert rec["records"]["mismatches_vs_unswizzled"] > 0  # the probe can tell swizzled from plain


def test_operand_layouts_give_the_descriptor_strides():
    kmajor = W.operand_layouts(256, kmajor=True)
    assert len(kmajor) == 1 and kmajor[0].pitch_bytes == 128 and kmajor[0].size_bytes == 256 * 128
    assert W.descriptor_strides(kmajor)[1] == 1024  # SBO: 8 lines of 128 B
    mn = W.operand_layouts(256, kmajor=False)
    assert [t.base_bytes for t in mn] == [0, 8192, 16384, 24576]
    assert W.descriptor_strides(mn) == (8192, 1024)  # LBO: one 64 x 64 atom; SBO: 8 k lines
    for t in kmajor + mn:
        assert t.base_alignment == 1024 and t.base_bytes % 1024 == 0


# ------------------------------------------------------------------------------------------ schedule


def test_schedule_validation_names_the_field():
    for bad, field in ((dict(bm=96), "bm"), (dict(bn=320), "bn"), (dict(stages=1), "stages"),
                       (dict(consumers=4), "consumers"), (dict(raster="z"), "raster"),
                       (dict(cluster=3), "cluster"), (dict(cluster=2, bn=192), "bn"), (dict(stages=6), "stages"),
                       (dict(pingpong=True, consumers=1, bm=64), "pingpong"), (dict(bm=0), "bm"),
                       (dict(store="smem"), "store"), (dict(store="tma", stages=5), "stages")):
        with pytest.raises(BadInputError, match=field):
            W.WgmmaSchedule(**bad).validate()
    with pytest.raises(BadInputError, match="dtype"):
        W.HERO.validate(Gemm(64, 64, 64, "fp32"))


def test_schedule_json_round_trip_and_space():
    op = Gemm(4096, 4096, 4096, "bf16")
    space = W.search_space(op)
    assert space[0] == W.hero_schedule(op) == W.HERO
    assert len(set(space)) == len(space) > 20
    assert any(s.pingpong for s in space) and any(s.consumers == 1 for s in space)
    assert any(s.cluster == 2 and s.pingpong for s in space) and any(s.store == "tma" for s in space)
    for s in space:
        s.validate(op)
        assert W.WgmmaSchedule.from_json(json.loads(json.dumps(s.to_json()))) == s
        assert s.smem_bytes <= W.SMEM_OPTIN_SM90
    with pytest.raises(BadInputError, match="unknown field"):
        W.WgmmaSchedule.from_json({**W.HERO.to_json(), "bogus": 1})
    decode = W.hero_schedule(Gemm(8, 4096, 4096, "bf16"))
    assert decode.bm == 64


def test_register_split_fits_the_register_file():
    for s in (W.HERO, W.WgmmaSchedule(bm=192, bn=128, consumers=3, stages=5),
              W.WgmmaSchedule(bm=64, bn=64, consumers=1, stages=8)):
        entry, prod, cons = s.register_split()
        assert prod % 8 == 0 and cons % 8 == 0 and 24 <= prod <= cons <= 256
        assert 128 * prod + 128 * s.consumers * cons <= entry * s.threads <= 65536
    assert W.HERO.register_split() == (168, 40, 232)


def test_tma_alignment_is_checked():
    assert W.tma_unsupported(Gemm(4096, 4096, 4096, "bf16")) is None
    assert W.tma_unsupported(Gemm(4000, 4000, 4000, "fp16")) is None
    why = W.tma_unsupported(Gemm(4097, 4097, 4097, "bf16"))
    assert why and "16 B" in why
    assert W.tma_unsupported(Gemm(4096, 4097, 4096, "bf16", layout_b="col")) is None  # B is N x K then


def test_rendered_source_has_the_hopper_pieces():
    op = Gemm(1000, 1000, 1000, "bf16", epilogue=("bias", "gelu", "scale", "residual"))
    src = W.render(op, W.WgmmaSchedule())  # direct stores
    for piece in ("wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16",
                  "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes",
                  "mbarrier.try_wait.parity", "mbarrier.arrive.expect_tx", "setmaxnreg.dec.sync.aligned.u32 40",
                  "setmaxnreg.inc.sync.aligned.u32 232", "__launch_bounds__(384, 1)", "__grid_constant__",
                  "tr_gelu(v)", "v *= alpha", "residual[(int64_t)row * N + col]"):
        assert piece in src, piece
    # Epilogue order follows the IR: bias before gelu before scale before residual.
    order = [src.index(p) for p in ("bias[col]", "tr_gelu(v)", "v *= alpha", "residual[(int64_t)")]
    assert order == sorted(order)
    # B row-major (n contiguous) is MN-major: the wgmma transposes it; A row-major is K-major.
    assert re.search(r"p, 1, 1, 0, 1;", src)
    staged = W.render(Gemm(1000, 1000, 1000, "bf16"), W.WgmmaSchedule(store="tma"))
    atom = TileLayout(64, 64, 2, "row", swizzle=TmaSwizzle("128B")).c_offset("r_in", "c_in")
    assert f"buf + {atom}" in staged and "cp.async.bulk.tensor.2d.global.shared::cta.bulk_group" in staged
    assert "fence.proxy.async.shared::cta" in staged and "if (store_tma)" in staged
    assert "if (store_tma)" not in src
    pair = W.render(Gemm(1000, 1000, 1000, "bf16"), W.WgmmaSchedule(cluster=2))
    for piece in ("__cluster_dims__(2, 1, 1)", "tr_tma_load_2d_mc(sb", "tr_mbar_arrive_remote(bars",
                  "barrier.cluster.wait"):
        assert piece in pair and piece not in src, piece
    assert "p, 1, 1, 1, 0;" in W.render(Gemm(64, 64, 64, "fp16", layout_a="col", layout_b="col"), W.HERO)


# ------------------------------------------------------------------------------------------ NVRTC


def nvrtc_compile(src: str, name: str) -> str:
    """Compile for sm_90a with cuda-core's NVRTC, as the product does (nvrtc.compile_with_report: ptxas's
    report even where the driver's compute cache holds the source); return ptxas's -v log."""
    from tracea.emitters.nvrtc import compile_with_report, options_for

    code, log = compile_with_report(src, f"{name}.cu", None, options_for("sm_90a"))
    assert len(code) > 1000
    return log


def spills(log: str) -> tuple[int, int, int]:
    m = re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", log)
    assert m, log
    return tuple(int(x) for x in m.groups())


@pytest.fixture(scope="module")
def nvrtc():
    pytest.importorskip("cuda.core")
    from tracea.emitters.nvrtc import find_nvrtc

    return find_nvrtc()


def test_hero_compiles_for_sm90a_without_spills(nvrtc):
    for op in (Gemm(4096, 4096, 4096, "bf16"), Gemm(4096, 4096, 4096, "fp16"),
               Gemm(8, 4096, 4096, "bf16")):
        sched = W.hero_schedule(op)
        log = nvrtc_compile(W.render(op, sched), sched.name)
        assert "Compiling entry function 'tr_wgmma_gemm' for 'sm_90a'" in log
        assert spills(log) == (0, 0, 0), f"{sched.name}: {log}"
        assert "C7508" not in log  # ptxas would say so if it ignored setmaxnreg
        regs = int(re.search(r"Used (\d+) registers", log).group(1))
        assert regs <= sched.register_split()[0] or sched.consumers == 1


def test_a_sample_of_schedules_compiles(nvrtc):
    rnd = random.Random(5)
    ops = [Gemm(1000, 1000, 1000, "bf16"), Gemm(257, 136, 72, "fp16", layout_a="col", layout_b="col",
                                                epilogue=("residual", "relu", "bias"))]
    for op in ops:
        space = W.search_space(op)
        picks = rnd.sample(space[1:], 3) + [s for s in space if s.pingpong][:1] + \
            [s for s in space if s.cluster == 2][-1:] + [s for s in space if s.store == "tma"][-1:]
        for sched in picks:
            log = nvrtc_compile(W.render(op, sched), sched.name)
            # Compiles for sm_90a; spills are allowed off the hero (the tuner measures what they cost).
            assert "Compiling entry function 'tr_wgmma_gemm' for 'sm_90a'" in log, log
            spills(log)  # ptxas reported its resource line


def test_tma_probe_compiles(nvrtc):
    assert "tr_tma_probe" in nvrtc_compile(W.render_tma_probe(), "probe")


# ------------------------------------------------------------------------------------------ GPU


@pytest.mark.gpu
def test_gpu_verify_quick(tmp_path):
    """On an sm_90 GPU with torch: the harness's quick verification (probe, then 8 verified cases)."""
    pytest.importorskip("torch")
    import torch

    if not torch.cuda.is_available() or torch.cuda.get_device_capability(0) != (9, 0):
        pytest.skip("needs an sm_90 GPU")
    if shutil.which(sys.executable) is None:
        pytest.skip("no interpreter path")
    harness = ROOT / "benchmarks" / "gpu" / "wgmma_run.py"
    for phase in ("probe", "verify"):
        p = subprocess.run([sys.executable, str(harness), "--phase", phase, "--quick",
                            "--out", str(tmp_path)], capture_output=True, text=True, timeout=600,
                           env={**os.environ, "PYTHONUNBUFFERED": "1"})
        assert p.returncode == 0, p.stdout + p.stderr
    probe = json.loads((tmp_path / "probe.json").read_text())["records"]
    assert probe["mismatches_vs_layout"] == 0
    recs = json.loads((tmp_path / "verify.json").read_text())["records"]
    assert recs and all(r["ok"] for r in recs), [r for r in recs if not r["ok"]]


# ------------------------------------------------------------------------------------------ emitter + plan


def _planned(host, op):
    from tracea.doctor.plan import plan
    from tracea.emitters import cuda
    from tracea.emitters.cuda.variants import resolve

    WGMMA_GEMM = resolve("cuda-wgmma.gemm")

    return plan(op, host, cuda.ALL_VARIANTS + (WGMMA_GEMM,), backend="cuda")


@pytest.mark.parametrize("snapshot", ["h100_live", "h100_measured", "h200_live"])
def test_plan_prefers_wgmma_on_sm90(snapshot):
    from tracea.doctor.snapshot import read_snapshot

    host, _ = read_snapshot(ROOT / "tests/fixtures/snapshots" / f"{snapshot}.json")
    for dtype in ("bf16", "fp16"):
        d = _planned(host, Gemm(4096, 4096, 4096, dtype))
        assert d.chosen == "cuda-wgmma.gemm"
        ranked = [c.variant for c in d.candidates if c.accepted]
        assert ranked.index("cuda-wgmma.gemm") < ranked.index("cuda-mma-sync.gemm")
    d = _planned(host, Gemm(64, 64, 64, "fp32"))
    assert d.chosen != "cuda-wgmma.gemm"


@pytest.mark.parametrize("target", ["sm_80", "sm_86", "sm_89", "sm_100", "sm_120"])
def test_plan_never_offers_wgmma_off_sm90(target):
    from tracea.doctor.snapshot import read_snapshot
    from tracea.emitters.cuda.arch import target_host

    host, _ = read_snapshot(ROOT / "tests/fixtures/snapshots/h100_live.json")
    d = _planned(target_host(host, target), Gemm(4096, 4096, 4096, "bf16"))
    wg = next(c for c in d.candidates if c.variant == "cuda-wgmma.gemm")
    assert not wg.accepted and any("compute capability" in r for r in wg.reasons)
    assert d.chosen != "cuda-wgmma.gemm"


def test_variant_smem_requirement_is_the_hero_ring():
    from tracea.emitters.cuda.variants import resolve

    WGMMA_GEMM = resolve("cuda-wgmma.gemm")

    from tracea.emitters.cuda.hopper import gemm_heroes as G

    # every form the hero can take: the variant is offered only where the largest fits
    want = max(s.smem_bytes for s in (W.HERO, G.FEW_TILES, G.OFF_LINE_WIDE, G.OFF_LINE_PAIR, *G.ONE_WAVE_FORMS))
    assert WGMMA_GEMM.requirements.min_shared_memory_per_block_bytes == want <= W.SMEM_OPTIN_SM90
    assert WGMMA_GEMM.requirements.min_compute_capability == WGMMA_GEMM.requirements.max_compute_capability == (9, 0)


class _NoGpu:
    nvidia = None


def test_emitter_builds_and_emits_for_sm90a_only(nvrtc, tmp_path, monkeypatch):
    from tracea.doctor.errors import UnsupportedError
    from tracea.emitters import cuda
    from tracea.emitters.cuda.build import compile_kernel

    monkeypatch.setenv("TRACEA_HOME", str(tmp_path / "home"))
    op = Gemm(4000, 4000, 4000, "bf16", epilogue=("bias", "relu"))
    hero = cuda.hero_schedule(op, "cuda-wgmma.gemm", _NoGpu(), "sm_90a")
    assert hero == W.HERO
    _, r, _, art = compile_kernel(op, "cuda-wgmma.gemm", hero, _NoGpu(), "sm_90a")
    assert art.metadata["resources"]["spills"] == 0 and r.entry == W.KERNEL_NAME
    assert art.metadata["launch"]["block"] == [384, 1, 1] and art.metadata["launch"]["dynamic_smem"] == hero.smem_bytes
    files = cuda.emit(op, "cuda-wgmma.gemm", hero, _NoGpu(), tmp_path / "out", arch="sm_90a")
    assert {p.suffix for p in files} >= {".cu", ".cubin", ".json", ".yaml"}
    space = cuda.search_space(op, "cuda-wgmma.gemm", _NoGpu(), "sm_90a")
    assert space[0] == hero and len(space) > 20
    assert cuda.search_space(op, "cuda-wgmma.gemm", _NoGpu(), "sm_80") == []
    with pytest.raises(UnsupportedError, match="sm_90"):
        compile_kernel(op, "cuda-wgmma.gemm", hero, _NoGpu(), "sm_80")
    with pytest.raises(UnsupportedError, match="sm_90a"):
        compile_kernel(op, "cuda-wgmma.gemm", hero, _NoGpu(), "sm_90")


def test_schedules_whose_accumulators_exceed_the_compile_time_register_cap_are_invalid():
    # 192x256 with 3 consumers: 128 accumulators under a 128-register cap (4 warpgroups); ptxas refuses it
    # (C7602, seen on an H200 with NVRTC 13.0 and here with 13.5), so the search space must not offer it
    from tracea.doctor.errors import BadInputError
    from tracea.emitters.cuda.hopper.schedule import ADDRESS_REGS, WgmmaSchedule
    from tracea.emitters.cuda.hopper.space import search_space

    with pytest.raises(BadInputError, match="consumers"):
        WgmmaSchedule(bm=192, bn=256, stages=3, consumers=3).validate()
    for s in search_space(Gemm(2048, 2048, 2048, dtype="bf16")):
        assert s.accumulators + ADDRESS_REGS <= s.register_split()[0], s.name
