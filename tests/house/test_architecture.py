"""The backend contract holds (DESIGN.md, "Inside the emitters"), read from the source with ``ast``.

Backend names. Outside ``emitters/`` (where each backend lives) and ``tracea_cli/`` (which parses
``--backend``), no code decides anything by a backend's name: it asks the backend (emitters/backend.py)
instead. A decision is a comparison with a name literal ("cpu", "cuda", "hip", "metal"): ``==``, ``!=``,
``in``/``not in`` (against a literal tuple, list or set too), a ``match`` case on one, or a dict literal of
names indexed on the spot (``{"cpu": a, "cuda": b}[backend]``). A name used as data is not a decision: a
dict key, a default argument, a row's value.

The doctor is not exempt, but what it compares must be hardware, not a backend. The doctor describes the
host: its report has a "cpu" section and ceilings keyed by device ("cpu", "cuda:0"); code that picks one
of those by the kind of *device* reads hardware and may spell it as it likes, but never with a bare backend
name as the compared literal (a device key is "cuda:0", a section is "nvidia"). Comparing a variant's
``backend`` field with a name given by the caller (doctor/plan.py filters by ``--backend``) compares two
values, not a literal, and is fine. The fingerprint's per-backend facts come from the backend.

Imports. ``reports/`` reaches the emitters only through the protocol: ``tracea.emitters.registry`` (a
backend by name), ``tracea.emitters.backend`` (the protocol and its ``Rendering``) and
``tracea.emitters.bench`` (the one verify-and-time loop, backend-agnostic); ``emitters/`` imports neither
``reports/`` nor ``tuner/`` (they sit above it).
"""

from __future__ import annotations

import ast
import inspect
import typing
from pathlib import Path

import pytest

from tracea.emitters import registry
from tracea.emitters.backend import Backend

ROOT = Path(__file__).resolve().parents[2]
NAMES = frozenset({"cpu", "cuda", "hip", "metal"})
CHECKED = ("doctor", "kernels", "reports", "tuner")  # every layer but emitters/ and tracea_cli/


