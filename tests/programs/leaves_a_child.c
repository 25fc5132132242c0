// A program that leaves a process of its own behind (a child that outlives it, with the
// job's environment): the harness must fail the test that ran it.
#include "check.h"
#include <unistd.h>

int main(void) {
  int x = 1;
#pragma omp target map(tofrom : x)
  x += 1;
  CHECK(x == 2, "x = %d", x);
  if (fork() == 0) {
    setsid();
    execlp("sleep", "sleep", "30", (char *)NULL);
    _exit(1);
  }
  return finish("leaves_a_child");
}
