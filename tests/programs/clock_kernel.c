// Regions whose results differ from run to run, as a kernel that reads a clock does: each
// writes the processor's time stamp counter into its block (mapped `from`). The program prints
// only how many blocks were written, the same on every run. Replicas of these regions never
// agree: with OMPCLUSTER_FT_VOTE=1 they end the program, naming the kernel and
// OMPCLUSTER_FT_VOTE_SKIP. Usage: clock_kernel [N] (N regions, at most 64; 8 by default).
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv) {
  int n = argc > 1 ? atoi(argv[1]) : 8;
  if (n < 1 || n > 64) {
    fprintf(stderr, "usage: %s [N]  (1 <= N <= 64)\n", argv[0]);
    return 2;
  }
  static double t[64][8];
  for (int i = 0; i < n; i++) {
    double *b = t[i];
    #pragma omp target map(from: b[0:8]) nowait
    {
      for (int j = 0; j < 8; j++)
        b[j] = (double)__builtin_ia32_rdtsc();
    }
  }
  #pragma omp taskwait
  int ok = 0;
  for (int i = 0; i < n; i++)
    ok += t[i][0] > 0;
  printf("clock_kernel: %d of %d regions wrote a time\n", ok, n);
  printf("clock_kernel: %s\n", ok == n ? "PASS" : "FAIL");
  return ok == n ? 0 : 1;
}
