// Minimal: the device address of a declare-target global (use_device_addr) dereferenced by a
// kernel through is_device_ptr.
#include <stdio.h>

#pragma omp declare target
int g[4];
#pragma omp end declare target

int main(void) {
  int *dg = NULL;
#pragma omp target data use_device_addr(g)
  dg = g;
#pragma omp target is_device_ptr(dg)
  dg[0] = 5;
#pragma omp target update from(g)
  printf("%s: g[0]=%d (want 5)\n", g[0] == 5 ? "PASS" : "FAIL", g[0]);
  return g[0] != 5;
}
