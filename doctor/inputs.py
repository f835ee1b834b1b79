"""Reading what a user or someone else hands Tracea: one layer every entry point uses for files and values
(CLI options and their files, bundles, snapshots, tuning exports, the ``tracea.ops`` arguments).

Each check ends in one BadInputError naming what was given and what is expected: text must be UTF-8,
JSON must parse and nest no deeper than ``MAX_DEPTH`` (Python's own parser recurses and would end in a
RecursionError), a file may not exceed its size limit, and integers stay in the range their consumer can
hold (SQLite's 64-bit integers, a shape's extent). Nothing here imports more than the standard library.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .errors import BadInputError

MAX_DEPTH = 64  # JSON nesting: Tracea's own documents nest a handful of levels
MAX_TEXT_BYTES = 64 << 20  # a suite, schedule, space or export file
INT64 = (-(2**63), 2**63 - 1)


def read_text(path: str | Path, what: str, limit: int = MAX_TEXT_BYTES) -> str:
    """The file's text (UTF-8); BadInputError when it cannot be read, is larger than ``limit`` bytes or is
    not UTF-8."""
    p = Path(path)
    try:
        with open(p, "rb") as f:
            data = f.read(limit + 1)
    except IsADirectoryError:
        raise BadInputError(f"{what} {p} is a folder, not a file") from None
    except OSError as exc:
        raise BadInputError(f"{what} {p} cannot be read ({exc.strerror or exc})") from None
    if len(data) > limit:
        raise BadInputError(f"{what} {p} is larger than {limit >> 20} MiB")
    return decode(data, f"{what} {p}")


def decode(data: bytes, what: str) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BadInputError(f"{what} is not UTF-8 text (byte 0x{data[exc.start]:02x} at offset {exc.start})") from None


def parse_json(text: str | bytes, what: str, max_depth: int = MAX_DEPTH) -> Any:
    """``text`` parsed as JSON, nested no deeper than ``max_depth``; BadInputError otherwise."""
    if isinstance(text, bytes):
        text = decode(text, what)
    depth = _bracket_depth(text)
    if depth > max_depth:
        raise BadInputError(f"{what} nests {depth} levels deep (at most {max_depth})")
    try:
        return json.loads(text)
    except RecursionError:  # a depth the bracket count did not see (it cannot happen; kept as the last line)
        raise BadInputError(f"{what} nests too deep") from None
    except ValueError as exc:
        raise BadInputError(f"{what} is not JSON ({exc})") from None


def _bracket_depth(text: str) -> int:
    """The deepest nesting of [ and { outside strings, in one pass (no recursion)."""
    depth = deepest = 0
    in_string = escaped = False
    for ch in text:
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif ch in "]}":
            depth -= 1
    return deepest


def check_int(value: Any, what: str, lo: int = INT64[0], hi: int = INT64[1]) -> int:
    """``value`` as an int within [lo, hi] (a bool is not an int); BadInputError otherwise."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise BadInputError(f"{what} is {value!r}, not an integer")
    if not lo <= value <= hi:
        raise BadInputError(f"{what} is {value}, outside {lo}..{hi}")
    return value


def check_ints_in(doc: Any, what: str, lo: int = INT64[0], hi: int = INT64[1]) -> None:
    """Every integer anywhere in a parsed document within [lo, hi] (a database column holds 64 bits)."""
    stack = [(doc, what)]
    while stack:
        value, where = stack.pop()
        if isinstance(value, dict):
            stack.extend((v, f"{where}.{k}") for k, v in value.items())
        elif isinstance(value, list):
            stack.extend((v, f"{where}[{i}]") for i, v in enumerate(value))
        elif isinstance(value, int) and not isinstance(value, bool) and not lo <= value <= hi:
            raise BadInputError(f"{where} is {value}, outside {lo}..{hi}")
