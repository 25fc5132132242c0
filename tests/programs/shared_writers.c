// Regions running at the same time that write one buffer (issue 10, item 1): each region
// writes its own slice of `work` (disjoint writes) and takes a ticket with an atomic capture,
// then writes order[ticket] (overlapping writes). Legal on one device; the result must be one
// that some order of the regions could give: ticket == R, order[] a permutation of 0..R-1,
// every slice written by its region.
// Usage: shared_writers N R ROUNDS TEAMS   (TEAMS=1: `target teams distribute parallel for`)
#include "check.h"
#include <omp.h>
#include <string.h>

int main(int argc, char **argv) {
  int n = argc > 1 ? atoi(argv[1]) : 64;
  int r = argc > 2 ? atoi(argv[2]) : 16;
  int rounds = argc > 3 ? atoi(argv[3]) : 3;
  int teams = argc > 4 ? atoi(argv[4]) : 0;
  if (n < 1 || r < 1 || r > 4096 || rounds < 1) {
    fprintf(stderr, "usage: shared_writers N R ROUNDS TEAMS\n");
    return 2;
  }
  double *work = malloc(sizeof(double) * (size_t)r * n);
  int *order = malloc(sizeof(int) * r);
  for (int round = 0; round < rounds; round++) {
    int ticket = 0;
    for (int i = 0; i < r; i++) order[i] = -1;
    memset(work, 0, sizeof(double) * (size_t)r * n);
#pragma omp target enter data map(to: ticket, order[0:r]) map(alloc: work[0:r*n])
#pragma omp parallel num_threads(4)
#pragma omp single
    for (int i = 0; i < r; i++) {
      if (teams) {
#pragma omp target teams distribute parallel for map(alloc: work[i*n:n], ticket, order[0:r]) nowait firstprivate(i, round)
        for (int j = 0; j < n; j++) {
          work[(size_t)i * n + j] = i * 1000.0 + j + round;
          if (j == 0) {
            int t;
#pragma omp atomic capture
            t = ticket++;
            order[t] = i;
          }
        }
      } else {
#pragma omp target map(alloc: work[i*n:n], ticket, order[0:r]) nowait firstprivate(i, round)
        {
          for (int j = 0; j < n; j++) work[(size_t)i * n + j] = i * 1000.0 + j + round;
          int t;
#pragma omp atomic capture
          t = ticket++;
          order[t] = i;
        }
      }
    }
#pragma omp taskwait
#pragma omp target exit data map(from: ticket, order[0:r], work[0:r*n])
    CHECK(ticket == r, "round %d: ticket %d, expected %d", round, ticket, r);
    int *seen = calloc(r, sizeof(int));
    for (int t = 0; t < r; t++) {
      CHECK(order[t] >= 0 && order[t] < r && !seen[order[t]], "round %d: order[%d] = %d", round, t, order[t]);
      if (order[t] >= 0 && order[t] < r) seen[order[t]] = 1;
    }
    free(seen);
    for (int i = 0; i < r; i++)
      for (int j = 0; j < n; j++)
        CHECK(work[(size_t)i * n + j] == i * 1000.0 + j + round, "round %d: work[%d][%d] = %g", round, i, j,
              work[(size_t)i * n + j]);
  }
  free(work);
  free(order);
  return finish("shared_writers");
}
