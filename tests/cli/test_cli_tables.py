"""Tables in a pipe or a file are printed whole: no cell cut to an ellipsis, no row folded to fit 80
columns that are not there (`tracea bench ... | cat`, `tracea cache list > f`); an explicit ``COLUMNS`` is
the width instead, and a cell that does not fit it wraps without losing a character. Every command prints
through ``render.make_console``; pytest's captured stdout is not a terminal, as a pipe is not."""

from __future__ import annotations

from pathlib import Path

import pytest
from rich.table import Table

from tracea.__main__ import main
from tracea.render import make_console

SNAPSHOT = Path(__file__).parents[1] / "fixtures" / "snapshots" / "h100_live.json"
LONG_WORD = "OPENBLAS_CORETYPE=Haswell," * 8  # no space to wrap at: Rich cuts it to "OPENBLAS_CORE…"
SENTENCE = "the baseline is pinned below its best for this CPU, so the ratio flatters Tracea"


def _table() -> Table:
    table = Table(box=None, header_style="bold", pad_edge=False)
    for col in ("case", "baseline", "ratio"):
        table.add_column(col, no_wrap=col == "case")
    table.add_row("gemm 8192x4096x4096 bf16 " * 3, f"{LONG_WORD} {SENTENCE}", "0.95")
    return table


def test_a_table_in_a_pipe_is_printed_whole(capsys, monkeypatch) -> None:
    monkeypatch.delenv("COLUMNS", raising=False)
    make_console().print(_table())
    out = capsys.readouterr().out
    assert "…" not in out
    (row,) = [line for line in out.splitlines() if "0.95" in line]  # one line, every cell whole
    assert "gemm 8192x4096x4096 bf16 " * 3 in row and f"{LONG_WORD} {SENTENCE}" in row
    assert len(row.rstrip()) > 200


def test_columns_sets_the_width_and_no_cell_loses_text(capsys, monkeypatch) -> None:
    monkeypatch.setenv("COLUMNS", "60")
    console = make_console()
    one = Table(box=None, pad_edge=False)
    one.add_column("baseline", no_wrap=True)  # a column that asks not to wrap is folded rather than cut
    one.add_row(f"{LONG_WORD} {SENTENCE}")
    console.print(one)
    console.print(_table())
    out = capsys.readouterr().out
    assert "…" not in out and max(len(line) for line in out.splitlines()) <= 60
    first = out[:out.index("case")]
    assert "".join(f"{LONG_WORD} {SENTENCE}".split()) in "".join(first.split())  # folded over lines, all there
    for word in ("8192x4096x4096", "0.95", *SENTENCE.split()):
        assert word in out[len(first):]


def test_a_stderr_console_in_a_pipe_writes_whole_lines(capsys, monkeypatch) -> None:
    monkeypatch.delenv("COLUMNS", raising=False)
    make_console(stderr=True).print(SENTENCE * 3)
    out, err = capsys.readouterr()
    assert out == "" and err == SENTENCE * 3 + "\n"  # not folded at 80 columns


@pytest.mark.parametrize("columns", [None, "200"])
def test_plan_table_rows_are_whole_in_a_pipe(capsys, monkeypatch, columns) -> None:
    """A real command: `tracea plan` for a recorded H100, its "why not" column wider than 80 columns."""
    if columns is None:
        monkeypatch.delenv("COLUMNS", raising=False)
    else:
        monkeypatch.setenv("COLUMNS", columns)
    code = main(["plan", "gemm", "--m", "4096", "--dtype", "bf16", "--backend", "cuda", "--input", str(SNAPSHOT)])
    out, err = capsys.readouterr()
    assert code == 0, err
    (row,) = [line for line in out.splitlines() if "cuda-simt.gemm" in line and "✗" in line]
    assert "does not compute bf16 (only fp32)" in row and len(row.rstrip()) > 80
    assert "…" not in out
