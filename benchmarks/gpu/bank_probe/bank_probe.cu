// bank_probe: run ONE warp over a per-lane shared-memory address pattern, so that Nsight Compute can
// count the wavefronts of exactly one kind of shared-memory instruction.
//
//   bank_probe PATTERNS.txt [REPS]
//
// PATTERNS.txt has one pattern a line:  <name> <op> <a0> <a1> ... <a31>
//   op:  ld1 ld2 ld4 ld8 ld16 | st1 st2 st4 st8 st16 | ldsm1 ldsm2 ldsm4 | stsm1 stsm2 stsm4
//        | cpa4 cpa8 cpa16 (cp.async .ca 4/8, .cg 16) | cpa16ca (cp.async .ca 16)
//   aN:  lane N's byte offset into the (1024-byte aligned) shared buffer, or '-' for an inactive lane.
//        ldmatrix/stmatrix lanes past the ones the shape uses (8/16/32 for x1/x2/x4) are given as '-'
//        and run with offset 0: the hardware ignores their address, and .sync.aligned needs every lane.
//
// Each pattern is one kernel launch of one warp; the access under test runs REPS times (default 256) in
// a loop the compiler may not unroll, and the kernel holds no other shared-memory instruction (checked
// on the SASS by run_probe.py), so wavefronts / instructions from ncu is that access's exact cost.
// The address carries `acc & zero` (zero is a kernel argument, 0 at run time): without it ptxas hoists
// a loop-invariant ld.shared out of the loop and a load runs once (the first recorded run, 2026-11-21,
// was built that way; its per-instruction figures divide by the instruction counter, so they hold).
// cp.async reads its source from a coalesced global buffer (lane * bytes) and writes the pattern.
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#define CHECK(call)                                                                              \
  do {                                                                                           \
    cudaError_t err_ = (call);                                                                   \
    if (err_ != cudaSuccess) {                                                                   \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(err_)); \
      std::exit(1);                                                                              \
    }                                                                                            \
  } while (0)

constexpr unsigned kInactive = 0xffffffffu;
constexpr int kSmemBytes = 64 * 1024;  // patterns must stay below this
constexpr int kAlign = 1024;           // swizzle periods up to 1024 B line up with the patterns' offsets

enum Op { LD1, LD2, LD4, LD8, LD16, ST1, ST2, ST4, ST8, ST16, LDSM1, LDSM2, LDSM4, STSM1, STSM2, STSM4,
          CPA4, CPA8, CPA16, CPA16CA, NUM_OPS };
static const char* kOpNames[NUM_OPS] = {"ld1",   "ld2",   "ld4",   "ld8",   "ld16",  "st1",  "st2",
                                        "st4",   "st8",   "st16",  "ldsm1", "ldsm2", "ldsm4", "stsm1",
                                        "stsm2", "stsm4", "cpa4",  "cpa8",  "cpa16", "cpa16ca"};
static const int kOpBytes[NUM_OPS] = {1, 2, 4, 8, 16, 1, 2, 4, 8, 16, 16, 16, 16, 16, 16, 16, 4, 8, 16, 16};
static const int kMatrixLanes[NUM_OPS] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 8, 16, 32, 8, 16, 32, 0, 0, 0, 0};

// One access of kind OP at shared address `a`; `acc` keeps loads alive and feeds stores.
template <int OP>
__device__ __forceinline__ void access(unsigned a, unsigned& acc, const char* gsrc) {
  unsigned x = 0, y = 0, z = 0, w = 0;
  if constexpr (OP == LD1) {
    asm volatile("ld.shared.u8 %0, [%1];" : "=r"(x) : "r"(a) : "memory");
  } else if constexpr (OP == LD2) {
    asm volatile("ld.shared.u16 %0, [%1];" : "=r"(x) : "r"(a) : "memory");
  } else if constexpr (OP == LD4) {
    asm volatile("ld.shared.u32 %0, [%1];" : "=r"(x) : "r"(a) : "memory");
  } else if constexpr (OP == LD8) {
    asm volatile("ld.shared.v2.u32 {%0, %1}, [%2];" : "=r"(x), "=r"(y) : "r"(a) : "memory");
  } else if constexpr (OP == LD16) {
    asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(x), "=r"(y), "=r"(z), "=r"(w) : "r"(a) : "memory");
  } else if constexpr (OP == ST1) {
    asm volatile("st.shared.u8 [%0], %1;" ::"r"(a), "r"(acc) : "memory");
  } else if constexpr (OP == ST2) {
    asm volatile("st.shared.u16 [%0], %1;" ::"r"(a), "r"(acc) : "memory");
  } else if constexpr (OP == ST4) {
    asm volatile("st.shared.u32 [%0], %1;" ::"r"(a), "r"(acc) : "memory");
  } else if constexpr (OP == ST8) {
    asm volatile("st.shared.v2.u32 [%0], {%1, %2};" ::"r"(a), "r"(acc), "r"(acc + 1) : "memory");
  } else if constexpr (OP == ST16) {
    asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %4};" ::"r"(a), "r"(acc), "r"(acc + 1), "r"(acc + 2),
                 "r"(acc + 3) : "memory");
  } else if constexpr (OP == LDSM1) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x1.shared.b16 {%0}, [%1];" : "=r"(x) : "r"(a) : "memory");
  } else if constexpr (OP == LDSM2) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0, %1}, [%2];" : "=r"(x), "=r"(y) : "r"(a) : "memory");
  } else if constexpr (OP == LDSM4) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(x), "=r"(y), "=r"(z), "=r"(w) : "r"(a) : "memory");
  } else if constexpr (OP == STSM1) {
    asm volatile("stmatrix.sync.aligned.m8n8.x1.shared.b16 [%0], {%1};" ::"r"(a), "r"(acc) : "memory");
  } else if constexpr (OP == STSM2) {
    asm volatile("stmatrix.sync.aligned.m8n8.x2.shared.b16 [%0], {%1, %2};" ::"r"(a), "r"(acc), "r"(acc + 1)
                 : "memory");
  } else if constexpr (OP == STSM4) {
    asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};" ::"r"(a), "r"(acc),
                 "r"(acc + 1), "r"(acc + 2), "r"(acc + 3) : "memory");
  } else if constexpr (OP == CPA4) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4;" ::"r"(a), "l"(gsrc) : "memory");
  } else if constexpr (OP == CPA8) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 8;" ::"r"(a), "l"(gsrc) : "memory");
  } else if constexpr (OP == CPA16) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(a), "l"(gsrc) : "memory");
  } else if constexpr (OP == CPA16CA) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 16;" ::"r"(a), "l"(gsrc) : "memory");
  }
  acc ^= x ^ (y << 1) ^ (z << 2) ^ (w << 3);
}

