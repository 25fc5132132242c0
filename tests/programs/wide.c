// How many `nowait` regions run at once. Every region sleeps `ms` milliseconds on its device
// (so the machine's cores decide nothing) and sets its own int.
//   wide independent R ms   R independent regions issued from one host thread
//   wide chains C L ms      C chains of L dependent regions (depend(inout) on each chain's int)
// Prints the regions at once on average (regions x ms / elapsed) and the CPU time this process
// (the head) used, all its threads together.
#include "check.h"
#include <omp.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

int main(int argc, char **argv) {
  int chains = argc > 1 && strcmp(argv[1], "chains") == 0;
  int n = argc > 2 ? atoi(argv[2]) : 64;
  int len = chains && argc > 3 ? atoi(argv[3]) : 1;
  int ms = argc > (chains ? 4 : 3) ? atoi(argv[chains ? 4 : 3]) : 200;
  int *v = calloc(n, sizeof(int));
  double t0 = omp_get_wtime();
#pragma omp parallel
#pragma omp single
  for (int s = 0; s < len; s++)
    for (int i = 0; i < n; i++) {
      int *p = &v[i];
#pragma omp target nowait map(tofrom : p[0:1]) firstprivate(ms) depend(inout : p[0])
      {
        usleep(ms * 1000);
        p[0] += 1;
      }
    }
  double took = omp_get_wtime() - t0;
  int bad = 0;
  for (int i = 0; i < n; i++) bad += v[i] != len;
  CHECK(bad == 0, "%d of %d regions' results wrong", bad, n);
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  double cpu = ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 + ru.ru_stime.tv_sec + ru.ru_stime.tv_usec / 1e6;
  printf("wide: %d regions of %d ms in %.3f s: %.1f at once; head cpu %.2f s\n", n * len, ms, took, n * len * ms / 1e3 / took, cpu);
  return finish("wide");
}
