// argv[3] rounds (default 3) of: one region of 100 ms, then argv[1] regions (default 12) of
// argv[2] ms each (default 40) that all read what it wrote; the next round's first region
// waits for them. Every region is issued up front. libomp hands the regions a finished one
// releases to the hidden helper thread that ran it, and the other helpers sleep: unless the
// runtime wakes them, each fan-out runs one region at a time. The kernels are named after
// their functions in the task log (`root`, `readers`). Each result is checked.
#include "check.h"
#include <unistd.h>

static void root(int *r, int round) {
#pragma omp target nowait map(tofrom: r[0:1]) depend(inout: r[0]) firstprivate(round)
  {
    usleep(100 * 1000);
    r[0] = r[0] * 10 + round;
  }
}

static void readers(int *r, int **out, int n, int ms) {
  for (int i = 0; i < n; i++) {
    int *o = out[i];
#pragma omp target nowait map(to: r[0:1]) map(tofrom: o[0:1]) depend(in: r[0]) firstprivate(i, ms)
    {
      usleep(ms * 1000);
      o[0] += r[0] * 100 + i;
    }
  }
}

int main(int argc, char **argv) {
  int n = argc > 1 ? atoi(argv[1]) : 12;
  int ms = argc > 2 ? atoi(argv[2]) : 40;
  int rounds = argc > 3 ? atoi(argv[3]) : 3;
  int *r = calloc(1, sizeof(int));
  int **out = malloc(n * sizeof(int *));
  for (int i = 0; i < n; i++) out[i] = calloc(1, sizeof(int));
#pragma omp parallel
#pragma omp single
  for (int k = 1; k <= rounds; k++) {
    root(r, k);
    readers(r, out, n, ms);
  }
  // Expected: r after round k is r_k = r_{k-1} * 10 + k; each reader adds r_k * 100 + i.
  int rk = 0, sum = 0;
  for (int k = 1; k <= rounds; k++) {
    rk = rk * 10 + k;
    sum += rk * 100;
  }
  CHECK(*r == rk, "r = %d, expected %d", *r, rk);
  for (int i = 0; i < n; i++) CHECK(*out[i] == sum + rounds * i, "out[%d] = %d, expected %d", i, *out[i], sum + rounds * i);
  for (int i = 0; i < n; i++) free(out[i]);
  free(out);
  free(r);
  return finish("fan_out");
}
