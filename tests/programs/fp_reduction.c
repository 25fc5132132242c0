// Regions that sum doubles in parallel, as scientists' kernels do: `parallel for
// reduction(+:s)` with T threads (4 by default) and a static schedule, one region after
// another. Each thread's share sums to one of 1e16, 1, -1e16, 3, and every iteration sleeps a
// millisecond, so the threads finish in an order that varies from run to run. libomp's
// default for a team of at most 4 threads adds each thread's share to `s` atomically, in the
// order the threads finish: then the 1 survives the 1e16 or not, and the sum differs from run
// to run (3.5, 4.5 or 5.5 ...). Replicas of such a region agree only if every worker sums in
// a fixed order. With T = 0 the regions sum 1/3 + ... + 1/10 over the worker's default team
// (omp_get_max_threads() threads): workers whose defaults differ split the terms otherwise
// (1 thread and 3 threads give sums that differ in the last bit), and replicas agree only if
// every worker runs teams of one size; each such region is followed by one that sums over a
// `target teams distribute parallel for` on the default league. The program prints how many
// distinct sums its regions gave.
// Usage: fp_reduction [N] [T]  (N regions, at most 64, 8 by default; T threads, 0 to 64, 4
// by default).
#include "check.h"
#include <omp.h>
#include <string.h>
#include <unistd.h>

int main(int argc, char **argv) {
  int n = argc > 1 ? atoi(argv[1]) : 8;
  int nt = argc > 2 ? atoi(argv[2]) : 4;
  if (n < 1 || n > 64 || nt < 0 || nt > 64) {
    fprintf(stderr, "usage: %s [N] [T]  (1 <= N <= 64 regions, 0 <= T <= 64 threads)\n", argv[0]);
    return 2;
  }
  static double sums[64], tsums[64];
  for (int r = 0; r < n; r++) {
    double *out = &sums[r];
    #pragma omp target map(tofrom: out[0:1]) firstprivate(nt)
    {
      double s = 0.5;
      int team = nt > 0 ? nt : omp_get_max_threads(), iters = nt > 0 ? 2 * nt : 8;
      #pragma omp parallel for reduction(+:s) num_threads(team) schedule(static)
      for (int i = 0; i < iters; i++) {
        static const double share[4] = {0.5e16, 0.5, -0.5e16, 1.5};
        usleep(1000);
        s += nt > 0 ? share[(i / 2) % 4] : 1.0 / (3 + i);
      }
      out[0] = s;
    }
    if (nt == 0) {
      // The same sum over a `teams` construct's default league (one team, whose threads
      // follow the default team size too).
      double *t = &tsums[r];
      #pragma omp target teams distribute parallel for reduction(+:t[0]) map(tofrom: t[0:1])
      for (int i = 0; i < 64; i++)
        t[0] += 1.0 / (3 + i);
    }
  }
  if (nt == 0) {
    int tdistinct = 0;
    for (int r = 0; r < n; r++) {
      int seen = 0;
      for (int q = 0; q < r && !seen; q++) seen = memcmp(&tsums[q], &tsums[r], sizeof(double)) == 0;
      tdistinct += !seen;
    }
    printf("fp_reduction: %d teams regions, %d distinct sums (first %.17g)\n", n, tdistinct, tsums[0]);
  }
  int distinct = 0;
  for (int r = 0; r < n; r++) {
    int seen = 0;
    for (int q = 0; q < r && !seen; q++) seen = memcmp(&sums[q], &sums[r], sizeof(double)) == 0;
    distinct += !seen;
    CHECK(sums[r] > 0.0 && sums[r] < 10.0, "region %d summed %g", r, sums[r]);
  }
  printf("fp_reduction: %d regions, %d distinct sums (first %.17g)\n", n, distinct, sums[0]);
  return finish("fp_reduction");
}
