// Minimal: device state that has no offload entry (a static in a declare-target block, a
// function-local static): successive regions must see each other's updates, also when the
// round-robin scheduler puts them on different workers.
#include <stdio.h>
#pragma omp declare target
static int file_static = 100;
int next_id(void) { static int n = 0; return ++n; }
int bump(void) { return ++file_static; }
#pragma omp end declare target
int main(void) {
  int a = 0, b = 0;
  for (int i = 0; i < 6; i++) {
#pragma omp target map(tofrom: a, b)
    { a = next_id(); b = bump(); }
  }
  printf("%s: last next_id()=%d (want 6), bump()=%d (want 106)\n", a == 6 && b == 106 ? "PASS" : "FAIL", a, b);
  return !(a == 6 && b == 106);
}
