// Regions that share one worker's copy of a buffer: in each round a region that reads one half
// of `x` runs at the same time as a region that rewrites the other half (one device memory: no
// dependence is needed) and ends after it, so the task record can list the reader, of the
// version before the rewrite, after the writer. When that worker dies, recovery runs the writers
// again; each must leave the version its round's reader needs.
//   ft_shared_reader [ROUNDS] [READER_MS] [N]
#include "check.h"
#include <unistd.h>

int main(int argc, char **argv) {
  int rounds = argc > 1 ? atoi(argv[1]) : 12;
  int ms = argc > 2 ? atoi(argv[2]) : 50;
  int n = argc > 3 ? atoi(argv[3]) : 1 << 14;
  if (rounds < 1 || ms < 0 || n < 2) {
    fprintf(stderr, "usage: ft_shared_reader [ROUNDS>=1] [READER_MS>=0] [N>=2]\n");
    return 2;
  }
  int h = n / 2;
  int *x = malloc(n * sizeof(int)), *y = malloc((size_t)rounds * h * sizeof(int));
  for (int i = 0; i < n; i++) x[i] = i;
#pragma omp target enter data map(to: x[0:n]) map(alloc: y[0:rounds * h])
#pragma omp target
  for (int i = 0; i < n; i++) x[i] = 3 * x[i] + 1;
  // Several threads launch the tasks, so that the two regions of a round run at once.
#pragma omp parallel num_threads(4)
#pragma omp single
  for (int r = 0; r < rounds; r++) {
    // The writer, quick, is launched first; the reader, started meanwhile, ends after it.
#pragma omp target nowait firstprivate(r, h, n)
    for (int i = h; i < n; i++) x[i] += r + 1;
    // The reader sees the first half, which no region of this round changes.
#pragma omp target nowait firstprivate(ms, r, h)
    {
      usleep(ms * 1000);
      for (int i = 0; i < h; i++) y[r * h + i] = 2 * x[i] + r;
    }
#pragma omp taskwait
    // The next round's reader reads the version this round's writer made.
#pragma omp target firstprivate(r, h)
    for (int i = 0; i < h; i++) x[i] = x[i + h] - x[i];
  }
  printf("ft_shared_reader: regions done\n");
  fflush(stdout);
#pragma omp target exit data map(from: x[0:n], y[0:rounds * h])
  // On the host, the same computation.
  int *ex = malloc(n * sizeof(int));
  for (int i = 0; i < n; i++) ex[i] = 3 * i + 1;
  for (int r = 0; r < rounds; r++) {
    for (int i = 0; i < h; i++) CHECK(y[r * h + i] == 2 * ex[i] + r, "round %d: y[%d] = %d, expected %d", r, i, y[r * h + i], 2 * ex[i] + r);
    for (int i = h; i < n; i++) ex[i] += r + 1;
    for (int i = 0; i < h; i++) ex[i] = ex[i + h] - ex[i];
  }
  for (int i = 0; i < n; i++) CHECK(x[i] == ex[i], "x[%d] = %d, expected %d", i, x[i], ex[i]);
  free(ex);
  free(x);
  free(y);
  return finish("ft_shared_reader");
}
