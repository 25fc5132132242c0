// Minimal: concurrent nowait regions write disjoint elements of one resident buffer; with
// several workers each runs on its own copy and only one copy survives (lost updates).
#include <stdio.h>
#include <unistd.h>
#define N 60
int main(void) {
  int done[N] = {0};
#pragma omp target enter data map(to: done)
#pragma omp parallel num_threads(4)
#pragma omp single
  for (int t = 0; t < N; t++) {
#pragma omp target nowait firstprivate(t)
    {
      usleep(20000);
      done[t] = 1;
    }
  }
#pragma omp target exit data map(from: done)
  int c = 0;
  for (int t = 0; t < N; t++) c += done[t];
  printf("%s: %d of %d elements written\n", c == N ? "PASS" : "FAIL", c, N);
  return c != N;
}
