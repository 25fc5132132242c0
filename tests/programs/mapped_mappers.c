// Mapped structs, the variants mapped_structs.c leaves out (issue 36, item 2): a mapper used
// by `target update` of a nested member; mappers of mappers over arrays of structs (an array
// of structs that hold a mapped struct, and a struct whose mapper maps an array of mapped
// structs); a mapper with several pointer members brought back partially by `exit data`
// (`map(from : T.a[:n])` only); a mapper with a name used explicitly (`map(mapper(id), ...)`).
// Every region dereferences every pointer member on the worker, and every result is compared
// with the same computation done on the host. Argument: the cases to run ("1234", default all).
//
// The mapped structs are static: libomptarget 16 never unmaps a struct's own entry mapped
// through a mapper (docs/mapped-structs.md), so a struct on the stack would leave its host
// address mapped, and a later function's variable at that address would find it "present".
#include <string.h>
#include "check.h"

enum { N = 500, K = 3 };

typedef struct {
  int n;
  double *v;
} s_t;
#pragma omp declare mapper(s_t m) map(m) map(tofrom : m.v[:m.n])

// A struct holding a mapped struct (through its mapper) and a pointer member of its own.
typedef struct {
  s_t in;
  int k;
  double *w;
} o_t;
#pragma omp declare mapper(o_t m) map(m) map(mapper(default), tofrom : m.in) map(tofrom : m.w[:m.k])

// A struct whose mapper maps an array of mapped structs.
typedef struct {
  int k;
  s_t *items;
} list_t;
#pragma omp declare mapper(list_t m) map(m) map(mapper(default), tofrom : m.items[:m.k])

// Several pointer members.
typedef struct {
  int n;
  double *a;
  int *b;
  double *c;
} t_t;
#pragma omp declare mapper(t_t m) map(m) map(tofrom : m.a[:m.n], m.b[:m.n]) map(to : m.c[:m.n])

// A mapper with a name, for a type that also has a default one.
#pragma omp declare mapper(deep : s_t m) map(m) map(tofrom : m.v[:m.n])
typedef struct {
  int n;
  double *x;
  double *y;
} u_t;
#pragma omp declare mapper(pair : u_t m) map(m) map(to : m.x[:m.n]) map(tofrom : m.y[:m.n])

static double *filled(int n, double base) {
  double *p = malloc(n * sizeof(double));
  for (int i = 0; i < n; i++) p[i] = base + i;
  return p;
}

