// argv[1] "loop" or "function", argv[2] regions, argv[3] stack limit in KiB (set here, for the
// main thread). "loop": synchronous target regions in a loop inside main, which clang 16
// compiles with a fresh stack block for each region's arguments, released only when main
// returns (the stack grows with every region); "function": the same region in a function of
// its own, called each iteration (the stack does not grow). The result is checked.
#include "check.h"
#include <string.h>
#include <sys/resource.h>

__attribute__((noinline)) static void add_one(double *a, long n) {
#pragma omp target map(alloc: a[0:n])
  for (long i = 0; i < n; i++) a[i] += 1.0;
}

int main(int argc, char **argv) {
  if (argc != 4) {
    fprintf(stderr, "usage: stack_growth loop|function REGIONS STACK_KIB\n");
    return 2;
  }
  int in_loop = !strcmp(argv[1], "loop"), regions = atoi(argv[2]);
  struct rlimit rl = {(rlim_t)atol(argv[3]) << 10, RLIM_INFINITY};
  struct rlimit old;
  getrlimit(RLIMIT_STACK, &old);
  rl.rlim_max = old.rlim_max;
  CHECK(setrlimit(RLIMIT_STACK, &rl) == 0, "cannot set the stack limit");
  long n = 64;
  double *a = calloc(n, sizeof(double));
#pragma omp target enter data map(to: a[0:n])
  for (int r = 0; r < regions; r++) {
    if (in_loop) {
#pragma omp target map(alloc: a[0:n])
      for (long i = 0; i < n; i++) a[i] += 1.0;
    } else {
      add_one(a, n);
    }
  }
#pragma omp target exit data map(from: a[0:n])
  for (long i = 0; i < n; i++) CHECK(a[i] == regions, "a[%ld] = %g, expected %d", i, a[i], regions);
  free(a);
  return finish("stack_growth");
}
