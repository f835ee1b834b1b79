"""The HIP MFMA GEMM (issue 19) compiled both ways without any GPU: for gfx90a and CDNA3 by hipcc (the
expected MFMA instructions in the disassembly, no spills, no scratch) when hipcc is installed, and for
sm_80/sm_90 by NVRTC through the NVIDIA prelude (what tests/emitters/hip/test_hip_gpu.py runs). Schedules are checked."""

from __future__ import annotations

import importlib.util
import re

import pytest

from tracea.doctor.errors import BadInputError, ToolchainMissingError
from tracea.emitters.hip import compiler as hc
from tracea.emitters.hip.gemm import KERNEL, HipGemmSchedule, render

SCHEDULES = [HipGemmSchedule(), HipGemmSchedule(bm=64, bn=128, bk=32, waves_m=1, waves_n=2),
             HipGemmSchedule(bm=256, bn=128, bk=16, waves_m=2, waves_n=2, pad=8)]
MFMA = {"bf16": {"v_mfma_f32_32x32x8bf16_1k", "v_mfma_f32_32x32x8_bf16"},
        "fp16": {"v_mfma_f32_32x32x8f16", "v_mfma_f32_32x32x8_f16"},
        "fp32": {"v_mfma_f32_32x32x2f32", "v_mfma_f32_32x32x2_f32"}}
MFMA_K = {"bf16": 8, "fp16": 8, "fp32": 2}


def _hipcc():
    try:
        hc.find_toolchain()
    except ToolchainMissingError as exc:
        pytest.skip(f"no HIP compiler here: {exc.message}")


