// Issue 34's resident stencil, as a user wrote it: NB blocks of N doubles kept on the device
// (`target enter data`) with a two-value halo buffer each; every step reads back each block's
// two edge values (`target update from`, one element each), pushes each block's halo
// (`target update to`), and runs one `target nowait` region per block, `depend(inout)` on the
// block, inside `parallel` + `single`. Placement must spread the blocks over the workers and
// keep them there. The host computes the same steps and compares (exact).
//   halo_stencil [NBLOCKS] [BLOCK_DOUBLES] [STEPS] [sync|depend]
// sync: the updates are synchronous and each step ends with a taskwait; depend: the updates
// are `nowait` tasks with `depend(inout)` on the block too, and only the edges are waited for.
// (Synchronous updates with a `depend` clause abort libomp 16 itself, under the stock plugin
// too: "Assertion failure at kmp_taskdeps.h(26): n >= 0"; docs/nowait-regions.md.)
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void step(double *p, const double *h, long n) {
  double prev = h[0];
  for (long i = 0; i < n; i++) {
    double next = i + 1 < n ? p[i + 1] : h[1];
    double cur = p[i];
    p[i] = 0.5 * cur + 0.25 * (prev + next);
    prev = cur;
  }
}
#pragma omp declare target(step)

int main(int argc, char **argv) {
  int nb = argc > 1 ? atoi(argv[1]) : 6;
  long n = argc > 2 ? atol(argv[2]) : 65536;
  int steps = argc > 3 ? atoi(argv[3]) : 400;
  int dep = argc > 4 && strcmp(argv[4], "depend") == 0;
  if (nb < 1 || n < 2 || steps < 0) return 2;
  double **blk = malloc(nb * sizeof *blk), **ref = malloc(nb * sizeof *ref), **halo = malloc(nb * sizeof *halo);
  double *le = calloc(nb, sizeof(double)), *re = calloc(nb, sizeof(double));
  for (int b = 0; b < nb; b++) {
    blk[b] = malloc(n * sizeof(double));
    ref[b] = malloc(n * sizeof(double));
    halo[b] = calloc(2, sizeof(double));
    for (long i = 0; i < n; i++) blk[b][i] = ref[b][i] = b + (double)(i % 1000) * 1e-3;
    double *p = blk[b], *h = halo[b];
#pragma omp target enter data map(to: p[0:n], h[0:2])
  }
#pragma omp parallel
#pragma omp single
  for (int s = 0; s < steps; s++) {
    for (int b = 0; b < nb; b++) {
      double *p = blk[b];
      if (dep) {
#pragma omp target update from(p[0:1]) depend(inout: p[0]) nowait
#pragma omp target update from(p[n-1:1]) depend(inout: p[0]) nowait
      } else {
#pragma omp target update from(p[0:1])
#pragma omp target update from(p[n-1:1])
      }
    }
    if (dep) {
#pragma omp taskwait
    }
    for (int b = 0; b < nb; b++) {
      le[b] = blk[b][0];
      re[b] = blk[b][n - 1];
    }
    for (int b = 0; b < nb; b++) {
      double *p = blk[b], *h = halo[b];
      h[0] = b > 0 ? re[b - 1] : 0.0;
      h[1] = b + 1 < nb ? le[b + 1] : 0.0;
      if (dep) {
#pragma omp target update to(h[0:2]) depend(inout: p[0]) nowait
      } else {
#pragma omp target update to(h[0:2])
      }
#pragma omp target map(alloc: p[0:n], h[0:2]) depend(inout: p[0]) nowait
      step(p, h, n);
    }
    if (!dep) {
#pragma omp taskwait
    }
  }
  double h[2];
  for (int s = 0; s < steps; s++) {
    for (int b = 0; b < nb; b++) {
      le[b] = ref[b][0];
      re[b] = ref[b][n - 1];
    }
    for (int b = 0; b < nb; b++) {
      h[0] = b > 0 ? re[b - 1] : 0.0;
      h[1] = b + 1 < nb ? le[b + 1] : 0.0;
      step(ref[b], h, n);
    }
  }
  int bad = 0;
  for (int b = 0; b < nb; b++) {
    double *p = blk[b], *hh = halo[b];
#pragma omp target exit data map(from: p[0:n]) map(delete: hh[0:2])
    bad += memcmp(p, ref[b], n * sizeof(double)) != 0;
  }
  printf("halo_stencil nb=%d n=%ld steps=%d %s: %s\n", nb, n, steps, dep ? "depend" : "sync", bad ? "WRONG" : "result correct");
  return bad != 0;
}
