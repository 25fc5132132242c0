// Never ends: a target region that sleeps for 10 minutes (the harness's timeout test).
#include <stdio.h>
#include <unistd.h>
int main(void) {
  printf("hang: started\n");
  fflush(stdout);
#pragma omp target
  sleep(600);
  return 0;
}
