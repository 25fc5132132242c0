// What summing in a fixed order costs (docs/recovery.md, "Replicas and voting": with replicas
// every worker sets KMP_DETERMINISTIC_REDUCTION=true): R parallel regions, each a
// `parallel for reduction(+:s)` over 64 doubles on the default team; prints the time per
// region in microseconds and the total (the same with either method only by chance).
//   clang-16 -O2 -fopenmp bench/reduction_order.c -o reduction_order
//   KMP_DETERMINISTIC_REDUCTION=false ./reduction_order 1000000
//   KMP_DETERMINISTIC_REDUCTION=true ./reduction_order 1000000
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv) {
  int r = argc > 1 ? atoi(argv[1]) : 1000000;
  if (r < 1) {
    fprintf(stderr, "usage: %s [REGIONS]  (REGIONS >= 1)\n", argv[0]);
    return 2;
  }
  static double v[64];
  for (int i = 0; i < 64; i++) v[i] = 1.0 / (i + 1);
  double total = 0, t0 = omp_get_wtime();
  for (int k = 0; k < r; k++) {
    double s = 0.5;
    #pragma omp parallel for reduction(+:s) schedule(static)
    for (int i = 0; i < 64; i++) s += v[i];
    total += s;
  }
  double t = omp_get_wtime() - t0;
  printf("threads %d us_per_region %.3f total %.17g\n", omp_get_max_threads(), 1e6 * t / r, total);
  return 0;
}
