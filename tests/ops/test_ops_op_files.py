"""Each op's pieces above the kernels are files of their own, found by the op's name or their folder: its
``tracea.ops`` function (``_functions/<op>.py``), its PyTorch pieces (``_torch/<op>.py``, whose public names
its function file declares so that ``tracea.ops`` offers them without importing torch) and its baselines
(``emitters/baselines/<op>.py``)."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from tracea.kernels import OPS


def test_every_op_has_its_function_in_order():
    from tracea.ops import _functions

    assert list(_functions.FUNCTIONS) == list(OPS)  # the ops' own order, each by its file
    import tracea.ops

    assert [n for n in tracea.ops.__all__ if n in OPS] == list(OPS)


def test_the_declared_torch_pieces_are_the_ones_each_file_holds():
    pytest.importorskip("torch")
    from tracea.ops import _functions, _torch

    declared = {name for name in _functions.TORCH_PIECES}
    assert declared == set(_torch.PIECES)
    for name, where in _functions.TORCH_PIECES.items():
        module = sys.modules[f"tracea.ops.{where}"]
        assert name in module.PIECES
    assert {m.kind for m in _torch.MATCHES} == {"matmul", "linear", "conv2d", "softmax", "attention"}


def test_import_tracea_ops_offers_the_torch_pieces_without_importing_torch():
    code = ("import sys, importlib.util, tracea.ops as o\n"
            "assert 'torch' not in sys.modules\n"
            "names = [n for n in o.__all__ if n.startswith(('Tracea', 'patch_', 'unpatch_'))]\n"
            "print(' '.join(sorted(names)) if importlib.util.find_spec('torch') else 'no torch')\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    if out.stdout.strip() != "no torch":
        assert out.stdout.split() == sorted(["TraceaConv2d", "TraceaLinear", "patch_conv2d", "patch_linear",
                                             "unpatch_conv2d", "unpatch_linear"])


def test_every_op_has_its_baselines_and_an_unknown_kind_has_none():
    from tracea.emitters import baselines

    for kind in OPS:
        mod = baselines.for_kind(kind)
        assert mod is not None and callable(mod.host) and baselines.device_call(kind) is mod.device
    assert baselines.for_kind("layernorm") is None and baselines.device_call("layernorm") is None
    assert baselines.for_kind("../gemm") is None  # a kind is a name, never a path


def test_an_op_without_a_baseline_file_says_so():
    from tracea.emitters.baselines import baseline_for

    class Unknown:
        kind = "no_such_op"

    base = baseline_for(Unknown(), {"x": np.zeros(1)})
    assert base.run is None and base.reason == "no baseline for no_such_op"
