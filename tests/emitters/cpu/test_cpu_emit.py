"""Rendering and emitting CPU kernels (any family, on any host: no compiler needed), the C-style base,
and the errors a user sees: no compiler, a compile error, a variant this host cannot run."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
from pathlib import Path

import pytest
import yaml

from tracea.doctor import probe
from tracea.doctor.errors import BadInputError, CompileError, ToolchainMissingError, UnsupportedError
from tracea.doctor.report import Tool
from tracea.doctor.snapshot import load_snapshot
from tracea.emitters import cpu
from tracea.emitters import host_compiler as compiler
from tracea.emitters.cpu.render import render
from tracea.emitters.cstyle import CodeWriter, CStyleRenderer, Param
from tracea.kernels import Conv2d, Gemm, Softmax

HOST = probe()
H100 = load_snapshot(Path(__file__).parents[2] / "fixtures" / "snapshots" / "h100_live.json")
OPS = [Gemm(100, 200, 300, dtype="bf16", layout_a="col", epilogue=("bias", "gelu", "residual")),
       Conv2d(2, 8, 16, 16, 32, 3, 3, padding=1, bias=True, layout="nhwc", dtype="fp16"),
       Softmax(10, 1000)]


@pytest.fixture(autouse=True)
def _kernel_cache(kernel_home, monkeypatch):
    monkeypatch.setenv("TRACEA_HOME", str(kernel_home))


@pytest.mark.parametrize("op", OPS, ids=lambda o: o.kind)
@pytest.mark.parametrize("family", ["cpu-avx512", "cpu-avx2-fma", "cpu-neon", "cpu-portable"])
def test_every_family_renders_every_op(op, family):
    v = cpu.resolve(f"{family}.{op.kind}")
    r = render(op, family, cpu.hero_schedule(op, v, H100))
    intrinsic = {"cpu-avx512": "_mm512_", "cpu-avx2-fma": "_mm256_", "cpu-neon": "vfmaq_f32", "cpu-portable": ""}[family]
    assert intrinsic in r.source and f"int {r.entry}(" in r.source
    assert ("immintrin.h" in r.source) == (family in ("cpu-avx512", "cpu-avx2-fma"))
    assert ("arm_neon.h" in r.source) == (family == "cpu-neon")
    assert "{" not in r.name and r.source.count("{") == r.source.count("}")
    assert r.metadata["name"] == r.name


def test_the_source_is_shape_free():
    v = cpu.resolve("cpu-avx512.gemm")
    s = cpu.hero_schedule(Gemm(1, 1, 1), v, H100)
    a = render(Gemm(10, 20, 30, alpha=2.0), "cpu-avx512", s).source
    b = render(Gemm(4096, 7, 1, alpha=0.5), "cpu-avx512", s).source
    c = render(Gemm(10, 20, 30, epilogue=("relu",)), "cpu-avx512", s).source
    assert a == b and a != c


def test_emit_writes_source_schedule_metadata_and_command(tmp_path):
    op = OPS[0]
    v = cpu.resolve("cpu-neon.gemm")  # not this machine's: emitting needs no compiler or matching CPU
    s = cpu.hero_schedule(op, v, HOST)
    files = cpu.emit(op, v, s, HOST, tmp_path / "out")
    names = sorted(p.name for p in files)
    assert names == sorted([f"{render(op, 'cpu-neon', s).name}.c", "schedule.json", "metadata.yaml", "compile.sh"])
    assert all(p.exists() for p in files)
    assert json.loads((tmp_path / "out" / "schedule.json").read_text()) == s.to_json()
    meta = yaml.safe_load((tmp_path / "out" / "metadata.yaml").read_text())
    assert meta["variant"] == "cpu-neon.gemm" and meta["tile"]["M"] == s.mr and meta["tile"]["N"] == s.nr
    assert meta["fragments"] == {**meta["fragments"], "dtype_in": "bf16", "dtype_acc": "fp32"}
    assert meta["resources"]["regs_per_thread"] is None and meta["launch"]["threads"] == s.threads
    assert meta["epilogue"] == ["bias", "gelu", "residual", "round to bf16"]
    script = (tmp_path / "out" / "compile.sh").read_text()
    assert "-O3" in script and "-march=armv8-a" in script and os.access(tmp_path / "out" / "compile.sh", os.X_OK)


def test_emitted_command_rebuilds_the_kernel(tmp_path):
    op = Gemm(8, 8, 8, epilogue=("relu",))
    v = cpu.resolve("cpu-portable.gemm")
    cpu.emit(op, v, cpu.hero_schedule(op, v, HOST), HOST, tmp_path)
    proc = subprocess.run(["sh", str(tmp_path / "compile.sh")], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert list(tmp_path.glob("*.so"))


def test_emit_rejects_a_bad_schedule_naming_the_field(tmp_path):
    op = Gemm(8, 8, 8)
    v = cpu.resolve("cpu-avx512.gemm")
    s = dataclasses.replace(cpu.hero_schedule(op, v, HOST), nr=40)
    with pytest.raises(BadInputError, match="^nr:"):
        cpu.emit(op, v, s, HOST, tmp_path)
    with pytest.raises(BadInputError, match="variant"):
        cpu.build(Softmax(2, 2), v, s, HOST)


def test_no_compiler_is_a_toolchain_error_with_a_hint(monkeypatch):
    op = Gemm(8, 8, 8)
    v = cpu.resolve("cpu-portable.gemm")
    monkeypatch.setenv("TRACEA_CC", "/nonexistent/cc")
    with pytest.raises(ToolchainMissingError) as err:
        cpu.build(op, v, cpu.hero_schedule(op, v, HOST), HOST)
    assert "TRACEA_CC" in str(err.value) and "apt install gcc" in err.value.hint
    monkeypatch.delenv("TRACEA_CC")
    monkeypatch.setenv("PATH", "/nonexistent")
    bare = dataclasses.replace(HOST, toolchains=[Tool(name=n, found=False, reason="not on PATH") for n in ("cc", "gcc", "clang")])
    with pytest.raises(ToolchainMissingError, match="no C compiler"):
        cpu.build(op, v, cpu.hero_schedule(op, v, bare), bare)


def test_a_compile_error_shows_the_log_and_the_source(tmp_path):
    cc = compiler.find_compiler(HOST)
    with pytest.raises(CompileError) as err:
        compiler.compile_cached("int broken( {\n", "broken", [*compiler.BASE_FLAGS], cc)
    text = str(err.value)
    src = text.split(" on ")[1].split(":\n")[0]
    assert src.endswith(".c") and Path(src).read_text() == "int broken( {\n"
    assert "error" in text and len(text.splitlines()) <= 14 and err.value.hint


def test_a_variant_this_host_cannot_run_is_unsupported():
    op = Gemm(8, 8, 8)
    v = cpu.resolve("cpu-neon.gemm")
    with pytest.raises(UnsupportedError, match="aarch64"):
        cpu.build(op, v, cpu.hero_schedule(op, v, HOST), HOST)


def test_cache_key_covers_source_flags_and_compiler():
    cc = compiler.Compiler("/usr/bin/cc", "cc 12.2.0")
    base = compiler.cache_key("int x;", ["-O3"], cc)
    assert base == compiler.cache_key("int x;", ["-O3"], cc)
    assert base != compiler.cache_key("int y;", ["-O3"], cc)
    assert base != compiler.cache_key("int x;", ["-O2"], cc)
    assert base != compiler.cache_key("int x;", ["-O3"], compiler.Compiler("/usr/bin/cc", "cc 13.1.0"))


def test_c_style_base():
    r = CStyleRenderer()
    assert r.render_const(1.0) == "1.0f" and r.render_const(float("inf")) == "INFINITY"
    assert r.render_const(float("-inf")) == "-INFINITY" and r.render_const(3, "i64") == "3LL"
    assert r.render_cast("fp32", "x") == "((float)(x))" and r.ctype("bf16") == "uint16_t"
    assert r.op("max", "a", "b") == "fmaxf(a, b)"
    sig = r.render_signature("f", [Param("a", "fp32", pointer=True, const=True, restrict=True), Param("n", "i64")])
    assert sig == "void f(const float* restrict a, int64_t n)"
    w = CodeWriter()
    with w.block("for (;;)"):
        w("break;")
    assert w.render() == "for (;;) {\n    break;\n}\n"
    with w.indented(2):
        w("x;\ny;")
    w("z;")
    assert w.render().endswith("\n        x;\n        y;\nz;\n")
    assert "*/" not in r.render_comment("a */ b")[2:-2]
