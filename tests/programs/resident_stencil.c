// Blocks kept on the device (`target enter data`), one independent in-place task per block
// per step (`nowait`, a taskwait per step), as issue 24 describes: placement must spread the
// blocks over the workers, since every step reuses them. The host computes the same steps
// and compares (exact: the same operations in the same order).
//   resident_stencil [NBLOCKS] [BLOCK_DOUBLES] [STEPS]
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void step(double *p, long n) {
  double prev = p[0];
  for (long i = 1; i < n - 1; i++) {
    double cur = p[i];
    p[i] = 0.5 * cur + 0.25 * (prev + p[i + 1]);
    prev = cur;
  }
}
#pragma omp declare target(step)

int main(int argc, char **argv) {
  int nb = argc > 1 ? atoi(argv[1]) : 6;
  long n = argc > 2 ? atol(argv[2]) : 65536;
  int steps = argc > 3 ? atoi(argv[3]) : 400;
  if (nb < 1 || n < 3 || steps < 0) return 2;
  double **blk = malloc(nb * sizeof *blk), **ref = malloc(nb * sizeof *ref);
  for (int b = 0; b < nb; b++) {
    blk[b] = malloc(n * sizeof(double));
    ref[b] = malloc(n * sizeof(double));
    for (long i = 0; i < n; i++) blk[b][i] = ref[b][i] = b + (double)(i % 1000) * 1e-3;
    double *p = blk[b];
#pragma omp target enter data map(to: p[0:n])
  }
  for (int s = 0; s < steps; s++) {
    for (int b = 0; b < nb; b++) {
      double *p = blk[b];
#pragma omp target map(alloc: p[0:n]) depend(inout: p[0]) nowait
      step(p, n);
    }
#pragma omp taskwait
  }
  int bad = 0;
  for (int b = 0; b < nb; b++) {
    double *p = blk[b];
#pragma omp target exit data map(from: p[0:n])
    for (int s = 0; s < steps; s++) step(ref[b], n);
    bad += memcmp(p, ref[b], n * sizeof(double)) != 0;
  }
  printf("resident_stencil nb=%d n=%ld steps=%d: %s\n", nb, n, steps, bad ? "WRONG" : "result correct");
  return bad != 0;
}
