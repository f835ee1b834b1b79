"""Several exported packages in one program: three CPU packages (two GEMMs, a softmax under a prefix of the
user's), installed with `cmake --install` or added as subdirectories, link into one C and one C++ program
whose results match NumPy; their default prefixes are distinct identifiers, every exported symbol is under its
package's prefix, and headers of two ABI versions in one unit are an error."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
from export_packages import CMAKE, build, defined_symbols, export, needs_cmake
from export_programs import check_outputs, consumer_cmake, program_c, program_cpp, write_inputs

from tracea.emitters.export_abi import ABI_VERSION, default_prefix, prefix_problem

# two GEMMs (one op kind: the collision a shared ABI had), and a softmax under a prefix of the user's
SIDE_BY_SIDE = {
    "gemm": ["gemm", "--m", "64", "--n", "48", "--k", "32", "--backend", "cpu"],
    "gemm-odd": ["gemm", "--m", "37", "--n", "29", "--k", "19", "--layout-b", "col", "--epilogue", "bias,relu",
                 "--backend", "cpu"],
    "softmax": ["softmax", "--rows", "7", "--cols", "333", "--backend", "cpu", "--prefix", "probs"],
}


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """The three packages exported, built (examples off) and installed into one prefix."""
    if CMAKE is None or shutil.which("gcc") is None or shutil.which("nm") is None:
        pytest.skip("cmake, gcc or nm is missing")
    root = tmp_path_factory.mktemp("side_by_side")
    manifests = []
    for name, args in SIDE_BY_SIDE.items():
        pkg = export(root, *args, name=name)
        m = json.loads((pkg / "manifest.json").read_text())
        build(pkg, f"-D{m['prefix']}_EXAMPLES=OFF")
        r = subprocess.run(["cmake", "--install", str(pkg / "build"), "--prefix", str(root / "install")],
                           capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
        manifests.append(m)
    return root, manifests


def test_default_prefixes_are_distinct_identifiers(installed):
    _, manifests = installed
    prefixes = [m["prefix"] for m in manifests]
    assert len(set(prefixes)) == 3 and prefixes[2] == "probs"
    assert prefixes[0].startswith("gemm_fp32_64x48x32_") and prefixes[1].startswith("gemm_fp32_37x29x19_")
    assert all(prefix_problem(p) is None for p in prefixes)
    from tracea.kernels import Gemm

    op = Gemm(m=64, n=48, k=32)
    assert default_prefix(op, "cpu") == prefixes[0] == default_prefix(Gemm(m=64, n=48, k=32), "cpu")
    assert len({default_prefix(op, "cpu"), default_prefix(op, "cuda"),
                default_prefix(Gemm(m=64, n=48, k=32, layout_a="col"), "cpu")}) == 3  # what the size does not show


def _build_app(app: Path, cmake: str, manifests: list[dict], *defines: str) -> None:
    app.mkdir()
    (app / "CMakeLists.txt").write_text(cmake)
    (app / "main.c").write_text(program_c(manifests))
    (app / "main.cpp").write_text(program_cpp(manifests))
    cfg = subprocess.run(["cmake", "-S", str(app), "-B", str(app / "build"), *defines], capture_output=True, text=True,
                         timeout=300)
    assert cfg.returncode == 0, cfg.stdout[-3000:] + cfg.stderr[-3000:]
    b = subprocess.run(["cmake", "--build", str(app / "build"), "-j2"], capture_output=True, text=True, timeout=600)
    assert b.returncode == 0, b.stdout[-3000:] + b.stderr[-3000:]


def _run_app(app: Path, data: Path, manifests: list[dict]) -> None:
    """Both programs on random inputs; each package's output against NumPy."""
    data.mkdir()
    inputs = write_inputs(data, manifests)
    for exe, tag in (("side_by_side_c", "c"), ("side_by_side_cpp", "cpp")):
        run = subprocess.run([str(app / "build" / exe), str(data)], capture_output=True, text=True, timeout=120)
        assert run.returncode == 0, run.stdout + run.stderr
        check_outputs(data, manifests, inputs, tag)
        if tag == "c":  # the bad call set the first package's error and left the second's empty
            assert f"separate errors: {manifests[0]['prefix']}_gemm: a is NULL" in run.stdout, run.stdout
        else:
            assert "tracea::Error 1:" in run.stdout and f"{manifests[0]['prefix']}_gemm: a has shape" in run.stdout


@needs_cmake
def test_installed_packages_link_into_one_c_and_one_cpp_program(installed):
    """find_package of all three from a separate project; both programs' results match NumPy."""
    root, manifests = installed
    _build_app(root / "app", consumer_cmake(manifests), manifests, f"-DCMAKE_PREFIX_PATH={root / 'install'}")
    _run_app(root / "app", root / "data", manifests)


@needs_cmake
def test_package_folders_added_as_subdirectories_link_too(installed):
    """add_subdirectory of the three package folders into one tree: their targets do not clash, their
    examples stay off (they are not the top-level project), and both programs' results match NumPy."""
    root, manifests = installed
    folders = [root / name for name in SIDE_BY_SIDE]
    _build_app(root / "tree", consumer_cmake(manifests, folders=folders), manifests)
    _run_app(root / "tree", root / "tree-data", manifests)
    assert not any((root / "tree" / "build" / m["prefix"] / "example").exists() for m in manifests)


def test_every_exported_symbol_carries_its_prefix(installed):
    """nm of each installed library: only <prefix>_ names (the launcher, the ABI functions, the kernel's
    renamed entry), none shared between packages, and the ABI helpers static."""
    root, manifests = installed
    everything = []
    for m in manifests:
        p = m["prefix"]
        syms = defined_symbols([root / "install" / "lib" / f"lib{p}.a"])
        assert set(syms) == {f"{p}_{m['op']['op']}", f"{p}_abi_version", f"{p}_get_last_error", f"{p}_clear_error",
                             f"{p}_init", f"{p}_shutdown", f"{p}_kernel_entry"}, syms
        everything += syms
        assert (root / "install" / "include" / p / "tracea.hpp").is_file()
        version = (root / "install" / "lib" / "cmake" / p / f"{p}ConfigVersion.cmake").read_text()
        assert f'set(PACKAGE_VERSION "{ABI_VERSION}")' in version
    assert len(everything) == len(set(everything))


@pytest.mark.skipif(shutil.which("g++") is None, reason="g++ is missing")
def test_headers_of_two_abi_versions_in_one_unit_are_an_error(installed, tmp_path):
    """The shared types are defined once per translation unit for one ABI version; another is a clear error."""
    root, manifests = installed
    src = tmp_path / "mixed.c"
    src.write_text(f"#define TRACEA_COMMON_ABI {ABI_VERSION - 1}\n#include \"{manifests[0]['prefix']}/tracea.h\"\n")
    r = subprocess.run(["gcc", "-fsyntax-only", "-I", str(root / "install" / "include"), str(src)],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode != 0 and "two Tracea C ABI versions" in r.stderr