// 1. `target update` of a nested member (O.in, through s_t's mapper), both ways.
static void nested_update(void) {
  static o_t O;
  O = (o_t){{N, filled(N, 0)}, N, filled(N, 100)};
  double *host_v = O.in.v, *host_w = O.w;
  double ev[N], ew[N];
#pragma omp target enter data map(to : O)
  // Changed on the host, sent with an update of the nested member only.
  for (int i = 0; i < N; i++) ev[i] = O.in.v[i] = 3.0 * i;
  for (int i = 0; i < N; i++) ew[i] = 100 + i;  // O.w is not updated: the device keeps its copy
  for (int i = 0; i < N; i++) O.w[i] = -7;       // (which the region below reads)
#pragma omp target update to(O.in)
  double sum = 0;
#pragma omp target map(to : O) map(tofrom : sum)
  for (int i = 0; i < O.in.n; i++) {
    O.w[i] = O.w[i] + 2 * O.in.v[i];
    O.in.v[i] += 1;
    sum += O.w[i] + O.in.v[i];
  }
  double esum = 0;
  for (int i = 0; i < N; i++) {
    ew[i] = ew[i] + 2 * ev[i];
    ev[i] += 1;
    esum += ew[i] + ev[i];
  }
  CHECK(sum == esum, "nested update: sum %g, expected %g", sum, esum);
  // Back with an update of the nested member: its pointer stays the host's, O.w is not touched.
#pragma omp target update from(O.in)
  CHECK(O.in.v == host_v, "nested update from changed the host pointer to %p", (void *)O.in.v);
  for (int i = 0; i < N; i++) CHECK(O.in.v[i] == ev[i], "nested update: O.in.v[%d] = %g, expected %g", i, O.in.v[i], ev[i]);
  for (int i = 0; i < N; i++) CHECK(O.w[i] == -7, "nested update: O.w[%d] = %g, not updated yet", i, O.w[i]);
#pragma omp target exit data map(from : O)
  CHECK(O.w == host_w && O.in.v == host_v, "exit data changed the host pointers");
  for (int i = 0; i < N; i++) CHECK(O.w[i] == ew[i], "nested update: O.w[%d] = %g, expected %g", i, O.w[i], ew[i]);
  // The whole outer struct updated both ways (its mapper calls the nested one).
#pragma omp target enter data map(to : O)
#pragma omp target map(to : O)
  for (int i = 0; i < O.in.n; i++) {
    O.in.v[i] *= 2;
    O.w[i] += O.in.v[i];
  }
#pragma omp target update from(O)
  CHECK(O.w == host_w && O.in.v == host_v, "update from of the outer struct changed the host pointers");
  for (int i = 0; i < N; i++) {
    ev[i] *= 2;
    ew[i] += ev[i];
    CHECK(O.in.v[i] == ev[i] && O.w[i] == ew[i], "outer update: %d: %g %g, expected %g %g", i, O.in.v[i], O.w[i], ev[i], ew[i]);
  }
  for (int i = 0; i < N; i++) O.in.v[i] = ev[i] = i % 7;
#pragma omp target update to(O)
  sum = 0;
#pragma omp target map(to : O) map(tofrom : sum)
  for (int i = 0; i < O.k; i++) sum += O.in.v[i] * O.w[i];
  esum = 0;
  for (int i = 0; i < N; i++) esum += ev[i] * ew[i];
  CHECK(sum == esum, "outer update to: sum %g, expected %g", sum, esum);
#pragma omp target exit data map(release : O)
  free(O.in.v);
  free(O.w);
}

// 2. Mappers of mappers over arrays of structs.
static void arrays_of_mapped_structs(void) {
  // An array of structs that each hold a mapped struct.
  static o_t arr[K];
  double ew[K][N];
  for (int k = 0; k < K; k++) {
    arr[k] = (o_t){{N, filled(N, k * N)}, N, filled(N, 0)};
  }
#pragma omp target enter data map(to : arr[0:K])
  double sums[K] = {0};
#pragma omp target map(to : arr[0:K]) map(tofrom : sums[0:K])
  for (int k = 0; k < K; k++)
    for (int i = 0; i < arr[k].in.n; i++) {
      arr[k].w[i] = arr[k].in.v[i] * 2 + arr[k].w[i];
      sums[k] += arr[k].w[i];
    }
#pragma omp target exit data map(from : arr[0:K])
  for (int k = 0; k < K; k++) {
    double e = 0;
    for (int i = 0; i < N; i++) e += ew[k][i] = (double)(k * N + i) * 2 + i;
    CHECK(sums[k] == e, "array of nested: sums[%d] = %g, expected %g", k, sums[k], e);
    for (int i = 0; i < N; i++) CHECK(arr[k].w[i] == ew[k][i], "array of nested: arr[%d].w[%d] = %g, expected %g", k, i, arr[k].w[i], ew[k][i]);
    free(arr[k].in.v);
    free(arr[k].w);
  }

  // A struct whose mapper maps an array of mapped structs (through their mapper).
  static list_t L;
  L = (list_t){K, malloc(K * sizeof(s_t))};
  for (int k = 0; k < K; k++) L.items[k] = (s_t){N, filled(N, 10 * k)};
  s_t *host_items = L.items;
#pragma omp target enter data map(to : L)
  double total = 0;
#pragma omp target map(to : L) map(tofrom : total)
  for (int k = 0; k < L.k; k++)
    for (int i = 0; i < L.items[k].n; i++) {
      L.items[k].v[i] *= 3;
      total += L.items[k].v[i];
    }
  double etotal = 0;
  for (int k = 0; k < K; k++)
    for (int i = 0; i < N; i++) etotal += 3.0 * (10 * k + i);
  CHECK(total == etotal, "list: total %g, expected %g", total, etotal);
#pragma omp target exit data map(from : L)
  CHECK(L.items == host_items, "list: exit data changed the host pointer");
  for (int k = 0; k < K; k++) {
    for (int i = 0; i < N; i++) CHECK(L.items[k].v[i] == 3.0 * (10 * k + i), "list: items[%d].v[%d] = %g", k, i, L.items[k].v[i]);
    free(L.items[k].v);
  }
  free(L.items);
}

