// A region that crashes its worker (abort() on the device) after a few good regions.
#include <stdio.h>
#include <stdlib.h>
int main(int argc, char **argv) {
  int when = argc > 1 ? atoi(argv[1]) : 3;
  int x = 0;
  for (int i = 0; i < 10; i++) {
#pragma omp target map(tofrom: x) firstprivate(i, when)
    {
      if (i == when) abort();
      x += 1;
    }
    printf("region %d done\n", i);
    fflush(stdout);
  }
  printf("PASS (should not get here)\n");
  return 0;
}
