// Structs whose pointer members a `declare mapper` maps, kept on the device by `enter data`,
// used by regions, updated and brought back: every region dereferences every member on the
// worker (a host pointer left in the device copy crashes it there). C++ classes:
// mapped_class.cpp. libomptarget 16 sends such
// a struct again when a region maps it and does not attach its pointers again
// (docs/mapped-structs.md); the plugin keeps them attached.
#include "check.h"

typedef struct {
  int n;
  double *v;
} s_t;
#pragma omp declare mapper(s_t m) map(m) map(to : m.v[:m.n])

// Two pointer members, one brought back.
typedef struct {
  int n;
  double *a;
  int *b;
} t_t;
#pragma omp declare mapper(t_t m) map(m) map(to : m.a[:m.n]) map(tofrom : m.b[:m.n])

// Nested: a struct holding a mapped struct (through its mapper) and a member mapped `alloc`
// (libomptarget attaches that one before it sends the struct's own bytes).
typedef struct {
  s_t in;
  int k;
  double *w;
} o_t;
#pragma omp declare mapper(o_t m) map(m) map(mapper(default), to : m.in) map(alloc : m.w[:m.k])

int main(void) {
  enum { N = 1000, K = 4 };
  // 1. Kept by `enter data`, read by a region, written through by another, updated both ways.
  s_t A = {N, malloc(N * sizeof(double))};
  for (int i = 0; i < N; i++) A.v[i] = i;
#pragma omp target enter data map(to : A)
  double sum = 0;
#pragma omp target map(to : A) map(tofrom : sum)
  for (int i = 0; i < A.n; i++) sum += A.v[i];
  CHECK(sum == N * (N - 1) / 2.0, "sum %g", sum);
#pragma omp target map(to : A)
  for (int i = 0; i < A.n; i++) A.v[i] *= 2;
  // The pointee brought back (the mapper maps it `to` only), the struct too: its pointer
  // member stays the host's.
  double *host_v = A.v;
#pragma omp target update from(A.v[0:N])
#pragma omp target update from(A)
  CHECK(A.v == host_v, "update from changed the host pointer to %p", (void *)A.v);
  for (int i = 0; i < N; i++) CHECK(A.v[i] == 2.0 * i, "A.v[%d] = %g after update from", i, A.v[i]);
  // Changed on the host, sent with `update to`, read by a region.
  for (int i = 0; i < N; i++) A.v[i] = 3.0 * i;
#pragma omp target update to(A)
  sum = 0;
#pragma omp target map(to : A) map(tofrom : sum)
  for (int i = 0; i < A.n; i++) sum += A.v[i];
  CHECK(sum == 3.0 * N * (N - 1) / 2.0, "sum %g after update to", sum);
#pragma omp target exit data map(release : A)

  // 2. Two pointer members, one mapped tofrom: written on the device, back on the host.
  t_t T = {N, malloc(N * sizeof(double)), calloc(N, sizeof(int))};
  for (int i = 0; i < N; i++) T.a[i] = i;
#pragma omp target enter data map(to : T)
#pragma omp target map(to : T)
  for (int i = 0; i < T.n; i++) T.b[i] = (int)T.a[i] + 1;
#pragma omp target exit data map(from : T)
  for (int i = 0; i < N; i++) CHECK(T.b[i] == i + 1, "T.b[%d] = %d", i, T.b[i]);

  // 3. An array of mapped structs.
  s_t arr[K];
  for (int k = 0; k < K; k++) {
    arr[k].n = N;
    arr[k].v = malloc(N * sizeof(double));
    for (int i = 0; i < N; i++) arr[k].v[i] = k * N + i;
  }
#pragma omp target enter data map(to : arr[0:K])
  double sums[K] = {0};
#pragma omp target map(to : arr[0:K]) map(tofrom : sums[0:K])
  for (int k = 0; k < K; k++)
    for (int i = 0; i < arr[k].n; i++) sums[k] += arr[k].v[i];
  for (int k = 0; k < K; k++) CHECK(sums[k] == (double)k * N * N + N * (N - 1) / 2.0, "sums[%d] = %g", k, sums[k]);
#pragma omp target exit data map(release : arr[0:K])

  // 4. Nested mappers and an `alloc` member, written on the device and brought back.
  o_t O = {{N, malloc(N * sizeof(double))}, N, malloc(N * sizeof(double))};
  for (int i = 0; i < N; i++) {
    O.in.v[i] = i;
    O.w[i] = -1;
  }
#pragma omp target enter data map(to : O)
  sum = 0;
#pragma omp target map(to : O) map(tofrom : sum)
  {
    for (int i = 0; i < O.in.n; i++) O.w[i] = 2 * O.in.v[i];
    for (int i = 0; i < O.k; i++) sum += O.w[i];
  }
  CHECK(sum == (double)N * (N - 1), "nested: sum %g", sum);
#pragma omp target update from(O.w[0:N])
  for (int i = 0; i < N; i++) CHECK(O.w[i] == 2.0 * i, "nested: O.w[%d] = %g", i, O.w[i]);
#pragma omp target exit data map(release : O)
  free(O.in.v);
  free(O.w);

  // 5. Regions without `enter data` (mapped each time), as a baseline.
  sum = 0;
#pragma omp target map(to : A) map(tofrom : sum)
  for (int i = 0; i < A.n; i++) sum += A.v[i];
  CHECK(sum == 3.0 * N * (N - 1) / 2.0, "sum %g without enter data", sum);

  for (int k = 0; k < K; k++) free(arr[k].v);
  free(T.a);
  free(T.b);
  free(A.v);
  return finish("mapped_structs");
}
