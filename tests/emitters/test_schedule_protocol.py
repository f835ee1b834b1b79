"""Every schedule class of every backend follows the one schedule contract (emitters/schedule.py
``Schedule``: ``name``, ``validate(op, target)``, ``to_json``/``from_json``, ``features(op)``), and every
backend's cores are the one ``Core`` type (emitters/core.py). The classes are found in the source, so a new
one is checked without a line here; each is met as the hero of some backend's variant, whose JSON must read
back as the same value, through the class and through the backend. Stored schedules (the recorded spaces,
written by earlier Tracea) read back and write out as they were stored."""

from __future__ import annotations

import ast
import dataclasses
import importlib
import inspect
import json
import math
from pathlib import Path
from typing import Any

import pytest

from tracea.doctor.snapshot import read_snapshot
from tracea.emitters import registry
from tracea.emitters.core import Core
from tracea.emitters.schedule import Schedule
from tracea.kernels import Conv2d, Gemm, ScaledGemm, Softmax
from tracea.kernels.ops.attention import Attention

ROOT = Path(__file__).resolve().parents[2]
EMITTERS = ROOT / "emitters"
FIXTURES = Path(__file__).parents[1] / "fixtures"


def schedule_classes() -> dict[str, type]:
    """module.Class -> class, for every class named ``...Schedule`` under emitters/ (the protocol aside)."""
    found: dict[str, type] = {}
    for path in sorted(EMITTERS.rglob("*.py")):
        tree = ast.parse(path.read_text())
        names = [n.name for n in tree.body if isinstance(n, ast.ClassDef) and n.name.endswith("Schedule")]
        if not names:
            continue
        module = "tracea." + ".".join(path.relative_to(ROOT).with_suffix("").parts)
        mod = importlib.import_module(module)
        for name in names:
            cls = getattr(mod, name)
            if cls is not Schedule:
                found[f"{module}.{name}"] = cls
    return found


def _ops() -> list[Any]:
    ops: list[Any] = []
    for dtype in ("fp32", "bf16"):
        ops += [Gemm(256, 256, 256, dtype=dtype), Gemm(4, 4096, 4096, dtype=dtype),
                Conv2d(2, 64, 30, 30, 96, 3, 3, padding=1, layout="nhwc", dtype=dtype),
                Conv2d(1, 3, 224, 224, 64, 7, 7, stride=2, padding=3, layout="nhwc", dtype=dtype),
                Softmax(rows=4096, cols=1000, dtype=dtype), Attention(2, 4, 1000, 64, dtype=dtype, causal=True),
                Attention(2, 8, 1, 64, seq_k=1000, kv_heads=2, dtype=dtype)]  # decode
    return [*ops, ScaledGemm(64, 512, 512)]  # int8


def _hosts() -> dict[str, Any]:
    from tracea.emitters.cuda.arch import target_host

    ci = read_snapshot(FIXTURES / "snapshots" / "ci_vm.json")[0]
    h100 = read_snapshot(FIXTURES / "snapshots" / "h100_live.json")[0]
    return {"cpu": ci, "cuda": target_host(h100, "sm_90a"), "hip": registry.backend("hip").target_host(ci, "gfx942"),
            "metal": registry.backend("metal").target_host(ci, "apple8")}


def heroes() -> dict[type, tuple[str, Any, Any, Any]]:
    """schedule class -> (backend, variant, op, hero): the first hero of each class over every backend's
    variants and the ops above that the variant computes (its precisions; the hero then passes its check)."""
    from tracea.doctor.errors import TraceaError

    out: dict[type, tuple[str, Any, Any, Any]] = {}
    for name, host in _hosts().items():
        b = registry.backend(name)
        for v in (*b.VARIANTS, *getattr(b, "ALL_VARIANTS", ())):
            for op in _ops():
                if v.op != op.kind or op.dtype.value not in v.precisions:
                    continue
                try:
                    hero = b.hero_schedule(op, v, host)
                    b.validate_schedule(op, v, hero, host)
                except TraceaError:
                    continue
                out.setdefault(type(hero), (name, v, op, hero))
    return out


HEROES = heroes()


def test_every_schedule_class_is_met_as_a_hero():
    classes = schedule_classes()
    assert len(classes) >= 11, sorted(classes)
    missing = sorted(name for name, cls in classes.items() if cls not in HEROES)
    assert not missing, f"no hero of {missing}: add an op that makes one to _ops()"


@pytest.mark.parametrize("cls", sorted(schedule_classes().values(), key=lambda c: c.__qualname__),
                         ids=lambda c: c.__name__)
def test_the_class_follows_the_schedule_protocol(cls):
    backend, _, op, hero = HEROES[cls]
    assert dataclasses.is_dataclass(cls) and cls.__dataclass_params__.frozen  # type: ignore[attr-defined]
    assert isinstance(hero, Schedule)
    assert isinstance(hero.name, str) and hero.name
    inspect.signature(cls.validate).bind(hero, op, None)  # validate(op, target)
    assert isinstance(inspect.getattr_static(cls, "from_json"), staticmethod)
    features = hero.features(op)
    assert isinstance(features, dict)
    assert all(isinstance(x, (int, float)) and math.isfinite(x) for x in features.values()), features
    stored = json.loads(json.dumps(hero.to_json()))
    assert cls.from_json(stored) == hero
    assert registry.backend(backend).schedule_from_json(stored) == hero


def test_the_heroes_are_valid_on_their_own_target_through_the_protocol():
    """``validate(op, target)`` with each backend's target: the host (CPU, HIP, Metal), the Arch (CUDA; the Hopper
    schedules its opt-in shared memory)."""
    from tracea.emitters.cuda.arch import target_of

    hosts = _hosts()
    arch = target_of(hosts["cuda"], "sm_90a")
    for cls, (backend, _, op, hero) in HEROES.items():
        target = {"cpu": hosts["cpu"], "hip": hosts["hip"], "metal": hosts["metal"]}.get(backend, arch)
        if cls.__module__.startswith("tracea.emitters.cuda.hopper"):
            target = arch.smem_optin
        hero.validate(op, target)


def test_every_backends_cores_are_the_one_core_type():
    from tracea.emitters.cpu.cores import CORES as CPU
    from tracea.emitters.cuda.cores import CORES as CUDA
    from tracea.emitters.hip.cores import CORES as HIP
    from tracea.emitters.metal.cores import CORES as METAL

    for core in (*CPU.values(), *CUDA, *HIP.values(), *METAL.values()):
        assert isinstance(core, Core), core
        assert core.ops and all(isinstance(k, str) for k in core.ops)
        assert isinstance(core.schedule, type) and callable(core.schedule.from_json)
    assert set(CPU) == {k for c in CPU.values() for k in c.ops} and set(HIP) == {k for c in HIP.values() for k in c.ops}
    assert set(METAL) == {k for c in METAL.values() for k in c.ops}
    shared = {f.name for f in dataclasses.fields(Core)}
    for core in (*CPU.values(), *CUDA, *HIP.values(), *METAL.values()):  # a backend adds fields; it renames none
        assert shared <= {f.name for f in dataclasses.fields(core)}


@pytest.mark.parametrize("space", sorted((FIXTURES / "spaces").glob("*.json")), ids=lambda p: p.stem)
def test_stored_schedules_read_back_as_they_were_stored(space):
    doc = json.loads(space.read_text())
    b = registry.backend(doc["backend"])
    for trial in doc["trials"]:
        s = b.schedule_from_json(trial["schedule"])
        assert isinstance(s, Schedule)
        assert s.to_json() == trial["schedule"]
