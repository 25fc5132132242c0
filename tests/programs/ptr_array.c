// An array of device pointers stored in device memory: several arrays from omp_target_alloc,
// their addresses copied into a device array with omp_target_memcpy; kernels dereference them
// (the runtime must find the buffers reachable through the stored pointers).
#include "check.h"
#include <omp.h>

#define K 6
#define N 5000

int main(void) {
  int dev = omp_get_default_device();
  int host = omp_get_initial_device();
  double *arrays[K];
  double *h = malloc(N * sizeof(double));
  for (int k = 0; k < K; k++) {
    arrays[k] = omp_target_alloc(N * sizeof(double), dev);
    for (int i = 0; i < N; i++) h[i] = k * 100000 + i;
    omp_target_memcpy(arrays[k], h, N * sizeof(double), 0, 0, dev, host);
  }
  double **table = omp_target_alloc(K * sizeof(double *), dev);
  CHECK(omp_target_memcpy(table, arrays, K * sizeof(double *), 0, 0, dev, host) == 0, "memcpy table");

  // Only the table is passed: the arrays are reached through it.
  for (int round = 0; round < 5; round++) {
#pragma omp target is_device_ptr(table) firstprivate(round)
    for (int k = 0; k < K; k++)
      for (int i = 0; i < N; i++) table[k][i] += k + round;
  }
  double sums[K];
#pragma omp target is_device_ptr(table) map(from: sums)
  for (int k = 0; k < K; k++) {
    double t = 0;
    for (int i = 0; i < N; i++) t += table[k][i];
    sums[k] = t;
  }
  for (int k = 0; k < K; k++) {
    double want = 0;
    for (int i = 0; i < N; i++) want += k * 100000 + i + 5 * k + 10;
    CHECK(sums[k] == want, "sums[%d]=%.1f want %.1f", k, sums[k], want);
    omp_target_memcpy(h, arrays[k], N * sizeof(double), 0, 0, host, dev);
    for (int i = 0; i < N; i++)
      CHECK(h[i] == k * 100000 + i + 5 * k + 10, "arrays[%d][%d]=%g", k, i, h[i]);
  }

  // The same pointers in a host array mapped with map(to:): found in submitted data.
  double *htable[K];
  for (int k = 0; k < K; k++) htable[k] = arrays[k];
#pragma omp target map(to: htable)
  for (int k = 0; k < K; k++)
    for (int i = 0; i < N; i++) htable[k][i] -= 10;
  double first[K];
#pragma omp target map(to: htable) map(from: first)
  for (int k = 0; k < K; k++) first[k] = htable[k][1];
  for (int k = 0; k < K; k++)
    CHECK(first[k] == k * 100000 + 1 + 5 * k, "htable[%d][1]=%g", k, first[k]);

  // A device-side table built by a kernel: pointers written in device memory by a region.
  double **table2 = omp_target_alloc(K * sizeof(double *), dev);
  double *base = arrays[0];
#pragma omp target is_device_ptr(table2, base)
  for (int k = 0; k < K; k++) table2[k] = base + k * (N / K);
#pragma omp target is_device_ptr(table2)
  for (int k = 0; k < K; k++) table2[k][0] = -1.0 - k;
  omp_target_memcpy(h, arrays[0], N * sizeof(double), 0, 0, host, dev);
  for (int k = 0; k < K; k++)
    CHECK(h[k * (N / K)] == -1.0 - k, "arrays[0][%d]=%g", k * (N / K), h[k * (N / K)]);

  for (int k = 0; k < K; k++) omp_target_free(arrays[k], dev);
  omp_target_free(table, dev);
  omp_target_free(table2, dev);
  free(h);
  return finish("ptr_array");
}
