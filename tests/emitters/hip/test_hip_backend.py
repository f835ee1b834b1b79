"""The HIP backend registered (issue 19): planned from a recorded MI300X host, emitted for gfx90a and CDNA3
with hipcc (every variant), passed over where its kernels cannot run, its schedules and search space.
Nothing here needs a GPU; the hipcc tests skip without hipcc."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
import yaml
from cli_runner import tracea  # tests/helpers/ (tests/conftest.py puts it on the path)

from tracea.doctor.errors import BadInputError, ToolchainMissingError, UnsupportedError
from tracea.emitters import registry
from tracea.kernels import Conv2d, Gemm, Softmax
from tracea.kernels.dtypes import parse_dtype

FIXTURES = Path(__file__).parents[2] / "fixtures"
MI300X = FIXTURES / "snapshots" / "mi300x_cpx_kfd.json"
HIP = registry.backend("hip")


def _hipcc():
    from tracea.emitters.hip import compiler as hc

    try:
        hc.find_toolchain()
    except ToolchainMissingError as exc:
        pytest.skip(f"no HIP compiler here: {exc.message}")


def _mi210_with_hipcc():
    from tracea.doctor.report import HostReport, Tool
    from tracea.doctor.sources import amd

    section = amd.interpret({"kfd": amd.collect_kfd(str(FIXTURES / "kfd" / "mi210_8x_xgmi"))})
    return dataclasses.replace(HostReport(), amd=section, toolchains=[Tool("hipcc", True, "/usr/bin/hipcc", "5.2")])


# ------------------------------------------------------------------ planning on a recorded MI300X machine

def test_the_recorded_mi300x_is_read_as_recorded():
    from tracea.doctor.snapshot import read_snapshot

    host, raw = read_snapshot(MI300X)
    gpus = host.amd.devices
    assert len(gpus) == 63  # 8 GPUs in CPX mode, 8 partitions each, one partition's node absent in the recording
    assert {g.name for g in gpus} == {"AMD Instinct MI300X"} and {g.gfx_target for g in gpus} == {"gfx942"}
    assert {g.compute_units for g in gpus} == {38} and {g.pci_device_id for g in gpus} == {"0x74a1"}
    assert host.toolchains == [] and "k8s-device-plugin" in raw["recording"]["source"]
    # the recording's properties are the fixture's files, byte for byte
    node = raw["amd"]["kfd"]["nodes"]["2"]["properties"]
    assert node == (FIXTURES / "kfd" / "mi300x_8x_cpx" / "nodes" / "2" / "properties").read_text()


def test_plan_picks_the_mfma_gemm_on_the_recorded_mi300x_and_says_why(capsys, home):
    code, out, err = tracea(capsys, "plan", "gemm", "--m", "4096", "--dtype", "bf16", "--input", str(MI300X))
    assert code == 0, err
    first = out.splitlines()[0]
    assert first.startswith("backend hip (the planner's first choice here is hip-mfma.gemm on GPU 0 "
                            "(AMD Instinct MI300X, gfx942)"), first
    assert "chosen: hip-mfma.gemm: Matrix Core GEMM" in out and "records no toolchains" in out
    code, out, err = tracea(capsys, "plan", "gemm", "--m", "4096", "--dtype", "bf16", "--input", str(MI300X), "--json")
    d = json.loads(out)
    assert d["chosen"] == "hip-mfma.gemm" and d["backend"] == "hip" and d["precision"] == "bf16"
    cuda = [c for c in d["candidates"] if c["backend"] == "cuda"]
    assert cuda and all(not c["accepted"] and any("no NVIDIA GPU" in r for r in c["reasons"]) for c in cuda)


@pytest.mark.parametrize("op,variant", [(["conv2d", "--n", "8", "--c", "64", "--h", "56", "--w", "56", "--k", "64",
                                          "--r", "3", "--s", "3", "--layout", "nhwc"], "hip-mfma.conv2d"),
                                        (["softmax", "--rows", "4096", "--cols", "4096"], "hip-simd.softmax")])
def test_plan_offers_the_other_hip_variants_there(capsys, home, op, variant):
    code, out, err = tracea(capsys, "plan", *op, "--dtype", "fp16", "--input", str(MI300X), "--json")
    assert code == 0 and json.loads(out)["chosen"] == variant, (out, err)


def test_a_gfx908_falls_back_to_fp16_and_bf16_plans_on_mi200(capsys):
    from tracea.doctor.plan import plan

    host = _mi210_with_hipcc()
    assert plan(Gemm(64, 64, 64, dtype=parse_dtype("bf16")), host, registry.all_variants()).chosen == "hip-mfma.gemm"
    old = dataclasses.replace(host, amd=dataclasses.replace(
        host.amd, devices=[dataclasses.replace(g, gfx_target="gfx908") for g in host.amd.devices]))
    d = plan(Gemm(64, 64, 64, dtype=parse_dtype("bf16")), old, registry.all_variants(backend="hip"), backend="hip")
    assert d.chosen == "hip-mfma.gemm" and d.precision == "fp16" and d.fallback


# --------------------------------------------------------- commands that run kernels pass over a dead HIP

def test_bench_and_tune_pass_over_hip_where_its_runtime_does_not_load():
    """An AMD host (the recorded MI210s, with hipcc) whose HIP runtime cannot start in this process: the
    planner still ranks the MFMA GEMM first, but a command that runs kernels takes the next backend and
    says why, in one sentence."""
    if HIP.runs_kernels(_mi210_with_hipcc()) is None:
        pytest.skip("this machine runs HIP kernels")
    op = Gemm(512, 512, 512, dtype=parse_dtype("bf16"))
    host = _mi210_with_hipcc()
    name, why = registry.default_backend(op, host)
    assert name != "hip" and "hip-mfma.gemm is passed over: " in why, why
    assert registry.default_backend(op, host, runs_here=False)[0] == "hip"


def test_build_without_an_amd_gpu_is_one_clear_error():
    with pytest.raises(UnsupportedError, match="HIP kernels cannot run here: no AMD GPU") as info:
        HIP.build(Gemm(64, 64, 64, dtype=parse_dtype("bf16")), "hip-mfma.gemm", HIP.hero_schedule(
            Gemm(64, 64, 64, dtype=parse_dtype("bf16")), "hip-mfma.gemm", _mi210_with_hipcc()),
            dataclasses.replace(_mi210_with_hipcc(), amd=dataclasses.replace(_mi210_with_hipcc().amd, devices=[])))
    assert "\n" not in info.value.message and "--arch gfx90a" in info.value.hint


# ------------------------------------------------------------------------------- emitting with hipcc

EMITS = [
    (["gemm", "--m", "256", "--dtype", "bf16"], "tr_hip_gemm", "v_mfma_f32_32x32x8"),
    (["gemm", "--m", "1000", "--n", "999", "--k", "1001", "--dtype", "fp32", "--epilogue", "bias,gelu"],
     "tr_hip_gemm", "v_mfma_f32_32x32x2"),
    (["gemm", "--m", "4096", "--dtype", "fp16", "--epilogue", "residual,relu"], "tr_hip_gemm", "v_mfma_f32_32x32x8"),
    (["conv2d", "--n", "1", "--c", "3", "--h", "224", "--w", "224", "--k", "64", "--r", "7", "--s", "7",
      "--stride", "2", "--padding", "3", "--layout", "nhwc", "--dtype", "bf16", "--bias"], "tr_hip_conv2d",
     "v_mfma_f32_32x32x8"),
    (["softmax", "--rows", "100", "--cols", "50000", "--dtype", "fp16"], "tr_hip_softmax", None),
]


@pytest.mark.parametrize("arch", ["gfx90a", "gfx942"])
@pytest.mark.parametrize("args,kernel,mfma", EMITS, ids=lambda a: "-".join(a[:2]) if isinstance(a, list) else None)
def test_emit_writes_the_source_code_object_and_resources_for_cdna2_and_cdna3(capsys, home, tmp_path, arch, args,
                                                                                kernel, mfma):
    """`tracea emit ... --backend hip --arch gfx90a|gfx942` on a machine without an AMD GPU: the source, the
    code object hipModuleLoadData takes, its disassembly, the schedule and the resources; gfx942 builds for
    gfx940 where this hipcc does not know gfx942, and says so."""
    _hipcc()
    from tracea.emitters.hip import compiler as hc

    out_dir = tmp_path / "out"
    code, out, err = tracea(capsys, "emit", *args, "--backend", "hip", "--arch", arch, "--out", str(out_dir))
    assert code == 0, err
    target = arch if arch == "gfx90a" else hc.cdna3_target()
    names = sorted(p.name for p in out_dir.iterdir())
    assert names == sorted([f"{kernel}.hip", f"{kernel}-{target}.co", f"{kernel}-{target}.s", "schedule.json",
                            "metadata.yaml"])
    meta = yaml.safe_load((out_dir / "metadata.yaml").read_text())
    assert meta["target"] == target and meta["kernel"] == kernel and ("note" in meta) == (target != arch)
    r = meta["resources"]
    assert r["vgpr_spills"] == r["scratch_bytes"] == 0 and r["wavefront"] == 64 and r["lds_bytes"] > 0, r
    asm = (out_dir / f"{kernel}-{target}.s").read_text()
    if mfma:
        assert meta["mfma"]["count"] > 0 and all(i.startswith(mfma) for i in meta["mfma"]["instructions"]), meta["mfma"]
        assert mfma in asm
    else:
        assert meta["mfma"]["count"] == 0
    assert (out_dir / f"{kernel}-{target}.co").read_bytes()[:24] == b"__CLANG_OFFLOAD_BUNDLE__"
    schedule = json.loads((out_dir / "schedule.json").read_text())
    assert HIP.schedule_from_json(schedule).to_json() == schedule


def test_arch_picks_the_backend_and_a_wrong_one_is_bad_input(capsys, home, tmp_path):
    code, _, err = tracea(capsys, "emit", "gemm", "--m", "64", "--arch", "gfx1100", "--out", str(tmp_path / "o"))
    assert code == 2 and err.startswith("error: --arch gfx1100: no backend builds for it"), err
    code, _, err = tracea(capsys, "emit", "gemm", "--m", "64", "--backend", "hip", "--arch", "sm_90a",
                          "--out", str(tmp_path / "o"))
    assert code == 2 and "not an AMD Instinct (CDNA) target" in err, err
    code, _, err = tracea(capsys, "emit", "gemm", "--m", "64", "--backend", "hip", "--arch", "gfx90a",
                          "--dtype", "fp64", "--out", str(tmp_path / "o"))
    assert code == 2 and "Traceback" not in err, err


# ------------------------------------------------------------------------- schedules and the space

def test_schedules_round_trip_and_foreign_documents_are_refused():
    from tracea.emitters.hip.gemm import HipGemmSchedule
    from tracea.emitters.hip.softmax import HipSoftmaxSchedule

    for s in (HipGemmSchedule(), HipGemmSchedule(64, 32, 64, 2, 1, 0), HipSoftmaxSchedule(3)):
        assert HIP.schedule_from_json(s.to_json()) == s
    for bad in ({"kind": "cuda-mma", "bm": 128}, {"kind": "hip-mfma", "bm": "128"}, {"kind": "hip-mfma", "bq": 1},
                {"kind": "hip-softmax", "rows_per_group": True}, [1, 2]):
        with pytest.raises(BadInputError):
            HIP.schedule_from_json(bad)


@pytest.mark.parametrize("dtype", ["bf16", "fp32"])
def test_the_search_space_is_valid_hero_first_and_spans_the_fields(dtype):
    host = _mi210_with_hipcc()
    op = Gemm(4096, 4096, 4096, dtype=parse_dtype(dtype))
    space = HIP.search_space(op, "hip-mfma.gemm", host)
    assert space[0] == HIP.hero_schedule(op, "hip-mfma.gemm", host) and len(set(space)) == len(space) > 200
    for s in space:
        HIP.validate_schedule(op, "hip-mfma.gemm", s, host)
        assert s.lds_bytes(dtype) <= 64 * 1024
    pads = {0, 4, 8, 12} if dtype == "bf16" else {0, 1, 4, 5}
    for field, values in (("bm", {32, 64, 128, 256}), ("bk", {8, 16, 32, 64}), ("pad", pads), ("waves_n", {1, 2, 4})):
        assert {getattr(s, field) for s in space} == values, field
    sm = HIP.search_space(Softmax(4096, 4096, dtype=parse_dtype("fp16")), "hip-simd.softmax", host)
    assert sorted(s.rows_per_group for s in sm) == list(range(1, 9))


def test_the_heuristic_fills_the_compute_units_before_it_grows_tiles():
    host = _mi210_with_hipcc()  # 104 CUs a GPU
    big = HIP.hero_schedule(Gemm(4096, 4096, 4096, dtype=parse_dtype("bf16")), "hip-mfma.gemm", host)
    assert (big.bm, big.bn) == (128, 128)
    small = HIP.hero_schedule(Gemm(512, 512, 4096, dtype=parse_dtype("bf16")), "hip-mfma.gemm", host)
    assert -(-512 // small.bm) * -(-512 // small.bn) >= 104 and small.bm * small.bn < 128 * 128
    conv = Conv2d(32, 64, 56, 56, 64, 3, 3, padding=1, layout="nhwc", dtype=parse_dtype("fp16"))
    assert HIP.hero_schedule(conv, "hip-mfma.conv2d", host).bm == 128
    with pytest.raises(UnsupportedError, match="NHWC"):
        HIP.hero_schedule(dataclasses.replace(conv, layout="nchw"), "hip-mfma.conv2d", host)


def test_rendering_names_the_recorded_target_without_a_gpu():
    op = Gemm(64, 64, 64, dtype=parse_dtype("bf16"))
    host = dataclasses.replace(_mi210_with_hipcc(), amd=dataclasses.replace(_mi210_with_hipcc().amd, devices=[]))
    with pytest.raises(UnsupportedError, match="no AMD GPU here"):
        HIP.rendering(op, HIP.resolve("hip-mfma.gemm"), HIP.hero_schedule(op, "hip-mfma.gemm", host), host)
    r = HIP.rendering(op, HIP.resolve("hip-mfma.gemm"), HIP.hero_schedule(op, "hip-mfma.gemm", host), host, arch="gfx90a")
    assert r.name == "tr_hip_gemm" and "--offload-arch=gfx90a" in r.flags and "__builtin_amdgcn_mfma" in r.source


@pytest.mark.parametrize("dtype", ["bf16", "fp16", "fp32"])
def test_the_heuristic_pads_read_fragments_without_bank_conflicts(dtype):
    """By the CDNA LDS model (emitters/bank_cdna.py, from AMD's documentation, unmeasured)."""
    from tracea.emitters.hip.lds_banks import READS, gemm_lds_report

    host = _mi210_with_hipcc()
    for m, n in ((4096, 4096), (512, 512), (256, 256), (64, 4096)):
        s = HIP.hero_schedule(Gemm(m, n, 1024, dtype=parse_dtype(dtype)), "hip-mfma.gemm", host)
        report = gemm_lds_report(s, dtype)
        assert all(report[k]["conflicts"] == 0 for k in READS), (s.name, report)


def test_the_tuner_drops_pads_whose_fragment_reads_conflict():
    from tracea.emitters.hip.gemm import HipGemmSchedule
    from tracea.tuner.space import build_space

    bf16, fp32 = (Gemm(4096, 4096, 4096, dtype=parse_dtype(d)) for d in ("bf16", "fp32"))
    assert HIP.bank_conflict_drop(bf16, "hip-mfma.gemm", HipGemmSchedule(pad=4)) is None
    assert "pad 4 has none" in HIP.bank_conflict_drop(bf16, "hip-mfma.gemm", HipGemmSchedule(pad=8))
    assert "pad 1 has none" in HIP.bank_conflict_drop(fp32, "hip-mfma.gemm", HipGemmSchedule(pad=4))
    pruned: list[str] = []
    kept = build_space(bf16, HIP.resolve("hip-mfma.gemm"), _mi210_with_hipcc(), HIP, pruned=pruned)
    assert pruned and kept[0] == HIP.hero_schedule(bf16, "hip-mfma.gemm", _mi210_with_hipcc())
    assert len(kept) + len(pruned) == len(HIP.search_space(bf16, "hip-mfma.gemm", _mi210_with_hipcc()))
    assert len(pruned) > len(kept) // 3 and all(HIP.bank_conflict_drop(bf16, "hip-mfma.gemm", s) is None for s in kept)


def test_the_bench_suite_leaves_out_a_hip_that_cannot_run_here():
    host = _mi210_with_hipcc()
    if HIP.runs_kernels(host) is None:
        pytest.skip("this machine runs HIP kernels")
    assert "hip" not in registry.runnable_backends(host)
    assert "hip" in [v.backend for v in registry.all_variants() if not v.unmet(host, "bf16")]


def test_emit_follows_the_plans_precision_fallback_and_takes_any_spelling_of_the_target(capsys, home, tmp_path):
    """bf16 on a gfx908 plans fp16 (its bf16 MFMAs take two values a lane): the emitted kernel is fp16, not
    a bf16 MFMA that gfx908 cannot select; ``--arch " GFX90A "`` is gfx90a."""
    _hipcc()
    out = tmp_path / "o908"
    code, _, err = tracea(capsys, "emit", "gemm", "--m", "256", "--dtype", "bf16", "--arch", "gfx908", "--out", str(out))
    assert code == 0, err
    meta = yaml.safe_load((out / "metadata.yaml").read_text())
    assert meta["op"]["dtype"] == "fp16" and meta["target"] == "gfx908"
    assert all(i.endswith("f16") for i in meta["mfma"]["instructions"]), meta["mfma"]
    code, _, err = tracea(capsys, "emit", "gemm", "--m", "64", "--arch", " GFX90A ", "--out", str(tmp_path / "up"))
    assert code == 0 and yaml.safe_load((tmp_path / "up" / "metadata.yaml").read_text())["target"] == "gfx90a", err
    code, _, err = tracea(capsys, "emit", "gemm", "--m", "64", "--arch", " ", "--out", str(tmp_path / "e"))
    assert code == 2 and err.startswith("error: --arch: empty"), err


def test_plan_on_an_amd_host_without_its_runtime_still_names_hip(capsys, home, monkeypatch):
    """`tracea plan` runs nothing: on an AMD host whose HIP runtime does not load, its first line and its
    choice agree on HIP (bench and tune pass over it: test_bench_and_tune_pass_over_hip...)."""
    import tracea.doctor as doctor

    monkeypatch.setattr(doctor, "probe", lambda refresh=False: _mi210_with_hipcc())
    code, out, err = tracea(capsys, "plan", "gemm", "--m", "1024", "--dtype", "bf16")
    assert code == 0, err
    assert out.startswith("backend hip (") and "chosen: hip-mfma.gemm" in out, out


def test_hip_workers_count_the_devices_this_process_may_use(monkeypatch):
    from tracea.emitters.gpu import gpu_members

    host = _mi210_with_hipcc()  # 8 GPUs in the KFD report
    monkeypatch.setenv("HIP_VISIBLE_DEVICES", "3")
    assert HIP.default_workers(host) == 1 and HIP.tuning_members(host, 1) == [{"HIP_VISIBLE_DEVICES": "3"}]
    with pytest.raises(BadInputError, match="sees 1"):
        gpu_members("HIP_VISIBLE_DEVICES", 2, 8, "HIP")
    monkeypatch.delenv("HIP_VISIBLE_DEVICES")
    assert HIP.default_workers(host) == 8 and [m["HIP_VISIBLE_DEVICES"] for m in HIP.tuning_members(host, 3)] == ["0", "1", "2"]


def test_emit_dump_ir_writes_every_stage(capsys, home, tmp_path):
    """`--dump-ir` with the HIP backend: the source, the compile command (hipcc --genco, the flags, the
    files) and the code object among the stages."""
    _hipcc()
    dump = tmp_path / "ir"
    code, _, err = tracea(capsys, "emit", "gemm", "--m", "128", "--dtype", "bf16", "--arch", "gfx90a",
                          "--out", str(tmp_path / "o"), "--dump-ir", str(dump))
    assert code == 0, err
    (stage,) = list(dump.iterdir())
    names = sorted(p.name for p in stage.iterdir())
    assert {"03_source.hip", "04_compile.json", "05_binary.co"} <= set(names), names
    cmd = json.loads((stage / "04_compile.json").read_text())["command"]
    assert cmd[:2] == ["hipcc", "--genco"] and cmd.count("--genco") == 1 and "--offload-arch=gfx90a" in cmd, cmd
