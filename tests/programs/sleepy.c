// A long run of slow independent tasks (argv[1] tasks of argv[2] ms each, default 600 x 50),
// each on its own buffer: the fault test kills a worker in the middle of it.
#include "check.h"
#include <omp.h>
#include <unistd.h>

int main(int argc, char **argv) {
  int n = argc > 1 ? atoi(argv[1]) : 600;
  int ms = argc > 2 ? atoi(argv[2]) : 50;
  int **done = malloc(n * sizeof(int *));
  for (int t = 0; t < n; t++) done[t] = calloc(1, sizeof(int));
  printf("sleepy: started\n");
  fflush(stdout);
#pragma omp parallel num_threads(4)
#pragma omp single
  for (int t = 0; t < n; t++) {
    int *d = done[t];
#pragma omp target nowait map(tofrom: d[0:1]) firstprivate(ms)
    {
      usleep(ms * 1000);
      d[0] = 1;
    }
  }
  int c = 0;
  for (int t = 0; t < n; t++) c += *done[t];
  CHECK(c == n, "%d of %d tasks done", c, n);
  for (int t = 0; t < n; t++) free(done[t]);
  free(done);
  return finish("sleepy");
}
