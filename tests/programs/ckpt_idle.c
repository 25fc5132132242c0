// Regions that change no device data for argv[1] ms, then regions that rewrite one buffer on a
// worker for argv[2] ms: the checkpoints that fall due in the first phase have nothing to save.
// (Each region is in a function of its own: clang-16 grows the stack of the function holding a
// target region by about 128 bytes per run of it, so 65,000 runs in one loop overflow an 8 MiB
// stack, under the stock plugin too.)
#include "check.h"
#include <omp.h>

__attribute__((noinline)) static void idle_region(long idle) {
#pragma omp target firstprivate(idle)
  {
    volatile long x = idle;
    (void)x;
  }
}

__attribute__((noinline)) static void busy_region(int *a, int n, long busy) {
#pragma omp target firstprivate(busy, n)
  for (int i = 0; i < n; i++) a[i] = (int)busy + i;
}

int main(int argc, char **argv) {
  double idle_ms = argc > 1 ? atof(argv[1]) : 300;
  double busy_ms = argc > 2 ? atof(argv[2]) : 200;
  int n = 4096;
  long idle = 0, busy = 0;
  double t0 = omp_get_wtime();
  while ((omp_get_wtime() - t0) * 1e3 < idle_ms) idle_region(idle++);
  int *a = malloc(n * sizeof(int));
#pragma omp target enter data map(alloc: a[0:n])
  t0 = omp_get_wtime();
  do busy_region(a, n, ++busy);
  while ((omp_get_wtime() - t0) * 1e3 < busy_ms);
#pragma omp target exit data map(from: a[0:n])
  for (int i = 0; i < n; i++) CHECK(a[i] == (int)busy + i, "a[%d] = %d, expected %ld", i, a[i], busy + i);
  printf("ckpt_idle: %ld idle regions, %ld busy regions\n", idle, busy);
  free(a);
  return finish("ckpt_idle");
}
