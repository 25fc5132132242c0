// Two device buffers that change all at once, many times, while checkpoints are taken:
// `h` is only ever updated from the host (it stays staged on the head), `w` is rewritten by a
// region on a worker. Every byte of each holds the same value at any moment, so a checkpoint
// that saved a buffer while it was being changed would show two different values in it.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv) {
  int iters = argc > 1 ? atoi(argv[1]) : 300;
  size_t n = argc > 2 ? (size_t)atol(argv[2]) : (size_t)1 << 20;
  unsigned char *h = malloc(n), *w = malloc(n);
  memset(h, 0, n);
  memset(w, 0, n);
  #pragma omp target enter data map(to: h[0:n], w[0:n])
  for (int i = 1; i <= iters; i++) {
    unsigned char v = (unsigned char)(i % 251 + 1);
    memset(h, v, n);
    #pragma omp target update to(h[0:n])
    #pragma omp target map(tofrom: w[0:n])
    for (size_t j = 0; j < n; j++)
      w[j] = v;
  }
  #pragma omp target exit data map(from: h[0:n], w[0:n])
  unsigned char last = (unsigned char)(iters % 251 + 1);
  for (size_t j = 0; j < n; j++) {
    if (h[j] != last || w[j] != last) {
      printf("FAIL at %zu: %d %d, expected %d\n", j, h[j], w[j], last);
      return 1;
    }
  }
  printf("PASS\n");
  return 0;
}
