"""CpuSchedule validation names the field; hero schedules fit every recorded host; the CPU variants,
their requirements and what the planner makes of them on real (recorded) machines. No compiler here."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from tracea.doctor.errors import BadInputError
from tracea.doctor.plan import plan
from tracea.doctor.snapshot import load_snapshot
from tracea.doctor.variants import Requirements
from tracea.emitters import cpu
from tracea.emitters.cpu.isa import ISAS
from tracea.emitters.cpu.schedule import FAMILY_REGISTERS, CpuSchedule
from tracea.kernels import Conv2d, Gemm, Softmax

SNAPSHOTS = Path(__file__).parents[2] / "fixtures" / "snapshots"
CI_VM = load_snapshot(SNAPSHOTS / "ci_vm.json")
H100 = load_snapshot(SNAPSHOTS / "h100_live.json")
GOOD = CpuSchedule(mr=8, nr=48, mc=128, kc=256, nc=4080, threads=2, unroll=4, prefetch=0)


def without_isa(host, *names):
    cpu_info = dataclasses.replace(host.cpu, isa=[i for i in host.cpu.isa if i not in names])
    return dataclasses.replace(host, cpu=cpu_info)


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"nr": 40}, "nr"),  # not a multiple of 16 lanes
        ({"mr": 15, "nr": 32, "mc": 120}, "mr"),  # 30 accumulators + 2 + 1 > 32 registers
        ({"mc": 100}, "mc"),  # not a multiple of mr
        ({"nc": 4000}, "nc"),  # not a multiple of nr
        ({"threads": 3}, "threads"),  # the CI VM has 2 logical cores
        ({"threads": 0}, "threads"),
        ({"kc": -1}, "kc"),
        ({"unroll": 17}, "unroll"),
        ({"prefetch": -2}, "prefetch"),
        ({"pack_a": "yes"}, "pack_a"),
        ({"mc": 8 * 2**20, "kc": 1024}, "mc"),  # a 32 GiB packed block
    ],
)
def test_validate_names_the_field(change, field):
    with pytest.raises(BadInputError) as err:
        dataclasses.replace(GOOD, **change).validate(Gemm(64, 64, 64), CI_VM, "cpu-avx512.gemm")
    assert str(err.value).startswith(f"{field}:"), str(err.value)


def test_register_budget_follows_the_family():
    s = CpuSchedule(mr=6, nr=16, mc=120, kc=256, nc=4096)
    s.validate(Gemm(8, 8, 8), CI_VM, "cpu-avx2-fma.gemm")  # 12 + 2 + 1 <= 16 ymm
    with pytest.raises(BadInputError, match="^mr:"):
        dataclasses.replace(s, mr=8, mc=128).validate(Gemm(8, 8, 8), CI_VM, "cpu-avx2-fma.gemm")
    with pytest.raises(BadInputError, match="^nr:"):
        CpuSchedule(mr=4, nr=6, mc=8, kc=8, nc=12).validate(Gemm(8, 8, 8), CI_VM, "cpu-neon.gemm")
    # without a variant, the host's own family decides (AVX-512 here: 16 lanes)
    with pytest.raises(BadInputError, match="^nr:"):
        CpuSchedule(mr=6, nr=16 + 8, mc=6, kc=8, nc=24).validate(Gemm(8, 8, 8), CI_VM)


def test_unpacked_operands_only_where_the_micro_kernel_can_read_them():
    s = dataclasses.replace(GOOD, pack_a=False, pack_b=False)
    s.validate(Gemm(64, 64, 64), CI_VM, "cpu-avx512.gemm")
    with pytest.raises(BadInputError, match="^pack_b:"):
        s.validate(Gemm(64, 64, 64, layout_b="col"), CI_VM, "cpu-avx512.gemm")
    with pytest.raises(BadInputError, match="^pack_a:"):
        s.validate(Gemm(64, 64, 64, dtype="bf16"), CI_VM, "cpu-avx512.gemm")
    with pytest.raises(BadInputError, match="^pack_a:"):
        s.validate(Conv2d(1, 3, 8, 8, 4, 3, 3), CI_VM, "cpu-avx512.conv2d")


def test_json_round_trip_and_bad_documents():
    d = GOOD.to_json()
    assert d["schema_version"] == 1 and d["backend"] == "cpu"
    assert CpuSchedule.from_json(d) == GOOD
    for bad, word in (({**d, "mq": 3}, "mq"), ({**d, "backend": "cuda"}, "cuda"),
                      ({k: v for k, v in d.items() if k != "kc"}, "kc"), ({**d, "schema_version": 9}, "schema")):
        with pytest.raises(BadInputError, match=word):
            CpuSchedule.from_json(bad)


def test_the_validator_and_the_renderers_agree_on_the_registers():
    assert {f: (c.lanes, c.vregs) for f, c in ISAS.items()} == FAMILY_REGISTERS


@pytest.mark.parametrize("host", [CI_VM, H100], ids=["ci_vm", "h100_host"])
@pytest.mark.parametrize("variant", [v for v in cpu.ALL_VARIANTS if v.op not in ("attention", "scaled_gemm")],
                         ids=lambda v: v.id)
def test_hero_schedules_are_valid_everywhere(host, variant):  # attention's, scaled_gemm's: their own test files
    op = {"gemm": Gemm(4096, 4096, 4096), "conv2d": Conv2d(8, 64, 56, 56, 64, 3, 3, padding=1),
          "softmax": Softmax(4096, 4096)}[variant.op]
    s = cpu.hero_schedule(op, variant, host)
    s.validate(op, host, variant)
    assert s.threads == host.cpu.logical_cores
    assert 4 * s.mc * s.kc <= host.cpu.l2_bytes_per_core  # the A block stays in L2
    assert 4 * s.kc * s.nc <= host.cpu.l3_bytes_total  # the B panel in L3


def test_registered_variants():
    ids = {v.id for v in cpu.VARIANTS}
    ops = ("gemm", "scaled_gemm", "conv2d", "softmax", "attention")
    assert ids == {f"{f}.{op}" for f in ("cpu-avx512", "cpu-avx2-fma", "cpu-portable") for op in ops}
    # NEON is rendered (and checked under emulation where a cross toolchain exists), not offered
    assert {v.id for v in cpu.ALL_VARIANTS} - ids == {f"cpu-neon.{op}" for op in ops}
    for v in cpu.VARIANTS:
        assert v.backend == "cpu" and v.requirements.toolchain == ("cc", "gcc", "clang")
        if v.op == "scaled_gemm":  # 8-bit inputs; AVX-512's kernel is VNNI's, the others plain int32 loops
            assert v.precisions == ("int8",)
            assert v.precision_requirements == ({"int8": Requirements(isa=("avx512bw", "avx512vl", "avx512vnni"))}
                                                if v.family == "cpu-avx512" else {})
            continue
        assert v.precisions == ("fp32", "fp16", "bf16")
        if v.family != "cpu-portable":
            assert v.precision_requirements["fp16"].isa == ("f16c",)
    prio = {v.family: v.priority for v in cpu.ALL_VARIANTS}
    assert prio["cpu-avx512"] > prio["cpu-avx2-fma"] > prio["cpu-portable"]
    assert prio["cpu-neon"] > prio["cpu-portable"]


def test_resolve_takes_an_id_or_a_variant():
    v = cpu.resolve("cpu-avx2-fma.softmax")
    assert cpu.resolve(v) is v and v.op == "softmax"
    with pytest.raises(BadInputError, match="variant"):
        cpu.resolve("cpu-sse.gemm")


@pytest.mark.parametrize(("host", "isa_removed", "chosen"), [
    (CI_VM, (), "cpu-avx512.gemm"),
    (H100, (), "cpu-avx512.gemm"),
    (CI_VM, ("avx512f",), "cpu-avx2-fma.gemm"),
    (CI_VM, ("avx512f", "avx2"), "cpu-portable.gemm"),
])
def test_plan_ranks_the_families(host, isa_removed, chosen):
    decision = plan(Gemm(1024, 1024, 1024), without_isa(host, *isa_removed), cpu.VARIANTS)
    assert decision.chosen == chosen
    neon = [c for c in plan(Gemm(8, 8, 8), host, cpu.ALL_VARIANTS).candidates if c.family == "cpu-neon"]
    assert neon and not neon[0].accepted and "aarch64" in neon[0].reasons[0]


def test_fp16_on_x86_needs_f16c():
    host = without_isa(CI_VM, "f16c")
    decision = plan(Gemm(64, 64, 64, dtype="fp16"), host, cpu.VARIANTS)
    assert decision.chosen == "cpu-portable.gemm" and decision.precision == "fp16"
    rejected = {c.variant: c.reasons for c in decision.rejected}
    assert any("f16c" in r for r in rejected["cpu-avx512.gemm"])
