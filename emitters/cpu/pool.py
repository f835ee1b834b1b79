"""The C runtime every multithreaded CPU kernel carries: a thread pool that lives across calls, a
spin barrier, and reusable workspace buffers.

Why not OpenMP: libgomp's pool breaks in a child process after ``fork`` (the tuner's worker processes),
and one library-wide pool cannot be sized per kernel. This pool is created on the first call, its
workers spin briefly after a call (so back-to-back calls do not pay a wake-up), then sleep on a
condition variable (an idle kernel steals no cycles from other libraries, NumPy's OpenBLAS included),
and exit after RETIRE_SECONDS idle (a process that loaded many kernels, a tuner's, does not keep a
pool of threads for each; the next call recreates them). ``pthread_atfork`` resets the pool in a
child, which rebuilds it lazily. Calls into one kernel library are serialised by a mutex: its
buffers and pool are shared.
"""

from __future__ import annotations

SPIN_SECONDS = 50e-6  # how long an idle worker spins after a call before it sleeps
WAIT_SPIN_SECONDS = 200e-6  # how long a thread waiting inside a call (barrier, join) spins before it sleeps
RETIRE_SECONDS = 5  # how long an idle worker sleeps before it exits

POOL_C = r"""
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <time.h>
#if defined(__linux__)
#include <sys/mman.h>
#define TR_AFFINITY 1
#endif

#define TR_MAX_THREADS 256
#define TR_SPIN_SECONDS @SPIN@
#define TR_WAIT_SPIN_SECONDS @WAIT@
#define TR_RETIRE_SECONDS @RETIRE@
typedef void (*tr_task)(void* arg, int tid, int nthreads);

static struct {
    pthread_mutex_t mu;
    pthread_cond_t wake;
    atomic_uint gen;
    atomic_int sleepers;
    atomic_int remaining;
    atomic_int master_sleeps;
    pthread_cond_t done;
    tr_task fn;
    void* arg;
    int nthreads;
    int nalive;                /* workers alive (guarded by mu) */
    int busy;                  /* a call is between tr_pool_ensure and its end: nobody retires (mu) */
    char alive[TR_MAX_THREADS];
    int master_cpu;            /* where the calling thread runs; workers keep off it (see tr_keep_off) */
    unsigned seen0[TR_MAX_THREADS];
} tr_pool = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0, 0, 0, PTHREAD_COND_INITIALIZER};
static pthread_mutex_t tr_call_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t tr_once = PTHREAD_ONCE_INIT;

static double tr_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void tr_after_fork_child(void) {
    /* the workers did not survive the fork: forget them, rebuild on the next call */
    pthread_mutex_init(&tr_pool.mu, NULL);
    pthread_cond_init(&tr_pool.wake, NULL);
    pthread_cond_init(&tr_pool.done, NULL);
    pthread_mutex_init(&tr_call_mu, NULL);
    atomic_store(&tr_pool.master_sleeps, 0);
    atomic_store(&tr_pool.gen, 0u);
    atomic_store(&tr_pool.sleepers, 0);
    atomic_store(&tr_pool.remaining, 0);
    tr_pool.nalive = 0;
    tr_pool.busy = 0;
    memset(tr_pool.alive, 0, sizeof tr_pool.alive);
}

static void tr_init_once(void) { pthread_atfork(NULL, NULL, tr_after_fork_child); }

/* Waiting threads spin briefly, then sleep. Sleeping matters on a busy machine: when a thread we wait
   for was preempted (another process's spinning thread took its core), our waiting core goes idle and
   the scheduler moves the preempted thread onto it at once; a spinning waiter would hold the core. */
static int tr_spin_briefly(atomic_int* v, int want) {
    double t0 = 0.0;
    for (int spins = 1;; ++spins) {
        if (atomic_load_explicit(v, memory_order_acquire) == want) return 1;
        cpu_relax();
        if (spins % 64) continue;
        const double t = tr_now();
        if (t0 == 0.0) t0 = t;
        else if (t - t0 > TR_WAIT_SPIN_SECONDS) return 0;
    }
}

static void tr_wait_zero(atomic_int* remaining) {
    if (tr_spin_briefly(remaining, 0)) return;
    pthread_mutex_lock(&tr_pool.mu);
    atomic_store(&tr_pool.master_sleeps, 1);
    while (atomic_load(remaining) != 0) pthread_cond_wait(&tr_pool.done, &tr_pool.mu);
    atomic_store(&tr_pool.master_sleeps, 0);
    pthread_mutex_unlock(&tr_pool.mu);
}

#ifdef TR_AFFINITY
/* Workers run anywhere but on the caller's CPU. Why: with another process's thread busy on one core
   (OpenBLAS's workers spin for ~0.1 s after each call), the scheduler balances by task count and may
   stack a woken worker onto the caller's core, leaving us one core where 1.5 were there for the taking.
   The set is the caller's own affinity (cpusets and taskset are honoured), minus the caller's CPU. */
static cpu_set_t tr_base_set;
static int tr_base_ok;

static void tr_keep_off(int cpu, int* applied) {
    if (!tr_base_ok || cpu == *applied) return;
    cpu_set_t set = tr_base_set;
    if (cpu >= 0 && cpu < CPU_SETSIZE && CPU_ISSET(cpu, &set) && CPU_COUNT(&set) > 1) CPU_CLR(cpu, &set);
    pthread_setaffinity_np(pthread_self(), sizeof set, &set);
    *applied = cpu;
}
#endif

static void* tr_worker(void* p) {
    const int tid = (int)(intptr_t)p;
    unsigned seen = tr_pool.seen0[tid];
#ifdef TR_AFFINITY
    int applied = -2;
    pthread_setname_np(pthread_self(), "tracea-cpu");  /* what `top -H` shows */
#endif
    for (;;) {
        unsigned g;
        int spins = 0;
        double t0 = 0.0;
        while ((g = atomic_load_explicit(&tr_pool.gen, memory_order_acquire)) == seen) {
            cpu_relax();
            if (++spins < 64) continue;
            spins = 0;
            if (t0 == 0.0) { t0 = tr_now(); continue; }
            if (tr_now() - t0 < TR_SPIN_SECONDS) continue;
            pthread_mutex_lock(&tr_pool.mu);
            atomic_fetch_add(&tr_pool.sleepers, 1);
            struct timespec until;
            clock_gettime(CLOCK_REALTIME, &until);
            until.tv_sec += TR_RETIRE_SECONDS;
            while (atomic_load(&tr_pool.gen) == seen) {
                if (pthread_cond_timedwait(&tr_pool.wake, &tr_pool.mu, &until) == ETIMEDOUT &&
                    atomic_load(&tr_pool.gen) == seen && !tr_pool.busy) {
                    tr_pool.alive[tid] = 0;  /* idle long enough: retire (tr_pool_ensure recreates) */
                    tr_pool.nalive--;
                    atomic_fetch_sub(&tr_pool.sleepers, 1);
                    pthread_mutex_unlock(&tr_pool.mu);
                    return NULL;
                }
            }
            atomic_fetch_sub(&tr_pool.sleepers, 1);
            pthread_mutex_unlock(&tr_pool.mu);
            t0 = 0.0;
        }
        seen = g;
#ifdef TR_AFFINITY
        tr_keep_off(tr_pool.master_cpu, &applied);
#endif
        if (tid < tr_pool.nthreads) tr_pool.fn(tr_pool.arg, tid, tr_pool.nthreads);
        if (atomic_fetch_sub(&tr_pool.remaining, 1) == 1 && atomic_load(&tr_pool.master_sleeps)) {
            pthread_mutex_lock(&tr_pool.mu);
            pthread_cond_broadcast(&tr_pool.done);
            pthread_mutex_unlock(&tr_pool.mu);
        }
    }
    return NULL;
}

/* Make sure workers 1 .. n-1 are alive; returns how many threads (workers + the caller) can run.
   From here until tr_parallel returns (or tr_pool_release for a serial call) no worker retires. */
static int tr_pool_ensure(int n) {
    if (n > TR_MAX_THREADS) n = TR_MAX_THREADS;
    if (n <= 1) return 1;
    pthread_once(&tr_once, tr_init_once);
    pthread_mutex_lock(&tr_pool.mu);
    tr_pool.busy = 1;
#ifdef TR_AFFINITY
    if (!tr_base_ok) tr_base_ok = pthread_getaffinity_np(pthread_self(), sizeof tr_base_set, &tr_base_set) == 0;
#endif
    int avail = 1;
    for (int tid = 1; tid < n; ++tid, ++avail) {
        if (tr_pool.alive[tid]) continue;
        pthread_t th;
        pthread_attr_t attr;
        tr_pool.seen0[tid] = atomic_load(&tr_pool.gen);
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        const int rc = pthread_create(&th, &attr, tr_worker, (void*)(intptr_t)tid);
        pthread_attr_destroy(&attr);
        if (rc != 0) break;
        tr_pool.alive[tid] = 1;
        tr_pool.nalive++;
    }
    pthread_mutex_unlock(&tr_pool.mu);
    return avail;
}

static void tr_pool_release(void) {
    pthread_mutex_lock(&tr_pool.mu);
    tr_pool.busy = 0;
    pthread_mutex_unlock(&tr_pool.mu);
}

/* Run fn(arg, tid, n) for tid in [0, n), n = what tr_pool_ensure returned: the caller is thread 0.
   Workers alive beyond n (from a wider earlier call) wake, do nothing and count themselves done. */
static void tr_parallel(tr_task fn, void* arg, int n) {
    if (n <= 1) {
        fn(arg, 0, 1);
        if (tr_pool.busy) tr_pool_release();
        return;
    }
    pthread_mutex_lock(&tr_pool.mu);
    tr_pool.fn = fn;
    tr_pool.arg = arg;
    tr_pool.nthreads = n;
#ifdef TR_AFFINITY
    tr_pool.master_cpu = sched_getcpu();
#endif
    atomic_store(&tr_pool.remaining, tr_pool.nalive);
    atomic_fetch_add(&tr_pool.gen, 1u);
    if (atomic_load(&tr_pool.sleepers) > 0) pthread_cond_broadcast(&tr_pool.wake);
    pthread_mutex_unlock(&tr_pool.mu);
    fn(arg, 0, n);
    tr_wait_zero(&tr_pool.remaining);
    tr_pool_release();
}

/* Sense-reversing barrier for the n threads of one tr_parallel call: spin briefly, then sleep. */
typedef struct {
    atomic_int count, sense, sleepers;
    int n;
    pthread_mutex_t mu;
    pthread_cond_t cv;
} tr_barrier;

static void tr_barrier_init(tr_barrier* b, int n) {
    atomic_store(&b->count, 0);
    atomic_store(&b->sense, 0);
    atomic_store(&b->sleepers, 0);
    b->n = n;
    pthread_mutex_init(&b->mu, NULL);
    pthread_cond_init(&b->cv, NULL);
}

static void tr_barrier_destroy(tr_barrier* b) {
    pthread_mutex_destroy(&b->mu);
    pthread_cond_destroy(&b->cv);
}

static void tr_barrier_wait(tr_barrier* b, int* local_sense) {
    const int s = !*local_sense;
    *local_sense = s;
    if (atomic_fetch_add(&b->count, 1) == b->n - 1) {
        atomic_store(&b->count, 0);
        atomic_store(&b->sense, s);
        if (atomic_load(&b->sleepers) > 0) {
            pthread_mutex_lock(&b->mu);
            pthread_cond_broadcast(&b->cv);
            pthread_mutex_unlock(&b->mu);
        }
        return;
    }
    if (tr_spin_briefly(&b->sense, s)) return;
    pthread_mutex_lock(&b->mu);
    atomic_fetch_add(&b->sleepers, 1);
    while (atomic_load(&b->sense) != s) pthread_cond_wait(&b->cv, &b->mu);
    atomic_fetch_sub(&b->sleepers, 1);
    pthread_mutex_unlock(&b->mu);
}

/* Grow-only, 64-byte aligned buffers kept between calls (no allocation once warm). */
typedef struct { void* p; size_t cap; } tr_buf;

static void* tr_reserve(tr_buf* b, size_t bytes) {
    if (bytes == 0) bytes = 64;
    if (b->cap >= bytes) return b->p;
    free(b->p);
    b->p = NULL;
    b->cap = 0;
    /* large buffers on 2 MiB boundaries, and asked to be huge pages: the packed panels are streamed
       by the micro-kernel, and 4 KiB pages would cost a TLB miss every 4 KiB */
    const size_t align = bytes >= ((size_t)1 << 20) ? ((size_t)1 << 21) : 64;
    const size_t size = (bytes + align - 1) & ~(align - 1);
    if (posix_memalign(&b->p, align, size) != 0) { b->p = NULL; return NULL; }
#ifdef MADV_HUGEPAGE
    if (align > 64) madvise(b->p, size, MADV_HUGEPAGE);
#endif
    b->cap = size;
    return b->p;
}

static inline long tr_min(long a, long b) { return a < b ? a : b; }
static inline long tr_cdiv(long a, long b) { return (a + b - 1) / b; }
/* split n into blocks of at most cap, all of about the same size, rounded up to a multiple of unit */
static inline long tr_balanced(long n, long cap, long unit) {
    const long blocks = tr_cdiv(n, cap);
    long b = tr_cdiv(tr_cdiv(n, blocks), unit) * unit;
    return b > cap ? cap : b;
}
"""


def pool_c() -> str:
    return (POOL_C.replace("@SPIN@", repr(SPIN_SECONDS)).replace("@WAIT@", repr(WAIT_SPIN_SECONDS))
            .replace("@RETIRE@", str(RETIRE_SECONDS)))
