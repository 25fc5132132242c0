// Structs by value, structs with pointer members (PTR_AND_OBJ attach), arrays of structs.
#include "check.h"
#include <omp.h>

typedef struct {
  int a;
  double b;
  char tag[8];
} Plain;

typedef struct {
  int n;
  double *p;
} Vec;

typedef struct {
  int n;
  int *idx;
  double *val;
} Sparse;

int main(void) {
  // struct by value (firstprivate) and by map(tofrom)
  Plain s = {3, 1.5, "abc"};
  Plain r = {0, 0, ""};
#pragma omp target firstprivate(s) map(from: r)
  {
    r.a = s.a * 10;
    r.b = s.b + 1;
    r.tag[0] = s.tag[2];
    r.tag[1] = 0;
  }
  CHECK(r.a == 30, "r.a=%d", r.a);
  CHECK(r.b == 2.5, "r.b=%g", r.b);
  CHECK(r.tag[0] == 'c' && r.tag[1] == 0, "r.tag=%s", r.tag);

#pragma omp target map(tofrom: s)
  {
    s.a++;
    s.b *= 2;
  }
  CHECK(s.a == 4 && s.b == 3.0, "s.a=%d s.b=%g", s.a, s.b);

  const int n = 1000;
  Vec v = {n, malloc(n * sizeof(double))};
  for (int i = 0; i < n; i++) v.p[i] = i;
  // map(tofrom: v, v.p[0:n]): struct and pointee, the pointer member attached on the device
  int seen_n = 0;
#pragma omp target map(tofrom: v, v.p[0:n]) map(from: seen_n)
  {
    seen_n = v.n;
    for (int i = 0; i < v.n; i++) v.p[i] *= 2;
    v.n = 77;
  }
  CHECK(seen_n == n, "seen_n=%d", seen_n);
  CHECK(v.n == 77, "v.n=%d (struct not copied back)", v.n);
  for (int i = 0; i < n; i++) CHECK(v.p[i] == 2.0 * i, "v.p[%d]=%g", i, v.p[i]);
  v.n = n;

  // Two pointer members, inside a data region, used by two regions.
  Sparse sp = {n, malloc(n * sizeof(int)), malloc(n * sizeof(double))};
  for (int i = 0; i < n; i++) {
    sp.idx[i] = (i * 7) % n;
    sp.val[i] = 0;
  }
  double sum = 0;
#pragma omp target data map(to: sp, sp.idx[0:n]) map(tofrom: sp.val[0:n])
  {
#pragma omp target
    for (int i = 0; i < sp.n; i++) sp.val[sp.idx[i]] = i;
#pragma omp target map(tofrom: sum)
    for (int i = 0; i < sp.n; i++) sum += sp.val[i];
  }
  CHECK(sum == (double)n * (n - 1) / 2, "sum=%g", sum);
  for (int i = 0; i < n; i++) CHECK(sp.val[sp.idx[i]] == i, "sp.val[%d]=%g", sp.idx[i], sp.val[sp.idx[i]]);

  // array of structs
  Plain arr[16];
  for (int i = 0; i < 16; i++) {
    arr[i].a = i;
    arr[i].b = i * 0.25;
    arr[i].tag[0] = 'a' + i;
  }
#pragma omp target map(tofrom: arr)
  for (int i = 0; i < 16; i++) {
    arr[i].a = arr[i].a * arr[i].a;
    arr[i].b += 100;
    arr[i].tag[0] -= 32;
  }
  for (int i = 0; i < 16; i++) {
    CHECK(arr[i].a == i * i, "arr[%d].a=%d", i, arr[i].a);
    CHECK(arr[i].b == i * 0.25 + 100, "arr[%d].b=%g", i, arr[i].b);
    CHECK(arr[i].tag[0] == 'A' + i, "arr[%d].tag=%c", i, arr[i].tag[0]);
  }
  // (last: only the member is mapped, the kernel argument &v is before the device buffer)
  // struct with a pointer member: map(v.p[0:n]) (the struct itself implicitly)
  for (int i = 0; i < n; i++) v.p[i] = i;
  // (only the member p of v is mapped here: use n, not v.n, in the region)
#pragma omp target map(tofrom: v.p[0:n])
  for (int i = 0; i < n; i++) v.p[i] += 0.5;
  for (int i = 0; i < n; i++) CHECK(v.p[i] == i + 0.5, "v.p[%d]=%g", i, v.p[i]);

  free(v.p);
  free(sp.idx);
  free(sp.val);
  return finish("structs");
}
