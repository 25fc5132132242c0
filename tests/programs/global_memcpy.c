// Globals through their device address (use_device_addr): omp_target_memcpy to/from it,
// device -> device copies, and kernels that dereference it with is_device_ptr.
#include "check.h"
#include <omp.h>
#pragma omp declare target
double gbuf[256];
#pragma omp end declare target
int main(void) {
  int dev = omp_get_default_device(), host = omp_get_initial_device();
  double h[256];
  for (int i = 0; i < 256; i++) h[i] = i * 1.5;
  double *dg = NULL;
#pragma omp target data use_device_addr(gbuf)
  dg = gbuf;
  CHECK(dg != NULL && dg != gbuf, "use_device_addr(gbuf)=%p", (void *)dg);
  CHECK(omp_target_memcpy(dg, h, sizeof(h), 0, 0, dev, host) == 0, "memcpy h->gbuf");
  double s = 0;
#pragma omp target map(tofrom: s)
  {
    double t = 0;
    for (int i = 0; i < 256; i++) t += gbuf[i];
    s = t;
  }
  CHECK(s == 1.5 * 255 * 256 / 2, "s=%g", s);
#pragma omp target
  for (int i = 0; i < 256; i++) gbuf[i] = -i;
  double back[256];
  CHECK(omp_target_memcpy(back, dg, sizeof(back), 0, 0, host, dev) == 0, "memcpy gbuf->h");
  for (int i = 0; i < 256; i++) CHECK(back[i] == -i, "back[%d]=%g", i, back[i]);
  double *d2 = omp_target_alloc(sizeof(h), dev);
  CHECK(omp_target_memcpy(d2, dg, sizeof(h), 0, 0, dev, dev) == 0, "memcpy gbuf->d2");
#pragma omp target is_device_ptr(d2, dg)
  for (int i = 0; i < 256; i++) dg[i] = d2[i] * 2;
#pragma omp target update from(gbuf)
  for (int i = 0; i < 256; i++) CHECK(gbuf[i] == -2.0 * i, "gbuf[%d]=%g", i, gbuf[i]);
  omp_target_free(d2, dev);
  return finish("global_memcpy");
}
