// Benchmark (b) of recovery: a lost set that is the same on every run.
//
// NB independent blocks, each updated once in place by one `target nowait` task (phase 1),
// then a taskwait, then every block copied back (phase 2). Run it with
// OMPCLUSTER_SCHEDULER=roundrobin (the tasks are spread over the workers by count) and
// OMPCLUSTER_FT_INJECT=kill:rank=R:after_tasks=NB (the kill comes once the last phase-1 task
// completed, when no task is in flight): the blocks rank R computed, NB / workers of them,
// are lost, and recovery re-runs exactly their tasks; which blocks they are may change, but
// their number and their cost do not.
//
// Each task spins ITERS rounds of integer arithmetic over its block (compute-bound), then
// sleeps SLEEP_US microseconds (time that is not this machine's CPU: I/O, an accelerator, a
// remote service). Args: NB SIZE ITERS SLEEP_US. Prints a checksum.
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include <strings.h>
#include "../examples/no_device.h"

#pragma omp declare target
static void update(long long *x, int n, int iters, int sleep_us) {
  for (int r = 0; r < iters; r++)
    for (int i = 0; i < n; i++) x[i] = (x[i] * 1103515245 + 12345 + r) % 2147483647;
  if (sleep_us > 0) usleep(sleep_us);
}
#pragma omp end declare target

int main(int argc, char **argv) {
  if (no_device("ft_reexec")) return 3;
  int nb = argc > 1 ? atoi(argv[1]) : 24, n = argc > 2 ? atoi(argv[2]) : 4096;
  int iters = argc > 3 ? atoi(argv[3]) : 200, sleep_us = argc > 4 ? atoi(argv[4]) : 0;
  long long **blk = malloc(sizeof(long long *) * nb);
  for (int b = 0; b < nb; b++) {
    blk[b] = malloc(sizeof(long long) * n);
    for (int i = 0; i < n; i++) blk[b][i] = b * 7919 + i;
    long long *x = blk[b];
#pragma omp target enter data map(to : x[0 : n])
  }
  double t0 = omp_get_wtime();
#pragma omp parallel
#pragma omp single
  {
    for (int b = 0; b < nb; b++) {
      long long *x = blk[b];
#pragma omp target map(alloc : x[0 : n]) depend(inout : x[0]) nowait firstprivate(n, iters, sleep_us)
      update(x, n, iters, sleep_us);
    }
#pragma omp taskwait
  }
  double t1 = omp_get_wtime();
  for (int b = 0; b < nb; b++) {
    long long *x = blk[b];
#pragma omp target exit data map(from : x[0 : n])
  }
  double t2 = omp_get_wtime();
  long long sum = 0;
  for (int b = 0; b < nb; b++)
    for (int i = 0; i < n; i++) sum = (sum * 31 + blk[b][i]) % 1000000007;
  printf("ft_reexec: %d blocks x %d, %d iters, sleep %d us: compute %.3f s, copy back %.3f s, checksum %lld\n", nb, n,
         iters, sleep_us, t1 - t0, t2 - t1, sum);
  return 0;
}
