// Producer/consumer: buffers written by one region and read by later regions. With the
// round-robin scheduler and several workers the consumers run on other workers than the
// producers, so the data must go worker -> worker (EXCHANGE).
#include "check.h"
#include <omp.h>

#define N (256 * 1024)
#define NB 3

int main(void) {
  int *buf[NB];
  for (int b = 0; b < NB; b++) buf[b] = malloc(N * sizeof(int));
  int *b0 = buf[0], *b1 = buf[1], *b2 = buf[2];
#pragma omp target enter data map(alloc: b0[0:N], b1[0:N], b2[0:N])
  // Produce on the device only.
  for (int b = 0; b < NB; b++) {
    int *p = buf[b];
#pragma omp target firstprivate(b)
    for (int i = 0; i < N; i++) p[i] = i + b * N;
  }
  // Consume: each region reads one buffer and updates the next.
  for (int r = 0; r < 6; r++) {
    int *src = buf[r % NB], *dst = buf[(r + 1) % NB];
#pragma omp target
    for (int i = 0; i < N; i++) dst[i] += src[N - 1 - i] % 3;
  }
  long sums[NB] = {0, 0, 0};
#pragma omp target map(tofrom: sums)
  for (int b = 0; b < NB; b++) {
    int *p = b == 0 ? b0 : b == 1 ? b1 : b2;
    long t = 0;
    for (int i = 0; i < N; i++) t += p[i];
    sums[b] = t;
  }
#pragma omp target exit data map(from: b0[0:N], b1[0:N], b2[0:N])
  // Host model.
  int *m[NB];
  for (int b = 0; b < NB; b++) {
    m[b] = malloc(N * sizeof(int));
    for (int i = 0; i < N; i++) m[b][i] = i + b * N;
  }
  for (int r = 0; r < 6; r++) {
    int *src = m[r % NB], *dst = m[(r + 1) % NB];
    for (int i = 0; i < N; i++) dst[i] += src[N - 1 - i] % 3;
  }
  for (int b = 0; b < NB; b++) {
    long t = 0;
    for (int i = 0; i < N; i++) {
      CHECK(buf[b][i] == m[b][i], "buf[%d][%d]=%d want %d", b, i, buf[b][i], m[b][i]);
      t += m[b][i];
    }
    CHECK(sums[b] == t, "sums[%d]=%ld want %ld", b, sums[b], t);
  }
  return finish("exchange");
}
