"""Where a backend and an op kind may be named: the two lists of docs/architecture.md ("Add a backend",
"Add an op"), held against the code with ``ast``.

The code checked is the product: completions/, doctor/, emitters/, kernels/, reports/, tracea_cli/ and
tuner/. Not tests/ (a new backend or op comes with its tests, which name it by design) and not benchmarks/
(scripts that measure one named backend or op on purpose, which no new backend or op has to edit).

A module *names a backend* where it

- imports a backend's package: ``tracea.emitters.<name>`` or a module under it, relative imports resolved,
  or spelt as a dotted string (``"tracea.emitters.cuda.backend"``, what ``importlib`` reads);
- decides by a backend's name: the literal ("cpu", "cuda", "hip", "metal") is an operand of a comparison
  (alone or in a literal tuple, list or set), a ``match`` case, or a key of a dict literal indexed on the
  spot. A comparison with a ``.type`` or ``.device`` attribute is a device test, not a backend's: torch calls
  its devices "cpu" and "cuda" (on ROCm too);
- keeps a table over backends: a dict literal with two or more backend names as keys, or a tuple, list or
  set literal of two or more;
- spells a registered variant family or id ("cpu-avx2-fma", "cuda-wgmma.conv2d"), which belongs to one
  backend.

A backend's name used as a value is not counted: a parameter's default (``backend="cpu"``), a fallback
(``backend or "cpu"``), a record's field (``"backend": "cpu"``), one key among other sections (the doctor's
"cpu" section and its "cuda" probe, the "metal" compiler: the hardware, not a backend).

A module *names an op kind* where it holds a string literal equal to an op kind ("gemm", "conv2d", "softmax",
"attention": a comparison with ``.kind``, a table's key, a ``Core`` or ``Variant`` line, a suite's name, a
call's argument; f-string text aside), spells a variant id ("cuda-simt.softmax"), or imports an op's class
from ``tracea.kernels`` (``Gemm``, ``Conv2d``, ``Softmax``, ``Attention``). Op kinds have none of the
homonyms backend names have, so every such literal counts.

The allowed places are ``BACKEND_PLACES`` and ``OP_PLACES`` below, each entry with its row kind and why:
``new`` (a file or folder one creates), ``edit`` (an existing file one edits) or ``stray`` (names a backend
or an op today though a new one needs no line there: the distance to "one folder plus one registry line",
"one op file plus one core file per backend"). The doc's two tables list exactly these entries.
"""

from __future__ import annotations

import ast
import functools
import re
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "architecture.md"
PRODUCT = ("completions", "doctor", "emitters", "kernels", "reports", "tracea_cli", "tuner")
DEVICE_ATTRS = frozenset({"type", "device"})

# ------------------------------------------------------------------------------------- the allowed places

BACKEND_PLACES: dict[str, tuple[str, str]] = {
    "emitters/<name>/": ("new", "the backend's folder: its modules name their own backend and no other"),
    "emitters/registry.py": ("edit", "one line in BACKENDS: the name and its module's dotted path"),
}

OP_PLACES: dict[str, tuple[str, str]] = {
    "kernels/ops/<op>.py": ("new", "the op as a frozen dataclass (with its aliases, default shape, order, labels, "
                                   "its suites of shapes, its C reference for export); it registers itself in OPS, "
                                   "and kernels/ops/__init__.py imports every file of its folder"),
    "emitters/<backend>/": ("new", "the op's kernel module and core file (cores/<op>.py) in each backend that serves "
                                   "it; each backend's cores/ folder is its registry (any file in a backend's folder "
                                   "may name the ops its cores serve)"),
    "emitters/baselines/<op>.py": ("new", "its baselines: host (NumPy, torch on the CPU) and device (PyTorch's "
                                          "kernels); found by the op's name"),
    "tracea_cli/<op>_options.py": ("new", "its CLI flags, help line, place and IR value (make_op); op_options.py "
                                          "finds it by name"),
    "tracea_cli/ops/_functions/<op>.py": ("new", "the tracea.ops function (arguments to the IR value, the call) and "
                                                 "its vendor fallback; offered by its __all__, placed by its ORDER"),
    "tracea_cli/ops/_torch/<op>.py": ("new", "its PyTorch pieces, for an op torch has too: the torch.compile backend's "
                                             "custom op (torch's own op beside it) and its match in a graph; the "
                                             "nn.Module Tracea stands in for, if any"),
}

