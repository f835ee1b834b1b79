"""Facts that had drifted apart in copies each have one home (DESIGN.md: "file suffixes, languages and element
sizes are facts of the backend, the renderer and ``DType``, not of tables elsewhere"), read from the source with
``ast``, and every reader takes them from there.

Source suffixes. A kernel's source file is named with its backend's ``SOURCE_SUFFIX`` (emitters/backend.py; the
renderer's ``file_suffix``). The readers, an IR dump's ``03_source`` (reports/irdump.py), the source a crash
record keeps of a failed build (reports/record.py) and ``tracea emit --dump-ir`` (tracea_cli/cmd_evidence.py),
ask the backend; no module keeps a dict from languages to suffixes or back.

Element sizes. Bytes per element are ``DType.itemsize`` for the IR's types, and ``kernels/dtypes.py``'s
``element_bytes`` for any type name (with the few types the IR only stores). No other module keeps a dict of
type names to their sizes, or spells ``4 if dtype == "fp32" else 2``.
"""

from __future__ import annotations

import ast
import types
from pathlib import Path

import pytest
from cli_runner import tracea  # tests/helpers/ (tests/conftest.py puts it on the path)

from tracea.doctor.errors import UnsupportedError
from tracea.emitters import registry
from tracea.kernels import DType
from tracea.kernels.dtypes import ELEMENT_NAMES, STORAGE_ONLY_BYTES, element_bytes

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = ("kernels", "emitters", "tuner", "reports", "doctor", "tracea_cli", "benchmarks")
SIZES_HOME = "kernels/dtypes.py"
BACKENDS = sorted(registry.BACKENDS)


def _modules() -> list[Path]:
    return sorted(p for f in PRODUCT for p in (ROOT / f).rglob("*.py") if "__pycache__" not in p.parts)


def _type_name(node: ast.AST | None) -> str | None:
    """The element type a dict key or a compared operand names: a string literal, or ``DType.FP32``."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str) and element_bytes(node.value) is not None:
        return node.value
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "DType" \
            and node.attr in DType.__members__:
        return DType[node.attr].value
    return None


def _ints(node: ast.AST) -> list[int]:
    """The int literals a dict value is: the int itself, or the ints of a tuple (``("CODE", 4)``)."""
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return [node.value]
    if isinstance(node, ast.Tuple):
        return [e.value for e in node.elts if isinstance(e, ast.Constant) and type(e.value) is int]
    return []


def size_tables(source: str) -> list[int]:
    """Lines of ``source`` that spell element sizes out: a dict literal with two or more type names as keys,
    each mapped to its size (alone or in a tuple), or ``SIZE if dtype == NAME else OTHER_SIZE``."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Dict):
            typed = [(_type_name(k), v) for k, v in zip(node.keys, node.values, strict=True) if _type_name(k)]
            if len(typed) >= 2 and all(element_bytes(name) in _ints(v) for name, v in typed):
                out.append(node.lineno)
        elif isinstance(node, ast.IfExp) and isinstance(node.test, ast.Compare) and len(node.test.ops) == 1:
            names = [n for n in (_type_name(node.test.left), _type_name(node.test.comparators[0])) if n]
            sizes = (_ints(node.body), _ints(node.orelse))
            if not names or not all(len(s) == 1 and isinstance(x, ast.Constant) for s, x in
                                    zip(sizes, (node.body, node.orelse), strict=True)):
                continue
            same, other = sizes[0][0], sizes[1][0]
            if isinstance(node.test.ops[0], (ast.NotEq, ast.IsNot, ast.NotIn)):
                same, other = other, same
            others = {d.itemsize for d in DType if d.value != names[0]}
            if same == element_bytes(names[0]) and other in others and other != same:
                out.append(node.lineno)
    return out


def _languages() -> set[str]:
    return {registry.backend(n).LANGUAGE for n in BACKENDS} | {"cu", "ptx", "metal"}


