// Thousands of tiny target regions (argv[1], default 5000): each maps its own 8-byte heap
// cell (a fresh device buffer per region) and writes it; the host checks the cells and the
// sum. Independent regions, so the runtime may place them on any worker.
#include "check.h"
#include <omp.h>

int main(int argc, char **argv) {
  int n = argc > 1 ? atoi(argv[1]) : 5000;
  long **cells = malloc(n * sizeof(long *));
  for (int t = 0; t < n; t++) {
    cells[t] = malloc(sizeof(long));
    *cells[t] = t;
  }
  for (int t = 0; t < n; t++) {
    long *cell = cells[t];
#pragma omp target map(tofrom: cell[0:1]) firstprivate(t)
    cell[0] = cell[0] * 2 + (long)t + 1;
  }
  long sum = 0;
  for (int t = 0; t < n; t++) {
    CHECK(*cells[t] == (long)t * 3 + 1, "cell %d=%ld", t, *cells[t]);
    sum += *cells[t];
    free(cells[t]);
  }
  long want = 3L * n * (n - 1) / 2 + n;
  CHECK(sum == want, "sum=%ld want %ld", sum, want);
  free(cells);
  return finish("many_tasks");
}
