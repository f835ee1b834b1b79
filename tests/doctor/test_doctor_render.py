"""``tracea doctor`` prints, byte for byte, what it printed when these renderings were recorded: each
recorded snapshot in plain text (a pipe, or --plain) and styled (a colour terminal), with an Apple GPU
and the "snapshot saved to" line covered too.

A restructuring of tracea_cli/render.py must leave every rendering as it is; a change that means to change
the report re-records them (``python tests/doctor/test_doctor_render.py --record``) and says why in its commit.
"""

from __future__ import annotations

import dataclasses
import io
import json
import sys
from pathlib import Path

import pytest

FIXTURES = Path(__file__).parents[1] / "fixtures"
RECORDED = FIXTURES / "doctor_render"
SNAPSHOTS = ("ci_vm", "h100_live", "h100_measured", "h200_live", "mi300x_cpx_kfd", "m1_pro_spdisplays")
CASES = [f"{name}.{style}" for name in (*SNAPSHOTS, "ci_vm_apple_saved") for style in ("plain", "styled")]


def _report(name: str):
    from tracea.doctor.snapshot import load_snapshot

    if name != "ci_vm_apple_saved":
        return load_snapshot(FIXTURES / "snapshots" / f"{name}.json"), None
    from tracea.doctor.sources import apple

    spd = json.loads((FIXTURES / "apple" / "m1_pro_spdisplays.json").read_text())
    section = apple.interpret({"status": "ok", "spdisplays": spd}, {"hw.memsize": "34359738368"})
    report = load_snapshot(FIXTURES / "snapshots" / "ci_vm.json")
    return dataclasses.replace(report, apple=section), Path("saved/snapshot.json")


def rendered(case: str) -> str:
    """What render_doctor writes for ``case``: plain (the console a pipe gets) or styled (a colour terminal
    120 columns wide)."""
    from rich.console import Console

    from tracea import render

    name, style = case.rsplit(".", 1)
    report, saved_to = _report(name)
    out = io.StringIO()
    if style == "plain":
        make = lambda plain: Console(file=out, highlight=False, no_color=True, emoji=False, soft_wrap=True,  # noqa: E731
                                     width=render.WHOLE_WIDTH)
    else:
        make = lambda plain: Console(file=out, highlight=False, emoji=False, force_terminal=True,  # noqa: E731
                                     color_system="truecolor", width=120)
    real, render.make_console = render.make_console, make
    try:
        render.render_doctor(report, plain=style == "plain", saved_to=saved_to)
    finally:
        render.make_console = real
    return out.getvalue()


@pytest.mark.parametrize("case", CASES)
def test_doctor_renders_the_recorded_text(case):
    path = RECORDED / f"{case}.txt"
    if not path.exists():
        pytest.fail(f"{path} is missing: record it with python {__file__} --record")
    assert rendered(case) == path.read_text()


def test_the_recordings_cover_every_section():
    plain = "".join((RECORDED / f"{c}.txt").read_text() for c in CASES if c.endswith(".plain"))
    for words in ("GPU 0", "KFD node", "GPU cores", "spec ", "measured ", "hint: ", "snapshot saved to"):
        assert words in plain, words
    assert "\x1b[" in (RECORDED / "h100_live.styled.txt").read_text()


if __name__ == "__main__" and "--record" in sys.argv:
    RECORDED.mkdir(exist_ok=True)
    for c in CASES:
        (RECORDED / f"{c}.txt").write_text(rendered(c))
    print(f"recorded {len(CASES)} renderings in {RECORDED}")
