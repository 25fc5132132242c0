// Runs a region, then exits with code 3 on purpose (exit-code forwarding).
#include <stdio.h>
#include <stdlib.h>
int main(void) {
  int x = 1;
#pragma omp target map(tofrom: x)
  x += 1;
  printf("x=%d, exiting with 3\n", x);
  fflush(stdout);
  exit(x == 2 ? 3 : 1);
}