def _suffixes() -> set[str]:
    dotted = {registry.backend(n).SOURCE_SUFFIX for n in BACKENDS} | {".ptx", ".metal"}
    return dotted | {s.removeprefix(".") for s in dotted}


def suffix_tables(source: str) -> list[int]:
    """Lines of ``source`` with a dict literal of two or more languages mapped to source suffixes (``"cuda":
    ".cu"``, ``"cuda": "cu"``) or suffixes mapped to languages (``".cu": "cuda"``)."""
    languages, suffixes = _languages(), _suffixes()
    out = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Dict):
            continue
        pairs = [(k.value, v.value) for k, v in zip(node.keys, node.values, strict=True)
                 if isinstance(k, ast.Constant) and isinstance(v, ast.Constant)]
        hits = [(k, v) for k, v in pairs if (k in languages and v in suffixes) or (k in suffixes and v in languages)]
        if len(hits) >= 2:
            out.append(node.lineno)
    return out


# ------------------------------------------------------------------------------------------- the rules

def test_the_size_rule_sees_each_way_of_spelling_a_table():
    assert size_tables('ELEM = {"fp32": 4, "fp16": 2, "bf16": 2}') == [1]
    assert size_tables('D = {"fp8": 1, "int8": 1, "f64": 8}') == [1]
    assert size_tables('D = {DType.FP32: 4, DType.BF16: 2}') == [1]
    assert size_tables('D = {"fp32": ("TRACEA_DTYPE_F32", 4), "fp16": ("TRACEA_DTYPE_F16", 2)}') == [1]
    assert size_tables('n = 2 * (4 if dtype == "fp32" else 2)') == [1]
    assert size_tables('n = 2 if dtype != "fp32" else 4') == [1]
    assert size_tables('n = 4 if self is DType.FP32 else 2') == [1]
    # data that is not a size: a pad per type, one type alone, a step, a count
    assert size_tables('PAD = {"bf16": 4, "fp16": 4, "fp32": 1}') == []
    assert size_tables('ELEM = {"fp32": 4}') == []
    assert size_tables('step = 1 if dtype == "fp32" else 4') == []
    assert size_tables('PEAK = {"fp32": 128, "fp64": 64, "fp16": 2048}') == []


def test_the_suffix_rule_sees_each_way_of_spelling_a_table():
    assert suffix_tables('exts = {".c": "c", ".cu": "cuda", ".ptx": "ptx"}') == [1]
    assert suffix_tables('SOURCE_EXT = {"c": "c", "cuda": "cu", "hip": "hip"}') == [1]
    assert suffix_tables('S = {"cuda": ".cu", "hip": ".hip"}') == [1]
    assert suffix_tables('FORMATS = {".csv": "csv", ".jsonl": "jsonl"}') == []
    assert suffix_tables('one = {".cu": "cuda"}') == []


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(ROOT)))
def test_element_sizes_live_in_kernels_dtypes_only(path):
    rel = path.relative_to(ROOT).as_posix()
    lines = size_tables(path.read_text())
    if rel == SIZES_HOME:
        return
    assert not lines, (f"{rel}:{lines} spells element sizes out; use DType(name).itemsize or "
                       "tracea.kernels.dtypes.element_bytes(name)")


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(ROOT)))
def test_no_module_keeps_a_table_of_source_suffixes(path):
    lines = suffix_tables(path.read_text())
    assert not lines, (f"{path.relative_to(ROOT)}:{lines} maps languages to source suffixes; ask the backend "
                       "(SOURCE_SUFFIX, LANGUAGE; registry.by_language for an artifact's language)")


# ---------------------------------------------------------------------------------- the one sources

