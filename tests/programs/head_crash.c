// The program (rank 0) dies of a signal after a region: the launcher must die of the same
// signal, as the program run alone would (`not --crash` in LLVM's tests), also with fault
// tolerance on, where mpirun exits 0 whatever rank 0 did.
//   head_crash MODE   0: abort() in host code; 1: a mapping that extends a mapped section
//                     (libomptarget's fatal error, abort); 2: SIGSEGV in host code;
//                     3 FILE: create FILE after the region, abort() 0.5 s later (time for a
//                     test to freeze a worker, not for the head to notice it).
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

int main(int argc, char **argv) {
  int mode = argc > 1 ? atoi(argv[1]) : 0;
  int x = 1;
#pragma omp target map(tofrom: x)
  x += 1;
  printf("region done, x = %d\n", x);
  fflush(stdout);
  if (mode == 0) abort();
  if (mode == 3 && argc > 2) {
    FILE *f = fopen(argv[2], "w");
    if (f) fclose(f);
    usleep(500000);
    abort();
  }
  if (mode == 1) {
    int a[10] = {0};
#pragma omp target data map(to: a[0:5])
    {
#pragma omp target map(tofrom: a[0:10])
      a[9] = 1;
    }
  }
  if (mode == 2) {
    volatile int *p = (volatile int *)(long)(x - 2);
    *p = 1;
  }
  printf("not reached\n");
  return 0;
}
