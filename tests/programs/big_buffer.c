// A buffer of several MiB (many fragments when OMPCLUSTER_FRAGMENT_SIZE is small), moved
// head -> worker, worker -> worker and worker -> head. Size in MiB as argv[1] (default 6).
#include "check.h"
#include <omp.h>
#include <stdint.h>

int main(int argc, char **argv) {
  size_t mib = argc > 1 ? (size_t)atoi(argv[1]) : 6;
  size_t n = mib * 1024 * 1024 / sizeof(uint32_t) + 13; // not a multiple of any fragment
  uint32_t *a = malloc(n * sizeof(uint32_t));
  for (size_t i = 0; i < n; i++) a[i] = (uint32_t)(i * 2654435761u);
#pragma omp target enter data map(to: a[0:n])
  for (int r = 0; r < 4; r++) {
#pragma omp target firstprivate(r)
    for (size_t i = 0; i < n; i++) a[i] = a[i] ^ (uint32_t)(i + r);
  }
  uint64_t sum = 0;
#pragma omp target map(tofrom: sum)
  {
    uint64_t t = 0;
    for (size_t i = 0; i < n; i++) t += a[i];
    sum = t;
  }
#pragma omp target exit data map(from: a[0:n])
  uint64_t want_sum = 0;
  size_t bad = 0;
  for (size_t i = 0; i < n; i++) {
    uint32_t v = (uint32_t)(i * 2654435761u);
    for (int r = 0; r < 4; r++) v ^= (uint32_t)(i + r);
    want_sum += v;
    if (a[i] != v) {
      if (bad < 5) printf("a[%zu]=%u want %u\n", i, a[i], v);
      bad++;
    }
  }
  CHECK(bad == 0, "%zu wrong elements of %zu", bad, n);
  CHECK(sum == want_sum, "device sum=%llu want %llu", (unsigned long long)sum, (unsigned long long)want_sum);
  free(a);
  return finish("big_buffer");
}
