// Minimal: an array section that does not start at 0 (the kernel argument points before
// the mapped buffer).
#include <stdio.h>
#include <stdlib.h>
int main(void) {
  int n = 1000, *p = malloc(3000 * sizeof(int));
  for (int i = 0; i < 3000; i++) p[i] = i;
#pragma omp target map(tofrom: p[1000:1000])
  for (int i = 1000; i < 2000; i++) p[i] = -p[i];
  int bad = 0;
  for (int i = 0; i < 3000; i++) bad += p[i] != ((i >= 1000 && i < 2000) ? -i : i);
  printf("%s bad=%d\n", bad ? "FAIL" : "PASS", bad);
  return bad != 0;
}