@pytest.mark.parametrize("dtype", ["bf16", "fp16", "fp32"])
@pytest.mark.parametrize("sched", SCHEDULES, ids=lambda s: s.name)
def test_hipcc_builds_mfma_code_for_cdna2_and_cdna3(tmp_path, monkeypatch, dtype, sched):
    _hipcc()
    monkeypatch.setenv("TRACEA_HOME", str(tmp_path))
    if sched.lds_bytes(dtype) > 64 * 1024:
        with pytest.raises(BadInputError, match="64 KiB"):
            render(dtype, sched, "amd")
        return
    for target in ("gfx90a", hc.cdna3_target()):
        obj = hc.compile_hip(render(dtype, sched, "amd"), KERNEL, target)
        found = hc.mfma_mnemonics(hc.disassemble(obj))
        per_k_tile = (sched.bm // sched.waves_m // 32) * (sched.bn // sched.waves_n // 32) * (sched.bk // MFMA_K[dtype])
        assert len(found) == per_k_tile and set(found) <= MFMA[dtype], (target, found)
        r = obj.resources
        assert r["vgpr_spills"] == r["scratch_bytes"] == 0, (target, r)  # nothing goes to memory
        if sched == SCHEDULES[0]:  # the hero: not even an SGPR spilled to a VGPR lane
            assert r["sgpr_spills"] == 0, (target, r)
        assert r["wavefront"] == 64 and r["lds_bytes"] == sched.lds_bytes(dtype) == \
            2 * (4 if dtype == "fp32" else 2) * (sched.bm + sched.bn) * (sched.bk + sched.pad)
        tiles = (sched.bm // sched.waves_m // 32) * (sched.bn // sched.waves_n // 32)
        assert r["agprs"] + r["vgprs"] >= 16 * tiles, r  # the accumulators are in registers


@pytest.mark.parametrize("dtype", ["bf16", "fp16", "fp32"])
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_the_nvidia_prelude_builds_the_same_body_with_nvrtc(tmp_path, monkeypatch, dtype, arch):
    """What runs on the NVIDIA GPU is the AMD kernel's body, character for character, after another prelude."""
    pytest.importorskip("cuda.core")
    from tracea.emitters.nvrtc import compile_cached

    monkeypatch.setenv("TRACEA_HOME", str(tmp_path))
    valid = [s for s in SCHEDULES if s.lds_bytes(dtype) <= 64 * 1024]  # the schedules valid in dtype
    # every one for sm_90 (the GPU the logic is verified on), the hero for sm_80: the body is the same text
    for sched in valid if arch == "sm_90" else valid[:1]:
        src = render(dtype, sched, "nvidia")
        compile_cached(src, KERNEL, KERNEL, arch)  # spills are no concern here: this build checks logic
        body = src[src.index('extern "C" __global__'):]
        assert body == render(dtype, sched, "amd")[render(dtype, sched, "amd").index('extern "C" __global__'):]


@pytest.mark.parametrize("bad,message", [
    (dict(bm=96), "whole 32x32 MFMA tiles"), (dict(bk=12), "multiple of 8"), (dict(pad=2), "multiple of 4"),
    (dict(waves_m=4, waves_n=4, bm=128, bn=128), "1..15"), (dict(bm=256, bn=256, bk=64), "64 KiB"),
])
def test_a_bad_schedule_is_one_clear_error(bad, message):
    with pytest.raises(BadInputError, match=re.escape(message)):
        render("bf16", HipGemmSchedule(**bad), "amd")


@pytest.mark.parametrize("dtype", ["fp64", "int8", "tf32"])
def test_only_the_mfma_types(dtype):
    with pytest.raises(BadInputError, match="bf16, fp16, fp32"):
        render(dtype, HipGemmSchedule(), "nvidia")


def test_an_unknown_epilogue_or_layout_is_refused():
    with pytest.raises(BadInputError, match="no swish"):
        render("bf16", HipGemmSchedule(), "amd", chain=("bias", "swish"))
    with pytest.raises(BadInputError, match="row or col"):
        render("bf16", HipGemmSchedule(), "amd", layout_b="tiled")


@pytest.mark.parametrize("dtype", ["bf16", "fp32"])
def test_epilogues_and_column_major_operands_build_for_amd(tmp_path, monkeypatch, dtype):
    """The whole chain fused (bias, gelu, scale, residual, relu), A and B column-major: the same MFMAs,
    nothing spilled, and each op's code in the kernel (tr_gelu's tanh, the residual's load)."""
    _hipcc()
    monkeypatch.setenv("TRACEA_HOME", str(tmp_path))
    chain = ("bias", "gelu", "scale", "residual", "relu")
    src = render(dtype, SCHEDULES[0], "amd", chain=chain, layout_a="col", layout_b="col")
    assert "tr_gelu(v)" in src and "v *= alpha" in src and "Res[(long long)gm * N + gn]" in src
    assert "A[(long long)gk * M + gm]" in src and "B[(long long)gn * K + gk]" in src
    plain = render(dtype, SCHEDULES[0], "amd")
    assert "v *= alpha" not in plain  # alpha is applied only when the chain scales, as the IR's reference does
    for target in ("gfx90a", hc.cdna3_target()):
        obj = hc.compile_hip(src, KERNEL, target)
        found = hc.mfma_mnemonics(hc.disassemble(obj))
        assert len(found) == 4 * 16 // MFMA_K[dtype] and set(found) <= MFMA[dtype], found
        assert obj.resources["vgpr_spills"] == obj.resources["scratch_bytes"] == 0, obj.resources


@pytest.mark.parametrize("dtype", ["fp32", "bf16", "fp16"])
def test_the_softmax_builds_for_amd_and_through_the_nvidia_prelude(tmp_path, monkeypatch, dtype):
    from tracea.emitters.hip import softmax as sm

    monkeypatch.setenv("TRACEA_HOME", str(tmp_path))
    for sched in (sm.HipSoftmaxSchedule(), sm.HipSoftmaxSchedule(rows_per_group=1)):
        if importlib.util.find_spec("cuda.core") is not None:
            from tracea.emitters.nvrtc import compile_cached

            compile_cached(sm.render(dtype, sched, "nvidia"), sm.KERNEL, sm.KERNEL, "sm_90")
        try:
            hc.find_toolchain()
        except ToolchainMissingError:
            continue
        for target in ("gfx90a", hc.cdna3_target()):
            r = hc.compile_hip(sm.render(dtype, sched, "amd"), sm.KERNEL, target).resources
            assert r["vgpr_spills"] == r["sgpr_spills"] == r["scratch_bytes"] == 0 and r["wavefront"] == 64, r
            assert r["lds_bytes"] == 2 * 4 * 64 * sched.rows_per_group, r


@pytest.mark.parametrize("dtype", ["bf16", "fp16", "fp32"])
def test_the_conv_builds_for_amd_and_through_the_nvidia_prelude(tmp_path, monkeypatch, dtype):
    from tracea.emitters.hip.gemm import CONV_KERNEL

    monkeypatch.setenv("TRACEA_HOME", str(tmp_path))
    sched = SCHEDULES[0]
    if importlib.util.find_spec("cuda.core") is not None:
        from tracea.emitters.nvrtc import compile_cached

        compile_cached(render(dtype, sched, "nvidia", "conv", ("bias",)), CONV_KERNEL, CONV_KERNEL, "sm_90")
    try:
        hc.find_toolchain()
    except ToolchainMissingError:
        return
    for target in ("gfx90a", hc.cdna3_target()):
        obj = hc.compile_hip(render(dtype, sched, "amd", "conv", ("bias",)), CONV_KERNEL, target)
        found = hc.mfma_mnemonics(hc.disassemble(obj))
        assert len(found) == 4 * 16 // MFMA_K[dtype] and set(found) <= MFMA[dtype], found
        assert obj.resources["vgpr_spills"] == obj.resources["scratch_bytes"] == 0, obj.resources


@pytest.mark.parametrize("dtype", ["bf16", "fp32"])
@pytest.mark.parametrize("problem", ["gemm", "conv"])
def test_the_hero_loads_16_bytes_and_reads_whole_fragments(tmp_path, monkeypatch, dtype, problem):
    """The hero's A comes in 16-byte global loads (where K, or a conv's channels, and the pointer allow: the
    kernel checks at run time and falls back to element loads) and is stored to LDS 8 bytes at a time in
    16 bits; each lane's MFMA fragment is one LDS read (8 bytes in 16 bits), never element by element."""
    _hipcc()
    from tracea.emitters.hip.gemm import CONV_KERNEL

    monkeypatch.setenv("TRACEA_HOME", str(tmp_path))
    sched = HipGemmSchedule(pad=1 if dtype == "fp32" else 4)
    name = KERNEL if problem == "gemm" else CONV_KERNEL
    asm = hc.disassemble(hc.compile_hip(render(dtype, sched, "amd", problem), name, "gfx90a"))
    ops = set(re.findall(r"^\s*((?:global|buffer)_load_\w+|ds_write\w*|ds_read\w*)", asm, re.M))
    assert "global_load_dwordx4" in ops, ops
    if dtype == "bf16":
        assert ops & {"ds_read_b64", "ds_read2_b64"} and not ops & {"ds_read_u16", "ds_read_u16_d16"}, ops
        assert ops & {"ds_write_b64", "ds_write2_b64"}, ops