def test_element_bytes_answers_with_dtype_itemsize_for_every_ir_name():
    from tracea.kernels.dtypes import ALIASES

    for name, dtype in ALIASES.items():
        assert element_bytes(name) == element_bytes(name.upper()) == dtype.itemsize
    assert [element_bytes(d) for d in DType] == [4, 2, 2, 1, 1, 1, 4]  # fp32 fp16 bf16 int8 e4m3 e5m2 int32
    assert not set(STORAGE_ONLY_BYTES) & set(ALIASES)  # an IR type's size is DType's, never a second entry
    assert element_bytes("fp8") == 1 and element_bytes("tf32") == 4 and element_bytes("fp64") == 8
    assert element_bytes("fp7") is None and element_bytes("") is None
    assert len(set(ELEMENT_NAMES)) == len(ELEMENT_NAMES)


@pytest.mark.parametrize("name", BACKENDS)
def test_each_backend_names_its_sources_with_its_renderers_suffix(name):
    b = registry.backend(name)
    assert b.SOURCE_SUFFIX.startswith(".") and len(b.SOURCE_SUFFIX) > 1
    assert registry.by_language(b.LANGUAGE) is b
    others = {registry.backend(n).SOURCE_SUFFIX for n in BACKENDS if n != name}
    assert b.SOURCE_SUFFIX not in others  # a source among emitted files tells its backend


def test_the_suffixes_are_what_the_compilers_take():
    assert {n: registry.backend(n).SOURCE_SUFFIX for n in BACKENDS} == \
        {"cpu": ".c", "cuda": ".cu", "hip": ".hip", "metal": ".metal"}


# ------------------------------------------------------------------------------------------- the readers

@pytest.mark.parametrize("name", BACKENDS)
def test_an_ir_dump_names_the_source_with_its_backends_suffix(name, tmp_path):
    from tracea.reports.irdump import dump_kernel, source_suffix

    b = registry.backend(name)
    assert source_suffix(b.LANGUAGE) == b.SOURCE_SUFFIX
    art = {"name": "k", "source": "/* k */", "language": b.LANGUAGE}
    paths = dump_kernel(tmp_path / "a", {"op": "gemm"}, None, None, art)
    assert f"03_source{b.SOURCE_SUFFIX}" in [p.name for p in paths]
    paths = dump_kernel(tmp_path / "b", {"op": "gemm"}, None, None, None, source="/* k */", language=b.LANGUAGE)
    assert [p.name for p in paths if p.name.startswith("03_")] == [f"03_source{b.SOURCE_SUFFIX}"]


@pytest.mark.parametrize("language", ["fortran", "ptx", "cu", "msl", "C", "../../etc", 7])
def test_an_ir_dump_of_a_language_no_backend_compiles_is_text(language, tmp_path):
    from tracea.reports.irdump import compile_record, dump_kernel, source_suffix

    assert source_suffix(language) == ".txt"
    art = {"name": "k", "source": "x", "language": language, "compiler": "cc"}
    paths = dump_kernel(tmp_path, {"op": "gemm"}, None, None, art)
    assert [p.name for p in paths if p.name.startswith("03_")] == ["03_source.txt"]
    assert compile_record(art)["command"] is None


def test_an_ir_dump_without_a_language_is_c(tmp_path):
    from tracea.reports.irdump import dump_kernel

    paths = dump_kernel(tmp_path, {"op": "gemm"}, None, None, None, source="int x;")
    assert [p.name for p in paths if p.name.startswith("03_")] == [f"03_source{registry.backend('cpu').SOURCE_SUFFIX}"]


def test_the_compile_command_of_a_dump_names_the_dumped_source():
    from tracea.reports.irdump import compile_record

    for name in BACKENDS:
        b = registry.backend(name)
        command = compile_record({"language": b.LANGUAGE, "compiler": "cc", "flags": ["-O2"]})["command"]
        assert command is None or f"03_source{b.SOURCE_SUFFIX}" in command, (name, command)


