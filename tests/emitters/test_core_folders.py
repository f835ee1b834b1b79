"""A backend's registry is a folder of core files (emitters/core.py ``gathered``): the folder is the list, read
in the files' ``ORDER``, and two files that claim one place are refused. Checked on a real package made on
disk, and on the three backends' folders."""

from __future__ import annotations

import sys

import pytest

from tracea.emitters.core import gathered


@pytest.fixture
def package(tmp_path, monkeypatch):
    root = tmp_path / "made_cores"
    root.mkdir()
    (root / "__init__.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield root
    for name in [m for m in sys.modules if m == "made_cores" or m.startswith("made_cores.")]:
        del sys.modules[name]


def _file(root, name: str, order: int, cores: tuple[str, ...]) -> None:
    (root / f"{name}.py").write_text(f"ORDER = {order}\nCORES = {cores!r}\n")


def test_a_new_core_file_is_read_in_its_order(package):
    _file(package, "b_second", 20, ("b",))
    _file(package, "a_third", 30, ("c1", "c2"))
    _file(package, "z_first", 10, ("a",))
    assert gathered("made_cores", [str(package)]) == ("a", "b", "c1", "c2")
    _file(package, "m_new", 15, ("new",))  # one more file: no other file changes
    assert gathered("made_cores", [str(package)]) == ("a", "new", "b", "c1", "c2")


def test_two_core_files_with_one_order_are_refused(package):
    _file(package, "one", 10, ("a",))
    _file(package, "two", 10, ("b",))
    with pytest.raises(RuntimeError, match="share an ORDER"):
        gathered("made_cores", [str(package)])


def test_every_backends_cores_come_from_its_folder():
    from tracea.emitters.cpu import cores as cpu
    from tracea.emitters.cuda import cores as cuda
    from tracea.emitters.hip import cores as hip

    for registry, expected in ((cpu, {"gemm", "scaled_gemm", "conv2d", "softmax", "attention"}),
                               (hip, {"gemm", "conv2d", "softmax"})):
        assert set(registry.CORES) == expected
    # CUDA: the variants' order is the core files' ORDER (mma, simt, softmax, attention-mma, wgmma x3, ...)
    assert [c.name for c in cuda.CORES] == ["mma", "simt", "softmax", "attention-mma", "wgmma", "wgmma", "wgmma",
                                            "wgmma-attention", "stem", "gemv_tma", "gemv", "attention-decode"]
