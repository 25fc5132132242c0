// Blocked matrix multiply C = A * B on the cluster device.
//
// The N x N matrices are split into BS x BS blocks, each its own allocation. Every block
// product C[i][j] += A[i][k] * B[k][j] is one `target nowait` task; `depend` clauses order the
// updates of each C block, and the runtime spreads the tasks over the workers and moves the
// blocks between them. The result is checked against a sequential product on the host.
//
//   clang-16 -O2 -fopenmp -fopenmp-targets=x86_64-pc-linux-gnu matmul.c -o matmul
//   ompcluster-run -np 4 ./matmul [N] [BS] [nocheck]
//
// `nocheck` skips the sequential check on the host (O(N^3) on one core: for benchmarks of
// large N, where it would take longer than the offloaded product).
//
// With no offloading device (run bare, where libomptarget finds no plugin) it stops with exit
// status 3 rather than run the blocks on the host; OMP_TARGET_OFFLOAD=DISABLED runs it on the
// host on purpose. The stock x86_64 plugin: LD_LIBRARY_PATH=/usr/lib/llvm-16/lib ./matmul.
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include "../no_device.h"

static void block_product(const double *a, const double *b, double *c, int bs) {
  for (int i = 0; i < bs; i++)
    for (int k = 0; k < bs; k++) {
      double aik = a[i * bs + k];
      for (int j = 0; j < bs; j++)
        c[i * bs + j] += aik * b[k * bs + j];
    }
}
#pragma omp declare target(block_product)

int main(int argc, char **argv) {
  if (no_device("matmul")) return 3;
  int n = argc > 1 ? atoi(argv[1]) : 1024;
  int bs = argc > 2 ? atoi(argv[2]) : 256;
  if (n <= 0 || bs <= 0 || n % bs != 0) {
    fprintf(stderr, "usage: %s [N] [BS]  (N a positive multiple of BS)\n", argv[0]);
    return 2;
  }
  int nb = n / bs;
  size_t blk = (size_t)bs * bs;
  double **A = malloc(nb * nb * sizeof *A), **B = malloc(nb * nb * sizeof *B),
         **C = malloc(nb * nb * sizeof *C);
  for (int b = 0; b < nb * nb; b++) {
    A[b] = malloc(blk * sizeof(double));
    B[b] = malloc(blk * sizeof(double));
    C[b] = calloc(blk, sizeof(double));
  }
  // Element (r, c) of a matrix lives in block (r/bs, c/bs) at offset (r%bs, c%bs).
  for (int r = 0; r < n; r++)
    for (int c = 0; c < n; c++) {
      size_t blkid = (size_t)(r / bs) * nb + c / bs, off = (size_t)(r % bs) * bs + c % bs;
      A[blkid][off] = (double)((r * 7 + c * 3) % 11) - 5.0;
      B[blkid][off] = (double)((r * 5 + c * 2) % 13) - 6.0;
    }

  double t0 = omp_get_wtime();
  for (int b = 0; b < nb * nb; b++) {
    double *a = A[b], *bb = B[b], *c = C[b];
    #pragma omp target enter data map(to: a[0:blk], bb[0:blk], c[0:blk])
  }
  #pragma omp parallel
  #pragma omp single
  for (int i = 0; i < nb; i++)
    for (int j = 0; j < nb; j++)
      for (int k = 0; k < nb; k++) {
        double *a = A[i * nb + k], *b = B[k * nb + j], *c = C[i * nb + j];
        #pragma omp target map(to: a[0:blk], b[0:blk]) map(tofrom: c[0:blk]) \
            depend(in: a[0], b[0]) depend(inout: c[0]) nowait
        block_product(a, b, c, bs);
      }
  for (int b = 0; b < nb * nb; b++) {
    double *a = A[b], *bb = B[b], *c = C[b];
    #pragma omp target exit data map(from: c[0:blk]) map(release: a[0:blk], bb[0:blk])
  }
  double t1 = omp_get_wtime();
  if (argc > 3 && !strcmp(argv[3], "nocheck")) {
    printf("matmul N=%d BS=%d tasks=%d: %.3f s, result not checked\n", n, bs, nb * nb * nb, t1 - t0);
    return 0;
  }

  // Check against a sequential product of the same matrices, in plain row-major arrays.
  double *fa = malloc((size_t)n * n * sizeof(double)), *fb = malloc((size_t)n * n * sizeof(double)),
         *fc = calloc((size_t)n * n, sizeof(double));
  for (int r = 0; r < n; r++)
    for (int c = 0; c < n; c++) {
      size_t blkid = (size_t)(r / bs) * nb + c / bs, off = (size_t)(r % bs) * bs + c % bs;
      fa[(size_t)r * n + c] = A[blkid][off];
      fb[(size_t)r * n + c] = B[blkid][off];
    }
  for (int r = 0; r < n; r++)
    for (int k = 0; k < n; k++) {
      double ark = fa[(size_t)r * n + k];
      for (int c = 0; c < n; c++) fc[(size_t)r * n + c] += ark * fb[(size_t)k * n + c];
    }
  double max_err = 0.0;
  for (int r = 0; r < n; r++)
    for (int c = 0; c < n; c++) {
      double got = C[(size_t)(r / bs) * nb + c / bs][(size_t)(r % bs) * bs + c % bs];
      double err = fabs(got - fc[(size_t)r * n + c]);
      if (err > max_err) max_err = err;
    }
  int ok = max_err < 1e-6;
  printf("matmul N=%d BS=%d tasks=%d: %.3f s, max error %g: %s\n", n, bs, nb * nb * nb, t1 - t0,
         max_err, ok ? "result correct" : "RESULT WRONG");
  return ok ? 0 : 1;
}
