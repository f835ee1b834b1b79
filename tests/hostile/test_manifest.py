"""Hostile manifests: names and paths that leave the bundle or the compile cache, wrong types, forged
sums, tampered IR records. Each is one clear line and exit 2 (never an internal error), before anything
is compiled, and nothing is written outside the compile cache."""

from __future__ import annotations

import hashlib
import json

import pytest


def edit(h, change) -> None:
    doc = h.manifest
    change(doc)
    h.write_manifest(doc)


def first_kernel(key, value):
    def change(doc):
        doc["kernels"][0][key] = value
    return change


def top(key, value):
    def change(doc):
        doc[key] = value
    return change


def dropped(key):
    return lambda doc: doc.pop(key)


def refused(h, *args, source=None):
    out = h.replay("--yes", *args, source=source)
    assert out.returncode == 2, out.stdout + out.stderr
    assert out.stderr.startswith("error: ") and "Traceback" not in out.stderr
    assert "verified" not in out.stdout and "replay will" not in out.stdout  # refused before the plan
    return out.stderr.splitlines()[0]


@pytest.mark.parametrize("name", ["../../../../../outside/PWN", "../../../outside/PWN", "a/b", "x;rm -rf ~", "",
                                  "0abc", "x" * 129, "\x1b[2Jname"])
@pytest.mark.parametrize("mode", [[], ["--bundled-source"]])
def test_kernel_name_traversal(hostile, name, mode):
    edit(hostile, first_kernel("name", name))
    line = refused(hostile, *mode)
    assert "kernels[0].name" in line and "is not a C identifier" in line, line
    assert "\x1b" not in line
    assert not (hostile.base / "outside").exists()


@pytest.mark.parametrize(("change", "expected"), [
    (top("kernels", ["x"]), "kernels[0] is str, expected dict"),
    (top("kernels", {"dir": "x"}), "kernels is dict, expected list"),
    (top("kernels", [{}]), "kernels[0] has no 'dir'"),
    (top("kernels", None), "kernels is null, expected list"),
    (top("files", []), "files is list, expected dict"),
    (top("files", {"README.txt": "abc"}), "files['README.txt'] is str, expected dict"),
    (top("files", {"README.txt": {"size": "12", "sha256": "0" * 64}}), "files['README.txt'].size is str"),
    (top("files", {"README.txt": {"size": True, "sha256": "0" * 64}}), "files['README.txt'].size is bool"),
    (top("files", {"README.txt": {"size": 1}}), "files['README.txt'].sha256 is null, expected str"),
    (top("files", {"README.txt": {"size": 1, "sha256": "zz"}}), "is not a sha256"),
    (top("files", {"README.txt": {"size": -1, "sha256": "0" * 64}}), "size -1 is outside"),
    (top("files", {"/etc/passwd": {"size": 1, "sha256": "0" * 64}}), "outside the bundle"),
    (top("files", {"run/../../x": {"size": 1, "sha256": "0" * 64}}), "outside the bundle"),
    (top("files", {"run//x": {"size": 1, "sha256": "0" * 64}}), "not a plain relative path"),
    (top("schema_version", "1"), "schema_version '1'; this Tracea reads 1"),
    (top("schema_version", True), "schema_version True; this Tracea reads 1"),
    (top("run", "bench"), "run is str, expected dict or null"),
    (top("run", {"argv": "bench gemm"}), "run.argv is str, expected list or null"),
    (top("run", {"argv": ["bench", 1]}), "run.argv[1] is int, expected str"),
    (top("env", []), "env is list, expected dict or null"),
    (top("env", {"cpu": "x"}), "env.cpu is str, expected dict"),
    (top("env", {"cpu": {"environment": [1]}}), "env.cpu.environment is list"),
    (top("command_line", [1, 2]), "command_line[0] is int"),
    (top("python", 3.11), "python is float, expected str or null"),
    (dropped("files"), "required field 'files' is missing"),
    (dropped("kernels"), "required field 'kernels' is missing"),
    (first_kernel("dir", 5), "kernels[0].dir is int, expected str"),
    (first_kernel("dir", "../.."), "outside the bundle"),
    (first_kernel("dir", "/etc"), "outside the bundle"),
    (first_kernel("source", "../../../etc/passwd"), "kernels[0].source '../../../etc/passwd' is not a file name"),
    (first_kernel("binary", "/bin/sh"), "kernels[0].binary '/bin/sh' is not a file name"),
    (first_kernel("variant", ["cpu-avx512.gemm"]), "kernels[0].variant is list, expected str or null"),
    (first_kernel("name", 7), "kernels[0].name is int, expected str or null"),
], ids=lambda v: v if isinstance(v, str) else "")
def test_wrong_typed_manifest_fields(hostile, change, expected):
    edit(hostile, change)
    line = refused(hostile)
    assert expected in line, line


