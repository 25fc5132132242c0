// Blocked matrix multiply for the recovery tests: each block its own buffer, kept on the
// device (`target enter data`), one `target nowait` task per block product with `depend`, C
// blocks updated in place across tasks (a chain of versions a lost worker takes with it).
// Integer-valued doubles: the checksum is exact whatever the order of execution.
// Args: N BS DELAY_US (each kernel sleeps DELAY_US, so a run's length does not depend on
// the machine).
#include "check.h"
#include <omp.h>
#include <unistd.h>

static void block_product(const double *a, const double *b, double *c, int bs, int delay) {
  for (int i = 0; i < bs; i++)
    for (int k = 0; k < bs; k++) {
      double aik = a[i * bs + k];
      for (int j = 0; j < bs; j++) c[i * bs + j] += aik * b[k * bs + j];
    }
  if (delay > 0) usleep(delay);
}
#pragma omp declare target(block_product)

int main(int argc, char **argv) {
  int n = argc > 1 ? atoi(argv[1]) : 256, bs = argc > 2 ? atoi(argv[2]) : 64;
  int delay = argc > 3 ? atoi(argv[3]) : 0;
  if (n <= 0 || bs <= 0 || n % bs) return 2;
  int nb = n / bs;
  size_t blk = (size_t)bs * bs;
  double **A = malloc(nb * nb * sizeof *A), **B = malloc(nb * nb * sizeof *B), **C = malloc(nb * nb * sizeof *C);
  for (int b = 0; b < nb * nb; b++) {
    A[b] = malloc(blk * sizeof(double));
    B[b] = malloc(blk * sizeof(double));
    C[b] = calloc(blk, sizeof(double));
  }
  for (int r = 0; r < n; r++)
    for (int c = 0; c < n; c++) {
      size_t id = (size_t)(r / bs) * nb + c / bs, off = (size_t)(r % bs) * bs + c % bs;
      A[id][off] = (double)((r * 7 + c * 3) % 11) - 5.0;
      B[id][off] = (double)((r * 5 + c * 2) % 13) - 6.0;
    }
  for (int b = 0; b < nb * nb; b++) {
    double *a = A[b], *bb = B[b], *c = C[b];
#pragma omp target enter data map(to : a[0 : blk], bb[0 : blk], c[0 : blk])
  }
#pragma omp parallel
#pragma omp single
  for (int k = 0; k < nb; k++)
    for (int i = 0; i < nb; i++)
      for (int j = 0; j < nb; j++) {
        double *a = A[i * nb + k], *b = B[k * nb + j], *c = C[i * nb + j];
#pragma omp target map(to : a[0 : blk], b[0 : blk]) map(tofrom : c[0 : blk]) depend(in : a[0], b[0]) \
    depend(inout : c[0]) nowait firstprivate(bs, delay)
        block_product(a, b, c, bs, delay);
      }
  for (int b = 0; b < nb * nb; b++) {
    double *a = A[b], *bb = B[b], *c = C[b];
#pragma omp target exit data map(from : c[0 : blk]) map(release : a[0 : blk], bb[0 : blk])
  }
  long long sum = 0, wsum = 0;
  int bad = 0;
  for (int r = 0; r < n; r++)
    for (int c = 0; c < n; c++) {
      double ref = 0;
      for (int k = 0; k < n; k++) ref += (double)((r * 7 + k * 3) % 11 - 5) * (double)((k * 5 + c * 2) % 13 - 6);
      double got = C[(size_t)(r / bs) * nb + c / bs][(size_t)(r % bs) * bs + c % bs];
      bad += got != ref;
      sum += (long long)got;
      wsum += (long long)got * ((r * 131 + c * 71) % 1009 + 1); // position-weighted
    }
  CHECK(bad == 0, "%d wrong elements", bad);
  printf("ft_matmul N=%d BS=%d: sum %lld, weighted %lld\n", n, bs, sum, wsum);
  return finish("ft_matmul");
}
