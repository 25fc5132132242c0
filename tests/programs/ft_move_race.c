// A copy moved from a worker while a kernel placed there after the move began changes it.
// `x` lives on one worker, `y` on another. In each round a reader of the first half of `x`
// (and of `y`) is launched first: it runs where `y` is, so `x` is copied to it; GAP ms later a
// writer of the other half of `x` starts where `x` is, maybe before the copy is sent (the
// test slows copies down: `slow:moves=MS` in OMPCLUSTER_FT_INJECT). The copy then holds the
// writer's change, or part of it, and is no copy of the version before it: when the writer's
// worker dies, recovery must not run the writer again from it.
//   ft_move_race [ROUNDS] [READER_MS] [N] [GAP_MS]
#include "check.h"
#include <unistd.h>

int main(int argc, char **argv) {
  int rounds = argc > 1 ? atoi(argv[1]) : 8;
  int ms = argc > 2 ? atoi(argv[2]) : 50;
  int n = argc > 3 ? atoi(argv[3]) : 1 << 14;
  int gap = argc > 4 ? atoi(argv[4]) : 2;
  if (rounds < 2 || ms < 0 || n < 2 || gap < 0) {
    fprintf(stderr, "usage: ft_move_race [ROUNDS>=2] [READER_MS>=0] [N>=2] [GAP_MS>=0]\n");
    return 2;
  }
  int h = n / 2;
  // `y` is the larger: the reader goes where it is.
  int *x = malloc(n * sizeof(int)), *y = malloc((size_t)rounds * n * sizeof(int));
  for (int i = 0; i < n; i++) x[i] = i;
#pragma omp target enter data map(to: x[0:n]) map(alloc: y[0:rounds * n])
#pragma omp parallel num_threads(4)
#pragma omp single
  for (int r = 0; r < rounds; r++) {
    if (r < 2) {
      // Round 0 runs every kernel once, one at a time: a kernel's first run teaches the
      // runtime what it writes (until then the regions reaching what it may write follow it
      // to its worker). Round 1 first puts `x` on one worker, kept busy there, so that `y`
      // goes to another (rewritten: -1 is never a result).
#pragma omp target nowait firstprivate(ms, n)
      {
        usleep(ms * 1000);
        for (int i = 0; i < n; i++) x[i] = 3 * x[i] + 1;
      }
      if (r == 0) {
#pragma omp taskwait
      } else {
        usleep(ms * 1000 / 2);
      }
#pragma omp target nowait firstprivate(rounds, n)
      for (int i = 0; i < rounds * n; i++) y[i] = -1;
#pragma omp taskwait
    }
    // The reader first.
#pragma omp target nowait firstprivate(ms, r, h, n)
    {
      usleep(ms * 1000);
      for (int i = 0; i < h; i++) y[r * n + i] = 2 * x[i] + r;
    }
    if (r == 0) {
#pragma omp taskwait
    } else {
      usleep(gap * 1000);
    }
    // The writer changes its half at once, then runs on: a copy sent meanwhile holds the change.
#pragma omp target nowait firstprivate(ms, r, h, n)
    {
      for (int i = h; i < n; i++) x[i] += r + 1;
      usleep(ms * 1000);
    }
#pragma omp taskwait
#pragma omp target firstprivate(h)
    for (int i = 0; i < h; i++) x[i] = x[i + h] - x[i];
  }
  printf("ft_move_race: regions done\n");
  fflush(stdout);
#pragma omp target exit data map(from: x[0:n], y[0:rounds * n])
  // On the host, the same computation (round 0's output was overwritten in round 1).
  int *ex = malloc(n * sizeof(int));
  for (int i = 0; i < n; i++) ex[i] = i;
  for (int r = 0; r < rounds; r++) {
    if (r < 2)
      for (int i = 0; i < n; i++) ex[i] = 3 * ex[i] + 1;
    for (int i = 0; i < h && r > 0; i++) CHECK(y[r * n + i] == 2 * ex[i] + r, "round %d: y[%d] = %d, expected %d", r, i, y[r * n + i], 2 * ex[i] + r);
    for (int i = h; i < n; i++) ex[i] += r + 1;
    for (int i = 0; i < h; i++) ex[i] = ex[i + h] - ex[i];
  }
  for (int i = 0; i < n; i++) CHECK(x[i] == ex[i], "x[%d] = %d, expected %d", i, x[i], ex[i]);
  free(ex);
  free(x);
  free(y);
  return finish("ft_move_race");
}
