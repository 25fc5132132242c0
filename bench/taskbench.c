// Task Bench-style benchmark (Slaughter et al., SC20) for OpenMP target tasks: a W x T grid of
// `target nowait` tasks whose dependences follow a pattern, each running a compute-bound
// kernel of K iterations. bench/taskbench.py sweeps K and computes METG (BENCHMARKS.md).
//
//   taskbench PATTERN [W] [T] [K] [REPS]   PATTERN: trivial | stencil_1d | fft
//                                          W points per step (default 8; a power of two >= 2
//                                          for fft), T steps (default 100), K kernel
//                                          iterations (default 1000), REPS timed repetitions
//                                          (default 1)
//   taskbench calibrate K                  ns per kernel iteration on the host (no offloading)
//
// Data, as in Task Bench: one 64-byte buffer (8 x uint64) per point and generation, two
// generations (step parity); each buffer is its own allocation (so each is its own device
// buffer, free to live on any worker). Task (t, i), t = 1..T, reads generation (t-1)%2 of its
// inputs and writes generation t%2 of point i; generation 0 holds the initial values (step 0).
//   trivial     no inputs: depend(out) on its own output only, so the W tasks of a step, and
//               those of consecutive steps, are independent (task (t, i) waits only for
//               (t-2, i), the previous writer of the same buffer);
//   stencil_1d  inputs (t-1, i-1), (t-1, i), (t-1, i+1), the ones outside [0, W) dropped;
//   fft         inputs (t-1, i) and (t-1, i XOR 2^((t-1) mod log2 W)).
// Reusing a generation is ordered by OpenMP itself: depend(out) on a buffer waits for the
// tasks of the previous step that read it (depend(in)).
//
// The kernel: mix the inputs and (t, i) into a 64-bit state (every input word counts), run K
// iterations of Marsaglia's xorshift64 (13, 7, 17) on it (a chain of dependent shifts and
// xors, 6 integer operations per iteration, that the compiler cannot fold or vectorise: K is
// known only at run time), and write 8 words derived from the result. xorshift64 is linear over
// GF(2), so the host's reference computes the K iterations as one 64 x 64 bit-matrix power
// (M^K, O(log K)) instead of running them: the check costs nothing at any K, and it is an
// independent computation (a kernel that skipped iterations would fail it).
//
// All tasks are issued from one thread, in `#pragma omp parallel` + `#pragma omp single`, as
// examples/matmul does: with libomp 16 and the stock x86_64 plugin, `target nowait` tasks
// issued from main outside a parallel region ran one after another (checked: 8 x 20 tasks of
// 3.4 ms took 0.62 s, the sum of the tasks, instead of 0.31 s on 2 cores). The time is from
// just before the first task is issued to after the final taskwait: it excludes mapping the
// buffers (target enter data), an untimed warm-up (one empty task per point, which starts
// libomp's threads), resetting the buffers between repetitions (target update to), retrieving
// them and the check. After each repetition every
// buffer is read back and compared word for word with a sequential host computation of the
// same pattern; a mismatch prints "FAIL ..." and exits 1. The program prints one line:
//   taskbench pattern=P width=W steps=T iters=K tasks=W*T reps=R seconds=BEST rep_seconds=A,B,.. check=ok
//
// Compile with -DTASKBENCH_BROKEN to check the check: the offloaded kernel then skips its last
// input (trivial: uses the wrong step), and every pattern must FAIL.
//
// With no offloading device it stops with exit status 3 (examples/no_device.h): the stock side
// is LD_LIBRARY_PATH=/usr/lib/llvm-16/lib taskbench ..., ours ompcluster-run -np N taskbench ...
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "../examples/no_device.h"

#define WORDS 8 // 64 bytes per point

enum pattern { TRIVIAL, STENCIL_1D, FFT };
static const char *pattern_names[] = {"trivial", "stencil_1d", "fft"};

#pragma omp declare target
static uint64_t seed_of(long t, long i) {
  uint64_t h = 0xcbf29ce484222325ULL ^ ((uint64_t)t * 0x9E3779B97F4A7C15ULL) ^ ((uint64_t)i << 32);
  return h * 0x100000001b3ULL;
}

// The inputs and (t, i), mixed into one state (never 0: xorshift64 would stay at 0).
static uint64_t mix_inputs(const uint64_t *a, const uint64_t *b, const uint64_t *c, int nin, long t, long i) {
  uint64_t h = seed_of(t, i);
  const uint64_t *in[3] = {a, b, c};
  for (int p = 0; p < nin; p++)
    for (int j = 0; j < WORDS; j++) {
      h ^= in[p][j];
      h *= 0x100000001b3ULL;
      h ^= h >> 29;
    }
  return h | 1;
}

static uint64_t chain(uint64_t x, long k) {
  for (long n = 0; n < k; n++) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
  }
  return x;
}

// The 8 output words, each from the kernel's result x and the mixed inputs h (none of them
// constant, K = 0 included, where x = h).
static void finish(uint64_t *out, uint64_t x, uint64_t h) {
  for (int j = 0; j < WORDS; j++) out[j] = x * (2 * j + 3) + (h ^ (uint64_t)j * 0x9E3779B97F4A7C15ULL);
}

