"""Checks on an unpacked repro bundle before replay believes anything in it.

A bundle comes from someone else, so its manifest is input like any other: every field is type-checked
(``check_manifest``), every path it names must stay inside the bundle and reach a plain file without
passing a symbolic link (``read_listed``: ``lstat`` on every component, then ``O_NOFOLLOW`` and an
inode comparison), every listed file must have its recorded size and sha256, files the manifest does
not list are reported and never read (``unlisted``), kernel names must be C identifiers, and the
compiler flags of a bundle pass an allow-list before ``--bundled-source`` may use them
(``compiler_flags.refused_flag``).
Every refusal is a BadInputError: one line, exit 2.

The sha256 list guards against a bundle damaged or edited after packing; it proves nothing about who
made it (whoever writes the files can write the manifest). That is why replay runs nothing from the
bundle unless asked.
"""

from __future__ import annotations

import hashlib
import os
import re
import stat
from pathlib import Path, PurePosixPath
from typing import Any

from tracea.doctor.errors import BadInputError

from .safetar import MAX_MEMBER_BYTES, MAX_MEMBERS, MAX_TOTAL_BYTES

# Tracea's CUDA kernel names reach ~90 characters (core, tile, warps, stages, epilogue), hence 128
KERNEL_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")
_SHA256 = re.compile(r"[0-9a-f]{64}")
_NONE = type(None)
_OPT_STR = (str, _NONE)

# key: (allowed types, required); a missing optional key is None
TOP_FIELDS: dict[str, tuple[tuple[type, ...], bool]] = {
    "kind": ((str,), True), "schema_version": ((int,), True), "files": ((dict,), True), "kernels": ((list,), True),
    "tracea_version": (_OPT_STR, False), "created_at": (_OPT_STR, False), "command_line": ((list, _NONE), False),
    "run": ((dict, _NONE), False), "env": ((dict, _NONE), False), "env_hash": (_OPT_STR, False),
    "python": (_OPT_STR, False), "platform": (_OPT_STR, False), "machine": (_OPT_STR, False),
    "replay": (_OPT_STR, False),
}
RUN_FIELDS = {"id": _OPT_STR, "run_kind": _OPT_STR, "argv": (list, _NONE), "status": _OPT_STR, "error": _OPT_STR,
              "started_at": _OPT_STR, "finished_at": _OPT_STR, "tracea_version": _OPT_STR}
KERNEL_FIELDS = {"dir": (str,), "name": _OPT_STR, "variant": _OPT_STR, "backend": _OPT_STR, "language": _OPT_STR,
                 "source": _OPT_STR, "binary": _OPT_STR, "arch": _OPT_STR}


def _type_name(value: Any) -> str:
    return "null" if value is None else type(value).__name__


def _want(where: str, value: Any, types: tuple[type, ...]) -> None:
    # bool is an int to isinstance; a manifest's true is never a number or a version
    ok = isinstance(value, types) and not (isinstance(value, bool) and bool not in types)
    if not ok:
        names = " or ".join("null" if t is _NONE else t.__name__ for t in types)
        raise BadInputError(f"bundle manifest: {where} is {_type_name(value)}, expected {names}",
                            "the manifest was edited or made by something else than `tracea pack-repro`")


def _strings(where: str, value: Any) -> None:
    if value is not None:
        for i, item in enumerate(value):
            _want(f"{where}[{i}]", item, (str,))


def check_rel_path(where: str, rel: Any) -> PurePosixPath:
    """A path named by the manifest: relative, no '..', '.', empty part, backslash or NUL."""
    _want(where, rel, (str,))
    parts = rel.split("/")
    if (not rel or "\x00" in rel or "\\" in rel or rel.startswith("/") or len(rel) > 1024
            or any(p in ("", ".", "..") or len(p) > 255 for p in parts)):
        raise BadInputError(f"bundle manifest: {where} {quoted(rel)} is outside the bundle or not a plain "
                            "relative path")
    return PurePosixPath(rel)


def check_kernel_name(where: str, name: Any) -> None:
    if name is not None and (not isinstance(name, str) or not KERNEL_NAME.fullmatch(name)):
        raise BadInputError(f"bundle manifest: {where} {quoted(name)} is not a C identifier "
                            "([A-Za-z_][A-Za-z0-9_]*, at most 128 characters)",
                            "kernel names become file names in the compile cache; this one could leave it")


