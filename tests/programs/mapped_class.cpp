// A C++ class whose array member a `declare mapper` maps `tofrom`, kept by `enter data`: a
// member function reads it on the worker, a region changes it, `exit data` brings it back
// (see mapped_structs.c).
#include "check.h"

struct Vec {
  int n;
  double *v;
  double sum() const {
    double s = 0;
    for (int i = 0; i < n; i++) s += v[i];
    return s;
  }
};
#pragma omp declare mapper(Vec m) map(m) map(tofrom : m.v[:m.n])

int main() {
  const int N = 200;
  Vec a{N, new double[N]};
  for (int i = 0; i < N; i++) a.v[i] = i;
#pragma omp target enter data map(to : a)
  double s = 0;
#pragma omp target map(to : a) map(tofrom : s)
  {
    s = a.sum();
    for (int i = 0; i < a.n; i++) a.v[i] += 1;
  }
  CHECK(s == N * (N - 1) / 2.0, "sum %g", s);
#pragma omp target exit data map(from : a)
  for (int i = 0; i < N; i++) CHECK(a.v[i] == i + 1, "v[%d] = %g", i, a.v[i]);
  delete[] a.v;
  return finish("mapped_class");
}
