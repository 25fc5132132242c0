// Pointers to declare-target globals taken on the device, stored in device memory and
// dereferenced by later regions (possibly on other workers).
#include "check.h"
#include <omp.h>

#pragma omp declare target
double garr[64];
int gval = 1;
double *gptr;
#pragma omp end declare target

int main(void) {
  long *slots = calloc(4, sizeof(long));
#pragma omp target enter data map(to: slots[0:4])
  // Region 1: store device addresses of globals in a mapped buffer and a global pointer.
#pragma omp target
  {
    slots[0] = (long)&garr[5];
    slots[1] = (long)&gval;
    gptr = &garr[10];
    for (int i = 0; i < 64; i++) garr[i] = i;
  }
  // Later regions write through the stored pointers.
#pragma omp target
  {
    *(double *)slots[0] = 42.0;
    *(int *)slots[1] = 7;
  }
#pragma omp target
  *gptr = -1.0;
#pragma omp target
  gptr[1] = gptr[0] * 2;
  int seen = 0;
  double s5 = 0;
#pragma omp target map(from: seen, s5)
  {
    seen = gval;
    s5 = garr[5];
  }
  CHECK(seen == 7, "gval=%d on the device", seen);
  CHECK(s5 == 42.0, "garr[5]=%g on the device", s5);
#pragma omp target update from(garr, gval)
  CHECK(gval == 7, "gval=%d", gval);
  for (int i = 0; i < 64; i++) {
    double want = i == 5 ? 42.0 : i == 10 ? -1.0 : i == 11 ? -2.0 : i;
    CHECK(garr[i] == want, "garr[%d]=%g want %g", i, garr[i], want);
  }
#pragma omp target exit data map(delete: slots[0:4])
  free(slots);
  return finish("global_pointers");
}
