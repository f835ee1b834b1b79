/* CPU ceilings for `tracea doctor --measure`: FMA throughput and a STREAM-style triad.
 *
 * Built by the doctor with the host compiler, -O3, -ffp-contract=fast and the ISA flags the CPU
 * emitter uses, with -DVBYTES set to its vector width in bytes. One pthread per logical core.
 *   fma:   NACC independent vector accumulators per thread (enough to cover FMA latency x pipes),
 *          acc = acc * x + y; FLOPs = iterations x NACC x lanes x 2.
 *   triad: a[i] = b[i] + s * c[i] over arrays far larger than the last-level cache;
 *          bytes = 3 x 4 x N per pass (two reads and a write, the STREAM convention).
 * Prints one JSON line. Inputs come from argv so the compiler cannot fold the loops away.
 */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#ifndef VBYTES
#define VBYTES 16
#endif
#ifndef NACC
#define NACC 12 /* independent accumulators: >= FMA pipes x latency, <= registers (16 on AVX2) */
#endif
#define LANES (VBYTES / 4)

typedef float vf __attribute__((vector_size(VBYTES)));

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

typedef struct {
    long iters;
    float x, y;
    float *a, *b, *c;
    long n0, n1;
    float s;
    double sink;
    double t0, t1; /* each worker times itself: the main thread may be descheduled */
    pthread_barrier_t *barrier;
} job_t;

static void *fma_worker(void *arg) {
    job_t *j = (job_t *)arg;
    vf acc[NACC];
    vf x, y;
    for (int l = 0; l < LANES; ++l) { x[l] = j->x; y[l] = j->y; }
    for (int k = 0; k < NACC; ++k)
        for (int l = 0; l < LANES; ++l) acc[k][l] = (float)(k + l) * 1e-3f;
    pthread_barrier_wait(j->barrier);
    j->t0 = now_s();
    for (long i = 0; i < j->iters; ++i) {
#pragma GCC unroll 16
        for (int k = 0; k < NACC; ++k) acc[k] = acc[k] * x + y;
    }
    double s = 0;
    for (int k = 0; k < NACC; ++k)
        for (int l = 0; l < LANES; ++l) s += acc[k][l];
    j->t1 = now_s();
    j->sink = s;
    return NULL;
}

/* each thread first touches its own range, so pages land on its NUMA node (as STREAM does) */
static void *init_worker(void *arg) {
    job_t *j = (job_t *)arg;
    pthread_barrier_wait(j->barrier);
    j->t0 = now_s();
    for (long i = j->n0; i < j->n1; ++i) {
        j->a[i] = 0.5f;
        j->b[i] = (float)(i % 1021) * 0.25f + 1.0f;
        j->c[i] = (float)(i % 997) * 0.5f + 2.0f;
    }
    j->t1 = now_s();
    return NULL;
}

static void *triad_worker(void *arg) {
    job_t *j = (job_t *)arg;
    pthread_barrier_wait(j->barrier);
    j->t0 = now_s();
    for (long i = j->n0; i < j->n1; ++i) j->a[i] = j->b[i] + j->s * j->c[i];
    j->t1 = now_s();
    return NULL;
}

static double run(int threads, job_t *jobs, void *(*fn)(void *)) {
    pthread_t tid[1024];
    pthread_barrier_t barrier;
    pthread_barrier_init(&barrier, NULL, (unsigned)threads + 1);
    for (int t = 0; t < threads; ++t) {
        jobs[t].barrier = &barrier;
        pthread_create(&tid[t], NULL, fn, &jobs[t]);
    }
    pthread_barrier_wait(&barrier);
    for (int t = 0; t < threads; ++t) pthread_join(tid[t], NULL);
    pthread_barrier_destroy(&barrier);
    /* from the first worker's start to the last worker's end */
    double t0 = jobs[0].t0, t1 = jobs[0].t1;
    for (int t = 1; t < threads; ++t) {
        if (jobs[t].t0 < t0) t0 = jobs[t].t0;
        if (jobs[t].t1 > t1) t1 = jobs[t].t1;
    }
    return t1 - t0;
}

int main(int argc, char **argv) {
    int threads = argc > 1 ? atoi(argv[1]) : 1;
    long fma_iters = argc > 2 ? atol(argv[2]) : 100000000L;
    long n = argc > 3 ? atol(argv[3]) : 32L * 1024 * 1024;
    float x = argc > 4 ? (float)atof(argv[4]) : 0.999999f;
    if (threads < 1 || threads > 1024) threads = 1;
    job_t *jobs = calloc((size_t)threads, sizeof(job_t));

    double best_fma = 1e30, sink = 0;
    for (int rep = 0; rep < 3; ++rep) {
        for (int t = 0; t < threads; ++t) { jobs[t].iters = fma_iters; jobs[t].x = x; jobs[t].y = 1e-6f; }
        double dt = run(threads, jobs, fma_worker);
        if (dt < best_fma) best_fma = dt;
        for (int t = 0; t < threads; ++t) sink += jobs[t].sink;
    }
    double fma_flops = (double)threads * fma_iters * NACC * LANES * 2.0 / best_fma;

    float *a = aligned_alloc(64, (size_t)n * 4), *b = aligned_alloc(64, (size_t)n * 4), *c = aligned_alloc(64, (size_t)n * 4);
    if (!a || !b || !c) { printf("{\"error\": \"out of memory for %ld floats\"}\n", n); return 1; }
    for (int t = 0; t < threads; ++t) {
        jobs[t].a = a; jobs[t].b = b; jobs[t].c = c; jobs[t].s = x;
        jobs[t].n0 = n * t / threads; jobs[t].n1 = n * (t + 1) / threads;
    }
    run(threads, jobs, init_worker); /* never-zero values, first touched by their own thread */
    double best_triad = 1e30;
    for (int rep = 0; rep < 5; ++rep) {
        for (int t = 0; t < threads; ++t) {
            jobs[t].a = a; jobs[t].b = b; jobs[t].c = c; jobs[t].s = x;
            jobs[t].n0 = n * t / threads; jobs[t].n1 = n * (t + 1) / threads;
        }
        double dt = run(threads, jobs, triad_worker);
        if (dt < best_triad) best_triad = dt;
    }
    /* verify the triad on a sample: a must equal b + s*c */
    long bad = 0;
    for (long i = 0; i < n; i += 4099) if (a[i] != b[i] + x * c[i]) ++bad;
    double triad_bps = 3.0 * 4.0 * (double)n / best_triad;
    printf("{\"threads\": %d, \"vector_bytes\": %d, \"accumulators\": %d, \"fma_flops\": %.6e, "
           "\"fma_seconds\": %.6f, \"triad_bytes_per_s\": %.6e, \"triad_seconds\": %.6f, "
           "\"triad_floats\": %ld, \"triad_mismatches\": %ld, \"sink\": %g}\n",
           threads, VBYTES, NACC, fma_flops, best_fma, triad_bps, best_triad, n, bad, sink);
    free(a); free(b); free(c); free(jobs);
    return bad ? 1 : 0;
}