def _names_in(node: ast.AST) -> set[str]:
    """Backend names among the literal(s) ``node`` is: a string, or a tuple/list/set of them."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return {node.value} & NAMES
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return set().union(*(_names_in(e) for e in node.elts)) if node.elts else set()
    return set()


def name_decisions(source: str) -> list[tuple[int, str]]:
    """(line, backend name) for every decision on a backend-name literal in ``source``."""
    out: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare):
            for operand in (node.left, *node.comparators):
                out += [(node.lineno, n) for n in _names_in(operand)]
        elif isinstance(node, ast.match_case):
            for pat in ast.walk(node.pattern):
                if isinstance(pat, ast.MatchValue):
                    out += [(pat.lineno, n) for n in _names_in(pat.value)]
        elif isinstance(node, ast.Subscript) and isinstance(node.value, ast.Dict):
            keys = set().union(*(_names_in(k) for k in node.value.keys if k is not None))
            out += [(node.lineno, n) for n in sorted(keys)]
    return out


def _modules(*folders: str) -> list[Path]:
    return sorted(p for f in folders for p in (ROOT / f).rglob("*.py") if "__pycache__" not in p.parts)


@pytest.mark.parametrize("path", _modules(*CHECKED), ids=lambda p: str(p.relative_to(ROOT)))
def test_no_backend_name_is_compared_outside_emitters(path):
    found = name_decisions(path.read_text())
    assert not found, f"{path.relative_to(ROOT)} decides by a backend's name at {found}: ask the backend " \
                      "(tracea.emitters.registry.backend(name), emitters/backend.py) instead"


def test_the_name_rule_sees_each_kind_of_decision():
    src = ('if backend == "cpu": pass\nif "cuda" != b: pass\nif b in ("hip", None): pass\n'
           'match b:\n    case "metal": pass\nx = {"cpu": 1, "cuda": 2}[b]\n'
           'ok = {"cpu": 1}\ny = b == "cuda:0"\nz = f(backend="cpu")\n')
    assert name_decisions(src) == [(1, "cpu"), (2, "cuda"), (3, "hip"), (5, "metal"), (6, "cpu"), (6, "cuda")]


def _imports(path: Path) -> set[str]:
    """Every module ``path`` imports (inside functions too), relative imports made absolute."""
    top, *sub = path.relative_to(ROOT).parent.parts
    package = ["tracea", *sub] if top == "tracea_cli" else ["tracea", top, *sub]  # pyproject's package-dir
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - node.level + 1]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            out |= {mod} | {f"{mod}.{a.name}" for a in node.names}
    return out


REPORTS_MAY_IMPORT = ("tracea.emitters.registry", "tracea.emitters.backend", "tracea.emitters.bench")


@pytest.mark.parametrize("path", _modules("reports"), ids=lambda p: str(p.relative_to(ROOT)))
def test_reports_reach_the_emitters_only_through_the_protocol(path):
    bad = sorted(m for m in _imports(path) if m.startswith("tracea.emitters.")
                 and not m.startswith(REPORTS_MAY_IMPORT))
    assert not bad, f"{path.relative_to(ROOT)} imports emitters internals {bad}"


@pytest.mark.parametrize("path", _modules("emitters"), ids=lambda p: str(p.relative_to(ROOT)))
def test_emitters_import_nothing_above_them(path):
    bad = sorted(m for m in _imports(path) if m.startswith(("tracea.reports", "tracea.tuner")))
    assert not bad, f"{path.relative_to(ROOT)} imports {bad}: reports/ and tuner/ sit above the emitters"


# ------------------------------------------------------------------------------------ the protocol

PLUG_INS = ("test_tuner_fault_backend", "noisy_baseline_backend", "test_tuner_cuda_fault_backend")
PLUG_IN_FOLDER = Path(__file__).resolve().parents[1] / "tuner"  # the tuner's tests hold these backends


def _members() -> tuple[dict[str, type], dict[str, inspect.Signature]]:
    hints = typing.get_type_hints(Backend)
    data = {k: typing.get_origin(t) or t for k, t in hints.items()}
    methods = {k: inspect.signature(v) for k, v in vars(Backend).items()
               if callable(v) and not k.startswith("_") and k not in data}
    return data, methods


def _conforms(module):
    assert isinstance(module, Backend), sorted(m for m in Backend.__protocol_attrs__ if not hasattr(module, m)) \
        if hasattr(Backend, "__protocol_attrs__") else module
    data, methods = _members()
    for name, kind in data.items():
        assert isinstance(getattr(module, name), kind), f"{module.__name__}.{name} is not a {kind.__name__}"
    for name, sig in methods.items():
        want = [p for p in sig.parameters.values() if p.name != "self"]
        have = list(inspect.signature(getattr(module, name)).parameters.values())
        assert [p.name for p in have[: len(want)]] == [p.name for p in want], f"{module.__name__}.{name}{have}"
        extra = have[len(want):]
        assert all(p.default is not inspect.Parameter.empty for p in extra), f"{module.__name__}.{name}: {extra}"
        for mine, theirs in zip(want, have, strict=False):
            if mine.default is not inspect.Parameter.empty:
                assert theirs.default == mine.default, f"{module.__name__}.{name}({theirs.name}=...)"


@pytest.mark.parametrize("name", sorted(registry.BACKENDS))
def test_every_registered_backend_satisfies_the_protocol(name):
    b = registry.backend(name)
    _conforms(b)
    assert b.NAME == name and all(v.backend == name for v in b.VARIANTS)


@pytest.mark.parametrize("module", PLUG_INS)
def test_test_backends_satisfy_the_protocol(module, monkeypatch):
    import importlib

    monkeypatch.syspath_prepend(str(PLUG_IN_FOLDER))  # found whichever test folders this run collected
    _conforms(importlib.import_module(module))


def test_every_protocol_member_says_its_contract():
    _, methods = _members()
    assert all((getattr(Backend, m).__doc__ or "").strip() for m in methods)
