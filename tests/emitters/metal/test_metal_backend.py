"""The Metal backend registered (issue 36): its contract members, its --arch targets, every registered Metal
op emitted through the CLI on a machine without a Mac, planned from the recorded M1 Pro, and the one-line
errors where Metal cannot run. Nothing here needs a Mac or Apple's compiler (the .metallib is built only
where ``xcrun metal`` is installed; elsewhere metadata.yaml says why not)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
import yaml
from cli_runner import tracea  # tests/helpers/ (tests/conftest.py puts it on the path)

from tracea.doctor.errors import BadInputError, UnsupportedError
from tracea.emitters import registry
from tracea.emitters.backend import Backend

FIXTURES = Path(__file__).parents[2] / "fixtures"
M1_PRO = FIXTURES / "snapshots" / "m1_pro_spdisplays.json"
METAL = registry.backend("metal")

# a small case of every op kind a Metal core may serve: the CLI's arguments and the variant the plan picks
CASES = {
    "gemm": (["gemm", "--m", "96", "--n", "80", "--k", "72", "--dtype", "fp16", "--epilogue", "bias,gelu"],
             "metal-simdgroup.gemm"),
    "conv2d": (["conv2d", "--n", "1", "--c", "16", "--h", "12", "--w", "12", "--k", "32", "--r", "3", "--s", "3",
                "--padding", "1", "--layout", "nhwc", "--dtype", "bf16", "--bias"], "metal-simdgroup.conv2d"),
    "softmax": (["softmax", "--rows", "5", "--cols", "3000", "--dtype", "fp32"], "metal-simd.softmax"),
    "attention": (["attention", "--heads", "4", "--kv-heads", "2", "--seq", "40", "--head-dim", "64", "--causal",
                   "--dtype", "fp16"], "metal-simdgroup.attention"),
}
OPS = sorted({v.op for v in METAL.VARIANTS})


def _m1_pro():
    from tracea.doctor.snapshot import load_snapshot

    return load_snapshot(M1_PRO)


def _op(capsys, kind: str):
    """The op of ``CASES[kind]`` as the CLI reads it (the plan's JSON op, read back by ``Op.from_json``)."""
    from tracea.kernels.op import Op

    code, out, err = tracea(capsys, "plan", *CASES[kind][0], "--input", str(M1_PRO), "--json")
    assert code == 0, err
    return Op.from_json(json.loads(out)["op"])


# ------------------------------------------------------------------------------------- the contract

def test_the_backend_is_registered_with_its_constants():
    assert isinstance(METAL, Backend)
    assert registry.BACKENDS["metal"] == "tracea.emitters.metal.backend" and "metal" not in registry.PLANNED
    assert (METAL.NAME, METAL.ON_DEVICE, METAL.DEVICE, METAL.LANGUAGE, METAL.SOURCE_SUFFIX) == \
        ("metal", True, "mps:0", "metal", ".metal")
    assert registry.by_language("metal") is METAL
    assert METAL.compute_metric("fp16") is None and METAL.copy_bandwidth(_m1_pro()) is None


def test_every_core_is_one_variant_for_apple7_on():
    from tracea.emitters.metal.cores import CORES

    assert OPS and set(OPS) == set(CORES)
    for v in METAL.VARIANTS:
        assert v.backend == "metal" and v.id == f"{v.family}.{v.op}" and v.description
        assert v.requirements.apple_families == ("apple7", "apple8", "apple9", "apple10") and v.requirements.toolchain == ()
        assert v.priority == {"metal-simdgroup": 70, "metal-simd": 50}[v.family]
        assert set(v.precisions) == {"fp32", "fp16", "bf16"}
    assert [v.id for v in METAL.VARIANTS if v.op in CASES] == \
        [CASES[v.op][1] for v in METAL.VARIANTS if v.op in CASES]


@pytest.mark.parametrize("arch,family", [("apple7", "apple7"), (" Apple8 ", "apple8"), ("APPLE 9", "apple9")])
def test_target_host_is_one_gpu_of_the_named_family(arch, family):
    host = METAL.target_host(_m1_pro(), arch)
    [g] = host.apple.devices
    assert g.gpu_family == family and g.gpu_cores is None and METAL.present(host)
    assert METAL.device_name(host) == f"GPU 0 (target {family}, {family}, ? GPU cores)"
    assert host.cpu == _m1_pro().cpu  # only the Apple section is replaced


@pytest.mark.parametrize("arch", ["apple6", "apple10", "gfx90a", "sm_90a", "m2", ""])
def test_target_host_refuses_anything_else_in_one_line(arch):
    with pytest.raises(BadInputError) as info:
        METAL.target_host(_m1_pro(), arch)
    assert "\n" not in info.value.message and "apple7, apple8, apple9" in info.value.message


def test_what_is_not_built_says_so_in_one_line(tmp_path):
    calls = [lambda: METAL.export(None, None, None, None, tmp_path),
             lambda: METAL.build_from_source("", None, None, {}),
             lambda: METAL.load_binary(tmp_path / "k.metallib", "apple8", None, {}),
             lambda: METAL.baseline_for(None, {})]
    for call in calls:
        with pytest.raises(UnsupportedError) as info:
            call()
        assert "\n" not in info.value.message
    assert METAL.compile_command("x", [], "a.metal", "b") is None  # Metal compiles the source in the process
    with pytest.raises(BadInputError, match="a Mac has one"):
        METAL.tuning_members(_m1_pro(), 2)
    assert METAL.tuning_members(_m1_pro(), 1) == [{}] and METAL.default_workers(_m1_pro()) == 1


def test_the_environment_holds_the_gpu_and_its_metal():
    env = METAL.environment(_m1_pro())
    assert env["gpus"] == [("Apple M1 Pro", "apple7", 16)] and env["metal_version"] == "Metal 3"
    assert registry.environment(_m1_pro(), "metal")["backend"] == "metal"  # no clash with the common fields


# ------------------------------------------------------------------------------------- schedules

@pytest.mark.parametrize("kind", OPS)
def test_schedules_round_trip_and_the_hero_leads_its_space(capsys, home, kind):
    from tracea.emitters.metal.cores import CORES

    variant = next(v for v in METAL.VARIANTS if v.op == kind)
    op = _op(capsys, kind)
    host = _m1_pro()
    hero = METAL.hero_schedule(op, variant, host)
    assert isinstance(hero, CORES[kind].schedule)
    METAL.validate_schedule(op, variant, hero, host)
    assert METAL.schedule_from_json(json.loads(json.dumps(hero.to_json()))) == hero
    space = METAL.search_space(op, variant, host)
    assert space[0] == hero and len(set(space)) == len(space)
    rendering = METAL.rendering(op, variant, hero, host)
    assert rendering.compiler == "Metal newLibraryWithSource" and f"kernel void {rendering.name}" in rendering.source


@pytest.mark.parametrize("doc", [[], {"kind": "hip-mfma"}, {"kind": None}, {"bm": 64}])
def test_a_document_that_is_no_metal_schedule_is_bad_input(doc):
    with pytest.raises(BadInputError) as info:
        METAL.schedule_from_json(doc)
    assert "\n" not in info.value.message


# ------------------------------------------------------------------------ emit, on a machine with no Mac

@pytest.mark.parametrize("kind", OPS)
def test_emit_writes_the_source_schedule_and_launch_for_apple8(capsys, home, tmp_path, kind):
    """`tracea emit OP --backend metal --arch apple8 --out DIR` and `--arch apple8` alone: the MSL source, its
    schedule and its launch; the .metallib only where Apple's compiler is installed (metadata says why not)."""
    from tracea.emitters.metal import compiler

    args, variant = CASES[kind]
    for extra, out_dir in ((["--backend", "metal"], tmp_path / "named"), ([], tmp_path / "by-arch")):
        code, out, err = tracea(capsys, "emit", *args, *extra, "--arch", "apple8", "--out", str(out_dir))
        assert code == 0, err
        assert out.startswith(f"{variant} · schedule ")
        meta = yaml.safe_load((out_dir / "metadata.yaml").read_text())
        name = meta["kernel"]
        source = (out_dir / f"{name}.metal").read_text()
        assert source.startswith("#include <metal_stdlib>") and f"kernel void {name}(" in source
        assert (meta["variant"], meta["target"], meta["op"]["op"]) == (variant, "apple8", kind)
        assert meta["threads"] == meta["block"][0] * meta["block"][1] * meta["block"][2] and meta["threads"] % 32 == 0
        assert len(meta["grid"]) == 3 and meta["threadgroup_bytes"] <= 32 * 1024
        assert [a.split(":")[0] for a in meta["arguments"]] == [f"buffer({i})" for i in range(len(meta["arguments"]))]
        stored = json.loads((out_dir / "schedule.json").read_text())
        assert METAL.schedule_from_json(stored).to_json() == stored
        libs = sorted(p.name for p in out_dir.glob("*.metallib"))
        if compiler.find_toolchain().found:
            assert libs == [f"{name}-apple8.metallib"]
        else:
            assert libs == [] and meta["metallib"].startswith("not built: ")
        assert sorted(p.name for p in out_dir.iterdir()) == sorted([f"{name}.metal", "schedule.json", "metadata.yaml", *libs])


def test_emit_dump_ir_writes_every_stage_up_to_the_source(capsys, home, tmp_path):
    from tracea.emitters.metal import compiler

    code, out, err = tracea(capsys, "emit", *CASES["softmax"][0], "--arch", "apple9", "--out", str(tmp_path / "o"),
                            "--dump-ir", str(tmp_path / "ir"))
    assert code == 0, err
    [stage] = (tmp_path / "ir").iterdir()
    names = sorted(p.name for p in stage.iterdir())
    assert names[:5] == ["00_op.json", "01_decision.json", "02_schedule.json", "03_source.metal", "04_compile.json"]
    record = json.loads((stage / "04_compile.json").read_text())
    assert record["language"] == "metal" and record["entry"] == "tr_metal_softmax"
    if not compiler.find_toolchain().found:
        assert record["log"].startswith("not compiled: ")


def test_emit_for_a_family_the_kernels_are_not_written_for_is_one_line(capsys, home, tmp_path):
    code, out, err = tracea(capsys, "emit", *CASES["softmax"][0], "--backend", "metal", "--arch", "apple6",
                            "--out", str(tmp_path))
    assert code == 2 and err.startswith("error: --arch apple6: not an Apple GPU family") and len(err.splitlines()) <= 2
    code, out, err = tracea(capsys, "emit", *CASES["softmax"][0], "--arch", "apple6", "--out", str(tmp_path))
    assert code == 2 and "no backend builds for it" in err and "metal: not an Apple GPU family" in err


# ------------------------------------------------------------------ planning on the recorded M1 Pro

def test_plan_picks_the_simdgroup_gemm_on_the_recorded_m1_pro_and_says_why(capsys, home):
    code, out, err = tracea(capsys, "plan", "gemm", "--m", "4096", "--dtype", "bf16", "--input", str(M1_PRO))
    assert code == 0, err
    assert out.splitlines()[0] == ("backend metal (the planner's first choice here is metal-simdgroup.gemm on GPU 0 "
                                   "(Apple M1 Pro, apple7, 16 GPU cores); --backend picks another)")
    assert "chosen: metal-simdgroup.gemm: " in out and "records no toolchains" in out
    code, out, err = tracea(capsys, "plan", "gemm", "--m", "4096", "--dtype", "bf16", "--input", str(M1_PRO), "--json")
    d = json.loads(out)
    assert d["chosen"] == "metal-simdgroup.gemm" and d["backend"] == "metal" and d["precision"] == "bf16"
    for c in d["candidates"]:
        if c["backend"] in ("cuda", "hip"):
            assert not c["accepted"] and any("no NVIDIA GPU" in r or "no AMD GPU" in r for r in c["reasons"])


@pytest.mark.parametrize("kind", [k for k in CASES if k != "gemm"])
def test_plan_offers_every_other_metal_variant_there(capsys, home, kind):
    assert kind in OPS, f"no Metal {kind} core registered"
    args, variant = CASES[kind]
    code, out, err = tracea(capsys, "plan", *args, "--input", str(M1_PRO), "--json")
    assert code == 0 and json.loads(out)["chosen"] == variant, (out, err)


def test_a_later_family_is_accepted_and_an_unknown_one_rejected_with_its_reason():
    """Apple's GPU families are cumulative: an M5 (apple10) runs the Apple7 kernels; a chip the doctor cannot
    place has no family, and the plan says so."""
    from tracea.doctor.plan import plan
    from tracea.kernels import Softmax

    host = _m1_pro()

    def gpu(**fields):
        return dataclasses.replace(host, apple=dataclasses.replace(host.apple, devices=[
            dataclasses.replace(host.apple.devices[0], **fields)]))

    [c] = plan(Softmax(4, 100), gpu(chip="Apple M5", gpu_family="apple10"), registry.all_variants("metal"),
               backend="metal").candidates
    assert c.accepted, c.reasons
    unknown = gpu(chip="Apple M12", gpu_family=None, unavailable={"gpu_family": "M12 is not in the table"})
    [c] = plan(Softmax(4, 100), unknown, registry.all_variants("metal"), backend="metal").candidates
    assert not c.accepted and "needs an Apple GPU of family apple7 or apple8 or apple9 or apple10" in c.reasons[0]
    assert "M12 is not in the table" in c.reasons[0]


# ----------------------------------------------------------------------- where Metal does not run

def test_a_command_that_runs_kernels_passes_over_metal_where_it_does_not_load():
    """The recorded M1 Pro read on this machine: the plan is Metal's, but Metal does not load in this process,
    so a command that runs kernels takes the next backend and says why in one sentence."""
    from tracea.kernels import Softmax

    host = _m1_pro()
    problem = METAL.runs_kernels(host)
    if problem is None:
        pytest.skip("this process runs Metal kernels")
    assert "\n" not in problem
    name, why = registry.default_backend(Softmax(8, 1000), host)
    assert name != "metal" and f"metal-simd.softmax is passed over: {problem}" in why
    assert registry.default_backend(Softmax(8, 1000), host, runs_here=False)[0] == "metal"


def test_build_without_metal_is_one_clear_error():
    from tracea.doctor.report import AppleSection
    from tracea.kernels import Softmax

    op = Softmax(4, 100)
    host = _m1_pro()
    hero = METAL.hero_schedule(op, "metal-simd.softmax", host)
    no_gpu = dataclasses.replace(host, apple=AppleSection(reason="not macOS (Linux)"))
    with pytest.raises(UnsupportedError, match=r"Metal kernels cannot run here: no Apple GPU \(not macOS") as info:
        METAL.build(op, "metal-simd.softmax", hero, no_gpu)
    assert "\n" not in info.value.message and "--arch apple8" in info.value.hint
    assert not METAL.present(no_gpu) and METAL.device_name(no_gpu) is None
