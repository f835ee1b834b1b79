"""Measure every pattern of patterns.json on this machine's GPU with Nsight Compute, in one go.

    python3 benchmarks/gpu/bank_probe/run_probe.py [--out DIR] [--reps 256] [--chunk 160] [--budget-s 420]

Builds bank_probe.cu for sm_90a, checks on the SASS that each probe kernel holds exactly one kind of
shared-memory instruction (LDS.*, STS.*, LDSM.*, STSM.*, LDGSTS.*; never-executed ``@!PT`` padding
aside), then runs the probe under ``ncu --clock-control none`` (the card's clocks are left alone), a
chunk of patterns per ncu session so that a time-out keeps the chunks already done. Writes to DIR
($OUT on the device machine): machine.json, sass.txt, metrics_available.txt, the raw
ncu CSV, results.json (every counter of every launch) and a printed summary. Stdlib only.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
PROBE_OPS = {  # probe op name, expected SASS opcode prefix, the kernel's template argument
    ("ld", 1): ("ld1", "LDS.U8", 0), ("ld", 2): ("ld2", "LDS.U16", 1), ("ld", 4): ("ld4", "LDS", 2),
    ("ld", 8): ("ld8", "LDS.64", 3), ("ld", 16): ("ld16", "LDS.128", 4),
    ("st", 1): ("st1", "STS.U8", 5), ("st", 2): ("st2", "STS.U16", 6), ("st", 4): ("st4", "STS", 7),
    ("st", 8): ("st8", "STS.64", 8), ("st", 16): ("st16", "STS.128", 9),
    ("ldmatrix.x1", 16): ("ldsm1", "LDSM.16.M88", 10), ("ldmatrix.x2", 16): ("ldsm2", "LDSM.16.M88.2", 11),
    ("ldmatrix.x4", 16): ("ldsm4", "LDSM.16.M88.4", 12),
    ("stmatrix.x1", 16): ("stsm1", "STSM.16.M88", 13), ("stmatrix.x2", 16): ("stsm2", "STSM.16.M88.2", 14),
    ("stmatrix.x4", 16): ("stsm4", "STSM.16.M88.4", 15),
    ("cp.async", 4): ("cpa4", "LDGSTS.E", 16), ("cp.async", 8): ("cpa8", "LDGSTS.E.64", 17),
    ("cp.async", 16): ("cpa16", "LDGSTS.E.BYPASS.128", 18),
}
PROBE_VARIANTS = {"cpa16ca": ("cpa16ca", "LDGSTS.E.128", 19)}  # a pattern's "probe_op" picks one


def probe_op(p: dict) -> tuple[str, str, int]:
    return PROBE_VARIANTS[p["probe_op"]] if p.get("probe_op") else PROBE_OPS[(p["op"], p["bytes_per_lane"])]

CORE_METRICS = [
    "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum",
    "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_st.sum",
    "smsp__sass_inst_executed_op_shared_ld.sum",
    "smsp__sass_inst_executed_op_shared_st.sum",
    "smsp__sass_inst_executed_op_ldsm.sum",
]
# Also recorded where this ncu knows them: the total, bank-conflict counters, and the SASS-attributed
# wavefront and instruction counters of STSM and LDGSTS (the l1tex op_* split has neither).
EXTRA_RE = re.compile(r"^(l1tex__data_pipe_lsu_wavefronts_mem_shared(_op_(ld|st|atom|gmma|ipa|misc))?"
                      r"|l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_(ld|st)"
                      r"|smsp__sass_inst_executed_op_(ldgsts|shared)"
                      r"|sm__sass_inst_executed_op_(ldgsts\w*|shared_stsm)"
                      r"|sm__sass_l1tex_data_pipe_lsu_wavefronts_mem_shared_op_(ldgsts\w*|stsm)"
                      r"|sm__sass_l1tex_data_bank_conflicts_pipe_lsu_mem_shared_op_(ldgsts|stsm))$")
SHARED_OPCODE = re.compile(r"^\s*/\*[0-9a-f]+\*/\s+(@!?P\w+\s+)?((LDS|STS|LDSM|STSM|LDGSTS|ATOMS)[\w.]*)\b")


def sh(cmd: list[str], **kw) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, **kw)


def machine_info() -> dict:
    q = sh(["nvidia-smi", "--query-gpu=name,uuid,driver_version,compute_cap,clocks.sm,clocks.max.sm",
            "--format=csv,noheader"]).stdout.strip()
    return {
        "gpu": q,
        "ncu": sh(["ncu", "--version"]).stdout.strip().splitlines()[-1:],
        "nvcc": sh(["nvcc", "--version"]).stdout.strip().splitlines()[-1:],
        "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "host": os.uname().nodename,
    }


def sass_check(binary: Path, out: Path) -> dict:
    sass = sh(["cuobjdump", "-sass", str(binary)]).stdout
    (out / "sass.txt").write_text(sass)
    found: dict[int, set[str]] = {}
    current = None
    for line in sass.splitlines():
        m = re.search(r"Function : _Z5probeILi(\d+)EE", line)
        if m:
            current = int(m.group(1))
            found[current] = set()
            continue
        m = SHARED_OPCODE.match(line)
        if m and current is not None and not (m.group(1) or "").strip().startswith("@!PT"):
            found[current].add(m.group(2))
    check = {}
    for pname, opcode, tid in [*PROBE_OPS.values(), *PROBE_VARIANTS.values()]:
        kinds = sorted(found.get(tid, set()))
        check[pname] = {"expected": opcode, "found": kinds, "ok": kinds == [opcode]}
    return check


def pick_metrics(out: Path) -> list[str]:
    listing = sh(["ncu", "--query-metrics"]).stdout
    (out / "metrics_available.txt").write_text(listing)
    names = {ln.split()[0] for ln in listing.splitlines() if ln.strip() and not ln.startswith(("-", "Device"))}
    extra = sorted(n + ".sum" for n in names if EXTRA_RE.match(n))
    return CORE_METRICS + [m for m in extra if m not in CORE_METRICS][:28]


def parse_csv(text: str) -> list[dict]:
    rows = list(csv.reader(io.StringIO(text)))
    start = next(i for i, r in enumerate(rows) if r and r[0] == "ID")
    header, body = rows[start], rows[start + 1:]
    # ncu puts a row of units under the header: its ID cell is empty.
    return [dict(zip(header, r, strict=True)) for r in body if len(r) == len(header) and r[0].strip().isdigit()]


def number(text: str) -> float | None:
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return None


def main() -> int:
    args = _args()
    t0 = time.time()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    work = Path("/tmp/bank_probe_build")
    work.mkdir(exist_ok=True)
    info = machine_info()
    (out / "machine.json").write_text(json.dumps(info, indent=1))
    print(json.dumps(info))

    binary = work / "bank_probe"
    b = sh(["nvcc", "-O3", "-std=c++17", "-gencode=arch=compute_90a,code=sm_90a", "-o", str(binary),
            str(HERE / "bank_probe.cu")])
    if b.returncode:
        print(b.stderr)
        return 1
    check = sass_check(binary, out)
    bad = {k: v for k, v in check.items() if not v["ok"]}
    print(f"SASS check: {len(check) - len(bad)}/{len(check)} probe kernels hold only the intended instruction",
          bad or "")

    metrics = pick_metrics(out)
    print("metrics:", ",".join(metrics))
    patterns = json.loads(Path(args.patterns).read_text())["patterns"]
    results, metrics = measure(patterns, binary, work, out, metrics, args, t0)
    doc = {"schema_version": 1, "machine": info, "reps": args.reps, "metrics": metrics,
           "sass_check": check, "results": results}
    (out / "results.json").write_text(json.dumps(doc))
    first_look(results)
    print(f"{len(results)}/{len(patterns)} patterns measured in {time.time() - t0:.0f} s")
    shutil.rmtree(work, ignore_errors=True)
    return 0


def _args() -> argparse.Namespace:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.environ.get("OUT", "/tmp/bank_probe_out"))
    ap.add_argument("--reps", type=int, default=256)
    ap.add_argument("--chunk", type=int, default=160)
    ap.add_argument("--budget-s", type=float, default=420.0)
    ap.add_argument("--patterns", default=str(HERE / "patterns.json"))
    return ap.parse_args()


def measure(patterns: list[dict], binary: Path, work: Path, out: Path, metrics: list[str], args: argparse.Namespace,
            t0: float) -> tuple[list[dict], list[str]]:
    """Every pattern's counters, a chunk of patterns per ncu session, until the time budget is spent or ncu
    fails; and the metrics they hold (the core ones where ncu refused the extra ones on the first chunk)."""
    results: list[dict] = []
    for c in range(0, len(patterns), args.chunk):
        if time.time() - t0 > args.budget_s:
            print(f"time budget spent: stopping before chunk {c // args.chunk}")
            break
        chunk = patterns[c:c + args.chunk]
        txt = work / f"chunk{c}.txt"
        txt.write_text("\n".join(chunk_line(p) for p in chunk) + "\n")
        rep = work / f"chunk{c}"
        t1 = time.time()
        r, metrics = run_ncu(binary, txt, rep, metrics, args.reps, may_retry=not results)
        if r.returncode:
            print("ncu failed:", r.stdout[-2000:], r.stderr[-2000:])
            (out / f"ncu_fail_{c}.txt").write_text(r.stdout + r.stderr)
            break
        raw = sh(["ncu", "-i", f"{rep}.ncu-rep", "--csv", "--page", "raw"]).stdout
        with open(out / "raw.csv", "a") as f:
            f.write(f"# chunk {c}\n{raw}")
        rows = parse_csv(raw)
        if len(rows) != len(chunk):
            print(f"chunk {c}: {len(rows)} ncu rows for {len(chunk)} patterns")
        results += [launch_result(p, row, metrics) for p, row in zip(chunk, rows, strict=False)]
        print(f"chunk {c // args.chunk}: {len(rows)} launches in {time.time() - t1:.1f} s")
    return results, metrics


def chunk_line(p: dict) -> str:
    """A pattern as the probe reads it: name, probe op, then each lane's address ("-": inactive)."""
    return " ".join([p["name"], probe_op(p)[0]] + ["-" if a is None else str(a) for a in p["addresses"]])