def _fake(name: str, written: list[str]) -> types.SimpleNamespace:
    """Backend ``name``'s suffix and language, with an ``emit`` that writes ``written`` (every backend's
    source among them) and a ``build`` that cannot build here."""
    b = registry.backend(name)

    def emit(op, variant, schedule, host, out):
        out = Path(out)
        out.mkdir(parents=True, exist_ok=True)
        for f in written:
            (out / f).write_text("name: k\n" if f.endswith(".yaml") else f"/* {f} */\n")
        return [out / f for f in written]

    def build(*_):
        raise UnsupportedError("not here")

    return types.SimpleNamespace(SOURCE_SUFFIX=b.SOURCE_SUFFIX, LANGUAGE=b.LANGUAGE, emit=emit, build=build)


def _every_source() -> list[str]:
    return ["metadata.yaml", "k.ptx", *(f"k{registry.backend(n).SOURCE_SUFFIX}" for n in BACKENDS), "k.txt"]


@pytest.mark.parametrize("name", BACKENDS)
def test_a_failed_builds_record_keeps_the_source_in_its_backends_suffix(name):
    from tracea.reports.record import _emitted_source

    b = registry.backend(name)
    assert _emitted_source(_fake(name, _every_source()), None, None, None, None) == (
        f"/* k{b.SOURCE_SUFFIX} */\n", b.LANGUAGE)
    assert _emitted_source(_fake(name, ["metadata.yaml", "k.ptx"]), None, None, None, None) == (None, None)


@pytest.mark.parametrize("name", BACKENDS)
def test_emit_dump_ir_dumps_the_source_in_its_backends_suffix(name, tmp_path):
    from tracea.cmd_evidence import dump_emitted

    b = registry.backend(name)
    mod = _fake(name, _every_source())
    emitted = mod.emit(None, None, None, None, tmp_path / "out")
    paths = dump_emitted({"op": "gemm"}, None, types.SimpleNamespace(id="v"), {"s": 1}, None, mod, emitted,
                         tmp_path / "ir")
    sources = [p for p in paths if p.name.startswith("03_")]
    assert [p.name for p in sources] == [f"03_source{b.SOURCE_SUFFIX}"]
    assert sources[0].read_text() == f"/* k{b.SOURCE_SUFFIX} */\n"
    import yaml

    assert yaml.safe_load((sources[0].parent / "07_metadata.yaml").read_text())["language"] == b.LANGUAGE


def test_a_real_cpu_emit_is_what_the_record_reads():
    from tracea.doctor import probe
    from tracea.kernels import Gemm
    from tracea.reports.record import _emitted_source

    cpu, host = registry.backend("cpu"), probe()
    op = Gemm(m=8, n=8, k=8)
    variant = cpu.VARIANTS[0]
    source, language = _emitted_source(cpu, op, variant, cpu.hero_schedule(op, variant, host), host)
    assert language == "c" and source and "Tracea CPU kernel" in source


TARGETS = {"cpu": None, "cuda": "sm_90a", "hip": "gfx90a", "metal": "apple8"}


@pytest.mark.parametrize("name", BACKENDS)
def test_tracea_emit_writes_and_dumps_the_source_in_the_backends_suffix(name, capsys, home, tmp_path):
    """End to end through the real emitters (CUDA through NVRTC, HIP through hipcc: skipped without them)."""
    b = registry.backend(name)
    arch = TARGETS.get(name)
    args = ["emit", "gemm", "--m", "64", "--n", "64", "--k", "64", "--dtype", "bf16" if arch else "fp32",
            "--backend", name, "--out", str(tmp_path / "out"), "--dump-ir", str(tmp_path / "ir"),
            *(["--arch", arch] if arch else [])]
    code, _, err = tracea(capsys, *args)
    if code == 3:  # no NVRTC or no hipcc here: the CLI's one line, exit 3
        pytest.skip(f"{name} cannot emit here: {err.strip()}")
    assert code == 0, err
    written = sorted(p.name for p in (tmp_path / "out").iterdir() if p.suffix == b.SOURCE_SUFFIX)
    assert len(written) == 1, sorted(p.name for p in (tmp_path / "out").iterdir())
    dumped = sorted(p.name for p in (tmp_path / "ir").rglob("03_source*"))
    assert dumped == [f"03_source{b.SOURCE_SUFFIX}"]
