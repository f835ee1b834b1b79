"""The C++17 model of the ``<metal_stdlib>`` subset Tracea's Metal kernels use (docs/metal.md lists it), as
``HEADER``: simulate.py compiles a kernel's own MSL source against it with g++ and runs it on the CPU.

What is modelled, and on whose word (Linux; macOS builds are untested):
- Address spaces vanish (``device``, ``thread``; ``constant`` is ``const``); a ``threadgroup T name[N];``
  array is ``static thread_local``: one OS thread runs one threadgroup at a time, its threads as fibers
  (a register-only switch on x86-64, ucontext elsewhere; 124 KiB stacks), so they share the array. Any
  other ``threadgroup`` use fails to compile or is refused by simulate.py. Threadgroup memory starts as
  all-ones bytes (NaN in float and half, -1 in integers) in every threadgroup.
- ``half`` is ``_Float16``; ``vec<T, N>`` (float2..., half4, uint3, ulong2): .x .y .z .w, elementwise
  arithmetic, explicit conversion; ``as_type`` is a bit copy; math on a half is done in float, rounded once;
  ``max``/``min`` of floats are fmax/fmin, a NaN giving the other operand (MSL 6.5, Table 6.4); ``fast::``
  and ``precise::`` are the same (precise) functions; ``mem_flags`` combine with ``|``.
- Barriers (``threadgroup_barrier``) and SIMD-group functions (simd_sum/max/min, simd_shuffle, _xor, _down,
  _up, simd_broadcast, simdgroup_barrier and every simdgroup_matrix load, store and product) are
  rendezvous: a fiber waits there until every thread that must come has come to the same call (same source
  line: a call site, not a loop iteration); the last lane of a simdgroup computes the result for all 32.
  MSL 6.9.1 lets a thread that has ended stop counting at a barrier on Apple silicon; the subset does
  not (barriers in threadgroup-uniform control flow only), so here a thread that finishes while others
  wait, lanes at different calls, or threads stuck with none runnable are a ``SimulationError``. After every
  barrier and collective the waiting fibers resume in a seeded pseudo-random order.
- simd_shuffle_down/up leave a lane whose source is out of range with its own value (MSL 6.9.2); lane, mask
  and delta are below 32 and but for simd_shuffle uniform. simd_sum adds in lane order, in the operand's type.
- ``simdgroup_matrix<T, 8, 8>`` (MSL 6.7): each lane holds 2 elements in MLX's layout (Apple documents none;
  mlx/backend/metal/kernels/steel/gemm/mma.h). ``simdgroup_load``/``_store`` put element (r, c) at
  ``(origin.y + r) * elements_per_row + origin.x + c`` (origin.x the column, as metal-flash-attention's
  simdgroup_matrix_storage ``apply_offset``), transposed at ``c * elements_per_row + r``; a transposed access
  with a non-zero origin is refused (which matrix that origin indexes is undocumented). A product forms each
  element in fp32 (c, then the 8 products in k order) and rounds it to the destination's type once.
"""

