"""The bundle's own code: a constructor in its source, a binary that runs code when loaded, compiler
flags that run programs. Default `tracea replay --yes` runs none of it (the marker file the hostile
code would create stays absent) and reports each difference; the opt-ins that do run it are named,
and the positive controls prove the marker would have appeared."""

from __future__ import annotations

import json
import subprocess

import pytest

from tracea.doctor.errors import BadInputError
from tracea.reports.compiler_flags import refused_flag


def constructor(marker) -> str:
    return ("\n#include <stdlib.h>\n"
            f"__attribute__((constructor)) static void tracea_pwn(void) {{ system(\"touch {marker}\"); }}\n")


def add_constructor(h) -> None:
    src = h.kernel_dir / "03_source.c"
    src.write_text(src.read_text() + constructor(h.marker))


def set_flags(h, flags: list[str]) -> None:
    rec = h.kernel_dir / "04_compile.json"
    doc = json.loads(rec.read_text())
    doc["flags"] = [*doc["flags"], *flags]
    rec.write_text(json.dumps(doc))


def test_constructor_in_source_is_not_run_by_default(hostile):
    add_constructor(hostile)
    hostile.resign()
    out = hostile.replay("--yes")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "nothing from the bundle is compiled, loaded or run" in out.stdout
    assert "DIFFERS: source: the bundle's 03_source.c" in out.stdout  # said before the run
    assert out.stdout.index("DIFFERS: source") < out.stdout.index("verified:")
    assert "differs and was not run (--bundled-source runs it)" in out.stdout
    assert "built from this Tracea's own rendering" in out.stdout


def test_constructor_runs_only_with_bundled_source_which_names_the_risk(hostile):
    add_constructor(hostile)
    hostile.resign()
    refused = hostile.replay("--bundled-source")  # no --yes, no terminal: nothing runs
    assert refused.returncode == 2 and "runs code from the bundle on this machine" in refused.stderr
    assert "RISK: --bundled-source" in refused.stdout
    ran = hostile.replay("--yes", "--bundled-source", expect_marker=True)  # the positive control
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert "warning: --bundled-source compiles the bundle's own source and runs it" in ran.stderr


def test_binary_with_constructor_is_loaded_only_with_binary(hostile):
    add_constructor(hostile)
    so = hostile.kernel_dir / "05_binary.so"
    cc = subprocess.run(["cc", "-O1", "-fPIC", "-shared", "-o", str(so), str(hostile.kernel_dir / "03_source.c"),
                         "-mavx512f", "-mavx2", "-mfma", "-lm"], capture_output=True, text=True)
    if cc.returncode != 0:
        pytest.skip(f"cc cannot build the hostile binary here: {cc.stderr[:200]}")
    hostile.resign()
    out = hostile.replay("--yes")
    assert out.returncode == 0, out.stdout + out.stderr
    ran = hostile.replay("--yes", "--binary", expect_marker=True)
    assert "RISK: --binary loads the bundle's own binary" in ran.stdout
    assert "load the bundled binary 05_binary.so" in ran.stdout


@pytest.mark.parametrize("body,said", [
    ("raise(SIGSEGV);", "crashed with SIGSEGV"),
    ("exit(0);", "ended its process (exit status 0) before it answered"),
    ("_exit(3);", "ended its process (exit status 3) before it answered"),
], ids=["segfault", "exit0", "exit3"])
def test_a_bundled_binary_that_ends_the_process_while_loading_is_a_recorded_failure(hostile, body, said):
    """--binary loads the bundled .so in a child first: a constructor that crashes or exits ends the child,
    not Tracea (which once died with signal 11, or ended "successfully" with no result), and replay says
    how it ended, with the recording not reproduced (exit 1), never a traceback."""
    src = hostile.kernel_dir / "03_source.c"
    src.write_text(src.read_text() + "\n#include <signal.h>\n#include <stdlib.h>\n#include <unistd.h>\n"
                   f"__attribute__((constructor)) static void tracea_bad(void) {{ {body} }}\n")
    so = hostile.kernel_dir / "05_binary.so"
    cc = subprocess.run(["cc", "-O1", "-fPIC", "-shared", "-o", str(so), str(src), "-mavx512f", "-mavx2", "-mfma", "-lm"],
                        capture_output=True, text=True)
    if cc.returncode != 0:
        pytest.skip(f"cc cannot build the hostile binary here: {cc.stderr[:200]}")
    hostile.resign()
    out = hostile.replay("--yes", "--binary")
    assert out.returncode == 1, out.stdout + out.stderr
    assert f"runtime_failed: the bundled binary 05_binary.so, while being loaded, {said}" in out.stdout + out.stderr
    assert "replay does not reproduce the recording" in out.stderr
    assert "Traceback" not in out.stderr and "internal error" not in out.stderr


