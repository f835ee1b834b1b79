"""The device-run evidence under docs/device-runs/: named by what it shows, and every file cited.

Three promises (issue "One house for every backend"):
- no file or folder of the repository is named after how the work was done (``session2``, ``run4``,
  ``final``, ``again``, ``suite-before-hold``), and no folder under docs/device-runs/ is named by its date;
- every citation of a path under docs/device-runs/ (in any document: the pages, the READMEs, code comments
  and docstrings, the tests) names a file or folder that exists;
- every file under docs/device-runs/ is cited by a document: by its own path, or through a cited folder
  above it whose README.md lists the file (by its path from that folder, or by its name on the line or list
  item that names its subfolder). A README citing its own folder's files does not count by itself: the
  folder must be cited from outside it.

Text only, no GPU: reads the repository's files (tracked, and new ones git does not ignore).
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path, PurePosixPath

ROOT = Path(__file__).parents[2]
RUNS = "docs/device-runs"
CPU_RUNS = "docs/cpu-runs"  # the CPU runs' logs: named by what they hold too
DOC_SUFFIXES = (".md", ".py", ".sh", ".txt", ".toml", ".cfg", ".yml", ".yaml", ".rst")

# A name token (a path component split at '-', '_' and '.') that says how or when the work was done.
HOW_MADE = re.compile(
    r"(session|run|take|attempt|try|pass|round|iter|v)\d+|session|final|again|retry|rerun|redo|wip|tmp|temp"
    r"|scratch|latest|old|new|before|after",
    re.IGNORECASE,
)
# Product names that end in a digit (``arm_neoverse_v2``) and schema versions (``schema_v1``) say what a
# file is, not how it was made.
VERSIONED_NAMES = re.compile(r"(neoverse|schema)[-_]v\d+", re.IGNORECASE)
DATE = re.compile(r"\d{4}-\d{2}-\d{2}")
CITATION = re.compile(r"(?<![\w./-])docs/device-runs/([\w.\-/]*)")


def repo_files() -> list[str]:
    """The repository's files as posix paths: tracked and not deleted, plus new files git does not ignore
    (so a rename in the working tree counts before it is committed). Without git, every file but .git,
    .venv and caches."""
    git = shutil.which("git")
    if git and (ROOT / ".git").exists():
        p = subprocess.run([git, "-C", str(ROOT), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                           capture_output=True, text=True)
        if p.returncode == 0 and p.stdout:
            return sorted({s for s in p.stdout.split("\0") if s and (ROOT / s).is_file()})
    skip = {".git", ".venv", "__pycache__", ".pytest_cache", ".ruff_cache"}
    return sorted(p.relative_to(ROOT).as_posix() for p in ROOT.rglob("*")
                  if p.is_file() and not skip.intersection(p.relative_to(ROOT).parts))


def how_made_names(paths: list[str]) -> list[str]:
    """Each file or folder whose name says how or when it was made (one entry per offending path)."""
    bad = set()
    for path in paths:
        parts = PurePosixPath(path).parts
        for i, part in enumerate(parts):
            stem = VERSIONED_NAMES.sub("", part)
            if any(HOW_MADE.fullmatch(tok) for tok in re.split(r"[-_.]", stem) if tok):
                bad.add("/".join(parts[: i + 1]))
            elif path.startswith((RUNS + "/", CPU_RUNS + "/")) and i >= 2 and DATE.search(part):
                bad.add("/".join(parts[: i + 1]))
    return sorted(bad)


def documents(paths: list[str]) -> dict[str, str]:
    """Every text file that can cite a device run: pages, code, tests, and the READMEs under
    docs/device-runs/ (the logs there are evidence, not documents)."""
    docs = {}
    for path in paths:
        if not path.endswith(DOC_SUFFIXES):
            continue
        if path.startswith(RUNS + "/") and PurePosixPath(path).name != "README.md":
            continue
        try:
            docs[path] = (ROOT / path).read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue
    return docs


def citations(docs: dict[str, str]) -> list[tuple[str, str]]:
    """(citing document, cited path under docs/device-runs/ without a trailing slash) for every citation:
    ``docs/device-runs/...`` anywhere, and a ``../name/...`` path in a README under docs/device-runs/."""
    found = []
    for doc, text in docs.items():
        for m in CITATION.finditer(text):
            target = m.group(1).rstrip(".,:;").rstrip("/")
            found.append((doc, f"{RUNS}/{target}" if target else RUNS))
        if doc.startswith(RUNS + "/"):
            here = PurePosixPath(doc).parent
            for m in re.finditer(r"(?<![\w./-])((?:\.\./)+[\w.\-/]+)", text):
                target = (here / m.group(1).rstrip(".,:;").rstrip("/")).as_posix()
                parts: list[str] = []
                for part in target.split("/"):
                    if part == "..":
                        parts.pop()
                    else:
                        parts.append(part)
                found.append((doc, "/".join(parts)))
    return found


def _blocks(readme: str) -> list[str]:
    """A README cut into its table rows, list items and paragraphs."""
    blocks: list[str] = []
    current: list[str] = []
    for line in readme.splitlines():
        stripped = line.strip()
        if not stripped or stripped.startswith(("|", "- ", "* ")):
            if current:
                blocks.append("\n".join(current))
            current = [line] if stripped else []
        else:
            current.append(line)
    if current:
        blocks.append("\n".join(current))
    return blocks


def _names(text: str, name: str) -> bool:
    return re.search(rf"(?<![\w./-]){re.escape(name)}(?![\w-])", text) is not None


def readme_lists(readme: str, rel: str) -> bool:
    """Whether a folder's README lists the file at ``rel`` (its path from that folder)."""
    if rel == "README.md" or _names(readme, rel):
        return True
    folder, _, name = rel.rpartition("/")
    if not folder:
        return False
    return any(_names(block, folder + "/") and _names(block, name) for block in _blocks(readme))


