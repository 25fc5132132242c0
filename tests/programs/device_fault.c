// A region that crashes in device code (issue 10, item 4): after `good` regions, one
// dereferences a bad pointer (MODE 0), executes a trap instruction (MODE 1), calls abort() (MODE 2), or
// faults inside a `parallel for` on libomp's threads (MODE 3). The job must end non-zero with
// one message naming the crash, without running the region again on every worker.
// Usage: device_fault MODE [GOOD]
#include <stdio.h>
#include <stdlib.h>
int main(int argc, char **argv) {
  int mode = argc > 1 ? atoi(argv[1]) : 0;
  int good = argc > 2 ? atoi(argv[2]) : 3;
  int x = 0;
  for (int i = 0; i <= good; i++) {
    volatile long bad = i == good ? 8 : 0; // an address nothing maps
#pragma omp target map(tofrom: x) firstprivate(mode, bad)
    {
      if (bad && mode == 0) x += *(volatile int *)bad;
      if (bad && mode == 1) __builtin_trap();
      if (bad && mode == 2) abort();
      if (bad && mode == 3) {
#pragma omp parallel for num_threads(2)
        for (int k = 0; k < 2; k++)
          if (k == 1) x += *(volatile int *)bad;
      }
      x += 1;
    }
    printf("region %d done\n", i);
    fflush(stdout);
  }
  printf("PASS (should not get here)\n");
  return 0;
}
