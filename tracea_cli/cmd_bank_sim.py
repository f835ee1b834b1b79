"""``tracea bank-sim``: shared-memory bank conflicts of explicit warp accesses or of a tile sweep.

Only Typer and the standard library load with the app; NumPy and the emitters layer load when the
command runs, so ``tracea --help`` stays instant.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from .validate import NON_NEGATIVE, checked

if TYPE_CHECKING:
    from tracea.emitters.bank_access import AccessBatch
    from tracea.emitters.bank_sim import SimResult

HELP = """Count shared-memory wavefronts and bank conflicts (NVIDIA sm_70+, rules measured on an H100;
--model cdna: AMD CDNA2/CDNA3 LDS cycles, 64-lane wavefronts, rules from AMD's documentation, unmeasured).

Either explicit accesses, --pattern FILE.json:
  {"instructions": [{"op": "ld", "bytes_per_lane": 16, "addresses": [0, 16, ..., null]}, ...]}
  op: ld, st, cp.async, ldmatrix.x1|x2|x4, stmatrix.x1|x2|x4; bytes_per_lane 1, 2, 4, 8, 16 (matrix
  rows: 16); 32 byte offsets, null for an inactive lane; optional "count" (weight) and "name".
  With --model cdna: op ld (ds_read) or st (ds_write), 64 byte offsets.

Or a tile and the access that sweeps it:
  --layout 128x64 --dtype bf16 [--order row|col] [--pad ELEMS] [--swizzle none|xor2|xor4|xor8|32B|64B|128B|sw<B,M,S>]
  --access ldmatrix.x4 | stmatrix.x2 | ld.128.row | st.32.column | cp.async.128.row  (repeatable;
  --model cdna: ld.BITS / st.BITS only)
"""


def _read_pattern(path: Path, model: str) -> AccessBatch:
    from tracea.doctor.errors import BadInputError
    from tracea.emitters.bank_access import Access, AccessBatch

    try:
        text = path.read_bytes().decode("utf-8")
    except OSError as exc:
        raise BadInputError(f"cannot read {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise BadInputError(f"{path} is not a pattern: not UTF-8 text (a binary file?)") from None
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise BadInputError(f"{path} is not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}") from None
    except RecursionError:
        raise BadInputError(f"{path} is not a pattern: JSON nested too deeply") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("instructions"), list) or not doc["instructions"]:
        raise BadInputError(f"{path}: expected an object with a non-empty \"instructions\" list",
                            'e.g. {"instructions": [{"op": "ld", "bytes_per_lane": 4, "addresses": [0, 4, ...]}]}')
    accesses = []
    for i, ins in enumerate(doc["instructions"]):
        where = f"instruction {i}"
        if not isinstance(ins, dict):
            raise BadInputError(f"{path}: {where} is not an object")
        unknown = set(ins) - {"op", "bytes_per_lane", "addresses", "count", "name"}
        if unknown:
            raise BadInputError(f"{path}: {where} has unknown field(s) {', '.join(sorted(unknown))}")
        op = ins.get("op")
        nbytes = ins.get("bytes_per_lane", 16 if isinstance(op, str) and "matrix" in op else None)
        name = ins.get("name", "")
        if not isinstance(name, str):
            raise BadInputError(f"{path}: {where} name must be a string")
        try:
            accesses.append(Access(op, nbytes, tuple(ins["addresses"]) if isinstance(ins.get("addresses"), list)
                                   else ins.get("addresses"), ins.get("count", 1), name or where, model))
        except BadInputError as exc:
            raise BadInputError(f"{path}: {exc.message}", exc.hint) from None
    return AccessBatch.from_accesses(accesses)


def _parse_layout(shape: str, dtype: str, order: str, pad: int, swizzle: str):
    from tracea.doctor.errors import BadInputError
    from tracea.emitters.layout import TileLayout, parse_swizzle
    from tracea.kernels.dtypes import ELEMENT_NAMES, element_bytes

    parts = shape.lower().split("x")
    if len(parts) != 2 or not all(p.isdigit() for p in parts):
        raise BadInputError(f"--layout {shape!r} is not ROWSxCOLS", "e.g. --layout 128x64")
    elem = element_bytes(dtype)
    if elem is None:
        raise BadInputError(f"unknown --dtype {dtype!r}", f"use one of {', '.join(ELEMENT_NAMES)}")
    rows, cols = int(parts[0]), int(parts[1])
    from tracea.emitters.bank_sim import MAX_ADDRESS

    if rows * (cols + max(pad, 0)) * elem > MAX_ADDRESS:  # said before sweeping it
        raise BadInputError(f"--layout {shape}: the tile is larger than {MAX_ADDRESS} bytes; shared memory is "
                            "smaller (an SM has at most 228 KiB)")
    return TileLayout(rows, cols, elem, order, pad, parse_swizzle(swizzle))


MODEL_HELP = ("nvidia (32-lane warps; rules measured on an H100) or cdna (AMD CDNA2/CDNA3 LDS, 64-lane wavefronts; "
              "rules from documentation, not measured).")
_HEAT_CHARS = "123456789abcdefghijklmnopqrstuvw"  # wavefront 1-32; a bank serves at most 32 words a group


def _ranges(banks: tuple[int, ...]) -> str:
    """(0, 1, 2, 3, 8) -> '0-3,8'."""
    if not banks:
        return "-"
    runs: list[list[int]] = []
    for b in banks:
        if runs and b == runs[-1][1] + 1:
            runs[-1][1] = b
        else:
            runs.append([b, b])
    return ",".join(f"{a}-{b}" if b > a else f"{a}" for a, b in runs)


def _heat_rows(grid: Any) -> list[tuple[int, list[int]]]:
    return [(lane, [int(v) for v in grid[lane]]) for lane in range(grid.shape[0]) if grid[lane].any()]


def _render(result: SimResult, title: str, heat_index: int, limit: int, plain: bool) -> None:
    from tracea.emitters.bank_sim import heatmap

    from .render import make_console

    console = make_console(plain)
    # an NVIDIA wavefront is one pass of the shared-memory pipeline; an AMD wavefront is a warp, so the
    # cdna model's passes are LDS cycles of a phase
    passes, group = ("wavefronts", "group") if result.batch.model == "nvidia" else ("cycles", "phase")
    console.print(title)
    console.print(f"{'#':>4} {'op':<12} {'B':>2} {passes:>10} {'ideal':>5} {'conflicts':>9} {'way':>3}  colliding banks")
    for i in range(min(limit, len(result))):
        r = result.instruction(i)
        banks = _ranges(r.colliding_banks)
        style = "" if r.conflicts == 0 else "bold red" if r.conflict_degree >= 4 else "yellow"
        line = (f"{i:>4} {r.op:<12} {r.bytes_per_lane:>2} {r.wavefronts:>10} {r.ideal:>5} {r.conflicts:>9} "
                f"{r.conflict_degree:>3}  {banks}{'  ' + r.name if r.name else ''}")
        console.print(line, style=style or None, markup=False, soft_wrap=True)
    if len(result) > limit:
        console.print(f"     ... {len(result) - limit} more (--limit N, or --json for all)")
    t = result.totals()
    console.print(f"total: {t['instructions']} instructions, {t['wavefronts']} {passes}, ideal {t['ideal']}, "
                  f"{t['conflicts']} conflict {passes} ({t['conflicted_instructions']} instructions conflict), "
                  f"efficiency {t['efficiency']:.0%}")
    grid = heatmap(result, heat_index)
    r = result.instruction(heat_index)
    console.print(f"\ninstruction {heat_index} ({r.op}, {r.bytes_per_lane} B/lane): lane x bank, the {passes[:-1]} "
                  f"of its {group} in which each bank serves the lane (1-9, then a=10 ... w=32; . = not touched)")
    console.print("bank " + "".join(f"{b // 10 if b >= 10 else ' '}" for b in range(32)), markup=False)
    console.print("lane " + "".join(str(b % 10) for b in range(32)), markup=False)
    colours = {1: "green", 2: "yellow", 3: "dark_orange"}
    from rich.text import Text

    for lane, row in _heat_rows(grid):
        text = Text(f"{lane:>4} ")
        for v in row:
            ch = "." if v == 0 else _HEAT_CHARS[min(v, len(_HEAT_CHARS)) - 1]
            text.append(ch, style=None if v == 0 else colours.get(v, "bold red"))
        console.print(text)


def bank_sim(
    pattern: Annotated[Path | None, typer.Option("--pattern", metavar="FILE.json",
                                                 help="Explicit warp accesses (see above).")] = None,
    layout: Annotated[str | None, typer.Option("--layout", metavar="ROWSxCOLS", help="Tile shape in elements.")] = None,
    dtype: Annotated[str, typer.Option("--dtype", help="Element type (bf16, fp16, fp32, int8, ...).")] = "bf16",
    order: Annotated[str, typer.Option("--order", help="row or col (which dimension is contiguous).")] = "row",
    pad: Annotated[int, checked(NON_NEGATIVE, "--pad", metavar="ELEMS", help="Padding elements per stored line.")] = 0,
    swizzle: Annotated[str, typer.Option("--swizzle", help="none, xor2/4/8, 32B/64B/128B (TMA), sw<B,M,S>.")] = "none",
    access: Annotated[list[str] | None, typer.Option("--access", metavar="SPEC",
                                                     help="ldmatrix.x4, ld.128.column, cp.async.128.row, ...")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print the results as JSON.")] = False,
    heat: Annotated[int | None, checked(NON_NEGATIVE, "--heatmap", metavar="I", help="Instruction to draw (default: the worst).")] = None,
    limit: Annotated[int, checked(NON_NEGATIVE, "--limit", help="Instructions listed in text output.")] = 32,
    plain: Annotated[bool, typer.Option("--plain", help="No colours, even on a terminal.")] = False,
    model: Annotated[str, typer.Option("--model", help=MODEL_HELP)] = "nvidia",
) -> None:
    from tracea.doctor.errors import BadInputError
    from tracea.emitters.bank_access import model_of

    model = model_of(model.strip().lower()).name
    if (pattern is None) == (layout is None):
        raise BadInputError("give either --pattern FILE.json or --layout ROWSxCOLS (with --access)",
                            "see `tracea bank-sim --help`")
    import dataclasses

    from tracea.emitters.bank_access import AccessBatch, tile_sweep
    from tracea.emitters.bank_sim import simulate

    described: dict[str, Any] = {}
    if pattern is not None:
        if access:
            raise BadInputError("--access describes a tile sweep; it cannot be combined with --pattern")
        batch = _read_pattern(pattern, model)
        title = f"{pattern}: {len(batch)} instructions"
        described["pattern"] = str(pattern)
    else:
        tile = _parse_layout(layout or "", dtype, order, pad, swizzle)
        if not access:
            raise BadInputError("--layout needs at least one --access", "e.g. --access ldmatrix.x4")
        sweeps = [tile_sweep(tile, spec, model) for spec in access]
        batch = AccessBatch.concat(
            dataclasses.replace(b, names=tuple(f"{spec}#{i}" for i in range(len(b))))
            for spec, b in zip(access, sweeps, strict=True))
        title = f"{tile.describe()}; {', '.join(access)}: {len(batch)} instructions"
        described.update(layout=tile.to_json(), access=list(access))
    result = simulate(batch)
    if json_out:
        typer.echo(json.dumps({**result.to_json(), **described}, indent=1))
        return
    if heat is None:
        heat = int((result.wavefronts - result.ideal).argmax()) if len(result) else 0
    if not 0 <= heat < len(result):
        raise BadInputError(f"--heatmap {heat}: there are {len(result)} instructions (0-{len(result) - 1})")
    _render(result, title, heat, limit, plain or not sys.stdout.isatty())


def register(app: typer.Typer) -> None:
    app.command("bank-sim", help=HELP, no_args_is_help=True)(bank_sim)
