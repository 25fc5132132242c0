// Edge cases: zero-length sections, a region without arguments, a region with many
// arguments, 1-byte buffers, omp_target_memcpy_rect, declare target link.
#include "check.h"
#include <omp.h>

int linked[100];
#pragma omp declare target link(linked)

int main(void) {
  int dev = omp_get_default_device(), host = omp_get_initial_device();
  // No arguments at all.
#pragma omp target
  { volatile int x = 1; (void)x; }

  // Zero-length section of an array that is not mapped: nothing to move, region still runs.
  int *z = malloc(16 * sizeof(int));
  int ran = 0;
#pragma omp target map(tofrom: z[0:0]) map(tofrom: ran)
  ran = 1;
  CHECK(ran == 1, "region with a zero-length section did not run");

  // 1-byte buffers.
  char c1 = 'a', c2 = 'b';
#pragma omp target map(tofrom: c1, c2)
  {
    char t = c1;
    c1 = c2;
    c2 = t;
  }
  CHECK(c1 == 'b' && c2 == 'a', "c1=%c c2=%c", c1, c2);

  // Many arguments (32 mapped scalars + arrays).
  int v[32];
  for (int i = 0; i < 32; i++) v[i] = i;
  int a0=0,a1=1,a2=2,a3=3,a4=4,a5=5,a6=6,a7=7,a8=8,a9=9,a10=10,a11=11,a12=12,a13=13,a14=14,a15=15;
  double d0=0.5,d1=1.5,d2=2.5,d3=3.5,d4=4.5,d5=5.5,d6=6.5,d7=7.5;
  double total = 0;
#pragma omp target map(tofrom: total) map(to: v) firstprivate(a0,a1,a2,a3,a4,a5,a6,a7,a8,a9,a10,a11,a12,a13,a14,a15,d0,d1,d2,d3,d4,d5,d6,d7)
  {
    double t = a0+a1+a2+a3+a4+a5+a6+a7+a8+a9+a10+a11+a12+a13+a14+a15;
    t += d0+d1+d2+d3+d4+d5+d6+d7;
    for (int i = 0; i < 32; i++) t += v[i];
    total = t;
  }
  CHECK(total == 120 + 32 + 496, "total=%g", total);

  // omp_target_memcpy_rect: a 4x5 block of an 8x10 host matrix into a 4x5 device matrix.
  double hm[8][10], dm_back[4][5];
  for (int i = 0; i < 8; i++)
    for (int j = 0; j < 10; j++) hm[i][j] = i * 10 + j;
  double *dm = omp_target_alloc(4 * 5 * sizeof(double), dev);
  size_t vol[2] = {4, 5}, dst_off[2] = {0, 0}, src_off[2] = {2, 3}, dst_dims[2] = {4, 5}, src_dims[2] = {8, 10};
  int rc = omp_target_memcpy_rect(dm, hm, sizeof(double), 2, vol, dst_off, src_off, dst_dims, src_dims, dev, host);
  CHECK(rc == 0, "memcpy_rect h->d rc=%d", rc);
#pragma omp target is_device_ptr(dm)
  for (int i = 0; i < 20; i++) dm[i] += 1000;
  rc = omp_target_memcpy(dm_back, dm, sizeof(dm_back), 0, 0, host, dev);
  CHECK(rc == 0, "memcpy d->h rc=%d", rc);
  for (int i = 0; i < 4; i++)
    for (int j = 0; j < 5; j++)
      CHECK(dm_back[i][j] == (i + 2) * 10 + (j + 3) + 1000, "dm[%d][%d]=%g", i, j, dm_back[i][j]);
  omp_target_free(dm, dev);

  // declare target link: the global is mapped explicitly.
  for (int i = 0; i < 100; i++) linked[i] = i;
#pragma omp target map(tofrom: linked)
  for (int i = 0; i < 100; i++) linked[i] *= 3;
  for (int i = 0; i < 100; i++) CHECK(linked[i] == 3 * i, "linked[%d]=%d", i, linked[i]);
  free(z);
  return finish("edge");
}
