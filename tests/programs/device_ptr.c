// omp_target_alloc'd memory: is_device_ptr with offsets, omp_target_memcpy host<->device and
// device<->device, with offsets, and omp_target_free.
#include "check.h"
#include <omp.h>

#define N 10000

int main(void) {
  int dev = omp_get_default_device();
  int host = omp_get_initial_device();
  double *h = malloc(N * sizeof(double));
  for (int i = 0; i < N; i++) h[i] = i;

  double *d1 = omp_target_alloc(N * sizeof(double), dev);
  double *d2 = omp_target_alloc(N * sizeof(double), dev);
  CHECK(d1 && d2, "omp_target_alloc returned NULL");
  CHECK(omp_target_memcpy(d1, h, N * sizeof(double), 0, 0, dev, host) == 0, "memcpy h->d1");

  // Kernel on an interior pointer: d1 + 100, for 1000 elements.
  double *mid = d1 + 100;
#pragma omp target is_device_ptr(mid)
  for (int i = 0; i < 1000; i++) mid[i] = -mid[i];

  // Pointer arithmetic inside the region, negative offsets.
  double *end = d1 + N;
#pragma omp target is_device_ptr(end)
  for (int i = 1; i <= 10; i++) end[-i] = 1000000 + i;

  // device -> device copy with offsets: d2[0:N] = d1[0:N] shifted by 50 elements.
  CHECK(omp_target_memcpy(d2, d1, (N - 50) * sizeof(double), 0, 50 * sizeof(double), dev, dev) == 0,
        "memcpy d1->d2");
  // tail of d2 from the host
  CHECK(omp_target_memcpy(d2, h, 50 * sizeof(double), (N - 50) * sizeof(double), 0, dev, host) == 0,
        "memcpy h->d2 tail");

  // device -> host, with a destination offset.
  double *back = calloc(N + 10, sizeof(double));
  CHECK(omp_target_memcpy(back, d2, N * sizeof(double), 10 * sizeof(double), 0, host, dev) == 0, "memcpy d2->h");
  for (int i = 0; i < N; i++) {
    double want;
    if (i < N - 50) {
      int j = i + 50;
      want = (j >= 100 && j < 1100) ? -j : (j >= N - 10 ? 1000000 + (N - j) : j);
    } else {
      want = i - (N - 50);
    }
    CHECK(back[i + 10] == want, "back[%d]=%g want %g", i + 10, back[i + 10], want);
  }
  for (int i = 0; i < 10; i++) CHECK(back[i] == 0, "back[%d]=%g overwritten", i, back[i]);

  // A kernel reads one device array and writes another; result read with a partial memcpy.
  int *di = omp_target_alloc(N * sizeof(int), dev);
#pragma omp target is_device_ptr(d2, di)
  for (int i = 0; i < N; i++) di[i] = (int)d2[i] % 7;
  int part[100];
  CHECK(omp_target_memcpy(part, di, sizeof(part), 0, 5000 * sizeof(int), host, dev) == 0, "memcpy di->part");
  for (int i = 0; i < 100; i++) {
    int want = (int)back[5000 + i + 10] % 7;
    CHECK(part[i] == want, "part[%d]=%d want %d", i, part[i], want);
  }

  // Device pointer passed through a mapped struct-free scalar: uintptr_t arithmetic.
  long sum = 0;
#pragma omp target is_device_ptr(di) map(tofrom: sum)
  {
    long t = 0;
    int *p = di + N / 2;
    for (int i = -10; i < 10; i++) t += p[i];
    sum = t;
  }
  long want_sum = 0;
  for (int i = N / 2 - 10; i < N / 2 + 10; i++) want_sum += (int)back[i + 10] % 7;
  CHECK(sum == want_sum, "sum=%ld want %ld", sum, want_sum);

  omp_target_free(d1, dev);
  omp_target_free(d2, dev);
  omp_target_free(di, dev);
  // Allocate again after frees.
  double *d3 = omp_target_alloc(N * sizeof(double), dev);
#pragma omp target is_device_ptr(d3)
  for (int i = 0; i < N; i++) d3[i] = 2 * i;
  CHECK(omp_target_memcpy(h, d3, N * sizeof(double), 0, 0, host, dev) == 0, "memcpy d3->h");
  for (int i = 0; i < N; i++) CHECK(h[i] == 2.0 * i, "h[%d]=%g", i, h[i]);
  omp_target_free(d3, dev);
  free(h);
  free(back);
  return finish("device_ptr");
}
