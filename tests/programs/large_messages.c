// Events and replies larger than one message of the transport (4 KiB, which every receive is
// posted with): a region reaching 400 buffers through a table of device pointers (its EXECUTE
// lists them all; its reply lists which changed and the pointers found in each), and regions
// printing 12 KiB (the output travels with the reply). Each must arrive whole.
#include "check.h"
#include <omp.h>

#define K 400
#define N 16

int main(void) {
  int dev = omp_get_default_device();
  int host = omp_get_initial_device();
  long *arrays[K];
  long h[N];
  for (int k = 0; k < K; k++) {
    arrays[k] = omp_target_alloc(N * sizeof(long), dev);
    for (int i = 0; i < N; i++) h[i] = k * 1000 + i;
    omp_target_memcpy(arrays[k], h, N * sizeof(long), 0, 0, dev, host);
  }
  long **table = omp_target_alloc(K * sizeof(long *), dev);
  CHECK(omp_target_memcpy(table, arrays, K * sizeof(long *), 0, 0, dev, host) == 0, "memcpy table");

  for (int round = 0; round < 3; round++) {
    // Each array gets a pointer to the next one stored in its last word: every changed buffer
    // holds a device pointer, so the reply lists one per buffer.
#pragma omp target is_device_ptr(table) firstprivate(round)
    for (int k = 0; k < K; k++) {
      for (int i = 0; i < N - 1; i++) table[k][i] += round + 1;
      table[k][N - 1] = (long)table[(k + 1) % K];
    }
  }
  for (int k = 0; k < K; k++) {
    omp_target_memcpy(h, arrays[k], N * sizeof(long), 0, 0, host, dev);
    for (int i = 0; i < N - 1; i++) CHECK(h[i] == k * 1000 + i + 6, "arrays[%d][%d]=%ld", k, i, h[i]);
    CHECK(h[N - 1] == (long)arrays[(k + 1) % K], "arrays[%d] points to %#lx", k, h[N - 1]);
  }

  // 3 x 300 lines of 40 characters: each region's output (12 KiB) comes with its reply.
  for (int r = 0; r < 3; r++) {
#pragma omp target firstprivate(r)
    for (int i = 0; i < 300; i++) printf("region %d line %03d .......................\n", r, i);
  }
  fflush(stdout);
  for (int k = 0; k < K; k++) omp_target_free(arrays[k], dev);
  omp_target_free(table, dev);
  return finish("large_messages");
}
