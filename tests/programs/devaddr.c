// use_device_ptr / use_device_addr: device addresses of mapped buffers used with
// is_device_ptr and omp_target_memcpy, mixed with mapped accesses to the same buffers.
#include "check.h"
#include <omp.h>

#define N 4096

int main(void) {
  int dev = omp_get_default_device(), host = omp_get_initial_device();
  double *a = malloc(N * sizeof(double));
  double *b = malloc(N * sizeof(double));
  double *tmp = malloc(N * sizeof(double));
  for (int i = 0; i < N; i++) {
    a[i] = i;
    b[i] = 0;
    tmp[i] = -i;
  }
#pragma omp target data map(tofrom: a[0:N], b[0:N])
  {
    double *da = NULL, *db = NULL;
#pragma omp target data use_device_ptr(a, b)
    {
      da = a;
      db = b;
    }
    CHECK(da != NULL && da != a, "use_device_ptr gave %p for host %p", (void *)da, (void *)a);
    CHECK(omp_target_is_present(a, dev), "a not present");
    // A kernel through the device pointers.
#pragma omp target is_device_ptr(da, db)
    for (int i = 0; i < N; i++) db[i] = da[i] + 1;
    // A kernel through the mapping sees it.
    double s = 0;
#pragma omp target map(tofrom: s)
    {
      double t = 0;
      for (int i = 0; i < N; i++) t += b[i];
      s = t;
    }
    CHECK(s == (double)N * (N - 1) / 2 + N, "s=%g", s);
    // omp_target_memcpy into a mapped buffer (second half of a), then a mapped kernel.
    CHECK(omp_target_memcpy(da, tmp, N / 2 * sizeof(double), N / 2 * sizeof(double), N / 2 * sizeof(double), dev, host) == 0,
          "memcpy tmp->a");
#pragma omp target
    for (int i = 0; i < N; i++) a[i] *= 2;
    // Device -> device between two mapped buffers.
    CHECK(omp_target_memcpy(db, da, N * sizeof(double), 0, 0, dev, dev) == 0, "memcpy a->b");
#pragma omp target data use_device_addr(a[0:N])
    {
      double *p = &a[0];
#pragma omp target is_device_ptr(p)
      for (int i = 0; i < N; i++) p[i] += 0.25;
    }
  }
  for (int i = 0; i < N; i++) {
    double wa = (i < N / 2 ? i : -i) * 2.0;
    CHECK(b[i] == wa, "b[%d]=%g want %g", i, b[i], wa);
    CHECK(a[i] == wa + 0.25, "a[%d]=%g want %g", i, a[i], wa + 0.25);
  }
  free(a);
  free(b);
  free(tmp);
  return finish("devaddr");
}