def run_ncu(binary: Path, txt: Path, rep: Path, metrics: list[str], reps: int,
            may_retry: bool) -> tuple[subprocess.CompletedProcess, list[str]]:
    """One ncu session over the patterns of ``txt``; where it fails with the extra metrics and ``may_retry``
    (nothing measured yet), once more with the core ones. Returns the session and the metrics it read."""
    r = sh(["ncu", "--clock-control", "none", "--metrics", ",".join(metrics), "-f", "-o", str(rep),
            str(binary), str(txt), str(reps)])
    if r.returncode and may_retry and metrics != CORE_METRICS:
        print("ncu failed with the extra metrics; retrying with the core ones:", r.stderr[-500:])
        metrics = list(CORE_METRICS)
        r = sh(["ncu", "--clock-control", "none", "--metrics", ",".join(metrics), "-f", "-o", str(rep),
                str(binary), str(txt), str(reps)])
    return r, metrics


def launch_result(p: dict, row: dict, metrics: list[str]) -> dict:
    """The pattern with its launch's kernel name, whether that is the pattern's probe kernel, and its counters."""
    tid = probe_op(p)[2]
    kernel = row.get("Kernel Name", "")
    counters = {m: number(row.get(m, "")) for m in metrics}
    kernel_ok = re.search(rf"probe<(\(int\))?{tid}>", kernel) is not None
    return {**p, "kernel": kernel, "kernel_ok": kernel_ok, "counters": counters}


def first_look(results: list[dict]) -> None:
    """A first look: the shared wavefronts of each launch over its shared instructions (about 60 rows)."""
    tot, inst = f"{CORE_METRICS[0][:-len('_op_ld.sum')]}.sum", "smsp__sass_inst_executed_op_shared.sum"
    print(f"{'pattern':<44} {'op':<12} {'B':>2} {'all shared wf':>13} {'shared inst':>11}")
    for res in results[:: max(1, len(results) // 60)]:
        k = res["counters"]
        print(f"{res['name'][:44]:<44} {res['op']:<12} {res['bytes_per_lane']:>2} {k.get(tot) or 0:>13.0f} "
              f"{k.get(inst) or 0:>11.0f}")


if __name__ == "__main__":
    sys.exit(main())