// 3. Several pointer members, brought back partially by `exit data`.
static void partial_exit(void) {
  static t_t T;
  T = (t_t){N, filled(N, 0), calloc(N, sizeof(int)), filled(N, 1000)};
  double *host_a = T.a;
#pragma omp target enter data map(to : T)
#pragma omp target map(to : T)
  for (int i = 0; i < T.n; i++) {
    T.a[i] = T.a[i] * 2 + T.c[i];
    T.b[i] = (int)T.c[i] + i;
  }
  // Only `a` comes back; `b` stays on the device.
#pragma omp target exit data map(from : T.a[:N])
  CHECK(T.a == host_a, "partial exit changed the host pointer");
  for (int i = 0; i < N; i++) CHECK(T.a[i] == 2.0 * i + 1000 + i, "partial: T.a[%d] = %g, expected %g", i, T.a[i], 2.0 * i + 1000 + i);
  for (int i = 0; i < N; i++) CHECK(T.b[i] == 0, "partial: T.b[%d] = %d before it was brought back", i, T.b[i]);
  // The struct is still usable: b kept its device values.
  long bsum = 0;
#pragma omp target map(to : T) map(tofrom : bsum)
  for (int i = 0; i < T.n; i++) bsum += T.b[i] + (long)T.c[i] + (long)T.a[i];
  long ebsum = 0;
  for (int i = 0; i < N; i++) ebsum += (1000 + i + i) + (1000 + i) + (long)(2.0 * i + 1000 + i);
  CHECK(bsum == ebsum, "partial: after exit of a only, sum %ld, expected %ld", bsum, ebsum);
#pragma omp target exit data map(from : T)
  for (int i = 0; i < N; i++) CHECK(T.b[i] == 1000 + 2 * i, "partial: T.b[%d] = %d, expected %d", i, T.b[i], 1000 + 2 * i);
  // The middle member only, then changed on the host and mapped again with the struct.
  for (int i = 0; i < N; i++) T.a[i] = i;
#pragma omp target enter data map(to : T)
#pragma omp target map(to : T)
  for (int i = 0; i < T.n; i++) {
    T.a[i] += T.c[i];
    T.b[i] = i;
  }
#pragma omp target exit data map(from : T.b[:N])
  for (int i = 0; i < N; i++) CHECK(T.b[i] == i, "partial, middle: T.b[%d] = %d", i, T.b[i]);
  for (int i = 0; i < N; i++) T.b[i] = 5;
  bsum = 0;
#pragma omp target map(to : T) map(tofrom : bsum)
  for (int i = 0; i < T.n; i++) bsum += (long)T.a[i] + T.b[i] + (long)T.c[i];
  ebsum = 0;
  for (int i = 0; i < N; i++) ebsum += (i + 1000 + i) + 5 + (1000 + i);
  CHECK(bsum == ebsum, "partial, middle: sum %ld, expected %ld", bsum, ebsum);
#pragma omp target exit data map(from : T)
  for (int i = 0; i < N; i++) CHECK(T.a[i] == 1000 + 2.0 * i, "partial, middle: T.a[%d] = %g", i, T.a[i]);
  free(T.a);
  free(T.b);
  free(T.c);
}

