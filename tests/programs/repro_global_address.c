// Minimal: the device address of a declare-target global, taken by one region and used by
// the next one. Run with OMPCLUSTER_SCHEDULER=roundrobin and 2+ workers, the second region
// runs on another worker, where the image (and so the global) is at another address.
#include <stdio.h>

#pragma omp declare target
int g = 1;
#pragma omp end declare target

int main(void) {
  long addr = 0;
  int seen = 0;
#pragma omp target map(tofrom: addr)
  addr = (long)&g;
#pragma omp target map(to: addr)
  *(int *)addr = 7;
#pragma omp target map(tofrom: seen)
  seen = g;
  printf("%s: g=%d on the device (want 7)\n", seen == 7 ? "PASS" : "FAIL", seen);
  return seen != 7;
}