def check_manifest(m: dict[str, Any]) -> None:
    """Every field replay reads has the type pack-repro writes; paths and names are safe."""
    for key, (types, required) in TOP_FIELDS.items():
        if key not in m:
            if required:
                raise BadInputError(f"bundle manifest: required field {key!r} is missing")
            continue
        _want(key, m[key], types)
    _strings("command_line", m.get("command_line"))
    for key, value in (m.get("run") or {}).items():
        if key in RUN_FIELDS:
            _want(f"run.{key}", value, RUN_FIELDS[key])
    _strings("run.argv", (m.get("run") or {}).get("argv"))
    for backend, rec in (m.get("env") or {}).items():
        _want(f"env.{backend}", rec, (dict,))
        _want(f"env.{backend}.fingerprint", rec.get("fingerprint"), _OPT_STR)
        _want(f"env.{backend}.environment", rec.get("environment"), (dict, _NONE))
    if len(m["files"]) > MAX_MEMBERS:
        raise BadInputError(f"bundle manifest lists more than {MAX_MEMBERS} files")
    total = 0
    for rel, info in m["files"].items():
        check_rel_path("file", rel)
        _want(f"files[{rel!r}]", info, (dict,))
        _want(f"files[{rel!r}].size", info.get("size"), (int,))
        _want(f"files[{rel!r}].sha256", info.get("sha256"), (str,))
        if not _SHA256.fullmatch(info["sha256"]):
            raise BadInputError(f"bundle manifest: files[{rel!r}].sha256 is not a sha256 (64 lowercase hex digits)")
        if not 0 <= info["size"] <= MAX_MEMBER_BYTES:
            raise BadInputError(f"bundle manifest: files[{rel!r}].size {info['size']} is outside 0..{MAX_MEMBER_BYTES}")
        total += info["size"]
    if total > MAX_TOTAL_BYTES:
        raise BadInputError(f"bundle manifest: its files add up to more than {MAX_TOTAL_BYTES} bytes")
    for i, entry in enumerate(m["kernels"]):
        _want(f"kernels[{i}]", entry, (dict,))
        if "dir" not in entry:
            raise BadInputError(f"bundle manifest: kernels[{i}] has no 'dir' (its IR dump folder)")
        for key, types in KERNEL_FIELDS.items():
            _want(f"kernels[{i}].{key}", entry.get(key), types)
        check_rel_path(f"kernels[{i}].dir", entry["dir"])
        check_kernel_name(f"kernels[{i}].name", entry.get("name"))
        for key in ("source", "binary"):  # plain file names inside the kernel's folder
            if entry.get(key) is not None and (("/" in entry[key]) or entry[key] in (".", "..")):
                raise BadInputError(f"bundle manifest: kernels[{i}].{key} {quoted(entry[key])} is not a file name")
            if entry.get(key) is not None:
                check_rel_path(f"kernels[{i}].{key}", entry[key])


# ------------------------------------------------------------------------------------------- files


def _lstat_inside(root: Path, rel: str) -> os.stat_result:
    """lstat of every component from ``root`` down: no link is followed, the last one is a plain file."""
    parts = rel.split("/")
    here = root
    for i, part in enumerate(parts):
        here = here / part
        try:
            st = os.lstat(here)
        except FileNotFoundError:
            raise BadInputError(f"bundle is missing {rel}, which its manifest lists") from None
        except OSError as exc:
            raise BadInputError(f"bundle file {rel} cannot be read ({exc.strerror})") from None
        if stat.S_ISLNK(st.st_mode):
            raise BadInputError(f"bundle path {'/'.join(parts[:i + 1])} is a symbolic link; replay follows none",
                                "unpack the bundle again from its .tar.gz (links are refused there)")
        last = i == len(parts) - 1
        if not last and not stat.S_ISDIR(st.st_mode):
            raise BadInputError(f"bundle path {'/'.join(parts[:i + 1])} is not a folder")
        if last and not stat.S_ISREG(st.st_mode):
            raise BadInputError(f"bundle file {rel} is not a plain file")
    return st


def read_listed(root: Path, rel: str, info: dict[str, Any]) -> bytes:
    """The bytes of a listed file, after the link, size and sha256 checks."""
    st = _lstat_inside(root, rel)
    if st.st_size != info["size"]:
        raise BadInputError(f"bundle file {rel} does not match its sha256 and size in the manifest: it is "
                            f"{st.st_size} bytes, the manifest says {info['size']} (altered or corrupted)")
    try:
        fd = os.open(root / rel, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except OSError as exc:
        raise BadInputError(f"bundle file {rel} cannot be read ({exc.strerror})") from None
    with os.fdopen(fd, "rb") as f:
        now = os.fstat(f.fileno())
        if (now.st_ino, now.st_dev) != (st.st_ino, st.st_dev):  # swapped between the checks and the open
            raise BadInputError(f"bundle file {rel} changed while it was being checked")
        data = f.read(info["size"] + 1)
    if len(data) != info["size"] or hashlib.sha256(data).hexdigest() != info["sha256"]:
        raise BadInputError(f"bundle file {rel} does not match its sha256 in the manifest (altered or corrupted)")
    return data


def unlisted(root: Path, listed: set[str], limit: int = MAX_MEMBERS) -> list[tuple[str, str]]:
    """(path, what) for every entry under ``root`` the manifest does not list: files, links, specials.
    Links are reported, never followed."""
    out: list[tuple[str, str]] = []
    stack = [(root, "")]
    seen = 0
    while stack:
        folder, prefix = stack.pop()
        try:
            entries = sorted(os.scandir(folder), key=lambda e: e.name)
        except OSError as exc:
            out.append((prefix or ".", f"folder cannot be listed ({exc.strerror})"))
            continue
        for e in entries:
            seen += 1
            if seen > limit:
                out.append(("...", f"more than {limit} entries; the rest was not looked at"))
                return out
            rel = f"{prefix}{e.name}"
            if e.is_symlink():
                try:
                    target = os.readlink(e.path)
                except OSError:
                    target = "?"
                out.append((rel, f"a symbolic link (to {target}); not followed" + (", although the manifest lists it"
                                                                                  if rel in listed else "")))
            elif e.is_dir(follow_symlinks=False):
                stack.append((Path(e.path), rel + "/"))
            elif not e.is_file(follow_symlinks=False):
                out.append((rel, "a device, FIFO or socket"))
            elif rel not in listed and rel != "manifest.json":
                out.append((rel, "a file the manifest does not list"))
    return sorted(out)


def quoted(value: Any) -> str:
    """A bundle's value for a message: strings quoted, everything terminal-safe."""
    return f"'{shown(value)}'" if isinstance(value, str) else shown(repr(value))


def shown(value: Any) -> str:
    """A bundle's string made safe for a terminal: control characters (escape sequences that could
    rewrite the lines above a prompt) are written as \\xNN."""
    text = value if isinstance(value, str) else repr(value)
    return "".join(ch if ch.isprintable() else ascii(ch)[1:-1] for ch in text)
