// A plain C program, compiled without offloading (gcc): the launcher must refuse it.
#include <stdio.h>
int main(void) {
  printf("plain program ran\n");
  return 0;
}
