// Tiled Cholesky factorisation A = L * L^T on the cluster device: a richer task graph than
// matmul (potrf -> trsm -> syrk/gemm waves), each tile its own allocation, each tile kernel a
// `target nowait` task ordered by `depend`. Checks L * L^T against the original matrix.
//
//   clang-16 -O2 -fopenmp -fopenmp-targets=x86_64-pc-linux-gnu cholesky.c -lm -o cholesky
//   ompcluster-run -np 4 ./cholesky [N] [TS] [nocheck]
//
// `nocheck` skips the check on the host (O(N^3) on one core: for benchmarks of large N).
//
// With no offloading device it stops with exit status 3 (see no_device below); the stock x86_64
// plugin: LD_LIBRARY_PATH=/usr/lib/llvm-16/lib ./cholesky.
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include "../no_device.h"

#pragma omp declare target
// Tiles are TS x TS, row-major. Only the lower triangle of the matrix is stored.
static void potrf(double *a, int ts) {
  for (int j = 0; j < ts; j++) {
    double d = a[j * ts + j];
    for (int k = 0; k < j; k++) d -= a[j * ts + k] * a[j * ts + k];
    d = sqrt(d);
    a[j * ts + j] = d;
    for (int i = j + 1; i < ts; i++) {
      double s = a[i * ts + j];
      for (int k = 0; k < j; k++) s -= a[i * ts + k] * a[j * ts + k];
      a[i * ts + j] = s / d;
    }
    for (int i = 0; i < j; i++) a[i * ts + j] = 0.0; // upper part of the diagonal tile
  }
}
// b := b * inv(l)^T, l lower triangular (the factored diagonal tile).
static void trsm(const double *l, double *b, int ts) {
  for (int i = 0; i < ts; i++)
    for (int j = 0; j < ts; j++) {
      double s = b[i * ts + j];
      for (int k = 0; k < j; k++) s -= b[i * ts + k] * l[j * ts + k];
      b[i * ts + j] = s / l[j * ts + j];
    }
}
// c := c - a * b^T
static void gemm_nt(const double *a, const double *b, double *c, int ts) {
  for (int i = 0; i < ts; i++)
    for (int j = 0; j < ts; j++) {
      double s = 0.0;
      for (int k = 0; k < ts; k++) s += a[i * ts + k] * b[j * ts + k];
      c[i * ts + j] -= s;
    }
}
#pragma omp end declare target

int main(int argc, char **argv) {
  if (no_device("cholesky")) return 3;
  int n = argc > 1 ? atoi(argv[1]) : 512;
  int ts = argc > 2 ? atoi(argv[2]) : 128;
  if (n <= 0 || ts <= 0 || n % ts) {
    fprintf(stderr, "usage: %s [N] [TS]  (N a positive multiple of TS)\n", argv[0]);
    return 2;
  }
  int nt = n / ts;
  size_t tl = (size_t)ts * ts;
  double **T = calloc((size_t)nt * nt, sizeof *T); // T[i*nt+j], j <= i
  double *orig = malloc((size_t)n * n * sizeof(double));
  for (int r = 0; r < n; r++)
    for (int c = 0; c < n; c++)
      orig[(size_t)r * n + c] = 1.0 / (r + c + 1) + (r == c ? n : 0.0); // symmetric positive definite
  for (int i = 0; i < nt; i++)
    for (int j = 0; j <= i; j++) {
      double *t = T[i * nt + j] = malloc(tl * sizeof(double));
      for (int r = 0; r < ts; r++)
        for (int c = 0; c < ts; c++) t[r * ts + c] = orig[(size_t)(i * ts + r) * n + j * ts + c];
      #pragma omp target enter data map(to: t[0:tl])
    }

  int tasks = 0;
  double t0 = omp_get_wtime();
  #pragma omp parallel
  #pragma omp single
  for (int k = 0; k < nt; k++) {
    double *akk = T[k * nt + k];
    #pragma omp target map(tofrom: akk[0:tl]) depend(inout: akk[0]) nowait
    potrf(akk, ts);
    tasks++;
    for (int i = k + 1; i < nt; i++) {
      double *aik = T[i * nt + k];
      #pragma omp target map(to: akk[0:tl]) map(tofrom: aik[0:tl]) depend(in: akk[0]) depend(inout: aik[0]) nowait
      trsm(akk, aik, ts);
      tasks++;
    }
    for (int i = k + 1; i < nt; i++) {
      double *aik = T[i * nt + k];
      for (int j = k + 1; j <= i; j++) {
        double *ajk = T[j * nt + k], *aij = T[i * nt + j];
        #pragma omp target map(to: aik[0:tl], ajk[0:tl]) map(tofrom: aij[0:tl]) \
            depend(in: aik[0], ajk[0]) depend(inout: aij[0]) nowait
        gemm_nt(aik, ajk, aij, ts);
        tasks++;
      }
    }
  }
  double t1 = omp_get_wtime();
  for (int i = 0; i < nt; i++)
    for (int j = 0; j <= i; j++) {
      double *t = T[i * nt + j];
      #pragma omp target exit data map(from: t[0:tl])
    }
  if (argc > 3 && !strcmp(argv[3], "nocheck")) {
    printf("cholesky N=%d TS=%d tasks=%d: %.3f s, result not checked\n", n, ts, tasks, t1 - t0);
    return 0;
  }

  // Check: (L * L^T)[r][c] == orig[r][c] for the lower triangle.
  double max_err = 0.0;
  for (int r = 0; r < n; r++)
    for (int c = 0; c <= r; c++) {
      double s = 0.0;
      for (int k = 0; k <= c; k++) {
        double lr = T[(r / ts) * nt + k / ts][(r % ts) * ts + k % ts];
        double lc = T[(c / ts) * nt + k / ts][(c % ts) * ts + k % ts];
        s += lr * lc;
      }
      double err = fabs(s - orig[(size_t)r * n + c]);
      if (err > max_err) max_err = err;
    }
  int ok = max_err < 1e-8 * n;
  printf("cholesky N=%d TS=%d tasks=%d: %.3f s, max error %g: %s\n", n, ts, tasks, t1 - t0, max_err,
         ok ? "result correct" : "RESULT WRONG");
  return ok ? 0 : 1;
}