static void point_kernel(uint64_t *out, const uint64_t *a, const uint64_t *b, const uint64_t *c, int nin,
                         long t, long i, long k) {
  uint64_t h = mix_inputs(a, b, c, nin, t, i);
  finish(out, chain(h, k), h);
}
#pragma omp end declare target

// --- The reference: xorshift64 as a GF(2)-linear map, col[b] = image of bit b. ---
typedef struct { uint64_t col[64]; } bitmat;

static uint64_t apply(const bitmat *m, uint64_t x) {
  uint64_t y = 0;
  for (int b = 0; b < 64; b++)
    if (x >> b & 1) y ^= m->col[b];
  return y;
}

static bitmat compose(const bitmat *a, const bitmat *b) { // a after b
  bitmat r;
  for (int i = 0; i < 64; i++) r.col[i] = apply(a, b->col[i]);
  return r;
}

static bitmat chain_matrix(long k) { // M^k
  bitmat r, base;
  for (int i = 0; i < 64; i++) {
    r.col[i] = 1ULL << i;
    base.col[i] = chain(1ULL << i, 1);
  }
  for (; k > 0; k >>= 1) {
    if (k & 1) r = compose(&base, &r);
    base = compose(&base, &base);
  }
  return r;
}

static int log2_exact(long w) {
  int l = 0;
  while ((1L << l) < w) l++;
  return (1L << l) == w ? l : -1;
}

// The points task (t, i) reads (from generation (t-1)%2), in order; returns how many.
static int inputs_of(int pat, long w, long t, long i, long idx[3]) {
  int n = 0;
  switch (pat) {
  case TRIVIAL:
    break;
  case STENCIL_1D:
    if (i > 0) idx[n++] = i - 1;
    idx[n++] = i;
    if (i < w - 1) idx[n++] = i + 1;
    break;
  case FFT: {
    int l = log2_exact(w);
    idx[n++] = i;
    idx[n++] = i ^ (1L << ((t - 1) % l));
    break;
  }
  }
  return n;
}

static void initial_values(uint64_t *p, long i) {
  for (int j = 0; j < WORDS; j++) p[j] = seed_of(-1 - j, i);
}

// One task, in a function of its own: clang-16 grows the stack by about 120 bytes per target
// region executed in one function call (README.md).
__attribute__((noinline)) static void issue(uint64_t *out, uint64_t *a, uint64_t *b, uint64_t *c, int nin,
                                            long t, long i, long k) {
#ifdef TASKBENCH_BROKEN
  if (nin > 0) nin--; else t++;
#endif
  switch (nin) {
  case 0:
    #pragma omp target nowait map(from: out[0:WORDS]) depend(out: out[0])
    point_kernel(out, 0, 0, 0, 0, t, i, k);
    break;
  case 1:
    #pragma omp target nowait map(to: a[0:WORDS]) map(from: out[0:WORDS]) depend(in: a[0]) depend(out: out[0])
    point_kernel(out, a, 0, 0, 1, t, i, k);
    break;
  case 2:
    #pragma omp target nowait map(to: a[0:WORDS], b[0:WORDS]) map(from: out[0:WORDS]) \
        depend(in: a[0], b[0]) depend(out: out[0])
    point_kernel(out, a, b, 0, 2, t, i, k);
    break;
  case 3:
    #pragma omp target nowait map(to: a[0:WORDS], b[0:WORDS], c[0:WORDS]) map(from: out[0:WORDS]) \
        depend(in: a[0], b[0], c[0]) depend(out: out[0])
    point_kernel(out, a, b, c, 3, t, i, k);
    break;
  }
}

static double now(void) { return omp_get_wtime(); }

static int calibrate(long k) {
  // Host time of one kernel of k iterations (the same function the device image runs), with
  // the reference's matrix power as a check that both compute the same thing.
  if (k < 1) k = 1;
  bitmat m = chain_matrix(k);
  uint64_t x = 0x243F6A8885A308D3ULL;
  for (int n = 0; n < 3; n++, x = x * 0x100000001b3ULL | 1)
    if (chain(x, k) != apply(&m, x)) {
      printf("FAIL calibrate: the kernel and the reference disagree at K=%ld\n", k);
      return 1;
    }
  long runs = 0, batch = k >= 4096 ? 1 : 4096 / k;
  double t0 = now(), t1;
  do {
    for (long n = 0; n < batch; n++) x = chain(x, k) + 0x9E3779B97F4A7C15ULL;
    runs += batch;
    t1 = now();
  } while (t1 - t0 < 0.3 || runs < 3);
  if (x == 42) printf("(x=42)\n"); // keeps the loop's result alive
  double per = (t1 - t0) / runs;
  printf("taskbench_calibrate iters=%ld runs=%ld kernel_us=%.3f ns_per_iter=%.4f\n", k, runs, per * 1e6,
         per / k * 1e9);
  return 0;
}