// 4. Mappers with a name, used explicitly.
static void named_mappers(void) {
  static s_t S;
  S = (s_t){N, filled(N, 5)};
  double *host_v = S.v;
#pragma omp target enter data map(mapper(deep), to : S)
  double sum = 0;
#pragma omp target map(mapper(deep), to : S) map(tofrom : sum)
  for (int i = 0; i < S.n; i++) {
    S.v[i] = S.v[i] * S.v[i];
    sum += S.v[i];
  }
  double esum = 0;
  for (int i = 0; i < N; i++) esum += (5.0 + i) * (5.0 + i);
  CHECK(sum == esum, "named: sum %g, expected %g", sum, esum);
#pragma omp target update from(mapper(deep) : S)
  CHECK(S.v == host_v, "named: update from changed the host pointer");
  for (int i = 0; i < N; i++) CHECK(S.v[i] == (5.0 + i) * (5.0 + i), "named: S.v[%d] = %g", i, S.v[i]);
#pragma omp target exit data map(mapper(deep), release : S)

  static u_t U;
  U = (u_t){N, filled(N, 1), filled(N, 0)};
#pragma omp target enter data map(mapper(pair), to : U)
#pragma omp target map(mapper(pair), to : U)
  for (int i = 0; i < U.n; i++) U.y[i] = U.x[i] * 2 + U.y[i];
  for (int i = 0; i < N; i++) U.x[i] = -1;  // x is `to`: the device copy is not brought back
#pragma omp target exit data map(mapper(pair), from : U)
  for (int i = 0; i < N; i++) CHECK(U.y[i] == 2.0 * (1 + i) + i, "named pair: U.y[%d] = %g", i, U.y[i]);
  for (int i = 0; i < N; i++) CHECK(U.x[i] == -1, "named pair: U.x[%d] = %g, brought back", i, U.x[i]);
  // Without `enter data`: mapped by the region alone.
  for (int i = 0; i < N; i++) U.x[i] = i;
  double usum = 0;
#pragma omp target map(mapper(pair), tofrom : U) map(tofrom : usum)
  for (int i = 0; i < U.n; i++) {
    U.y[i] += U.x[i];
    usum += U.y[i];
  }
  double eusum = 0;
  for (int i = 0; i < N; i++) eusum += 2.0 * (1 + i) + i + i;
  CHECK(usum == eusum, "named pair, region only: sum %g, expected %g", usum, eusum);
  for (int i = 0; i < N; i++) CHECK(U.y[i] == 2.0 * (1 + i) + 2 * i, "named pair, region only: U.y[%d] = %g", i, U.y[i]);
  // A named mapper over an array of structs, on `update` too.
  static s_t SA[K];
  for (int k = 0; k < K; k++) SA[k] = (s_t){N, filled(N, k)};
#pragma omp target enter data map(mapper(deep), to : SA[0:K])
  for (int k = 0; k < K; k++)
    for (int i = 0; i < N; i++) SA[k].v[i] = 3;
#pragma omp target update to(mapper(deep) : SA[0:K])
#pragma omp target map(mapper(deep), to : SA[0:K])
  for (int k = 0; k < K; k++)
    for (int i = 0; i < SA[k].n; i++) SA[k].v[i] *= k + 1;
#pragma omp target exit data map(mapper(deep), from : SA[0:K])
  for (int k = 0; k < K; k++) {
    for (int i = 0; i < N; i++) CHECK(SA[k].v[i] == 3.0 * (k + 1), "named array: SA[%d].v[%d] = %g", k, i, SA[k].v[i]);
    free(SA[k].v);
  }
  free(S.v);
  free(U.x);
  free(U.y);
}

int main(int argc, char **argv) {
  const char *which = argc > 1 ? argv[1] : "1234";
  if (strchr(which, '1')) nested_update();
  if (strchr(which, '2')) arrays_of_mapped_structs();
  if (strchr(which, '3')) partial_exit();
  if (strchr(which, '4')) named_mappers();
  return finish("mapped_mappers");
}
