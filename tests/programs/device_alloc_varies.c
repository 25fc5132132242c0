// A region whose device allocation depends on the process it runs in (its size follows the
// worker's pid): re-run elsewhere after a failure, it cannot allocate what its first run did.
// Recovery must stop saying so, never rebuild the data at other addresses.
//   device_alloc_varies [N]
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

int main(int argc, char **argv) {
  int n = argc > 1 ? atoi(argv[1]) : 8;
  if (n < 1) return 2;
  long **ptrs = malloc(sizeof(long *) * n);
  long *sum = calloc(n, sizeof(long));
#pragma omp target enter data map(alloc: ptrs[0:n])
  for (int i = 0; i < n; i++) {
#pragma omp target map(alloc: ptrs[i:1]) nowait
    {
      ptrs[i] = malloc(4096 * (1 + getpid() % 64));
      ptrs[i][0] = i;
    }
  }
#pragma omp taskwait
  for (int i = 0; i < n; i++) {
#pragma omp target map(alloc: ptrs[i:1]) map(from: sum[i:1]) nowait
    sum[i] = ptrs[i][0];
  }
#pragma omp taskwait
  long s = 0;
  for (int i = 0; i < n; i++) s += sum[i];
  printf("sum %ld (expected %ld)\n", s, (long)n * (n - 1) / 2);
  return s == (long)n * (n - 1) / 2 ? 0 : 1;
}
