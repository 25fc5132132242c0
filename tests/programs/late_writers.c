// Regions whose kernel wrote a buffer in none of its earlier runs (so they are not placed
// together) write it at the same time on different workers: changes to different bytes are
// merged (issue 10, item 1). Round 0 writes nothing (the condition is false); from round 1 on
// each region writes its own elements of `hits`, and its own slice of `out`; with COUNT=1 it
// also bumps one shared counter (an atomic update: the same bytes, which cannot be merged, so
// one of the two regions runs again over the other's change).
// Usage: late_writers R N ROUNDS COUNT
#include "check.h"
#include <unistd.h>

int main(int argc, char **argv) {
  int r = argc > 1 ? atoi(argv[1]) : 12;
  int n = argc > 2 ? atoi(argv[2]) : 100;
  int rounds = argc > 3 ? atoi(argv[3]) : 3;
  int counting = argc > 4 ? atoi(argv[4]) : 0;
  if (r < 1 || n < 1 || rounds < 2) {
    fprintf(stderr, "usage: late_writers R N ROUNDS (ROUNDS >= 2)\n");
    return 2;
  }
  int *hits = calloc(r, sizeof(int));
  double *out = calloc((size_t)r * n, sizeof(double));
  int count[1] = {0};
#pragma omp target enter data map(to: hits[0:r], out[0:r*n], count[0:1])
  for (int round = 0; round < rounds; round++) {
#pragma omp parallel num_threads(4)
#pragma omp single
    for (int i = 0; i < r; i++) {
#pragma omp target nowait map(alloc: hits[0:r], out[0:r*n], count[0:1]) firstprivate(i, round, n, counting)
      {
        usleep(20000 * (1 + i % 2)); // long enough that the regions overlap in time
        if (round > 0) {
          hits[i] += round;
          for (int j = 0; j < n; j++) out[(size_t)i * n + j] = round * 1000.0 + i + j;
          if (counting) {
#pragma omp atomic update
            count[0] += 1;
          }
        }
      }
    }
  }
#pragma omp target exit data map(from: hits[0:r], out[0:r*n], count[0:1])
  int expect = rounds * (rounds - 1) / 2;
  CHECK(count[0] == (counting ? (rounds - 1) * r : 0), "count = %d", count[0]);
  for (int i = 0; i < r; i++) {
    CHECK(hits[i] == expect, "hits[%d] = %d, expected %d", i, hits[i], expect);
    for (int j = 0; j < n; j++)
      CHECK(out[(size_t)i * n + j] == (rounds - 1) * 1000.0 + i + j, "out[%d][%d] = %g", i, j, out[(size_t)i * n + j]);
  }
  free(hits);
  free(out);
  return finish("late_writers");
}
