// A long run of slow independent tasks (argv[1] tasks of argv[2] ms each, default 400 x 50):
// the fault test kills a worker in the middle of it.
#include "check.h"
#include <omp.h>
#include <unistd.h>

int main(int argc, char **argv) {
  int n = argc > 1 ? atoi(argv[1]) : 400;
  int ms = argc > 2 ? atoi(argv[2]) : 50;
  int *done = calloc(n, sizeof(int));
#pragma omp target enter data map(to: done[0:n])
  printf("sleepy: started\n");
  fflush(stdout);
#pragma omp parallel num_threads(4)
#pragma omp single
  for (int t = 0; t < n; t++) {
#pragma omp target nowait firstprivate(t, ms) depend(out: done[t])
    {
      usleep(ms * 1000);
      done[t] = 1;
    }
  }
#pragma omp target exit data map(from: done[0:n])
  int c = 0;
  for (int t = 0; t < n; t++) c += done[t];
  CHECK(c == n, "%d of %d tasks done", c, n);
  free(done);
  return finish("sleepy");
}
