"""The precompiled prelude of CPU kernels (emitters/host_compiler.py ``precompiled_prelude``): gcc reads the
`#define _GNU_SOURCE` and system includes every rendered kernel starts with (``<immintrin.h>`` among them)
precompiled, from the second compile that can use it on. It saves parsing and nothing else: the machine
code is the same instruction for instruction, gcc really uses it, a damaged one costs a recompile and not
a failure, and sources of another shape (a bundle's, a test's) compile as they are."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from tracea.doctor import probe
from tracea.emitters import cpu
from tracea.emitters import host_compiler as cc
from tracea.emitters.cpu.render import render
from tracea.kernels import Conv2d, Gemm, Softmax
from tracea.kernels.ops.attention import Attention

HOST = probe()
CASES = [("cpu-avx512", Gemm(64, 64, 64)), ("cpu-avx2-fma", Gemm(33, 65, 40, dtype="bf16", epilogue="bias,gelu")),
         ("cpu-avx512", Softmax(8, 100, dtype="fp16")), ("cpu-avx512", Conv2d(1, 8, 9, 9, 16, 3, 3, layout="nhwc")),
         ("cpu-avx2-fma", Attention(1, 2, 64, 64, causal=True))]


@pytest.fixture(scope="module")
def gcc():
    compiler = cc.find_compiler(HOST)
    if "clang" in compiler.version.lower() or shutil.which("objdump") is None:
        pytest.skip(f"the precompiled prelude is for gcc with binutils' objdump; here: {compiler.version}")
    return compiler


def _rendered(family: str, op):
    v = cpu.resolve(f"{family}.{op.kind}")
    if v.unmet(HOST, op.dtype.value):
        pytest.skip(f"{v.id} cannot run here")
    r = render(op, v.family, cpu.hero_schedule(op, v, HOST))
    return r.source, [*cc.BASE_FLAGS, *r.flags]


def _code(so: Path) -> str:
    out = subprocess.run(["objdump", "-d", "--no-show-raw-insn", str(so)], capture_output=True, text=True, check=True)
    return out.stdout.split("\n", 3)[3]  # past the file name line


@pytest.mark.parametrize("family,op", CASES, ids=lambda x: x if isinstance(x, str) else x.kind)
def test_the_same_machine_code_with_and_without_it(tmp_path, gcc, family, op):
    source, flags = _rendered(family, op)
    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "k.c").write_text(source)
    subprocess.run(cc.command(gcc, flags, plain / "k.c", plain / "k.so"), check=True, capture_output=True)
    folder = tmp_path / "cache"
    assert cc.precompiled_prelude(source, flags, gcc, folder) is None  # the first compile only marks it
    header = cc.precompiled_prelude(source, flags, gcc, folder)
    assert header is not None and header.with_suffix(".h.gch").is_file()
    used = subprocess.run([*cc.command(gcc, flags, plain / "k.c", tmp_path / "k.so", header), "-H"],
                          capture_output=True, text=True, check=True)
    assert f"! {header}.gch" in used.stderr  # gcc says it read the precompiled header
    assert _code(tmp_path / "k.so") == _code(plain / "k.so")


def test_it_is_built_once_per_block_and_flags_and_a_damaged_one_is_survived(tmp_path, gcc, monkeypatch):
    monkeypatch.setenv("TRACEA_HOME", str(tmp_path / "home"))
    source, flags = _rendered("cpu-avx2-fma", Gemm(16, 16, 16))
    name = "pch_check"
    cc.compile_cached(source, name, flags, gcc)
    cc.compile_cached(source + "\n/* another kernel */\n", name, flags, gcc)
    (pch,) = (cc.cache_dir() / "prelude").glob("*/prelude.h.gch")
    pch.write_bytes(b"not a precompiled header")  # damaged on disk
    path, hit, _ = cc.compile_cached(source + "\n/* a third */\n", name, flags, gcc)
    assert not hit and path.is_file()  # compiled all the same
    portable, _ = _rendered("cpu-portable", Gemm(16, 16, 16))  # no intrinsics header: nothing worth it
    assert cc.precompiled_prelude("int f(void) { return 1; }\n", flags, gcc, cc.cache_dir()) is None
    assert cc.precompiled_prelude(portable, flags, gcc, cc.cache_dir()) is None
    assert cc.precompiled_prelude("#define X 1\n#include <immintrin.h>\n", flags, gcc, cc.cache_dir()) is None


def test_no_header_is_built_on_a_disk_short_of_room(tmp_path, gcc, monkeypatch):
    """On a disk with less free room than PRELUDE_ROOM the header is not built (the compiles beside it keep
    their room; the kernel compiles without it); with room it is."""
    source, flags = _rendered("cpu-avx512", Gemm(64, 64, 64))
    folder = tmp_path / "cache"
    assert cc.precompiled_prelude(source, flags, gcc, folder) is None  # marks it
    real = shutil.disk_usage
    monkeypatch.setattr(shutil, "disk_usage", lambda p: real(p)._replace(free=cc.PRELUDE_ROOM - 1))
    assert cc.precompiled_prelude(source, flags, gcc, folder) is None
    assert not list((folder / "prelude").glob("*/prelude.h.gch"))
    monkeypatch.setattr(shutil, "disk_usage", lambda p: real(p)._replace(free=cc.PRELUDE_ROOM))
    header = cc.precompiled_prelude(source, flags, gcc, folder)
    assert header is not None and header.with_suffix(".h.gch").is_file()
