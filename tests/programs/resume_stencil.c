// For `tests/resume.rs`: blocks kept on the device for the whole run, updated in place. NB = 4
// blocks of N doubles (64 KiB each by default) are mapped once (`target enter data`); each of
// STEPS steps issues one `target nowait depend(inout: block)` region per block that sweeps its
// block in place (a 3-point average plus a source at its left end and a step-dependent term,
// so that every update of every step changes the result), then waits for the step
// (`taskwait`). The blocks come back once, at the end (`target exit data map(from:)`), so
// between the first region and the end their only copies are on the workers: a resumed job
// must take them from the checkpoint. Each region sleeps DELAY_US microseconds after its
// sweep, so that the run's length hardly depends on the machine's speed. SEED changes the
// initial values (and so the data the first mapping sends). The host makes the same sweeps and
// compares bit for bit. stdout is the same in every run of the same arguments (no times).
//
//   resume_stencil [STEPS] [DELAY_US] [SEED] [N]     (defaults 2000 1000 1 8192)
#include "check.h"
#include <string.h>
#include <unistd.h>

#define NB 4

static void sweep(double *p, long n, int s, int delay) {
  double prev = p[0];
  p[0] = prev + 1.0;
  double c = (double)(s % 7) * 1e-3;
  for (long i = 1; i < n - 1; i++) {
    double cur = p[i];
    p[i] = 0.5 * cur + 0.25 * (prev + p[i + 1]) + c;
    prev = cur;
  }
  if (delay > 0) usleep(delay);
}
#pragma omp declare target(sweep)

// One region per call, in a function of its own (see ckpt_idle.c: a loop holding a target
// region grows its function's stack at every run of it).
__attribute__((noinline)) static void step_block(double *p, long n, int s, int delay) {
#pragma omp target map(alloc: p[0:n]) depend(inout: p[0]) nowait firstprivate(n, s, delay)
  sweep(p, n, s, delay);
}

int main(int argc, char **argv) {
  int steps = argc > 1 ? atoi(argv[1]) : 2000;
  int delay = argc > 2 ? atoi(argv[2]) : 1000;
  int seed = argc > 3 ? atoi(argv[3]) : 1;
  long n = argc > 4 ? atol(argv[4]) : 8192;
  if (steps < 0 || delay < 0 || n < 3) {
    fprintf(stderr, "usage: %s [STEPS] [DELAY_US] [SEED] [N]\n", argv[0]);
    return 2;
  }
  double *blk[NB], *ref[NB];
  for (int b = 0; b < NB; b++) {
    blk[b] = malloc(n * sizeof(double));
    ref[b] = malloc(n * sizeof(double));
    for (long i = 0; i < n; i++) blk[b][i] = ref[b][i] = b + 0.37 * seed + (double)(i % 1000) * 1e-3;
    double *p = blk[b];
#pragma omp target enter data map(to: p[0:n])
  }
#pragma omp parallel
#pragma omp single
  for (int s = 0; s < steps; s++) {
    for (int b = 0; b < NB; b++) step_block(blk[b], n, s, delay);
#pragma omp taskwait
  }
  for (int b = 0; b < NB; b++) {
    double *p = blk[b];
#pragma omp target exit data map(from: p[0:n])
  }

  printf("resume_stencil: %d blocks of %ld doubles, %d steps, seed %d\n", NB, n, steps, seed);
  for (int b = 0; b < NB; b++) {
    double sum = 0.0;
    for (long i = 0; i < n; i++) sum += blk[b][i] * (double)(i % 5 + 1);
    printf("block %d checksum %.6e first %.6e middle %.6e\n", b, sum, blk[b][0], blk[b][n / 2]);
  }
  for (int b = 0; b < NB; b++) {
    for (int s = 0; s < steps; s++) sweep(ref[b], n, s, 0);
    long bad = 0;
    for (long i = 0; i < n; i++) bad += memcmp(&blk[b][i], &ref[b][i], sizeof(double)) != 0;
    CHECK(bad == 0, "block %d: %ld of %ld values differ from the host's sweeps", b, bad, n);
  }
  return finish("resume_stencil");
}
