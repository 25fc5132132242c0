// Device pointers stored in device memory, across failures: (a) a struct whose pointer
// member is attached by libomptarget (`map(to: s) map(tofrom: s.p[0:n])`, the device copy of
// `s` holds the device address of the data); (b) NBUF buffers from `omp_target_alloc` whose
// addresses a region writes into a device table (also `omp_target_alloc`), then ITERS rounds
// of regions that reach every buffer only through that table. Results come back with
// `omp_target_memcpy`. Integer arithmetic: exact. Args: NBUF SIZE ITERS DELAY_US.
// The regions run one after another: every one of them can reach every buffer through the
// table, and regions reaching one buffer at the same time on different workers are the
// separate problem of issue 10 (concurrent writers), not what this program tests.
#include "check.h"
#include <omp.h>
#include <unistd.h>

struct S {
  long long *p;
  int n;
};

int main(int argc, char **argv) {
  int nbuf = argc > 1 ? atoi(argv[1]) : 4, size = argc > 2 ? atoi(argv[2]) : 256;
  int iters = argc > 3 ? atoi(argv[3]) : 6, delay = argc > 4 ? atoi(argv[4]) : 0;
  int dev = omp_get_default_device(), host = omp_get_initial_device();
  // (a) pointer attachment
  struct S s = {malloc(size * sizeof(long long)), size};
  for (int i = 0; i < size; i++) s.p[i] = i;
#pragma omp target enter data map(to : s) map(to : s.p[0 : size])
  // (b) a device table of device buffers
  long long **table = omp_target_alloc(nbuf * sizeof(long long *), dev);
  long long **bufs = malloc(nbuf * sizeof *bufs);
  for (int b = 0; b < nbuf; b++) {
    bufs[b] = omp_target_alloc(size * sizeof(long long), dev);
    long long **t = table, *d = bufs[b];
#pragma omp target is_device_ptr(t, d) firstprivate(b, size)
    {
      t[b] = d;
      for (int i = 0; i < size; i++) d[i] = b * 1000 + i;
    }
  }
  for (int it = 0; it < iters; it++) {
    for (int b = 0; b < nbuf; b++) {
      long long **t = table;
#pragma omp target is_device_ptr(t) map(alloc : s.p[0 : size]) firstprivate(b, it, size, delay)
      {
        long long *d = t[b];
        for (int i = 0; i < size; i++) d[i] = (d[i] * 7 + it + b + s.p[(i + b) % size]) % 1000003;
        if (delay > 0) usleep(delay);
      }
    }
    // Then one region updates the struct's data from every buffer, through both pointers.
    long long **t = table;
#pragma omp target is_device_ptr(t) map(alloc : s.p[0 : size]) firstprivate(nbuf, size)
    for (int i = 0; i < size; i++) {
      long long x = s.p[i];
      for (int b = 0; b < nbuf; b++) x += t[b][i] % 10;
      s.p[i] = x % 1000003;
    }
  }
  // Host reference.
  long long *sp = malloc(size * sizeof *sp), **hb = malloc(nbuf * sizeof *hb);
  for (int i = 0; i < size; i++) sp[i] = i;
  for (int b = 0; b < nbuf; b++) {
    hb[b] = malloc(size * sizeof(long long));
    for (int i = 0; i < size; i++) hb[b][i] = b * 1000 + i;
  }
  for (int it = 0; it < iters; it++) {
    for (int b = 0; b < nbuf; b++)
      for (int i = 0; i < size; i++) hb[b][i] = (hb[b][i] * 7 + it + b + sp[(i + b) % size]) % 1000003;
    for (int i = 0; i < size; i++) {
      long long x = sp[i];
      for (int b = 0; b < nbuf; b++) x += hb[b][i] % 10;
      sp[i] = x % 1000003;
    }
  }
#pragma omp target exit data map(from : s.p[0 : size]) map(release : s)
  long long *got = malloc(size * sizeof *got), sum = 0;
  int bad = 0;
  for (int i = 0; i < size; i++) bad += s.p[i] != sp[i], sum += s.p[i];
  for (int b = 0; b < nbuf; b++) {
    omp_target_memcpy(got, bufs[b], size * sizeof(long long), 0, 0, host, dev);
    for (int i = 0; i < size; i++) bad += got[i] != hb[b][i], sum += got[i] * (b + 1);
    omp_target_free(bufs[b], dev);
  }
  omp_target_free(table, dev);
  CHECK(bad == 0, "%d wrong values", bad);
  printf("ft_devptr: %d buffers x %d, %d rounds, sum %lld\n", nbuf, size, iters, sum);
  return finish("ft_devptr");
}
