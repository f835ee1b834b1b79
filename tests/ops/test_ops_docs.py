"""docs/ops.md's examples run as written: every ```python block, in order of the page, each in a fresh
namespace; a block that imports torch is skipped where torch is absent (CI), one that names CUDA where no
GPU is."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

PAGE = Path(__file__).resolve().parents[2] / "docs" / "ops.md"
BLOCKS = re.findall(r"```python\n(.*?)```", PAGE.read_text(), flags=re.S)
pytestmark = pytest.mark.usefixtures("kernel_cache")


def test_the_page_has_examples():
    assert len(BLOCKS) >= 3


@pytest.mark.parametrize("index", range(len(BLOCKS)))
def test_example_runs(index, capsys):
    code = BLOCKS[index]
    if "import torch" in code and importlib.util.find_spec("torch") is None:
        pytest.skip("torch is not installed here")
    if "cuda" in code.replace("torch.cuda.current_stream()", ""):
        pytest.skip("a CUDA example")
    import tracea

    tracea.ops.allow_fallback(True)
    exec(compile(code, f"{PAGE.name} block {index}", "exec"), {"__name__": f"ops_md_{index}"})  # noqa: S102
    assert capsys.readouterr().out.strip()  # each example prints what it shows