def _inside(path: str, folder: str) -> bool:
    return path.startswith(folder + "/")


def uncited_runs(paths: list[str], docs: dict[str, str], cites: list[tuple[str, str]]) -> list[str]:
    """Files under docs/device-runs/ that no document cites."""
    runs = [p for p in paths if _inside(p, RUNS)]
    by_target: dict[str, set[str]] = {}
    for doc, target in cites:
        by_target.setdefault(target, set()).add(doc)
    uncited = []
    for path in runs:
        ancestors = [str(a) for a in PurePosixPath(path).parents if _inside(str(a), RUNS)]
        direct = {d for d in by_target.get(path, ()) if d != path
                  and not any(d == f"{a}/README.md" for a in ancestors)}
        if direct:
            continue
        listed = False
        for folder in ancestors:
            readme = docs.get(f"{folder}/README.md")
            outside = {d for d in by_target.get(folder, ()) if not _inside(d, folder)}
            if readme is not None and outside and readme_lists(readme, path[len(folder) + 1:]):
                listed = True
                break
        if not listed:
            uncited.append(path)
    return uncited


def test_no_file_or_folder_is_named_after_how_the_work_was_done():
    bad = how_made_names(repo_files())
    assert not bad, f"named after how or when the work was done (name them by what they hold): {bad}"


def test_how_made_names_are_recognised():
    assert how_made_names([f"{RUNS}/2026-11-26-h100-k/run12/rows.txt", "a/suite-before-hold/x.txt",
                           "b/final/y.txt", "c/bank_probe_run1.log", "d/session_head.sh"]) == [
        "a/suite-before-hold", "b/final", "c/bank_probe_run1.log", "d/session_head.sh",
        f"{RUNS}/2026-11-26-h100-k", f"{RUNS}/2026-11-26-h100-k/run12"]
    assert how_made_names([f"{CPU_RUNS}/2026-11-25-xeon/resnet50.txt", f"{CPU_RUNS}/xeon-avx512-cpu-suites/x.txt"]) == [
        f"{CPU_RUNS}/2026-11-25-xeon"]
    assert how_made_names(["tests/fixtures/cpuinfo/arm_neoverse_v2_grace.txt", "tests/fixtures/schema_v1_keys.json",
                           f"{RUNS}/h100-splitk-tail-and-suite/stem-rule/stem_rule.txt",
                           f"{RUNS}/h200-doctor/doctor_replay.txt"]) == []


def test_every_device_run_citation_names_a_path_that_exists():
    paths = repo_files()
    docs = documents(paths)
    dirs = {str(a) for p in paths for a in PurePosixPath(p).parents}
    files = set(paths)
    dangling = sorted({f"{doc}: {target}" for doc, target in citations(docs)
                       if target not in files and target not in dirs and target != RUNS})
    assert not dangling, f"citations of device-run paths that do not exist: {dangling}"


def test_every_device_run_file_is_cited_by_a_document():
    paths = repo_files()
    docs = documents(paths)
    uncited = uncited_runs(paths, docs, citations(docs))
    assert not uncited, ("files under docs/device-runs/ that no document cites (cite the file, or list it in "
                         f"the README of a folder a document cites; or delete it): {uncited}")


def test_the_citation_rules():
    readme = ("| folder | what |\n|---|---|\n| `cluster-fixup/` | `timeline.txt`, `device.txt` |\n\n"
              "- `stamps/hero.npy`: the raw stamps\n- `notes.txt` and\n  `other/`: continued\n")
    assert readme_lists(readme, "cluster-fixup/timeline.txt")
    assert readme_lists(readme, "stamps/hero.npy")
    assert readme_lists(readme, "notes.txt")
    assert not readme_lists(readme, "cluster-fixup/pytest.txt")
    assert not readme_lists(readme, "other/timeline.txt")
    a, b = f"{RUNS}/a", f"{RUNS}/b"  # (built, so that this file cites no device run itself)
    paths = [f"{a}/README.md", f"{a}/x/log.txt", f"{a}/y.txt", f"{b}/z.txt"]
    docs = {f"{a}/README.md": f"`x/`: `log.txt`. `y.txt`. See {b}/z.txt.", "docs/page.md": f"Logs: `{a}/`."}
    assert uncited_runs(paths, docs, citations(docs)) == []
    # a README naming its own folder's files, where nothing outside cites the folder, cites nothing
    alone = {f"{a}/README.md": docs[f"{a}/README.md"]}
    assert uncited_runs(paths, alone, citations(alone)) == [f"{a}/README.md", f"{a}/x/log.txt", f"{a}/y.txt"]
    # a README's relative path to another folder is a citation of it
    assert citations({f"{a}/README.md": "the run before (`../b/`)"}) == [(f"{a}/README.md", b)]


if __name__ == "__main__":  # python tests/house/test_device_runs.py: the same checks, as a list
    all_paths = repo_files()
    all_docs = documents(all_paths)
    all_cites = citations(all_docs)
    known = set(all_paths) | {str(a) for p in all_paths for a in PurePosixPath(p).parents}
    for d, t in sorted(set(all_cites)):
        if t not in known:
            print(f"cites a path that does not exist: {d}: {t}")
    for p in uncited_runs(all_paths, all_docs, all_cites):
        print(f"cited by no document: {p}")
    for p in how_made_names(all_paths):
        print(f"named after how or when it was made: {p}")
    print(f"{len(all_cites)} citations of docs/device-runs/ paths in {len({d for d, _ in all_cites})} documents; "
          f"{sum(p.startswith(RUNS + '/') for p in all_paths)} files under docs/device-runs/")
