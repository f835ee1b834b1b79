"""Turn run_probe.py's results.json into a test fixture: per pattern, the measured wavefronts and bank
conflicts per instruction, with the nonzero raw counters they came from and the machine/date.

    python benchmarks/gpu/bank_probe/to_fixture.py RESULTS.json tests/fixtures/bank_patterns/NAME.json

Per instruction = counter / the instruction counter of that kind (never / REPS: ptxas may hoist a
loop-invariant ld.shared out of the probe's loop, and then a load runs once, which the instruction
counter shows). Which counters, by op:

- ld:        l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld / smsp__sass_inst_executed_op_shared_ld
- st:        ..._op_st / smsp__sass_inst_executed_op_shared_st
- ldmatrix:  ..._op_ld / smsp__sass_inst_executed_op_ldsm
- stmatrix:  ..._op_st / smsp__sass_inst_executed_op_shared (STSM is the kernel's only shared instruction;
             it is not in op_shared_st)
- cp.async:  the shared wavefronts outside ld/st/atom/gmma/ipa/misc / smsp__sass_inst_executed_op_ldgsts
             (first run: LDGSTS's own counter was not recorded; 16-byte .cg copies, LDGSTS.BYPASS, show no
             wavefronts there and are kept as unmeasured)

Where a run recorded them (the second), STSM and LDGSTS use their SASS-attributed counters instead:
sm__sass_l1tex_data_pipe_lsu_wavefronts_mem_shared_op_{stsm,ldgsts} / sm__sass_inst_executed_op_{shared_stsm,
ldgsts}, with sm__sass_l1tex_data_bank_conflicts_pipe_lsu_mem_shared_op_{stsm,ldgsts}.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

W = "l1tex__data_pipe_lsu_wavefronts_mem_shared"
BC = "l1tex__data_bank_conflicts_pipe_lsu_mem_shared"
INST = "smsp__sass_inst_executed_op_"


SASS_W = "sm__sass_l1tex_data_pipe_lsu_wavefronts_mem_shared_op_"
SASS_BC = "sm__sass_l1tex_data_bank_conflicts_pipe_lsu_mem_shared_op_"


def measure(op: str, k: dict) -> tuple[float | None, float | None, float]:
    """(wavefronts, bank conflicts, instructions) for one launch; None where not measured."""
    # The second run recorded STSM's and LDGSTS's own SASS-attributed counters: use them where present.
    if op.startswith("stmatrix") and k.get(f"{SASS_W}stsm.sum") is not None:
        return k[f"{SASS_W}stsm.sum"], k[f"{SASS_BC}stsm.sum"], k["sm__sass_inst_executed_op_shared_stsm.sum"]
    if op == "cp.async" and k.get(f"{SASS_W}ldgsts.sum") is not None:
        return k[f"{SASS_W}ldgsts.sum"], k[f"{SASS_BC}ldgsts.sum"], k["sm__sass_inst_executed_op_ldgsts.sum"]
    if op == "ld":
        return k[f"{W}_op_ld.sum"], k[f"{BC}_op_ld.sum"], k[f"{INST}shared_ld.sum"]
    if op == "st":
        return k[f"{W}_op_st.sum"], k[f"{BC}_op_st.sum"], k[f"{INST}shared_st.sum"]
    if op.startswith("ldmatrix"):
        return k[f"{W}_op_ld.sum"], k[f"{BC}_op_ld.sum"], k[f"{INST}ldsm.sum"]
    if op.startswith("stmatrix"):
        return k[f"{W}_op_st.sum"], k[f"{BC}_op_st.sum"], k[f"{INST}shared.sum"]
    rest = k[f"{W}.sum"] - sum(k[f"{W}_op_{s}.sum"] for s in ("ld", "st", "atom", "gmma", "ipa", "misc"))
    return (rest if rest > 0 else None), None, k[f"{INST}ldgsts.sum"]


def main(src: str, dst: str) -> int:
    doc = json.loads(Path(src).read_text())
    patterns = []
    for r in doc["results"]:
        wf, bc, n = measure(r["op"], r["counters"])
        if not r["kernel_ok"] or not n:
            raise SystemExit(f"{r['name']}: launch does not match its kernel or ran no instruction")
        entry = {"name": r["name"], "op": r["op"], "bytes_per_lane": r["bytes_per_lane"],
                 **({"probe_op": r["probe_op"]} if r.get("probe_op") else {}),
                 "addresses": r["addresses"], "instructions": int(n),
                 "wavefronts": None if wf is None else wf / n,
                 "bank_conflicts": None if bc is None else bc / n,
                 "counters": {m: v for m, v in r["counters"].items() if v}}
        for key in ("wavefronts", "bank_conflicts"):
            v = entry[key]
            if v is not None:
                if v != int(v):
                    raise SystemExit(f"{r['name']}: {key} per instruction {v} is not an integer")
                entry[key] = int(v)
        patterns.append(entry)
    fixture = {
        "schema_version": 1,
        "machine": doc["machine"],
        "reps": doc["reps"],
        "sass_check": {k: v["found"] for k, v in doc["sass_check"].items()},
        "how": "benchmarks/gpu/bank_probe/run_probe.py under ncu --clock-control none; per-instruction = "
               "counter / instruction counter (see benchmarks/gpu/bank_probe/to_fixture.py)",
        "patterns": patterns,
    }
    Path(dst).write_text(json.dumps(fixture, separators=(",", ":")) + "\n")
    measured = sum(p["wavefronts"] is not None for p in patterns)
    print(f"wrote {dst}: {len(patterns)} patterns, {measured} with a measured wavefront count")
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 3:
        raise SystemExit(__doc__)
    sys.exit(main(sys.argv[1], sys.argv[2]))
