// Maps N small buffers at once (N from argv), then runs a region over the last one.
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv) {
  int n = atoi(argv[1]);
  int **bufs = malloc(n * sizeof(int *));
  for (int i = 0; i < n; i++) {
    bufs[i] = calloc(16, sizeof(int));
    int *b = bufs[i];
    b[0] = i;
    #pragma omp target enter data map(to: b[0:16])
  }
  int *last = bufs[n - 1];
  #pragma omp target map(tofrom: last[0:16])
  { last[1] = last[0] + 1; }
  // Already present: the region's map copies nothing back; ask for it.
  #pragma omp target update from(last[0:16])
  int ok = last[1] == n;
  printf("mapped %d, last[1] = %d\n", n, last[1]);
  for (int i = 0; i < n; i++) {
    int *b = bufs[i];
    #pragma omp target exit data map(delete: b[0:16])
    free(b);
  }
  free(bufs);
  return ok ? 0 : 1;
}
