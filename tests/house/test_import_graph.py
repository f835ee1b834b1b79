"""No import cycle among Tracea's own modules, counting the imports written inside functions (a lazy import
is still a dependency; it only moves the moment it runs).

The graph is built from the source with ``ast``, the way a reader or a tool would: ``tracea`` is tracea_cli/,
``tracea.<layer>`` is the layer's folder (pyproject's package-dir map), relative imports resolve within
their package, and ``from package import name`` points at the submodule ``name`` when there is one, else
at the package. Importing a submodule runs its packages' ``__init__`` too; that is not counted as an edge
(every package whose ``__init__`` re-exports a submodule would otherwise be a cycle with it).
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LAYERS = {"doctor", "emitters", "kernels", "tuner", "reports"}


def _module_of(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = list(rel.parts)
    parts[0] = "tracea" if parts[0] == "tracea_cli" else f"tracea.{parts[0]}"
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules() -> dict[str, Path]:
    out = {}
    for top in ("tracea_cli", *sorted(LAYERS)):
        for p in (ROOT / top).rglob("*.py"):
            out[_module_of(p)] = p
    return out


def _resolve(node: ast.ImportFrom, here: str, is_package: bool) -> str:
    if not node.level:
        return node.module or ""
    base = here.split(".") if is_package else here.split(".")[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def graph() -> dict[str, set[str]]:
    mods = modules()
    edges: dict[str, set[str]] = {m: set() for m in mods}
    for mod, path in mods.items():
        is_package = path.name == "__init__.py"
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = _resolve(node, mod, is_package)
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in mods else base for a in node.names]
            for t in targets:
                while t and t not in mods:  # `import tracea.emitters.cuda.build as b` -> that module
                    t = t.rpartition(".")[0]
                if t and t != mod:
                    edges[mod].add(t)
    return edges


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    counter = 0
    for root in sorted(edges):
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            for w in it:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(edges[w]))))
                    break
                if w in on:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    comp = []
                    while True:
                        w = stack.pop()
                        on.discard(w)
                        comp.append(w)
                        if w == v:
                            break
                    if len(comp) > 1:
                        out.append(sorted(comp))
    return out


def test_the_graph_sees_the_project():
    edges = graph()
    assert len(edges) > 100 and sum(map(len, edges.values())) > 300
    # spot checks: a function-level import, a relative import, the CLI's package name
    assert "tracea.emitters.nvrtc" in edges["tracea.emitters.cuda.build"]
    assert "tracea.kernels.epilogue" in edges["tracea.kernels.ops.gemm"]
    assert any(t.startswith("tracea.") and not t.startswith(("tracea.doctor", "tracea.emitters"))
               for t in edges["tracea.app"])


def test_no_import_cycle():
    found = cycles(graph())
    assert not found, "import cycles: " + "; ".join(" <-> ".join(c) for c in found)


def test_the_cycle_finder_finds_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def _layer(module: str) -> str:
    parts = module.split(".")
    return f"tracea.{parts[1]}" if len(parts) > 1 and parts[1] in LAYERS else "tracea"


def test_imports_are_relative_inside_a_folder_and_absolute_across():
    """Inside a layer's folder a module imports its siblings relatively (``from .layout import ...``), so a
    tool reading the folder resolves them; across folders it names the layer (``tracea.kernels``), never
    ``from ..`` out of its own folder."""
    wrong = []
    for mod, path in modules().items():
        own, is_package = _layer(mod), path.name == "__init__.py"
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level:
                target = _resolve(node, mod, is_package)
                if _layer(target) != own or not (target + ".").startswith(own + "."):
                    wrong.append(f"{path.relative_to(ROOT)}:{node.lineno} relative import out of {own}")
            else:
                names = [a.name for a in node.names] if isinstance(node, ast.Import) else (
                    [node.module] if isinstance(node, ast.ImportFrom) and node.module else [])
                for name in names:
                    if name.startswith("tracea") and _layer(name) == own:
                        wrong.append(f"{path.relative_to(ROOT)}:{node.lineno} {name} is in its own folder")
    assert not wrong, "\n".join(wrong)


def _backend_packages() -> frozenset[str]:
    """Every registered backend's package (``registry.BACKENDS``: ``tracea.emitters.<name>.backend``)."""
    from tracea.emitters.registry import BACKENDS

    return frozenset(module.split(".")[2] for module in BACKENDS.values())


BACKEND_PACKAGES = _backend_packages()


def _backend_of(module: str) -> str | None:
    parts = module.split(".")
    return parts[2] if len(parts) > 2 and parts[1] == "emitters" and parts[2] in BACKEND_PACKAGES else None


def test_no_backend_imports_another_backends_modules():
    """A backend is one folder, with no exception: what several backends need (the artifact record, the host
    compiler and the compile cache, NVRTC and its cubin cache, the device baselines, the GPU dialect and its
    epilogue writers) lives beside them in emitters/, never in one of them; and the tuner, reports, doctor,
    kernels and the CLI reach backends through the registry and the protocol, importing no backend module."""
    crossings = []
    for mod, targets in graph().items():
        own = _backend_of(mod)
        for t in targets:
            other = _backend_of(t)
            if other is not None and other != own:
                crossings.append(f"{mod} -> {t}")
    assert not crossings, "\n".join(sorted(crossings))


def test_no_build_module_branches_on_the_op_kind():
    """Each backend's build.py asks the op's core (its registry) for every step: no comparison with
    ``<something>.kind`` there, so an op is added by its core file and a registry line, not by branches."""
    branches = []
    for path in sorted((ROOT / "emitters").glob("*/build.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Compare) and any(
                    isinstance(side, ast.Attribute) and side.attr == "kind" for side in (node.left, *node.comparators)):
                branches.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not branches, branches


def test_core_registries_hold_direct_references():
    """Every backend's core registry is a folder of core files (``emitters/<backend>/cores/``) whose lines name
    their functions by reference (imports a reader and a tool can follow), never by a module and attribute
    string resolved at call time (``importlib``, ``lazy``): what a core runs is where its
    core file says. The one dynamic step is finding the files: each folder's ``__init__`` reads itself
    through ``emitters/core.py``'s ``gathered`` (the folder is the list), and nothing else in it imports."""
    found = []
    folders = sorted(p.parent for p in (ROOT / "emitters").glob("*/cores/__init__.py"))
    assert [f.parent.name for f in folders] == ["cpu", "cuda", "hip", "metal"]  # the scan saw every backend's registry
    for path in sorted(p for f in folders for p in f.glob("*.py")):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and node.attr == "import_module":
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}: importlib.import_module")
            if isinstance(node, ast.Name) and node.id in ("importlib", "lazy", "__import__"):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {node.id}")
        if path.name == "__init__.py":
            assert "gathered(__name__, __path__)" in path.read_text(), path
        else:  # a core file: its lines and its ORDER, with its imports at the top
            names = {t.id for n in tree.body if isinstance(n, ast.Assign) for t in n.targets if isinstance(t, ast.Name)}
            assert {"CORES", "ORDER"} <= names, path
    assert not found, "\n".join(found)