# ----------------------------------------------------------------------------------------------- the rule


@dataclass(frozen=True)
class Vocabulary:
    backends: frozenset[str]
    ops: frozenset[str]
    op_classes: dict[str, str]  # class name -> op kind
    families: dict[str, str]  # variant family -> backend

    def __post_init__(self) -> None:
        spelt = {f: (b, None) for f, b in self.families.items()}
        spelt |= {f"{f}.{op}": (b, op) for f, b in self.families.items() for op in self.ops}
        object.__setattr__(self, "_variants", spelt)

    def variant(self, text: str) -> tuple[str, str | None] | None:
        """(backend, op or None) for a variant family or id, else None."""
        return self._variants.get(text)  # type: ignore[attr-defined, no-any-return]


@functools.lru_cache(maxsize=1)
def vocabulary() -> Vocabulary:
    from tracea.emitters import registry
    from tracea.kernels import OPS

    return Vocabulary(frozenset(registry.BACKENDS) | frozenset(registry.PLANNED), frozenset(OPS),
                      {cls.__name__: kind for kind, cls in OPS.items()},
                      {v.family: v.backend for v in registry.all_variants()})


def _package(rel: str) -> list[str]:
    """The package a module's relative imports start from (pyproject's package-dir map)."""
    top, *sub = Path(rel).parent.parts or ("",)
    return ["tracea", *sub] if top == "tracea_cli" else ["tracea", top, *sub]


def _imported(node: ast.Import | ast.ImportFrom, package: list[str]) -> list[tuple[str, list[str]]]:
    """(module, names imported from it) for an import statement, relative modules made absolute."""
    if isinstance(node, ast.Import):
        return [(a.name, []) for a in node.names]
    base = package[: len(package) - node.level + 1] if node.level else []
    module = ".".join(base + ([node.module] if node.module else []))
    return [(module, [a.name for a in node.names])]


def _emitter_package(module: str, backends: frozenset[str]) -> str | None:
    parts = module.split(".")
    return parts[2] if parts[:2] == ["tracea", "emitters"] and len(parts) > 2 and parts[2] in backends else None


