// Cost of memory allocated by device code (malloc/free in target regions), per allocation.
//   device_alloc K ROUNDS
// Each round: region A allocates K blocks of 32 bytes and stores the pointers in a device
// array (they outlive the region: the runtime must learn of them); region B frees them;
// region C allocates and frees K blocks itself (never seen outside the region).
// Prints the median over rounds of each region's time divided by K, in microseconds.
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include "../examples/no_device.h"

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static double median(double *v, int n) {
  qsort(v, n, sizeof(double), cmp);
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

int main(int argc, char **argv) {
  int k = argc > 1 ? atoi(argv[1]) : 1000;
  int rounds = argc > 2 ? atoi(argv[2]) : 5;
  if (k < 1 || rounds < 1) {
    fprintf(stderr, "usage: device_alloc K>=1 ROUNDS>=1\n");
    return 2;
  }
  if (no_device("device_alloc")) return 3;
  long **ptrs = malloc(sizeof(long *) * k);
  long sum = 0;
  double *ta = malloc(sizeof(double) * rounds), *tb = malloc(sizeof(double) * rounds),
         *tc = malloc(sizeof(double) * rounds);
#pragma omp target enter data map(alloc: ptrs[0:k])
  for (int r = 0; r < rounds; r++) {
    double t0 = omp_get_wtime();
#pragma omp target map(alloc: ptrs[0:k])
    for (int i = 0; i < k; i++) {
      ptrs[i] = (long *)malloc(32);
      ptrs[i][0] = i;
    }
    double t1 = omp_get_wtime();
#pragma omp target map(alloc: ptrs[0:k]) map(tofrom: sum)
    for (int i = 0; i < k; i++) {
      sum += ptrs[i][0];
      free(ptrs[i]);
    }
    double t2 = omp_get_wtime();
#pragma omp target map(tofrom: sum)
    {
      // Called through volatile pointers, so the compiler cannot drop the malloc/free pair.
      void *(*volatile alloc)(size_t) = malloc;
      void (*volatile release)(void *) = free;
      for (int i = 0; i < k; i++) {
        long *p = (long *)alloc(32);
        p[0] = i;
        sum += p[0];
        release(p);
      }
    }
    double t3 = omp_get_wtime();
    ta[r] = (t1 - t0) / k * 1e6;
    tb[r] = (t2 - t1) / k * 1e6;
    tc[r] = (t3 - t2) / k * 1e6;
  }
#pragma omp target exit data map(delete: ptrs[0:k])
  long want = (long)rounds * 2 * ((long)k * (k - 1) / 2);
  if (sum != want) {
    printf("device_alloc: wrong sum %ld, expected %ld\n", sum, want);
    return 1;
  }
  printf("alloc_kept_us %.3f free_us %.3f alloc_free_in_region_us %.3f\n", median(ta, rounds),
         median(tb, rounds), median(tc, rounds));
  return 0;
}