template <int OP>
__global__ void __launch_bounds__(32) probe(const unsigned* __restrict__ lane_offset, const char* __restrict__ gsrc,
                                            unsigned* __restrict__ out, int reps, unsigned zero) {
  extern __shared__ unsigned char smem[];
  const unsigned lane = threadIdx.x;
  const unsigned off = lane_offset[lane];
  const bool active = off != kInactive;
  unsigned base = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  base = (base + kAlign - 1) & ~unsigned(kAlign - 1);
  const unsigned a = base + (active ? off : 0u);
  constexpr unsigned kSrcBytes = OP == CPA4 ? 4 : OP == CPA8 ? 8 : 16;  // cp.async source stride
  const char* src = gsrc + lane * kSrcBytes;
  unsigned acc = lane;
#pragma unroll 1
  for (int r = 0; r < reps; ++r) {
    if (active) access<OP>(a + (acc & zero), acc, src);
  }
  if constexpr (OP >= CPA4) asm volatile("cp.async.wait_all;" ::: "memory");
  out[lane] = acc;
}

typedef void (*ProbeFn)(const unsigned*, const char*, unsigned*, int, unsigned);

template <int... OPS>
struct Table {
  static void fill(ProbeFn* fns) {
    int i = 0;
    ((fns[i++] = probe<OPS>), ...);
  }
};

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s PATTERNS.txt [REPS]\n", argv[0]);
    return 2;
  }
  const int reps = argc > 2 ? std::atoi(argv[2]) : 256;
  ProbeFn fns[NUM_OPS];
  Table<LD1, LD2, LD4, LD8, LD16, ST1, ST2, ST4, ST8, ST16, LDSM1, LDSM2, LDSM4, STSM1, STSM2, STSM4, CPA4, CPA8,
        CPA16, CPA16CA>::fill(fns);
  for (int i = 0; i < NUM_OPS; ++i)
    CHECK(cudaFuncSetAttribute(fns[i], cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes + kAlign));

  unsigned *d_off = nullptr, *d_out = nullptr;
  char* d_src = nullptr;
  CHECK(cudaMalloc(&d_off, 32 * sizeof(unsigned)));
  CHECK(cudaMalloc(&d_out, 32 * sizeof(unsigned)));
  CHECK(cudaMalloc(&d_src, 32 * 16));
  CHECK(cudaMemset(d_src, 0x5a, 32 * 16));

  std::ifstream in(argv[1]);
  if (!in) {
    std::fprintf(stderr, "cannot read %s\n", argv[1]);
    return 2;
  }
  std::string line;
  int n = 0;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream ls(line);
    std::string name, op;
    ls >> name >> op;
    int k = 0;
    while (k < NUM_OPS && op != kOpNames[k]) ++k;
    if (k == NUM_OPS) {
      std::fprintf(stderr, "%s: unknown op %s\n", name.c_str(), op.c_str());
      return 2;
    }
    unsigned off[32];
    for (int lane = 0; lane < 32; ++lane) {
      std::string tok;
      if (!(ls >> tok)) {
        std::fprintf(stderr, "%s: fewer than 32 lanes\n", name.c_str());
        return 2;
      }
      if (tok == "-") {
        if (kMatrixLanes[k] && lane < kMatrixLanes[k]) {
          std::fprintf(stderr, "%s: lane %d of a matrix op needs an address\n", name.c_str(), lane);
          return 2;
        }
        off[lane] = kMatrixLanes[k] ? 0u : kInactive;
        continue;
      }
      const unsigned long v = std::strtoul(tok.c_str(), nullptr, 10);
      if (v % kOpBytes[k] != 0 || v + kOpBytes[k] > unsigned(kSmemBytes)) {
        std::fprintf(stderr, "%s: lane %d offset %lu misaligned or out of range\n", name.c_str(), lane, v);
        return 2;
      }
      off[lane] = unsigned(v);
    }
    CHECK(cudaMemcpy(d_off, off, sizeof(off), cudaMemcpyHostToDevice));
    fns[k]<<<1, 32, kSmemBytes + kAlign>>>(d_off, d_src, d_out, reps, 0u);
    CHECK(cudaGetLastError());
    CHECK(cudaDeviceSynchronize());
    std::printf("launch %d %s %s\n", n++, name.c_str(), op.c_str());
  }
  std::printf("done: %d launches, %d reps each\n", n, reps);
  return 0;
}
