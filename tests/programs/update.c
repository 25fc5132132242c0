// target update to/from, both ways, whole arrays and sections.
#include "check.h"
#include <omp.h>

#define N 2048

int main(void) {
  int *a = malloc(N * sizeof(int));
  for (int i = 0; i < N; i++) a[i] = i;
#pragma omp target data map(to: a[0:N])
  {
    // device: a += 1000
#pragma omp target
    for (int i = 0; i < N; i++) a[i] += 1000;
    CHECK(a[0] == 0, "a[0]=%d before update from", a[0]);
#pragma omp target update from(a[0:N])
    for (int i = 0; i < N; i++) CHECK(a[i] == i + 1000, "a[%d]=%d after update from", i, a[i]);

    // host changes, pushed with update to
    for (int i = 0; i < N; i++) a[i] = -i;
#pragma omp target update to(a[0:N])
#pragma omp target
    for (int i = 0; i < N; i++) a[i] *= 3;
#pragma omp target update from(a[0:N])
    for (int i = 0; i < N; i++) CHECK(a[i] == -3 * i, "a[%d]=%d after update to + from", i, a[i]);

    // section updates: only [100, 200) goes to the device, only [150, 250) comes back.
    for (int i = 0; i < N; i++) a[i] = 7;
#pragma omp target update to(a[100:100])
#pragma omp target
    for (int i = 0; i < N; i++) a[i] += 1;
    for (int i = 0; i < N; i++) a[i] = 0;
#pragma omp target update from(a[150:100])
    for (int i = 0; i < N; i++) {
      int want = 0;
      if (i >= 150 && i < 200) want = 8;
      else if (i >= 200 && i < 250) want = -3 * i + 1;
      CHECK(a[i] == want, "a[%d]=%d want %d", i, a[i], want);
    }
    // several updates between regions
    for (int r = 0; r < 10; r++) {
      for (int i = 0; i < N; i++) a[i] = r;
#pragma omp target update to(a[0:N])
#pragma omp target
      for (int i = 0; i < N; i++) a[i] = a[i] * 2 + i;
#pragma omp target update from(a[0:N])
      for (int i = 0; i < N; i++) CHECK(a[i] == 2 * r + i, "round %d a[%d]=%d", r, i, a[i]);
    }
    for (int i = 0; i < N; i++) a[i] = 12345;
  }
  // map(to:) region: nothing copied back at the end
  for (int i = 0; i < N; i++) CHECK(a[i] == 12345, "a[%d]=%d after the data region", i, a[i]);
  free(a);
  return finish("update");
}