HOSTILE_FLAGS = [
    ["-wrapper", "/bin/sh,-c,touch {marker}"],
    ["-fplugin=/tmp/evil-plugin.so"],
    ["-B{evil}/"],
    ["-specs={evil}/specs"],
    ["@{evil}/args"],
    ["-Wl,--wrap=malloc"],
    ["-Xlinker", "--plugin"],
    ["-fuse-ld=/tmp/evil-ld"],
    ["-o", "/tmp/elsewhere.so"],
    ["-save-temps"],
    ["-Xclang", "-load"],
    ["{evil}/extra.o"],
    ["-include", "/etc/passwd"],
    ["-fprofile-generate={evil}"],
    ["-MF", "{evil}/deps"],
    ["-fcompare-debug=-B{evil}/"],
]


def _with_flags(hostile, flags: list[list[str]], own_kernel_cache) -> None:
    """The home starts with Tracea's own kernel compiled (with Tracea's flags): a replay that took the
    bundle's flags would miss that cache entry (flags are part of its key) and run the compiler with them,
    so the marker would appear (-B gets a real evil folder whose `as` and `cc1` create it; -wrapper would
    run a shell); one that takes Tracea's finds it and needs no compile."""
    import shutil

    shutil.copytree(own_kernel_cache, hostile.home / "cache")
    evil = _evil_tools(hostile.base / "evil", hostile.marker)
    set_flags(hostile, [f.format(marker=hostile.marker, evil=evil) for fl in flags for f in fl])
    hostile.resign()


def test_the_default_replay_compares_hostile_flags_and_uses_its_own(hostile, own_kernel_cache):
    """Every hostile flag below in one bundle: the default replay (Tracea's flags, the bundle's only
    compared) says the bundle adds them, runs Tracea's own build and nothing of the bundle's (the marker is
    checked by ``replay``). The cold-cache default replay is test_the_untampered_bundle_replays_cleanly's."""
    _with_flags(hostile, HOSTILE_FLAGS, own_kernel_cache)
    out = hostile.replay("--yes")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "DIFFERS: compiler flags: the bundle adds " + HOSTILE_FLAGS[0][0] in out.stdout


@pytest.mark.parametrize("flags", HOSTILE_FLAGS, ids=lambda f: f[0].split("=")[0].split("/")[0] or "path")
def test_hostile_flags_never_reach_the_compiler(hostile, flags, own_kernel_cache):
    """Each flag alone: --bundled-source refuses the bundle (one line and its hint, exit 2) and runs
    nothing (``replay`` checks the marker and that nothing was written outside the compile cache)."""
    _with_flags(hostile, [flags], own_kernel_cache)
    refused = hostile.replay("--yes", "--bundled-source")
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert refused.stderr.startswith("error: bundle kernel run/ir/") and "--bundled-source refuses the bundle's " \
        "compiler flags" in refused.stderr
    assert len(refused.stderr.strip().splitlines()) <= 2  # the line and its hint


def _evil_tools(evil, marker):
    """A folder of an `as` and a `cc1` that create ``marker``, then do the real tool's work."""
    import shutil

    evil.mkdir()
    real_cc1 = subprocess.run(["cc", "-print-prog-name=cc1"], capture_output=True, text=True).stdout.strip()
    for tool, real in (("as", shutil.which("as") or "as"), ("cc1", real_cc1 or "cc1")):
        (evil / tool).write_text(f"#!/bin/sh\ntouch {marker}\nexec {real} \"$@\"\n")
        (evil / tool).chmod(0o755)
    return evil


def test_compare_debug_really_runs_a_program_named_by_its_value(tmp_path, monkeypatch):
    """The control for -fcompare-debug=-B...: handed to gcc, its value is a second compile's flags, and a
    -B there runs the `cc1` of that folder (so refusing it is not only caution)."""
    from tracea.emitters import host_compiler as cc

    compiler = cc.find_compiler()
    if "clang" in compiler.version.lower():
        pytest.skip(f"the control is for gcc; the compiler here is {compiler.version}")
    monkeypatch.setenv("TRACEA_HOME", str(tmp_path / "home"))
    marker = tmp_path / "PWNED"
    evil = _evil_tools(tmp_path / "evil", marker)
    try:
        cc.compile_cached("int f(void) { return 1; }\n", "control", [*cc.BASE_FLAGS, f"-fcompare-debug=-B{evil}/"],
                          compiler)
    except Exception:  # noqa: BLE001 - whether the compile succeeds does not matter: the program ran
        pass
    assert marker.exists()
    assert refused_flag(f"-fcompare-debug=-B{evil}/") is not None and refused_flag("-fcompare-debug=-B.") is not None


def test_the_wrapper_flag_is_really_dangerous(tmp_path, monkeypatch):
    """The control: handed to the compiler, -wrapper runs its command (so the test above can fail)."""
    from tracea.emitters import host_compiler as cc

    monkeypatch.setenv("TRACEA_HOME", str(tmp_path / "home"))
    marker = tmp_path / "PWNED"
    try:
        cc.compile_cached("int f(void) { return 1; }\n", "control", [*cc.BASE_FLAGS, "-wrapper",
                          f"/bin/sh,-c,touch {marker}"], cc.find_compiler())
    except Exception:  # noqa: BLE001 - the compile itself fails; the command ran first
        pass
    assert marker.exists()


