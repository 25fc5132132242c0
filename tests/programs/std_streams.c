// Target regions that name the C standard streams: fprintf to stdout and stderr, fputs,
// fflush, and a check that stdin is a stream (fileno). clang passes each stream named in a
// region to its kernel by value (the host's FILE *): a worker must use its own. Each region
// also computes, and the host checks the result. Args: regions (default 8, at most 64),
// milliseconds each region sleeps (default 0).
#include "check.h"
#include <unistd.h>

int main(int argc, char **argv) {
  int n = argc > 1 ? atoi(argv[1]) : 8;
  int ms = argc > 2 ? atoi(argv[2]) : 0;
  int out[64] = {0};
  if (n > 64) n = 64;
  for (int i = 0; i < n; i++) {
#pragma omp target map(tofrom: out[i:1]) firstprivate(i, ms)
    {
      fprintf(stdout, "region %d on stdout\n", i);
      fprintf(stderr, "region %d on stderr\n", i);
      fputs("fputs on stdout\n", stdout);
      fflush(stderr);
      if (ms > 0) usleep(ms * 1000);
      out[i] = i * 3 + (fileno(stdin) == 0);
    }
  }
  for (int i = 0; i < n; i++) CHECK(out[i] == i * 3 + 1, "out[%d] = %d", i, out[i]);
  return finish("std_streams");
}
