// C++ across failures: a class template with member functions called in device code, blocks
// updated in place by ITERS rounds of `target nowait` tasks chained with `depend` (each block
// also reads its right neighbour's previous value from a second buffer), checksum at the end.
// Integer arithmetic: exact. Args: NBLOCKS SIZE ITERS DELAY_US.
#include "check.h"
#include <omp.h>
#include <unistd.h>

template <typename T> struct Mixer {
  T mul, add;
  T apply(T x, T y) const { return (x * mul + y + add) % 1000003; }
};
#pragma omp declare target
template struct Mixer<long long>;
static void round_of(const Mixer<long long> &m, long long *x, const long long *nb, int n, int delay) {
  for (int i = 0; i < n; i++) x[i] = m.apply(x[i], nb[(i * 7) % n]);
  if (delay > 0) usleep(delay);
}
#pragma omp end declare target

int main(int argc, char **argv) {
  int nb = argc > 1 ? atoi(argv[1]) : 4, n = argc > 2 ? atoi(argv[2]) : 256;
  int iters = argc > 3 ? atoi(argv[3]) : 6, delay = argc > 4 ? atoi(argv[4]) : 0;
  long long **x = new long long *[nb], **prev = new long long *[nb];
  for (int b = 0; b < nb; b++) {
    x[b] = new long long[n];
    prev[b] = new long long[n];
    for (int i = 0; i < n; i++) x[b][i] = prev[b][i] = (b * 31 + i) % 101;
  }
  Mixer<long long> m{3, 11};
  for (int b = 0; b < nb; b++) {
    long long *a = x[b], *p = prev[b];
#pragma omp target enter data map(to : a[0 : n], p[0 : n])
  }
#pragma omp parallel
#pragma omp single
  for (int it = 0; it < iters; it++) {
    for (int b = 0; b < nb; b++) {
      long long *a = x[b], *p = prev[(b + 1) % nb];
#pragma omp target map(alloc : a[0 : n], p[0 : n]) depend(inout : a[0]) depend(in : p[0]) nowait firstprivate(m, n, delay)
      round_of(m, a, p, n, delay);
    }
#pragma omp taskwait
    for (int b = 0; b < nb; b++) {
      long long *a = x[b], *p = prev[b];
#pragma omp target map(alloc : a[0 : n], p[0 : n]) depend(in : a[0]) depend(out : p[0]) nowait firstprivate(n)
      for (int i = 0; i < n; i++) p[i] = a[i];
    }
#pragma omp taskwait
  }
  for (int b = 0; b < nb; b++) {
    long long *a = x[b], *p = prev[b];
#pragma omp target exit data map(from : a[0 : n]) map(delete : p[0 : n])
  }
  // Host reference.
  long long **hx = new long long *[nb], **hp = new long long *[nb];
  for (int b = 0; b < nb; b++) {
    hx[b] = new long long[n];
    hp[b] = new long long[n];
    for (int i = 0; i < n; i++) hx[b][i] = hp[b][i] = (b * 31 + i) % 101;
  }
  for (int it = 0; it < iters; it++) {
    for (int b = 0; b < nb; b++) round_of(m, hx[b], hp[(b + 1) % nb], n, 0);
    for (int b = 0; b < nb; b++)
      for (int i = 0; i < n; i++) hp[b][i] = hx[b][i];
  }
  long long sum = 0;
  int bad = 0;
  for (int b = 0; b < nb; b++)
    for (int i = 0; i < n; i++) bad += x[b][i] != hx[b][i], sum += x[b][i] * (b + 1);
  CHECK(bad == 0, "%d wrong values", bad);
  printf("ft_cxx: %d blocks x %d, %d rounds, sum %lld\n", nb, n, iters, sum);
  return finish("ft_cxx");
}
