"""Probe: how often this machine's cores run slow in bursts with nothing of ours on them. One thread a CPU, pinned,
times a fixed scalar dependency chain (no memory traffic, about 50 us a slice on a 2 GHz core) 20000 times and
prints the fastest, mean and slowest slice and how many took over 1.5x the fastest. On a quiet bare-metal core the
mean sits near the fastest; on a VM whose host takes the vCPUs back, bursts of slow slices show (the CI-class Xeon
VM, 2026-12-01: mean 1.16-1.26x the fastest, 1-10 % of slices over 1.5x in two runs an hour apart:
``docs/cpu-runs/xeon-amx-cpu-suites/``). Why
``tracea bench`` pools its attempts' paired rounds (``emitters/stability.py``).

    python benchmarks/probe_cpu_bursts.py [--slices 20000]

Needs gcc.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

C = r"""
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
static int N;
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + 1e-9 * t.tv_nsec; }
static volatile double sink;
static void* run(void* p) {
    const long cpu = (long)p;
    cpu_set_t s; CPU_ZERO(&s); CPU_SET(cpu, &s); pthread_setaffinity_np(pthread_self(), sizeof s, &s);
    double* d = malloc(N * sizeof(double)), x = 1.0, lo = 1e9, hi = 0.0, sum = 0.0;
    for (int i = 0; i < N; ++i) { double t0 = now(); for (int j = 0; j < 20000; ++j) x = x * 1.0000001 + 1e-9; d[i] = now() - t0; }
    sink = x;
    for (int i = 0; i < N; ++i) { if (d[i] < lo) lo = d[i]; if (d[i] > hi) hi = d[i]; sum += d[i]; }
    int slow = 0;
    for (int i = 0; i < N; ++i) slow += d[i] > 1.5 * lo;
    printf("cpu %ld: fastest %.1f us, mean %.1f us (%.2fx), slowest %.1f us; %d of %d slices over 1.5x the fastest\n",
           cpu, lo * 1e6, sum / N * 1e6, sum / N / lo, hi * 1e6, slow, N);
    free(d);
    return NULL;
}
int main(int argc, char** argv) {
    N = atoi(argv[1]);
    int n = 0; pthread_t th[256]; cpu_set_t s; sched_getaffinity(0, sizeof s, &s);
    for (long c = 0; c < CPU_SETSIZE && n < 256; ++c) if (CPU_ISSET(c, &s)) pthread_create(&th[n++], NULL, run, (void*)c);
    for (int i = 0; i < n; ++i) pthread_join(th[i], NULL);
    return 0;
}
"""


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--slices", type=int, default=20000)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        src, exe = Path(tmp) / "bursts.c", Path(tmp) / "bursts"
        src.write_text(C)
        subprocess.run(["gcc", "-O2", "-pthread", str(src), "-o", str(exe)], check=True)
        print(f"{os.cpu_count()} CPUs", flush=True)
        return subprocess.run([str(exe), str(a.slices)]).returncode


if __name__ == "__main__":
    sys.exit(main())
