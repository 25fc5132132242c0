// Regions that print, run one after another (no nowait): each adds its index to a counter
// kept on the device and prints the value it saw. A region lost with its worker and run
// again must neither print twice nor see a wrong value. Args: NREGIONS DELAY_US.
#include "check.h"
#include <omp.h>
#include <unistd.h>

int main(int argc, char **argv) {
  int n = argc > 1 ? atoi(argv[1]) : 50, delay = argc > 2 ? atoi(argv[2]) : 0;
  long long acc[4] = {0, 0, 0, 0};
#pragma omp target enter data map(to : acc[0 : 4])
  for (int i = 0; i < n; i++) {
#pragma omp target map(alloc : acc[0 : 4]) firstprivate(i, delay)
    {
      acc[i % 4] += i;
      acc[3] = acc[3] * 3 % 1000003 + i;
      printf("region %d sees %lld %lld\n", i, acc[i % 4], acc[3]);
      if (delay > 0) usleep(delay);
    }
  }
#pragma omp target exit data map(from : acc[0 : 4])
  long long e[4] = {0, 0, 0, 0};
  for (int i = 0; i < n; i++) {
    e[i % 4] += i;
    e[3] = e[3] * 3 % 1000003 + i;
  }
  for (int k = 0; k < 4; k++) CHECK(acc[k] == e[k], "acc[%d] = %lld, expected %lld", k, acc[k], e[k]);
  printf("ft_print: %lld %lld %lld %lld\n", acc[0], acc[1], acc[2], acc[3]);
  return finish("ft_print");
}
