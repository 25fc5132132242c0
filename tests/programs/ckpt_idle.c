// Regions that change no device data for argv[1] ms, then regions that rewrite one buffer on a
// worker for argv[2] ms: the checkpoints that fall due in the first phase have nothing to save.
#include "check.h"
#include <omp.h>

int main(int argc, char **argv) {
  double idle_ms = argc > 1 ? atof(argv[1]) : 300;
  double busy_ms = argc > 2 ? atof(argv[2]) : 200;
  int n = 4096;
  long idle = 0, busy = 0;
  double t0 = omp_get_wtime();
  while ((omp_get_wtime() - t0) * 1e3 < idle_ms) {
#pragma omp target firstprivate(idle)
    {
      volatile long x = idle;
      (void)x;
    }
    idle++;
  }
  int *a = malloc(n * sizeof(int));
#pragma omp target enter data map(alloc: a[0:n])
  t0 = omp_get_wtime();
  while ((omp_get_wtime() - t0) * 1e3 < busy_ms) {
    busy++;
#pragma omp target firstprivate(busy)
    for (int i = 0; i < n; i++) a[i] = (int)busy + i;
  }
#pragma omp target exit data map(from: a[0:n])
  for (int i = 0; i < n; i++) CHECK(a[i] == (int)busy + i, "a[%d] = %d, expected %ld", i, a[i], busy + i);
  printf("ckpt_idle: %ld idle regions, %ld busy regions\n", idle, busy);
  free(a);
  return finish("ckpt_idle");
}