HEADER = r"""// A model of the subset of <metal_stdlib> Tracea's Metal kernels use (emitters/metal/compat.py).
#ifndef TRACEA_METAL_SIM_HEADER
#define TRACEA_METAL_SIM_HEADER
#include <stdint.h>
#include <string.h>
#include <stdlib.h>
#include <stdio.h>
#include <math.h>
#if defined(__APPLE__) && !defined(_XOPEN_SOURCE)
#define _XOPEN_SOURCE 700  // macOS declares the ucontext calls only then
#endif
#include <ucontext.h>
#include <sys/mman.h>
#include <pthread.h>
#include <signal.h>
#if defined(__linux__)
#include <link.h>
#endif
#include <type_traits>
#include <stdarg.h>
#include <stddef.h>
#define METAL_SIM_COMMA ,
typedef _Float16 half;
typedef unsigned char uchar; typedef unsigned short ushort; typedef unsigned int uint; typedef unsigned long ulong;
namespace metal {
// ---- vectors: vec<T, N>, .x .y .z .w, elementwise arithmetic, explicit conversion between element types
template <class T, int N> struct vec;
#define METAL_SIM_VEC_COMMON(N)                                                  \
  typedef T scalar;                                                              \
  vec() = default;                                                               \
  T& operator[](int i) { return (&x)[i]; }                                       \
  const T& operator[](int i) const { return (&x)[i]; }                           \
  template <class U> explicit vec(const vec<U, N>& o) { for (int i = 0; i < N; ++i) (*this)[i] = T(o[i]); }
template <class T> struct vec<T, 2> {
  T x, y; METAL_SIM_VEC_COMMON(2)
  vec(T s) : x(s), y(s) {}
  vec(T a, T b) : x(a), y(b) {} };
template <class T> struct vec<T, 3> {
  T x, y, z; METAL_SIM_VEC_COMMON(3)
  vec(T s) : x(s), y(s), z(s) {}
  vec(T a, T b, T c) : x(a), y(b), z(c) {} };
template <class T> struct vec<T, 4> {
  T x, y, z, w; METAL_SIM_VEC_COMMON(4)
  vec(T s) : x(s), y(s), z(s), w(s) {}
  vec(T a, T b, T c, T d) : x(a), y(b), z(c), w(d) {}
  vec(vec<T, 2> a, vec<T, 2> b) : x(a.x), y(a.y), z(b.x), w(b.y) {} };
#define METAL_SIM_VEC_OP(OP)                                                                          \
  template <class T, int N> vec<T, N> operator OP(const vec<T, N>& a, const vec<T, N>& b) {          \
    vec<T, N> r; for (int i = 0; i < N; ++i) r[i] = a[i] OP b[i]; return r; }                        \
  template <class T, int N> vec<T, N> operator OP(const vec<T, N>& a, typename vec<T, N>::scalar s) { \
    vec<T, N> r; for (int i = 0; i < N; ++i) r[i] = a[i] OP s; return r; }                           \
  template <class T, int N> vec<T, N> operator OP(typename vec<T, N>::scalar s, const vec<T, N>& b) { \
    vec<T, N> r; for (int i = 0; i < N; ++i) r[i] = s OP b[i]; return r; }                           \
  template <class T, int N> vec<T, N>& operator OP##=(vec<T, N>& a, const vec<T, N>& b) {            \
    for (int i = 0; i < N; ++i) a[i] = a[i] OP b[i]; return a; }                                     \
  template <class T, int N> vec<T, N>& operator OP##=(vec<T, N>& a, typename vec<T, N>::scalar s) {   \
    for (int i = 0; i < N; ++i) a[i] = a[i] OP s; return a; }
METAL_SIM_VEC_OP(+) METAL_SIM_VEC_OP(-) METAL_SIM_VEC_OP(*) METAL_SIM_VEC_OP(/)
template <class T, int N> vec<T, N> operator-(const vec<T, N>& a) {
  vec<T, N> r; for (int i = 0; i < N; ++i) r[i] = -a[i]; return r; }
}  // namespace metal
#define METAL_SIM_VEC_TYPES(T)                                                                     \
  typedef metal::vec<T, 2> T##2; typedef metal::vec<T, 3> T##3; typedef metal::vec<T, 4> T##4;
METAL_SIM_VEC_TYPES(float) METAL_SIM_VEC_TYPES(half) METAL_SIM_VEC_TYPES(int) METAL_SIM_VEC_TYPES(uint)
METAL_SIM_VEC_TYPES(short) METAL_SIM_VEC_TYPES(ushort) METAL_SIM_VEC_TYPES(ulong) METAL_SIM_VEC_TYPES(uchar)
namespace metal {
// ---- bit casts and math. Float functions are templates: for a float the C library's own overload
// (the same function) is chosen where <math.h> declares one; half computes in float and rounds once.
template <class T, class U> T as_type(const U& u) {
  static_assert(sizeof(T) == sizeof(U), "as_type: the two types differ in size");
  T t; memcpy(&t, &u, sizeof t); return t; }
template <class T> struct is_real : std::integral_constant<bool,
    std::is_same<T, float>::value || std::is_same<T, half>::value> {};
#define METAL_SIM_UNARY(NAME, EXPR)                                                                  \
  template <class T> typename std::enable_if<is_real<T>::value, T>::type NAME(T v) {              \
    float x = float(v); return T(EXPR); }                                                          \
  template <class T, int N> vec<T, N> NAME(const vec<T, N>& v) {                                   \
    vec<T, N> r; for (int i = 0; i < N; ++i) r[i] = NAME(v[i]); return r; }
#define METAL_SIM_MATH                                                                             \
  METAL_SIM_UNARY(exp, ::expf(x)) METAL_SIM_UNARY(exp2, ::exp2f(x)) METAL_SIM_UNARY(log, ::logf(x)) \
  METAL_SIM_UNARY(log2, ::log2f(x)) METAL_SIM_UNARY(fabs, ::fabsf(x)) METAL_SIM_UNARY(abs, ::fabsf(x)) \
  METAL_SIM_UNARY(sqrt, ::sqrtf(x)) METAL_SIM_UNARY(rsqrt, 1.0f / ::sqrtf(x))                       \
  METAL_SIM_UNARY(tanh, ::tanhf(x)) METAL_SIM_UNARY(floor, ::floorf(x)) METAL_SIM_UNARY(ceil, ::ceilf(x)) \
  METAL_SIM_UNARY(sin, ::sinf(x)) METAL_SIM_UNARY(cos, ::cosf(x))
METAL_SIM_MATH
namespace fast { METAL_SIM_MATH }
namespace precise { METAL_SIM_MATH }
// max/min of floats are fmax/fmin (MSL spec 6.5, Table 6.4: a NaN argument gives the other argument)
template <class T> typename std::enable_if<is_real<T>::value, T>::type max(T a, T b) { return T(::fmaxf(float(a), float(b))); }
template <class T> typename std::enable_if<is_real<T>::value, T>::type min(T a, T b) { return T(::fminf(float(a), float(b))); }
template <class T> typename std::enable_if<std::is_integral<T>::value, T>::type max(T a, T b) { return a < b ? b : a; }
template <class T> typename std::enable_if<std::is_integral<T>::value, T>::type min(T a, T b) { return b < a ? b : a; }
template <class T, int N> vec<T, N> max(const vec<T, N>& a, const vec<T, N>& b) {
  vec<T, N> r; for (int i = 0; i < N; ++i) r[i] = max(a[i], b[i]); return r; }
template <class T, int N> vec<T, N> min(const vec<T, N>& a, const vec<T, N>& b) {
  vec<T, N> r; for (int i = 0; i < N; ++i) r[i] = min(a[i], b[i]); return r; }
template <class T> T clamp(T x, T lo, T hi) { return min(max(x, lo), hi); }
template <class T> typename std::enable_if<is_real<T>::value, T>::type fma(T a, T b, T c) {
  return T(::fmaf(float(a), float(b), float(c))); }
template <class T> T select(T a, T b, bool c) { return c ? b : a; }
template <class T> typename std::enable_if<is_real<T>::value, bool>::type isnan(T x) { return __builtin_isnan(float(x)); }
template <class T> typename std::enable_if<is_real<T>::value, bool>::type isinf(T x) { return __builtin_isinf(float(x)); }
template <class T> typename std::enable_if<is_real<T>::value, bool>::type isfinite(T x) { return __builtin_isfinite(float(x)); }
}  // namespace metal
#define M_PI_F 3.14159265358979323846f
#define M_LOG2E_F 1.44269504088896340736f
#define M_LN2_F 0.693147180559945309417f
#define M_SQRT2_F 1.41421356237309504880f
#define MAXHALF half(65504.0f)
// ---- the execution model: one threadgroup's threads are fibers of one OS thread --------------------
namespace metal_sim {
using metal::vec;
// A fiber's saved context. On Linux x86-64 a switch saves only the callee-saved registers and the stack
// pointer (a few ns); elsewhere it is ucontext's swapcontext (a system call for the signal mask each time).
#if defined(__linux__) && defined(__x86_64__) && !defined(METAL_SIM_UCONTEXT)
extern "C" __attribute__((visibility("hidden"))) void metal_sim_switch(void** save_sp, void* sp);
asm(".text\n.globl metal_sim_switch\n.hidden metal_sim_switch\n.type metal_sim_switch,@function\nmetal_sim_switch:\n"
    "pushq %rbp\npushq %rbx\npushq %r12\npushq %r13\npushq %r14\npushq %r15\nmovq %rsp, (%rdi)\nmovq %rsi, %rsp\n"
    "popq %r15\npopq %r14\npopq %r13\npopq %r12\npopq %rbx\npopq %rbp\nret\n.size metal_sim_switch, .-metal_sim_switch\n");
struct Context { void* sp; };
static inline void switch_to(Context* from, Context* to) { metal_sim_switch(&from->sp, to->sp); }
static void start_context(Context* c, char* stack, size_t bytes, void (*entry)()) {
  // six zeroed registers, then `entry` as the return address at a 16-byte boundary: entry starts as if called
  void** frame = (void**)(((uintptr_t(stack) + bytes) & ~uintptr_t(15)) - 16) - 6;
  memset(frame, 0, 8 * sizeof(void*));
  frame[6] = (void*)entry;
  c->sp = frame; }
#else
struct Context { ucontext_t uc; };
static inline void switch_to(Context* from, Context* to) { swapcontext(&from->uc, &to->uc); }
static void start_context(Context* c, char* stack, size_t bytes, void (*entry)()) {
  getcontext(&c->uc); c->uc.uc_stack.ss_sp = stack; c->uc.uc_stack.ss_size = bytes; c->uc.uc_link = nullptr;
  makecontext(&c->uc, entry, 0); }
#endif
enum { RUNNABLE, AT_BARRIER, AT_SIMD, FINISHED };
// A SIMD-group function, run by the last of the 32 lanes to arrive: reads every lane's input, writes every
// lane's output (pointers into the waiting fibers' stacks); returns why the call is invalid, or null.
typedef const char* (*SimdOp)(void* const* in, void* const* out);
struct Fiber { Context ctx; int state, line; const char* what; void* in; void* out; };
struct Builtins { vec<uint, 3> tgid, tpos; uint tidx, sgid, lane; };
typedef void (*Body)(void* const* args, const Builtins& b);
struct Group {
  int n; Fiber* f; char* stacks; size_t stack_bytes;
  Context sched; int cur, at_barrier, barrier_line, nready, in_fiber;
  int* ready; int* arrived; int* first;
  uint64_t rng; int failed; char err[400];
  Body body; void* const* args; vec<uint, 3> tgid; uint bx, by; };
static thread_local Group* current;
static uint64_t mix(uint64_t x) {  // splitmix64
  x += 0x9E3779B97F4A7C15ull; x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull; return x ^ (x >> 31); }
static void yield() { Group* g = current; switch_to(&g->f[g->cur].ctx, &g->sched); }
__attribute__((format(printf, 1, 2), noinline, cold)) static void fail(const char* fmt, ...) {
  Group* g = current;
  if (!g->failed) { va_list ap; va_start(ap, fmt); vsnprintf(g->err, sizeof g->err, fmt, ap); va_end(ap); }
  g->failed = 1;
  switch_to(&g->f[g->cur].ctx, &g->sched);  // never resumed: the threadgroup is abandoned
}
static void make_ready(Group* g, int i) { g->f[i].state = RUNNABLE; g->ready[g->nready++] = i; }
static uint lane_id() { return uint(current->cur) & 31u; }
__attribute__((noinline)) static void barrier(int line) {
  Group* g = current;
  if (g->at_barrier == 0) g->barrier_line = line;
  else if (g->barrier_line != line)
    fail("threads reached different threadgroup_barrier calls (lines %d and %d): a barrier in divergent "
         "control flow", g->barrier_line, line);
  g->f[g->cur].state = AT_BARRIER; g->f[g->cur].line = line; g->at_barrier++;
  yield(); }
// A rendezvous of the 32 lanes of the caller's simdgroup at one SIMD-group function (same function, same
// line): each deposits pointers to its input and output, the 32nd runs `op` for all, all continue.
__attribute__((noinline)) static void simd_meet(const char* what, int line, void* in, void* out, SimdOp op) {
  Group* g = current; int id = g->cur, s = id >> 5;
  Fiber& me = g->f[id];
  if (g->arrived[s] == 0) g->first[s] = id;
  else {
    Fiber& o = g->f[g->first[s]];
    if (o.what != what || o.line != line)
      fail("lanes of simdgroup %d reached different SIMD-group functions (%s at line %d, %s at line %d): "
           "a SIMD-group function in divergent control flow", s, o.what, o.line, what, line); }
  me.state = AT_SIMD; me.what = what; me.line = line; me.in = in; me.out = out;
  if (++g->arrived[s] == 32) {
    g->arrived[s] = 0;
    void* ins[32]; void* outs[32];
    for (int l = 0; l < 32; ++l) { ins[l] = g->f[s * 32 + l].in; outs[l] = g->f[s * 32 + l].out; }
    if (const char* why = op(ins, outs)) fail("%s at line %d: %s", what, line, why);
    for (int l = 0; l < 32; ++l) make_ready(g, s * 32 + l); }
  yield(); }
static void fiber_main() {
  Group* g = current; int i = g->cur; Builtins b;
  b.tgid = g->tgid; b.tidx = uint(i); b.sgid = uint(i) >> 5; b.lane = uint(i) & 31u;
  b.tpos = vec<uint, 3>(uint(i) % g->bx, (uint(i) / g->bx) % g->by, uint(i) / (g->bx * g->by));
  g->body(g->args, b);
  g = current; g->f[g->cur].state = FINISHED; switch_to(&g->f[g->cur].ctx, &g->sched); }
static void describe_stall(Group* g) {
  int fin = -1, bar = -1, sim = -1, n_bar = 0;
  for (int i = 0; i < g->n; ++i) {
    int st = g->f[i].state;
    if (st == FINISHED && fin < 0) fin = i;
    if (st == AT_BARRIER) { n_bar++; if (bar < 0) bar = i; }
    if (st == AT_SIMD && sim < 0) sim = i; }
  if (sim >= 0) {
    int s = sim >> 5; int other = fin >= 0 ? fin : bar;
    snprintf(g->err, sizeof g->err, "%s at line %d reached by %d of the 32 lanes of simdgroup %d (thread %d %s): "
             "a SIMD-group function in divergent control flow", g->f[sim].what, g->f[sim].line, g->arrived[s], s,
             other, other == fin ? "finished" : "waits at a threadgroup_barrier");
  } else if (bar >= 0 && fin >= 0) {
    snprintf(g->err, sizeof g->err, "thread %d finished while %d threads wait at the threadgroup_barrier of line "
             "%d: a barrier in divergent control flow", fin, n_bar, g->f[bar].line);
  } else {
    snprintf(g->err, sizeof g->err, "the threadgroup's threads stopped with none runnable (deadlock)"); }
  g->failed = 1; }
// Threadgroup memory (the kernel's `static thread_local` arrays, this module's TLS block) starts as all-ones
// bytes, a NaN in every float and half: a kernel reading threadgroup memory it never wrote sees NaN or -1.
#if defined(__linux__)
struct TlsQuery { void* inside; void* block; size_t bytes; };
static int tls_block(struct dl_phdr_info* info, size_t size, void* data) {
  TlsQuery* q = (TlsQuery*)data; bool ours = false; size_t tls = 0;
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr)& p = info->dlpi_phdr[i];
    uintptr_t lo = info->dlpi_addr + p.p_vaddr, a = (uintptr_t)q->inside;
    if (p.p_type == PT_LOAD && a >= lo && a < lo + p.p_memsz) ours = true;
    if (p.p_type == PT_TLS) tls = p.p_memsz; }
  if (!ours) return 0;
  if (size >= offsetof(struct dl_phdr_info, dlpi_tls_data) + sizeof(void*)) { q->block = info->dlpi_tls_data; q->bytes = tls; }
  return 1; }
static void poison_threadgroup_memory() {
  current = nullptr;  // touches this module's TLS so that the block exists in this thread
  TlsQuery q = {(void*)&tls_block, nullptr, 0};
  dl_iterate_phdr(tls_block, &q);
  if (q.block) memset(q.block, 0xFF, q.bytes); }
#else
static void poison_threadgroup_memory() {}  // elsewhere threadgroup memory keeps what the last threadgroup left
#endif
static const size_t STACK_BYTES = 128 * 1024;
static bool setup_group(Group* g, int n) {
  memset(g, 0, sizeof *g);
  g->n = n; g->stack_bytes = STACK_BYTES;
  g->f = (Fiber*)calloc(n, sizeof(Fiber)); g->ready = (int*)calloc(n, sizeof(int));
  g->arrived = (int*)calloc(n / 32, sizeof(int)); g->first = (int*)calloc(n / 32, sizeof(int));
  void* m = mmap(nullptr, n * STACK_BYTES, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (m == MAP_FAILED || !g->f || !g->ready || !g->arrived || !g->first) return false;
  g->stacks = (char*)m;
  for (int i = 0; i < n; ++i) mprotect(g->stacks + i * STACK_BYTES, 4096, PROT_NONE);  // a guard page each
  return true; }
static void free_group(Group* g) {
  if (g->stacks) munmap(g->stacks, g->n * g->stack_bytes);
  free(g->f); free(g->ready); free(g->arrived); free(g->first); }
// Runs one threadgroup to its end; false (with g->err) on a divergence or deadlock.
static bool run_group(Group* g, uint64_t seed) {
  poison_threadgroup_memory();
  current = g;
  g->rng = mix(seed); g->failed = 0; g->at_barrier = 0; g->nready = 0;
  for (int s = 0; s < g->n / 32; ++s) g->arrived[s] = 0;
  for (int i = 0; i < g->n; ++i) {
    Fiber& f = g->f[i];
    start_context(&f.ctx, g->stacks + i * g->stack_bytes + 4096, g->stack_bytes - 4096, fiber_main);
    make_ready(g, i); }
  for (;;) {
    while (g->nready > 0) {  // resume the ready fibers in a seeded random order
      g->rng = mix(g->rng);
      int k = int(g->rng % uint64_t(g->nready)), i = g->ready[k];
      g->ready[k] = g->ready[--g->nready];
      g->cur = i;
      g->in_fiber = 1; switch_to(&g->sched, &g->f[i].ctx); g->in_fiber = 0;
      if (g->failed) return false; }
    int fin = 0;
    for (int i = 0; i < g->n; ++i) fin += g->f[i].state == FINISHED;
    if (fin == g->n) return true;
    if (g->at_barrier == g->n) {  // every thread waits at the same barrier: release them all
      g->at_barrier = 0;
      for (int i = 0; i < g->n; ++i) make_ready(g, i);
      continue; }
    describe_stall(g);
    return false; } }
struct Launch {
  Body body; void* const* args; long grid[3], block[3]; uint64_t seed;
  long next; int failed; pthread_mutex_t lock; char err[400]; };
__attribute__((format(printf, 2, 3))) static void report(Launch* L, const char* fmt, ...) {  // the first failure wins
  pthread_mutex_lock(&L->lock);
  if (!L->failed) { va_list ap; va_start(ap, fmt); vsnprintf(L->err, sizeof L->err, fmt, ap); va_end(ap); }
  __atomic_store_n(&L->failed, 1, __ATOMIC_RELAXED); pthread_mutex_unlock(&L->lock); }
static void* worker(void* p) {
  Launch* L = (Launch*)p;
  int n = int(L->block[0] * L->block[1] * L->block[2]);
  long total = L->grid[0] * L->grid[1] * L->grid[2];
  Group* g = (Group*)malloc(sizeof(Group));
  stack_t alt, old_alt;  // a signal stack: the harness's fault handler runs there, even for a fiber stack overflow
  alt.ss_sp = malloc(1 << 16); alt.ss_size = 1 << 16; alt.ss_flags = 0;
  if (alt.ss_sp) sigaltstack(&alt, &old_alt);
  if (!g || !setup_group(g, n)) {
    report(L, "cannot allocate the stacks of %d fibers", n);
    if (g) { free_group(g); free(g); }
    if (alt.ss_sp) { sigaltstack(&old_alt, nullptr); free(alt.ss_sp); }
    return nullptr; }
  for (;;) {
    long t = __atomic_fetch_add(&L->next, 1, __ATOMIC_RELAXED);
    if (t >= total || __atomic_load_n(&L->failed, __ATOMIC_RELAXED)) break;
    g->body = L->body; g->args = L->args; g->bx = uint(L->block[0]); g->by = uint(L->block[1]);
    g->tgid = vec<uint, 3>(uint(t % L->grid[0]), uint(t / L->grid[0] % L->grid[1]), uint(t / (L->grid[0] * L->grid[1])));
    if (!run_group(g, L->seed * 0x100000001B3ull + uint64_t(t))) {
      report(L, "threadgroup (%u, %u, %u): %s", g->tgid.x, g->tgid.y, g->tgid.z, g->err);
      break; } }
  current = nullptr;
  free_group(g); free(g);
  if (alt.ss_sp) { sigaltstack(&old_alt, nullptr); free(alt.ss_sp); }
  return nullptr; }
// Runs the whole grid on `workers` OS threads; 0, or 1 with the reason in err.
static int run(Body body, void* const* args, const long* geom, int workers, uint64_t seed, char* err, int errlen) {
  Launch L; memset(&L, 0, sizeof L);
  L.body = body; L.args = args; L.seed = seed; pthread_mutex_init(&L.lock, nullptr);
  for (int i = 0; i < 3; ++i) { L.grid[i] = geom[i]; L.block[i] = geom[3 + i]; }
  if (workers < 1) workers = 1;
  pthread_t th[256]; int started = 0;
  if (workers > 256) workers = 256;
  for (int i = 1; i < workers; ++i) if (pthread_create(&th[started], nullptr, worker, &L) == 0) started++;
  worker(&L);
  for (int i = 0; i < started; ++i) pthread_join(th[i], nullptr);
  if (L.failed) snprintf(err, errlen, "%s", L.err);
  return L.failed; }
// ---- SIMD-group functions: a lane's value and its argument (lane, mask or delta) meet the other lanes'
template <class T> struct Arg { T v; uint k; };
template <class T> static const char* op_sum(void* const* in, void* const* out) {
  T acc = ((Arg<T>*)in[0])->v;  // lane order, in T's own arithmetic
  for (int l = 1; l < 32; ++l) acc = T(acc + ((Arg<T>*)in[l])->v);
  for (int l = 0; l < 32; ++l) *(T*)out[l] = acc;
  return nullptr; }
template <class T, bool MAX> static const char* op_extreme(void* const* in, void* const* out) {
  T acc = ((Arg<T>*)in[0])->v;
  for (int l = 1; l < 32; ++l) acc = MAX ? metal::max(acc, ((Arg<T>*)in[l])->v) : metal::min(acc, ((Arg<T>*)in[l])->v);
  for (int l = 0; l < 32; ++l) *(T*)out[l] = acc;
  return nullptr; }
enum { SHUFFLE, XOR, DOWN, UP, BROADCAST };
template <class T, int KIND> static const char* op_permute(void* const* in, void* const* out) {
  uint k0 = ((Arg<T>*)in[0])->k;
  for (int l = 0; l < 32; ++l) {
    uint k = ((Arg<T>*)in[l])->k;
    if (KIND != SHUFFLE && k != k0) return "its lane, mask or delta argument differs between lanes (it must be uniform)";
    if (k >= 32) return "its lane, mask or delta argument is not below 32"; }
  T tmp[32];
  for (int l = 0; l < 32; ++l) {
    uint k = ((Arg<T>*)in[l])->k, src = uint(l);
    if (KIND == SHUFFLE || KIND == BROADCAST) src = k;
    if (KIND == XOR) src = uint(l) ^ k;
    if (KIND == DOWN && l + k < 32) src = l + k;  // lanes past the end keep their own value (MSL 6.9.2)
    if (KIND == UP && uint(l) >= k) src = l - k;
    tmp[l] = ((Arg<T>*)in[src])->v; }
  for (int l = 0; l < 32; ++l) *(T*)out[l] = tmp[l];
  return nullptr; }
static const char* op_none(void* const*, void* const*) { return nullptr; }
template <class T> static T collective(const char* what, int line, T v, uint k, SimdOp op) {
  Arg<T> a = {v, k}; T r;
  simd_meet(what, line, &a, &r, op);
  return r; }
}  // namespace metal_sim
namespace metal {
enum class mem_flags { mem_none = 0, mem_device = 1, mem_threadgroup = 2, mem_texture = 4 };
inline mem_flags operator|(mem_flags a, mem_flags b) { return mem_flags(int(a) | int(b)); }
inline void threadgroup_barrier(mem_flags, int line = __builtin_LINE()) { metal_sim::barrier(line); }
inline void simdgroup_barrier(mem_flags, int line = __builtin_LINE()) {
  int none = 0; metal_sim::simd_meet("simdgroup_barrier", line, &none, &none, metal_sim::op_none); }
#define METAL_SIM_COLLECTIVE(NAME, OP, KARG, KVAL)                                                  \
  template <class T> T NAME(T v KARG, int line = __builtin_LINE()) {                              \
    return metal_sim::collective<T>(#NAME, line, v, KVAL, OP); }
METAL_SIM_COLLECTIVE(simd_sum, metal_sim::op_sum<T>, , 0u)
METAL_SIM_COLLECTIVE(simd_max, (metal_sim::op_extreme<T, true>), , 0u)
METAL_SIM_COLLECTIVE(simd_min, (metal_sim::op_extreme<T, false>), , 0u)
METAL_SIM_COLLECTIVE(simd_shuffle, (metal_sim::op_permute<T, metal_sim::SHUFFLE>), METAL_SIM_COMMA ushort k, k)
METAL_SIM_COLLECTIVE(simd_shuffle_xor, (metal_sim::op_permute<T, metal_sim::XOR>), METAL_SIM_COMMA ushort k, k)
METAL_SIM_COLLECTIVE(simd_shuffle_down, (metal_sim::op_permute<T, metal_sim::DOWN>), METAL_SIM_COMMA ushort k, k)
METAL_SIM_COLLECTIVE(simd_shuffle_up, (metal_sim::op_permute<T, metal_sim::UP>), METAL_SIM_COMMA ushort k, k)
METAL_SIM_COLLECTIVE(simd_broadcast, (metal_sim::op_permute<T, metal_sim::BROADCAST>), METAL_SIM_COMMA ushort k, k)
// ---- simdgroup_matrix<T, 8, 8>: each lane holds 2 elements, (row, col) and (row, col + 1), in the layout
// MLX's steel/gemm/mma.h uses (Apple does not document it): q = lane / 4, row = (q & 4) + (lane / 2) % 4,
// col = (q & 2) * 2 + (lane % 2) * 2.
template <class T, int Cols, int Rows> struct simdgroup_matrix {
  static_assert(Cols == 8 && Rows == 8, "the model has 8x8 simdgroup matrices only");
  vec<T, 2> e;
  simdgroup_matrix() = default;
  explicit simdgroup_matrix(T diagonal);  // a diagonal matrix (MSL 6.7.1)
  vec<T, 2>& thread_elements() { return e; }
  const vec<T, 2>& thread_elements() const { return e; } };
typedef simdgroup_matrix<float, 8, 8> simdgroup_float8x8;
typedef simdgroup_matrix<half, 8, 8> simdgroup_half8x8;
}  // namespace metal
namespace metal_sim {
inline void lane_position(uint lane, uint& row, uint& col) {
  uint q = lane / 4; row = (q & 4) + (lane / 2) % 4; col = (q & 2) * 2 + (lane % 2) * 2; }
// simdgroup_load / simdgroup_store (MSL 6.7.1, Table 6.9): element (r, c) of the matrix is memory element
// (origin.y + r) * elements_per_row + origin.x + c; transposed, element (r, c) is c * elements_per_row + r.
template <class T> struct Access { T* mem; ulong per_row, ox, oy; bool transpose; vec<T, 2>* m; };
template <class T> static const char* check_uniform(void* const* in) {
  Access<T>* a = (Access<T>*)in[0];
  for (int l = 1; l < 32; ++l) {
    Access<T>* b = (Access<T>*)in[l];
    if (b->mem != a->mem || b->per_row != a->per_row || b->ox != a->ox || b->oy != a->oy || b->transpose != a->transpose)
      return "its pointer, elements_per_row, matrix_origin or transpose differ between lanes (they must be uniform)";
  }
  if (a->transpose && (a->ox || a->oy))
    return "a transposed access with a non-zero matrix_origin is outside the modelled subset (Apple does not "
           "document which matrix the origin indexes): add the offset to the pointer instead";
  return nullptr; }
template <class T> static size_t at(const Access<T>* a, uint r, uint c) {
  return a->transpose ? c * a->per_row + r : (a->oy + r) * a->per_row + a->ox + c; }
template <class T, bool STORE> static const char* op_access(void* const* in, void*const*) {
  if (const char* why = check_uniform<T>(in)) return why;
  for (uint l = 0; l < 32; ++l) {
    Access<T>* a = (Access<T>*)in[l]; uint r, c; lane_position(l, r, c);
    for (uint i = 0; i < 2; ++i) {
      if (STORE) a->mem[at(a, r, c + i)] = (*a->m)[i];
      else (*a->m)[i] = a->mem[at(a, r, c + i)]; } }
  return nullptr; }
// d = a * b + c: products and sums in fp32, k ascending from c's value, rounded to d's type once at the end
template <class D, class A, class B, class C> struct Mma { vec<A, 2>* a; vec<B, 2>* b; vec<C, 2>* c; vec<D, 2>* d; };
template <class D, class A, class B, class C> static const char* op_mma(void* const* in, void* const*) {
  float ma[8][8], mb[8][8], mc[8][8];
  for (uint l = 0; l < 32; ++l) {
    Mma<D, A, B, C>* p = (Mma<D, A, B, C>*)in[l]; uint r, c; lane_position(l, r, c);
    for (uint i = 0; i < 2; ++i) {
      ma[r][c + i] = float((*p->a)[i]); mb[r][c + i] = float((*p->b)[i]);
      mc[r][c + i] = p->c ? float((*p->c)[i]) : 0.0f; } }
  for (uint l = 0; l < 32; ++l) {
    Mma<D, A, B, C>* p = (Mma<D, A, B, C>*)in[l]; uint r, c; lane_position(l, r, c);
    for (uint i = 0; i < 2; ++i) {
      float acc = mc[r][c + i];
      for (int k = 0; k < 8; ++k) acc += ma[r][k] * mb[k][c + i];
      (*p->d)[i] = D(acc); } }
  return nullptr; }
}  // namespace metal_sim
namespace metal {
template <class T, int C, int R> simdgroup_matrix<T, C, R>::simdgroup_matrix(T diagonal) {
  uint r, c; metal_sim::lane_position(metal_sim::lane_id(), r, c);
  e = vec<T, 2>(r == c ? diagonal : T(0), r == c + 1 ? diagonal : T(0)); }
template <class T, int C = 8, int R = 8> simdgroup_matrix<T, C, R> make_filled_simdgroup_matrix(T v) {
  simdgroup_matrix<T, C, R> m; m.e = vec<T, 2>(v, v); return m; }
template <class T, int C, int R>
void simdgroup_load(simdgroup_matrix<T, C, R>& d, const T* src, ulong elements_per_row = C,
                    vec<ulong, 2> matrix_origin = vec<ulong, 2>(0), bool transpose_matrix = false,
                    int line = __builtin_LINE()) {
  metal_sim::Access<T> a = {const_cast<T*>(src), elements_per_row, matrix_origin.x, matrix_origin.y, transpose_matrix, &d.e};
  metal_sim::simd_meet("simdgroup_load", line, &a, nullptr, metal_sim::op_access<T, false>); }
template <class T, int C, int R>
void simdgroup_store(simdgroup_matrix<T, C, R> m, T* dst, ulong elements_per_row = C,
                     vec<ulong, 2> matrix_origin = vec<ulong, 2>(0), bool transpose_matrix = false,
                     int line = __builtin_LINE()) {
  metal_sim::Access<T> a = {dst, elements_per_row, matrix_origin.x, matrix_origin.y, transpose_matrix, &m.e};
  metal_sim::simd_meet("simdgroup_store", line, &a, nullptr, metal_sim::op_access<T, true>); }
template <class D, class A, class B, class C>
void simdgroup_multiply_accumulate(simdgroup_matrix<D, 8, 8>& d, const simdgroup_matrix<A, 8, 8>& a,
                                   const simdgroup_matrix<B, 8, 8>& b, const simdgroup_matrix<C, 8, 8>& c,
                                   int line = __builtin_LINE()) {
  simdgroup_matrix<A, 8, 8> ca = a; simdgroup_matrix<B, 8, 8> cb = b; simdgroup_matrix<C, 8, 8> cc = c;
  metal_sim::Mma<D, A, B, C> p = {&ca.e, &cb.e, &cc.e, &d.e};
  metal_sim::simd_meet("simdgroup_multiply_accumulate", line, &p, nullptr, metal_sim::op_mma<D, A, B, C>); }
template <class D, class A, class B>
void simdgroup_multiply(simdgroup_matrix<D, 8, 8>& d, const simdgroup_matrix<A, 8, 8>& a,
                        const simdgroup_matrix<B, 8, 8>& b, int line = __builtin_LINE()) {
  simdgroup_matrix<A, 8, 8> ca = a; simdgroup_matrix<B, 8, 8> cb = b;
  metal_sim::Mma<D, A, B, D> p = {&ca.e, &cb.e, nullptr, &d.e};
  metal_sim::simd_meet("simdgroup_multiply", line, &p, nullptr, metal_sim::op_mma<D, A, B, D>); }
}  // namespace metal
// ---- address spaces and kernel attributes. A threadgroup array is one object per OS thread, which runs one
// threadgroup at a time: the threads (fibers) of that threadgroup share it.
#define kernel
#define device
#define constant const
#define thread
#define threadgroup __attribute__((used)) static thread_local
#endif
"""
