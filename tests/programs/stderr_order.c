// What regions print on stderr comes out in program order with what the host prints there:
// the host and 6 regions (on whichever workers) take turns writing numbered lines. The
// regions write with write(2) (fprintf(stderr) in device code: README, Limits).
#include <stdio.h>
#include <unistd.h>

int main(void) {
  int data[6] = {0};
  for (int i = 0; i < 6; i++) {
    fprintf(stderr, "host line %d\n", 2 * i);
#pragma omp target map(tofrom: data[i:1]) firstprivate(i)
    {
      char line[32];
      int n = snprintf(line, sizeof line, "region line %d\n", 2 * i + 1);
      if (write(2, line, n) != n) data[i] = -1;
      else data[i] = i + 1;
    }
  }
  int ok = 1;
  for (int i = 0; i < 6; i++) ok &= data[i] == i + 1;
  fprintf(stderr, "host line 12\n");
  printf("%s\n", ok ? "PASS" : "FAIL");
  return 0;
}
