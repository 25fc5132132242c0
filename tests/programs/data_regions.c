// Nested data regions, enter/exit data with delete/release and reference counts.
#include "check.h"
#include <omp.h>

#define N 4096

int main(void) {
  int dev = omp_get_default_device();
  double *a = malloc(N * sizeof(double));
  double *b = malloc(N * sizeof(double));
  for (int i = 0; i < N; i++) {
    a[i] = i;
    b[i] = 0;
  }

  // target data inside target data: the inner map of a is a no-op (already present), the
  // inner map(from: b) copies b back at the end of the inner region.
#pragma omp target data map(tofrom: a[0:N])
  {
#pragma omp target
    for (int i = 0; i < N; i++) a[i] += 1;
#pragma omp target data map(to: a[0:N]) map(from: b[0:N])
    {
#pragma omp target
      for (int i = 0; i < N; i++) b[i] = a[i] * 2;
    }
    // b came back at the end of the inner region; a is not yet copied back.
    for (int i = 0; i < N; i++) CHECK(b[i] == 2.0 * (i + 1), "b[%d]=%g", i, b[i]);
    CHECK(a[5] == 5, "a[5]=%g copied back too early", a[5]);
#pragma omp target
    for (int i = 0; i < N; i++) a[i] *= 10;
  }
  for (int i = 0; i < N; i++) CHECK(a[i] == 10.0 * (i + 1), "a[%d]=%g", i, a[i]);

  // enter/exit data
  for (int i = 0; i < N; i++) b[i] = i;
#pragma omp target enter data map(to: b[0:N])
  CHECK(omp_target_is_present(b, dev), "b not present after enter data");
#pragma omp target
  for (int i = 0; i < N; i++) b[i] = b[i] * b[i];
#pragma omp target exit data map(from: b[0:N])
  CHECK(!omp_target_is_present(b, dev), "b still present after exit data");
  for (int i = 0; i < N; i++) CHECK(b[i] == (double)i * i, "b[%d]=%g", i, b[i]);

  // Reference counting: entered twice, released once (stays), then deleted.
  int *c = malloc(N * sizeof(int));
  for (int i = 0; i < N; i++) c[i] = 1;
#pragma omp target enter data map(to: c[0:N])
#pragma omp target enter data map(to: c[0:N])
#pragma omp target
  for (int i = 0; i < N; i++) c[i] += 1;
#pragma omp target exit data map(release: c[0:N])
  CHECK(omp_target_is_present(c, dev), "c gone after one release of two references");
#pragma omp target
  for (int i = 0; i < N; i++) c[i] += 1;
  // still the host copy: nothing was copied back
  CHECK(c[0] == 1, "c[0]=%d on the host before exit data", c[0]);
#pragma omp target exit data map(from: c[0:N])
  CHECK(!omp_target_is_present(c, dev), "c still present");
  for (int i = 0; i < N; i++) CHECK(c[i] == 3, "c[%d]=%d", i, c[i]);

  // delete: the device copy is dropped without copy-back, whatever the reference count.
  for (int i = 0; i < N; i++) c[i] = 5;
#pragma omp target enter data map(to: c[0:N])
#pragma omp target enter data map(to: c[0:N])
#pragma omp target
  for (int i = 0; i < N; i++) c[i] = -1;
#pragma omp target exit data map(delete: c[0:N])
  CHECK(!omp_target_is_present(c, dev), "c present after delete");
  for (int i = 0; i < N; i++) CHECK(c[i] == 5, "c[%d]=%d after delete", i, c[i]);
  // mapped again: fresh copy from the host
#pragma omp target map(tofrom: c[0:N])
  for (int i = 0; i < N; i++) c[i] += 2;
  for (int i = 0; i < N; i++) CHECK(c[i] == 7, "c[%d]=%d", i, c[i]);

  // alloc via enter data, filled on the device, read back with exit data from
  double *d = malloc(N * sizeof(double));
#pragma omp target enter data map(alloc: d[0:N])
#pragma omp target
  for (int i = 0; i < N; i++) d[i] = 0.5 * i;
#pragma omp target exit data map(from: d[0:N])
  for (int i = 0; i < N; i++) CHECK(d[i] == 0.5 * i, "d[%d]=%g", i, d[i]);

  // Many allocations entered and freed in a loop (address reuse).
  for (int round = 0; round < 50; round++) {
    int *e = malloc((100 + round) * sizeof(int));
    int n = 100 + round;
    for (int i = 0; i < n; i++) e[i] = round;
#pragma omp target enter data map(to: e[0:n])
#pragma omp target
    for (int i = 0; i < n; i++) e[i] += i;
#pragma omp target exit data map(from: e[0:n])
    for (int i = 0; i < n; i++) CHECK(e[i] == round + i, "round %d e[%d]=%d", round, i, e[i]);
    free(e);
  }
  free(a);
  free(b);
  free(c);
  free(d);
  return finish("data_regions");
}