def test_manifest_that_is_not_an_object_or_not_json(hostile):
    (hostile.root / "manifest.json").write_text("[1, 2]")
    assert "not a Tracea repro bundle" in refused(hostile)
    (hostile.root / "manifest.json").write_text("{")
    assert "bundle manifest is unreadable" in refused(hostile)


@pytest.mark.parametrize("packed", [False, True], ids=["folder", "tar.gz"])
def test_forged_hashes_are_refused(hostile, packed):
    """A file changed after packing, the manifest not re-signed: its sha256 no longer matches."""
    src = hostile.kernel_dir / "03_source.c"
    src.write_text(src.read_text().replace("#include", "#include <stdlib.h>\n#include", 1)[:-20] + "x" * 20)
    line = refused(hostile, source=hostile.pack() if packed else None)
    assert "03_source.c does not match its sha256" in line, line


def test_forged_size_is_refused(hostile):
    def change(doc):
        info = doc["files"]["README.txt"]
        info["size"] += 1
    edit(hostile, change)
    assert "README.txt does not match its sha256 and size in the manifest" in refused(hostile)


def test_listed_file_missing(hostile):
    (hostile.kernel_dir / "00_op.json").unlink()
    assert "00_op.json, which its manifest lists" in refused(hostile)


def test_op_file_not_listed_is_never_read(hostile):
    """The manifest drops 00_op.json from its list: the file is reported as unlisted and not used."""
    rel = f"{hostile.manifest['kernels'][0]['dir']}/00_op.json"
    edit(hostile, lambda doc: doc["files"].pop(rel))
    out = hostile.replay("--yes")
    assert out.returncode == 2 and f"bundle is missing {rel} (its manifest does not list it)" in out.stderr
    assert f"unlisted: {rel}: a file the manifest does not list" in out.stdout


@pytest.mark.parametrize(("file", "content", "expected"), [
    ("00_op.json", '{"op": "gemm", "m": "64", "n": 1, "k": 1}', "bundle kernel run/ir/"),
    ("00_op.json", '{"op": "rm -rf"}', "unknown operation"),
    ("00_op.json", "[1]", "00_op.json holds list, expected a JSON object"),
    ("00_op.json", "{nope", "00_op.json is not JSON"),
    ("02_schedule.json", '{"backend": "cpu", "mr": -8}', "bundle kernel run/ir/"),
    ("02_schedule.json", '"fast"', "02_schedule.json holds str, expected a JSON object"),
    ("04_compile.json", '{"flags": "-O3 -wrapper x"}', "04_compile.json flags is not a list of strings"),
    ("04_compile.json", '{"flags": [1]}', "04_compile.json flags is not a list of strings"),
    ("04_compile.json", '{"compiler": ["/bin/sh"]}', "04_compile.json compiler is not a string"),
    ("03_source.c", b"\xff\xfe not utf-8", "03_source.c is not UTF-8 text"),
])
def test_tampered_kernel_records(hostile, file, content, expected):
    path = hostile.kernel_dir / file
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    hostile.resign()
    line = refused(hostile)
    assert expected in line, line


def test_variant_of_another_backend_or_op(hostile):
    edit(hostile, first_kernel("backend", "cuda"))
    assert "is a cpu variant, the manifest says backend 'cuda'" in refused(hostile)


def test_unknown_variant_is_unsupported_not_internal(hostile):
    edit(hostile, first_kernel("variant", "cpu-evil.gemm"))
    out = hostile.replay("--yes")
    assert out.returncode == 3 and "no registered variant 'cpu-evil.gemm'" in out.stderr, out.stderr


def test_garbage_metrics_file(hostile):
    (hostile.root / "run" / "metrics.jsonl").write_text("not json\n")
    hostile.resign()
    line = refused(hostile)
    assert line.startswith("error: bundle file run/metrics.jsonl is not a Tracea metrics file: run/metrics.jsonl:1")


def test_control_characters_in_bundle_text_are_not_sent_to_the_terminal(hostile):
    """A run id with escape sequences could clear the screen or rewrite the lines above the prompt."""
    def change(doc):
        doc["run"]["id"] = "ok\x1b[2J\x1b[1A\rRISK: none"
        doc["run"]["argv"] = ["bench", "\x1b]0;title\x07"]
    edit(hostile, change)
    out = hostile.replay("--yes")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "\x1b" not in out.stdout and "\r" not in out.stdout and "\x07" not in out.stdout
    assert "run ok\\x1b[2J\\x1b[1A\\rRISK: none" in out.stdout


def test_resigned_manifest_sums_are_consistent(hostile):
    """The fixture's re-signing is what a hostile sender does: sums match, so only the other checks stand."""
    hostile.resign()
    doc = hostile.manifest
    for rel, info in doc["files"].items():
        assert hashlib.sha256((hostile.root / rel).read_bytes()).hexdigest() == info["sha256"]
    assert json.loads((hostile.root / "manifest.json").read_text()) == doc
