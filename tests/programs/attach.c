// Pointer attachment: an array of structs mapped once, then each struct's pointee mapped with
// enter data (libomptarget writes the device pointer into the device copy of the struct);
// kernels follow the pointers.
#include "check.h"
#include <omp.h>

#define R 8
#define N 500

typedef struct {
  int n;
  double *v;
} Row;

int main(void) {
  Row rows[R];
  for (int r = 0; r < R; r++) {
    rows[r].n = N;
    rows[r].v = malloc(N * sizeof(double));
    for (int i = 0; i < N; i++) rows[r].v[i] = r * N + i;
  }
#pragma omp target enter data map(to: rows[0:R])
  for (int r = 0; r < R; r++) {
#pragma omp target enter data map(to: rows[r].v[0:N])
  }
  for (int rep = 0; rep < 4; rep++) {
#pragma omp target firstprivate(rep)
    for (int r = 0; r < R; r++)
      for (int i = 0; i < rows[r].n; i++) rows[r].v[i] += rep;
  }
  double sums[R];
#pragma omp target map(from: sums)
  for (int r = 0; r < R; r++) {
    double t = 0;
    for (int i = 0; i < rows[r].n; i++) t += rows[r].v[i];
    sums[r] = t;
  }
  for (int r = 0; r < R; r++) {
#pragma omp target exit data map(from: rows[r].v[0:N])
  }
#pragma omp target exit data map(delete: rows[0:R])
  for (int r = 0; r < R; r++) {
    double want = 0;
    for (int i = 0; i < N; i++) {
      CHECK(rows[r].v[i] == r * N + i + 6, "rows[%d].v[%d]=%g", r, i, rows[r].v[i]);
      want += r * N + i + 6;
    }
    CHECK(sums[r] == want, "sums[%d]=%g want %g", r, sums[r], want);
    free(rows[r].v);
  }

  return finish("attach");
}