@pytest.mark.parametrize("flag", ["-O3", "-O2", "-Os", "-Ofast", "-std=gnu11", "-std=c++17", "-fPIC", "-shared",
                                  "-pthread", "-fvisibility=hidden", "-mavx512f", "-mavx2", "-mfma", "-mf16c",
                                  "-march=armv8-a", "-march=native", "-funroll-loops", "-fno-math-errno",
                                  "-DNDEBUG", "-DTILE=64", "-UFOO", "-Wall", "-Wno-unused", "-g", "-fopenmp",
                                  "-mno-avx512f", "-mtune=znver4", "-mprefer-vector-width=512", "-ffp-contract=fast",
                                  "-fno-fast-math", "-falign-loops=32", "--param=max-unroll-times=4", "-ggdb",
                                  "-std=c17", "-Werror=vla", "-pedantic-errors", "-O"])
def test_allowed_flags(flag):
    assert refused_flag(flag) is None


@pytest.mark.parametrize("flag", ["-wrapper", "-fplugin=x.so", "-fplugin-arg-x", "-B/tmp", "-B", "-specs=x",
                                  "@args", "-Wl,-rpath,/tmp", "-Wa,-o,/tmp/x", "-Wp,-imacros,/etc/passwd",
                                  "-Xlinker", "-Xassembler", "-o", "-load", "-save-temps", "-fuse-ld=gold",
                                  "-mllvm", "-I/etc", "-L/tmp", "-lfoo", "-x", "/bin/sh", "x.c", "--sysroot=/",
                                  "-fprofile-use=/tmp", "-fdump-tree-all", "-DX=$(touch)", "-DX=a/b", "",
                                  "-O3 -wrapper", 7, None,
                                  # the compiler's other spellings: a program or a file in a value, joined forms,
                                  # long options, separate arguments, response files, pass-through options
                                  "-fcompare-debug=-B.", "-fcompare-debug", "-fcompare-debug-second",
                                  "-fplugin-arg-evil-x=1", "-fpass-plugin=x.so", "-fprofile-generate",
                                  "-fprofile-arcs", "-fauto-profile", "-fsave-optimization-record", "-fstack-usage",
                                  "-fcallgraph-info", "-ftest-coverage", "--coverage", "-fdiagnostics-format=sarif-file",
                                  "-fcrash-diagnostics-dir=x", "-fmodules-cache-path=x", "-flto", "-flto=auto",
                                  "-fuse-linker-plugin", "-Bprefix", "--specs=x", "--sysroot", "--output=x", "-ox",
                                  "-Wl", "-Wa", "-Wp", "-Wl,--version-script=x", "-Xpreprocessor", "-imacros",
                                  "-isystem", "-iquote", "-idirafter", "-iprefix", "-MD", "-MMD", "-MT", "-Mx",
                                  "-T", "-Tscript", "-nostdlib", "-static", "-rdynamic", "-z", "-zexecstack", "-e",
                                  "-lfoo", "-l", "-lpthread", "-fdebug-prefix-map=a=b", "-fvisibility=evil",
                                  "-fp-contract", "-fvisibility", "-fno-visibility=hidden", "-ffp-contract=x,y",
                                  "-falign-loops=32:x", "--param", "--param=x", "--param=x=y", "-march=../x",
                                  "-DX=\\x", "-D", "-U", "-DX Y", "-O3\n-wrapper", "-O3\x00", "-mllvm=x",
                                  "-W", "-Wl,", "-O4", "-std=c++17 -x", "-std=gnu11;", "-m", "-f", "-fno-",
                                  "-Ofast\u00a0", "-ᴏ3", "-mavx2\u200b"])
def test_refused_flags(flag):
    assert refused_flag(flag) is not None


@pytest.mark.parametrize("name", ["../../../../../outside/PWN", "../x", "a/b", "", "1abc", "a b", "x" * 200, "é"])
def test_compiler_layer_refuses_names_that_are_not_identifiers(tmp_path, monkeypatch, name):
    """Defence in depth: the compile caches refuse such a name themselves, before writing anything."""
    from tracea.emitters import host_compiler as cc
    from tracea.emitters import nvrtc as nv

    monkeypatch.setenv("TRACEA_HOME", str(tmp_path / "home"))
    with pytest.raises(BadInputError, match="is not a C identifier"):
        cc.compile_cached("int f(void) { return 1; }\n", name, list(cc.BASE_FLAGS), cc.find_compiler())
    with pytest.raises(BadInputError, match="is not a C identifier"):
        nv.compile_cached("__global__ void k() {}\n", name, "k", "sm_80")
    with pytest.raises(BadInputError, match="sm_XY"):
        nv.compile_cached("__global__ void k() {}\n", "ok_name", "k", "../../sm_80")
    written = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert written == []
