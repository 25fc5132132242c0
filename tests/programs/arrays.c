// Arrays with map(to/from/tofrom/alloc), array sections with offsets, heap arrays.
#include "check.h"
#include <omp.h>
#include <string.h>

#define N 10000

int main(void) {
  static int a[N], b[N], c[N];
  for (int i = 0; i < N; i++) {
    a[i] = i;
    b[i] = 2 * i;
    c[i] = -1;
  }
  // to + to -> from
#pragma omp target map(to: a, b) map(from: c)
  for (int i = 0; i < N; i++) c[i] = a[i] + b[i];
  for (int i = 0; i < N; i++) CHECK(c[i] == 3 * i, "c[%d]=%d", i, c[i]);

  // tofrom
#pragma omp target map(tofrom: c)
  for (int i = 0; i < N; i++) c[i] += 1;
  for (int i = 0; i < N; i++) CHECK(c[i] == 3 * i + 1, "c[%d]=%d", i, c[i]);

  // map(to:) does not copy back
#pragma omp target map(to: a)
  for (int i = 0; i < N; i++) a[i] = -7;
  for (int i = 0; i < N; i++) CHECK(a[i] == i, "a[%d]=%d after map(to)", i, a[i]);

  // alloc: a scratch device buffer used inside one region
  double *h = malloc(N * sizeof(double));
  double *scratch = malloc(N * sizeof(double));
  for (int i = 0; i < N; i++) h[i] = 0;
#pragma omp target map(alloc: scratch[0:N]) map(from: h[0:N])
  {
    for (int i = 0; i < N; i++) scratch[i] = i * 0.5;
    for (int i = 0; i < N; i++) h[i] = scratch[N - 1 - i];
  }
  for (int i = 0; i < N; i++) CHECK(h[i] == (N - 1 - i) * 0.5, "h[%d]=%g", i, h[i]);

  // alloc kept across regions by a data region
#pragma omp target data map(alloc: scratch[0:N]) map(from: h[0:N])
  {
#pragma omp target
    for (int i = 0; i < N; i++) scratch[i] = 3.0 * i;
#pragma omp target
    for (int i = 0; i < N; i++) h[i] = scratch[i] + 1.0;
  }
  for (int i = 0; i < N; i++) CHECK(h[i] == 3.0 * i + 1.0, "h[%d]=%g", i, h[i]);

  // 2-D array
  static float m[64][64];
  for (int i = 0; i < 64; i++)
    for (int j = 0; j < 64; j++) m[i][j] = i + j;
#pragma omp target map(tofrom: m)
  for (int i = 0; i < 64; i++)
    for (int j = 0; j < 64; j++) m[i][j] *= 2;
  for (int i = 0; i < 64; i++)
    for (int j = 0; j < 64; j++) CHECK(m[i][j] == 2.0f * (i + j), "m[%d][%d]=%g", i, j, m[i][j]);

  // char arrays
  char str[32] = "hello, cluster";
#pragma omp target map(tofrom: str)
  for (int i = 0; str[i]; i++)
    if (str[i] >= 'a' && str[i] <= 'z') str[i] -= 32;
  CHECK(strcmp(str, "HELLO, CLUSTER") == 0, "str=%s", str);

  // (last: a section with an offset, the kernel argument is before the device buffer)
  // A section with an offset: only [1000, 3000) is mapped; the rest of the host array stays.
  int *p = malloc(N * sizeof(int));
  for (int i = 0; i < N; i++) p[i] = i;
#pragma omp target map(tofrom: p[1000:2000])
  for (int i = 1000; i < 3000; i++) p[i] = -p[i];
  for (int i = 0; i < N; i++) {
    int want = (i >= 1000 && i < 3000) ? -i : i;
    CHECK(p[i] == want, "p[%d]=%d want %d", i, p[i], want);
  }

  free(h);
  free(scratch);
  free(p);
  return finish("arrays");
}
