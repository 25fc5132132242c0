// The most common HPC pattern, and the case recovery's cost used to grow with: NB buffers of
// SIZE bytes kept on the device (`target enter data`), one small region per iteration updating
// one of them in place, for ITERS iterations. Prints a checksum that depends on every update's
// order, so a lost or repeated update shows (and the regions' time on stderr). Usage: ft_inplace [ITERS] [NB] [SIZE]
// (defaults 20000 64 512). Each region is in a function of its own (see ckpt_idle.c).
#include "check.h"
#include <omp.h>
#include <stdint.h>

__attribute__((noinline)) static void step(uint32_t *b, int n, uint32_t it) {
#pragma omp target firstprivate(n, it)
  for (int i = 0; i < n; i++) b[i] = b[i] * 1664525u + it + (uint32_t)i;
}

int main(int argc, char **argv) {
  long iters = argc > 1 ? atol(argv[1]) : 20000;
  int nb = argc > 2 ? atoi(argv[2]) : 64;
  int size = argc > 3 ? atoi(argv[3]) : 512;
  int n = size / (int)sizeof(uint32_t);
  CHECK(nb > 0 && n > 0 && iters >= 0, "bad arguments");
  uint32_t **bufs = malloc(nb * sizeof(*bufs));
  for (int k = 0; k < nb; k++) {
    bufs[k] = malloc(n * sizeof(uint32_t));
    for (int i = 0; i < n; i++) bufs[k][i] = (uint32_t)(k * 7919 + i);
    uint32_t *b = bufs[k];
#pragma omp target enter data map(to: b[0:n])
  }
  double t0 = omp_get_wtime();
  for (long it = 0; it < iters; it++) step(bufs[it % nb], n, (uint32_t)it);
  double t1 = omp_get_wtime();
  // The same updates on the host, for the expected result.
  uint64_t sum = 0, want = 0;
  for (int k = 0; k < nb; k++) {
    uint32_t *b = bufs[k];
#pragma omp target exit data map(from: b[0:n])
    for (int i = 0; i < n; i++) sum = sum * 31 + b[i];
  }
  for (int k = 0; k < nb; k++)
    for (int i = 0; i < n; i++) bufs[k][i] = (uint32_t)(k * 7919 + i);
  for (long it = 0; it < iters; it++) {
    uint32_t *b = bufs[it % nb];
    for (int i = 0; i < n; i++) b[i] = b[i] * 1664525u + (uint32_t)it + (uint32_t)i;
  }
  for (int k = 0; k < nb; k++)
    for (int i = 0; i < n; i++) want = want * 31 + bufs[k][i];
  CHECK(sum == want, "checksum %llu, expected %llu", (unsigned long long)sum, (unsigned long long)want);
  printf("ft_inplace: %ld regions over %d buffers of %d bytes, checksum %llu\n", iters, nb, size, (unsigned long long)sum);
  // The time on stderr: stdout is the same in every run.
  fprintf(stderr, "ft_inplace: regions took %.3f s (%.2f us/region)\n", t1 - t0, (t1 - t0) * 1e6 / (iters ? iters : 1));
  return finish("ft_inplace");
}