def _literals(node: ast.AST, names: frozenset[str]) -> list[str]:
    """The names among the literal(s) ``node`` is: a string, or a tuple, list or set of them."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value] if node.value in names else []
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return [n for e in node.elts for n in _literals(e, names)]
    return []


def _decided(node: ast.AST, names: frozenset[str]) -> list[str]:
    """Names a decision reads: compared, matched, or the keys of a dict literal indexed on the spot."""
    if isinstance(node, ast.Compare):
        operands = [node.left, *node.comparators]
        if any(isinstance(o, ast.Attribute) and o.attr in DEVICE_ATTRS for o in operands):
            return []  # x.device.type == "cuda": a device, not a backend
        return [n for o in operands for n in _literals(o, names)]
    if isinstance(node, ast.match_case):
        return [n for p in ast.walk(node.pattern) if isinstance(p, ast.MatchValue) for n in _literals(p.value, names)]
    if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Dict):
        return [n for k in node.value.keys if k is not None for n in _literals(k, names)]
    return []


def _tabled(node: ast.AST, names: frozenset[str]) -> list[str]:
    """Names of a table over them: a dict literal keyed by two or more, a literal sequence of two or more."""
    if isinstance(node, ast.Dict):
        found = [n for k in node.keys if k is not None for n in _literals(k, names)]
    elif isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        found = [n for e in node.elts for n in _literals(e, names)]
    else:
        return []
    return found if len(set(found)) >= 2 else []


MODULE_STRING = re.compile(r"tracea\.emitters\.\w+(\.\w+)*")
SEQUENCES = (ast.Dict, ast.Tuple, ast.List, ast.Set)
DECISIONS = (ast.Compare, ast.match_case, ast.Subscript)


def backend_mentions(nodes: list[ast.AST], rel: str, vocab: Vocabulary) -> set[tuple[int, str, str]]:
    """(line, backend, how) for every place the module names a backend (the module docstring's rule);
    ``nodes``: the module's ``ast.walk``."""
    out: set[tuple[int, str, str]] = set()
    names, package = vocab.backends, _package(rel)
    for node in nodes:
        if isinstance(node, ast.Constant):
            if isinstance(node.value, str):
                if (v := vocab.variant(node.value)) is not None:
                    out.add((node.lineno, v[0], "variant"))
                elif node.value.startswith("tracea.emitters.") and MODULE_STRING.fullmatch(node.value) \
                        and (b := _emitter_package(node.value, names)):
                    out.add((node.lineno, b, "import"))
        elif isinstance(node, DECISIONS):
            line = node.pattern.lineno if isinstance(node, ast.match_case) else node.lineno
            out |= {(line, n, "decision") for n in _decided(node, names)}
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            for module, members in _imported(node, package):
                for m in [module, *(f"{module}.{a}" for a in members)]:
                    if b := _emitter_package(m, names):
                        out.add((node.lineno, b, "import"))
        if isinstance(node, SEQUENCES):
            out |= {(node.lineno, n, "table") for n in _tabled(node, names)}
    return out


def op_mentions(nodes: list[ast.AST], rel: str, vocab: Vocabulary) -> set[tuple[int, str, str]]:
    """(line, op kind, how) for every place the module names an op kind (the module docstring's rule);
    ``nodes``: the module's ``ast.walk``."""
    out: set[tuple[int, str, str]] = set()
    text = {id(v) for n in nodes if isinstance(n, ast.JoinedStr) for v in n.values}
    for node in nodes:
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in text:
            if node.value in vocab.ops:
                out.add((node.lineno, node.value, "literal"))
            elif (v := vocab.variant(node.value)) is not None and v[1]:
                out.add((node.lineno, v[1], "variant"))
        elif isinstance(node, ast.ImportFrom):
            for module, members in _imported(node, _package(rel)):
                if module == "tracea.kernels" or module.startswith("tracea.kernels."):
                    out |= {(node.lineno, vocab.op_classes[a], "import") for a in members if a in vocab.op_classes}
    return out


# --------------------------------------------------------------------------------------- the code, scanned


@functools.lru_cache(maxsize=1)
def _trees() -> dict[str, list[ast.AST]]:
    """Each product module's nodes, walked once for both rules. A module whose text holds none of the
    vocabulary's words names nothing (every way of naming spells the word, but a relative import between
    siblings in a backend's folder, which the folder allows), so it is not parsed."""
    vocab = vocabulary()
    words = sorted(vocab.backends | vocab.ops | set(vocab.op_classes) | set(vocab.families), key=len, reverse=True)
    spelt = re.compile("|".join(map(re.escape, words)))
    out = {}
    for path in sorted(p for f in PRODUCT for p in (ROOT / f).rglob("*.py") if "__pycache__" not in p.parts):
        if spelt.search(text := path.read_text()):
            out[path.relative_to(ROOT).as_posix()] = list(ast.walk(ast.parse(text, str(path))))
    return out


@functools.cache
def _pattern(key: str, named: str, backends: frozenset[str]) -> re.Pattern[str]:
    """An allow-list key as a regex for the files that may name ``named``: <name> and <op> stand for the
    name itself, <backend> for any backend's folder; a key ending in / is a folder."""
    rx = re.escape(key)
    rx = rx.replace(re.escape("<name>"), re.escape(named)).replace(re.escape("<op>"), re.escape(named))
    rx = rx.replace(re.escape("<backend>"), "(" + "|".join(map(re.escape, sorted(backends))) + ")")
    return re.compile(rx + (".*" if key.endswith("/") else ""))


def _allowed(rel: str, named: str, places: dict[str, tuple[str, str]], vocab: Vocabulary,
             explicit: bool = True) -> bool:
    keys = [k for k in places if "<" in k] + ([rel] if explicit and rel in places else [])
    return any(_pattern(k, named, vocab.backends).fullmatch(rel) for k in keys)


RULES = {"backend": (backend_mentions, BACKEND_PLACES), "op": (op_mentions, OP_PLACES)}


def _strays(kind: str) -> dict[str, list[tuple[int, str, str]]]:
    mentions, places = RULES[kind]
    vocab, out = vocabulary(), {}
    for rel, nodes in _trees().items():
        bad = sorted(m for m in mentions(nodes, rel, vocab) if not _allowed(rel, m[1], places, vocab))
        if bad:
            out[rel] = bad
    return out


@pytest.mark.parametrize("kind", sorted(RULES))
def test_no_module_names_a_backend_or_op_outside_its_places(kind):
    strays = _strays(kind)
    assert not strays, (
        f"these modules name {'a backend' if kind == 'backend' else 'an op kind'} outside the places "
        f"docs/architecture.md lists ((line, name, how) each): "
        f"{strays}. Ask the backend or the op instead (emitters/backend.py, Op.from_json), or, where the file "
        f"really is a place one edits, add it to the list in docs/architecture.md and to tests/house/test_growth_points.py")


@pytest.mark.parametrize("kind", sorted(RULES))
def test_every_listed_place_still_names_it(kind):
    """An entry the code no longer needs leaves the list (the list says what is true, not what was)."""
    mentions, places = RULES[kind]
    vocab, trees = vocabulary(), _trees()
    stale = []
    for rel in places:
        if "<" in rel or not rel.endswith(".py"):
            continue
        if not (ROOT / rel).is_file():
            stale.append(f"{rel}: no such module")
            continue
        if kind == "op" and any(_allowed(rel, n, places, vocab, explicit=False) for n in vocab.ops):
            continue  # a backend's registry files: listed as the edits a new op makes there, its folder allows them
        if not [m for m in mentions(trees.get(rel, []), rel, vocab) if not _allowed(rel, m[1], places, vocab, False)]:
            stale.append(f"{rel}: names no {kind} the patterns do not already allow: drop its row from "
                         "docs/architecture.md and from this test")
    assert not stale, stale


# ----------------------------------------------------------------------------------------------- the doc

SECTIONS = {"backend": "## Add a backend", "op": "## Add an op"}
ROW = re.compile(r"^\| (new|edit|stray) \| `([^`]+)` \|", re.MULTILINE)
COUNTED = re.compile(r"Counted: (\d+) new, (\d+) edit, (\d+) stray\.")


def _section(heading: str) -> str:
    text = DOC.read_text()
    start = text.index(heading)
    end = text.find("\n## ", start + 1)
    return text[start: end if end != -1 else len(text)]


@pytest.mark.parametrize("kind", sorted(SECTIONS))
def test_the_doc_lists_exactly_the_allowed_places(kind):
    section = _section(SECTIONS[kind])
    listed = {path: row for row, path in ROW.findall(section)}
    assert len(listed) == len(ROW.findall(section)), "a file listed twice"
    assert listed == {path: row for path, (row, _) in RULES[kind][1].items()}
    counted = COUNTED.search(section)
    assert counted, f"the section {SECTIONS[kind]!r} says 'Counted: N new, N edit, N stray.'"
    rows = [r for r, _ in RULES[kind][1].values()]
    assert tuple(map(int, counted.groups())) == (rows.count("new"), rows.count("edit"), rows.count("stray"))


# ------------------------------------------------------------------------------------ the rule on snippets

SNIPPETS = Vocabulary(frozenset({"cpu", "cuda", "hip", "metal"}), frozenset({"gemm", "conv2d", "softmax", "attention"}),
                      {"Gemm": "gemm", "Conv2d": "conv2d", "Softmax": "softmax", "Attention": "attention"},
                      {"cpu-avx2-fma": "cpu", "cuda-wgmma": "cuda"})


def _backends(src: str, rel: str = "tuner/run.py") -> list[tuple[int, str, str]]:
    return sorted(backend_mentions(list(ast.walk(ast.parse(src))), rel, SNIPPETS))


def _ops(src: str, rel: str = "tuner/run.py") -> list[tuple[int, str, str]]:
    return sorted(op_mentions(list(ast.walk(ast.parse(src))), rel, SNIPPETS))


def test_the_backend_rule_sees_each_way_of_naming_one():
    src = ('if backend == "cuda": pass\n'
           'if b in ("hip", None): pass\n'
           'match b:\n    case "metal": pass\n'
           'x = {"cpu": 1, "hip": 2}[b]\n'
           'TABLE = {"cpu": f, "cuda": g}\n'
           'GPUS = ("cuda", "hip")\n'
           'from tracea.emitters.cuda import build\n'
           'from tracea.emitters import hip\n'
           'import tracea.emitters.cpu.gemm\n'
           'm = "tracea.emitters.cuda.backend"\n'
           'v = r.variant == "cuda-wgmma.conv2d"\n'
           'f = "cpu-avx2-fma"\n')
    assert _backends(src) == [
        (1, "cuda", "decision"), (2, "hip", "decision"), (4, "metal", "decision"), (5, "cpu", "decision"),
        (5, "cpu", "table"), (5, "hip", "decision"), (5, "hip", "table"), (6, "cpu", "table"), (6, "cuda", "table"), (7, "cuda", "table"), (7, "hip", "table"),
        (8, "cuda", "import"), (9, "hip", "import"), (10, "cpu", "import"), (11, "cuda", "import"),
        (12, "cuda", "variant"), (13, "cpu", "variant")]


def test_the_backend_rule_resolves_relative_imports():
    assert _backends("from ..cuda.compiler import compile_cached\n", "emitters/hip/run_nvidia.py") == \
        [(1, "cuda", "import")]
    assert _backends("from . import cuda\n", "emitters/export_abi.py") == [(1, "cuda", "import")]
    assert _backends("from .cuda import x\n", "tracea_cli/ops/_engine.py") == []  # tracea.ops.cuda: not a backend


def test_the_backend_rule_leaves_devices_defaults_and_sections_alone():
    src = ('if x.device.type == "cuda": pass\n'
           'if first.device == "cuda": pass\n'
           't = torch.empty(1, device="cuda")\n'
           'def bench(op, backend="cpu"): pass\n'
           'b = backend or "cpu"\n'
           'row = {"backend": "cpu", "op": "gemm"}\n'
           'sections = {"host": h, "cpu": c, "nvidia": n}\n'
           'raw.get("cuda")\n'
           'pair = ("cpu", collect)\n'
           'ok = b == "cuda:0" or b == "cuda-core"\n')
    assert _backends(src) == []


def test_the_backend_rule_catches_a_new_branch_in_the_tuner_and_the_reports():
    for rel in ("tuner/run.py", "reports/record.py"):
        assert _backends('def f(backend):\n    if backend == "cuda":\n        return 1\n', rel) == \
            [(2, "cuda", "decision")]
        assert not _allowed(rel, "cuda", BACKEND_PLACES, SNIPPETS), f"{rel} is no place to name a backend"


def test_the_op_rule_sees_each_way_of_naming_one():
    src = ('if op.kind == "gemm": pass\n'
           'T = {"conv2d": f}\n'
           'Core("softmax", g)\n'
           'from tracea.kernels import Attention, DType\n'
           'v = "cuda-wgmma.conv2d"\n'
           'msg = f"gemm {m}"\n')
    assert _ops(src) == [(1, "gemm", "literal"), (2, "conv2d", "literal"), (3, "softmax", "literal"),
                         (4, "attention", "import"), (5, "conv2d", "variant")]
    assert _ops("from .ops import Conv2d, Gemm\n", "kernels/workloads.py") == \
        [(1, "conv2d", "import"), (1, "gemm", "import")]
    assert _ops('x = torch.nn.Conv2d\nname = "gemm_kernel"\nk = "cuda-wgmma"\n') == []


def test_the_patterns_stand_for_the_named_backend_or_op():
    assert _allowed("emitters/hip/cores.py", "hip", BACKEND_PLACES, SNIPPETS)
    assert not _allowed("emitters/hip/cores.py", "cuda", BACKEND_PLACES, SNIPPETS)
    assert not _allowed("emitters/hip/run_nvidia.py", "cuda", BACKEND_PLACES, SNIPPETS)
    assert _allowed("emitters/cuda/hopper/attention.py", "attention", OP_PLACES, SNIPPETS)
    assert _allowed("kernels/ops/attention.py", "attention", OP_PLACES, SNIPPETS)
    assert not _allowed("kernels/ops/attention.py", "gemm", OP_PLACES, SNIPPETS)
    assert not _allowed("emitters/timing.py", "gemm", OP_PLACES, SNIPPETS)
