"""The CPU backend's core registry: every op of its variants has a core, rendering, the heuristic, the
check and the search space go through it, and a core added to it is served with no other change."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from tracea.doctor.errors import BadInputError, UnsupportedError
from tracea.doctor.snapshot import load_snapshot
from tracea.emitters import cpu
from tracea.emitters.cpu.core import CpuCore
from tracea.emitters.cpu.cores import CORES, core_for
from tracea.emitters.cpu.render import render
from tracea.emitters.cpu.schedules import hero_schedule, rows_space
from tracea.emitters.cpu.variants import ALL_VARIANTS, FAMILIES
from tracea.kernels import Gemm, Softmax

HOST = load_snapshot(Path(__file__).parents[2] / "fixtures" / "snapshots" / "ci_vm.json")


def test_every_cpu_op_has_its_core_and_a_variant_in_every_family():
    assert all(kind in core.ops and core.descriptions[kind] for kind, core in CORES.items())
    assert [v.id for v in ALL_VARIANTS] == [f"{f}.{kind}" for f in FAMILIES for kind in CORES]


def test_render_takes_entry_buffers_and_arguments_from_the_core():
    op = Gemm(64, 32, 16, alpha=0.5)
    r = render(op, "cpu-portable", cpu.hero_schedule(op, "cpu-portable.gemm", HOST))
    core = core_for("gemm")
    assert (r.entry, r.buffers, r.dims, r.fparams) == (core.entry, core.buffers, (64, 32, 16, 0), (0.5,))
    assert f"int {core.entry}(" in r.source


def test_an_op_without_a_core_is_unsupported():
    toy = _ToyOp(kind="layernorm")
    for call in (lambda: render(toy, "cpu-portable", hero_schedule(toy, cpu.resolve("cpu-portable.softmax"), HOST)),
                 lambda: cpu.hero_schedule(toy, "cpu-portable.softmax", HOST),
                 lambda: cpu.search_space(toy, "cpu-portable.softmax", HOST)):
        with pytest.raises(UnsupportedError, match="no renderer for 'layernorm'"):
            call()


def test_the_schedule_class_is_the_cores():
    op = Softmax(4, 4)
    with pytest.raises(BadInputError, match="expected a CpuSchedule"):
        cpu.emit(op, "cpu-portable.softmax", {"threads": 1}, HOST, "/nonexistent")


@dataclasses.dataclass(frozen=True)
class _ToyOp:
    kind: str = "rowcopy"

    @property
    def dtype(self) -> Any:
        return Softmax(1, 1).dtype

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "dtype": "fp32", "rows": 3}


def test_a_registered_core_is_served_with_no_other_change(monkeypatch):
    toy = CpuCore(name="rowcopy", ops=("rowcopy",),
                  render=lambda op, isa, s, header: header + "int tracea_rowcopy(void) { return 0; }\n",
                  space=rows_space, entry="tracea_rowcopy", buffers=("x", "out"),
                  arguments=lambda op: ((3, 0), ()), tag=lambda op: "rows", shape_free=("dtype",),
                  metadata=lambda op, isa, s, name: {"name": name})
    monkeypatch.setitem(CORES, "rowcopy", toy)
    op = _ToyOp()
    s = cpu.hero_schedule(op, "cpu-portable.softmax", HOST)
    r = render(op, "cpu-portable", s)
    assert r.name == "rowcopy_fp32_rows_portable_4x4" and r.metadata == {"name": r.name}
    assert r.source.endswith("int tracea_rowcopy(void) { return 0; }\n") and '"dtype": "fp32"' in r.source
    assert [c.threads for c in cpu.search_space(op, "cpu-portable.softmax", HOST)][0] == s.threads