int main(int argc, char **argv) {
  if (argc >= 2 && !strcmp(argv[1], "calibrate")) return calibrate(argc > 2 ? atol(argv[2]) : 1L << 20);
  int pat = -1;
  for (int p = 0; argc >= 2 && p < 3; p++)
    if (!strcmp(argv[1], pattern_names[p])) pat = p;
  long w = argc > 2 ? atol(argv[2]) : 8, steps = argc > 3 ? atol(argv[3]) : 100;
  long k = argc > 4 ? atol(argv[4]) : 1000;
  int reps = argc > 5 ? atoi(argv[5]) : 1;
  if (pat < 0 || w < 1 || steps < 1 || k < 0 || reps < 1 || (pat == FFT && (w < 2 || log2_exact(w) < 0))) {
    fprintf(stderr, "usage: %s trivial|stencil_1d|fft [W] [T] [K] [REPS]   (fft: W a power of two >= 2)\n"
                    "       %s calibrate K\n", argv[0], argv[0]);
    return 2;
  }
  if (no_device("taskbench")) return 3;

  // pt[g * w + i]: point i, generation g.
  uint64_t **pt = malloc(2 * w * sizeof *pt), **ref = malloc(2 * w * sizeof *ref);
  for (long x = 0; x < 2 * w; x++) {
    pt[x] = aligned_alloc(64, WORDS * sizeof(uint64_t));
    ref[x] = malloc(WORDS * sizeof(uint64_t));
  }

  // The reference: the same pattern, sequentially on the host.
  bitmat m = chain_matrix(k);
  for (long i = 0; i < w; i++) {
    initial_values(ref[i], i);
    memset(ref[w + i], 0, WORDS * sizeof(uint64_t));
  }
  for (long t = 1; t <= steps; t++)
    for (long i = 0; i < w; i++) {
      long idx[3];
      int nin = inputs_of(pat, w, t, i, idx);
      const uint64_t *in[3] = {0, 0, 0};
      for (int p = 0; p < nin; p++) in[p] = ref[((t - 1) % 2) * w + idx[p]];
      uint64_t h = mix_inputs(in[0], in[1], in[2], nin, t, i);
      finish(ref[(t % 2) * w + i], apply(&m, h), h);
    }

  for (long x = 0; x < 2 * w; x++) {
    uint64_t *p = pt[x];
    memset(p, 0, WORDS * sizeof(uint64_t));
    #pragma omp target enter data map(to: p[0:WORDS])
  }
  // Warm-up, not timed: one task per point (K = 0) starts the team's threads and libomp's
  // helper threads (the first repetition was up to 30 ms slower without it); the buffers are
  // reset below.
  #pragma omp parallel
  #pragma omp single
  {
    for (long i = 0; i < w; i++) issue(pt[w + i], 0, 0, 0, 0, 1, i, 0);
    #pragma omp taskwait
  }

  double best = 0, *times = malloc(reps * sizeof(double));
  for (int r = 0; r < reps; r++) {
    for (long x = 0; x < 2 * w; x++) {
      uint64_t *p = pt[x];
      if (x < w) initial_values(p, x); else memset(p, 0, WORDS * sizeof(uint64_t));
      #pragma omp target update to(p[0:WORDS])
    }
    double t0 = 0, t1 = 0;
    #pragma omp parallel
    #pragma omp single
    {
      t0 = now();
      for (long t = 1; t <= steps; t++)
        for (long i = 0; i < w; i++) {
          long idx[3];
          int nin = inputs_of(pat, w, t, i, idx);
          uint64_t *in[3] = {0, 0, 0};
          for (int p = 0; p < nin; p++) in[p] = pt[((t - 1) % 2) * w + idx[p]];
          issue(pt[(t % 2) * w + i], in[0], in[1], in[2], nin, t, i, k);
        }
      #pragma omp taskwait
      t1 = now();
    }
    times[r] = t1 - t0;
    if (r == 0 || times[r] < best) best = times[r];

    for (long x = 0; x < 2 * w; x++) {
      uint64_t *p = pt[x];
      #pragma omp target update from(p[0:WORDS])
    }
    for (long x = 0; x < 2 * w; x++)
      for (int j = 0; j < WORDS; j++)
        if (pt[x][j] != ref[x][j]) {
          printf("FAIL taskbench pattern=%s width=%ld steps=%ld iters=%ld repetition %d: point %ld of generation "
                 "%ld (step %ld), word %d: got %016llx, expected %016llx\n",
                 pattern_names[pat], w, steps, k, r + 1, x % w, x / w, x / w == steps % 2 ? steps : steps - 1, j,
                 (unsigned long long)pt[x][j], (unsigned long long)ref[x][j]);
          return 1;
        }
  }
  for (long x = 0; x < 2 * w; x++) {
    uint64_t *p = pt[x];
    #pragma omp target exit data map(delete: p[0:WORDS])
  }

  printf("taskbench pattern=%s width=%ld steps=%ld iters=%ld tasks=%ld reps=%d seconds=%.6f rep_seconds=",
         pattern_names[pat], w, steps, k, w * steps, reps, best);
  for (int r = 0; r < reps; r++) printf("%s%.6f", r ? "," : "", times[r]);
  printf(" check=ok\n");
  return 0;
}
