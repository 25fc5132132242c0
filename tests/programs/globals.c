// declare target globals (scalar and array) and functions, used across regions.
#include "check.h"
#include <omp.h>

#define G 1000

#pragma omp declare target
int gcount = 5;
double garr[G];
int gtable[4] = {10, 20, 30, 40};
static int square(int x) { return x * x; }
double scaled(double x) { return x * gtable[1]; }
#pragma omp end declare target

int helper(int x);
#pragma omp declare target to(helper)
int helper(int x) { return square(x) + 1; }

int main(void) {
  // Initial value of a global on the device (before any update).
  int seen = 0;
#pragma omp target map(from: seen)
  seen = gcount;
  CHECK(seen == 5, "initial gcount on the device=%d", seen);

  // Written by one region, read by later regions (possibly on other workers).
#pragma omp target
  {
    gcount = 99;
    for (int i = 0; i < G; i++) garr[i] = i * 0.5;
  }
  for (int round = 0; round < 6; round++) {
    double sum = 0;
    int c = 0;
#pragma omp target map(from: sum, c)
    {
      double t = 0;
      for (int i = 0; i < G; i++) t += garr[i];
      sum = t;
      c = gcount;
    }
    CHECK(c == 99, "round %d: gcount=%d on the device", round, c);
    CHECK(sum == 0.5 * G * (G - 1) / 2, "round %d: sum=%g", round, sum);
  }
  // The host copy is untouched until update from.
  CHECK(gcount == 5, "host gcount=%d before update", gcount);
#pragma omp target update from(gcount, garr)
  CHECK(gcount == 99, "host gcount=%d after update from", gcount);
  for (int i = 0; i < G; i++) CHECK(garr[i] == i * 0.5, "garr[%d]=%g", i, garr[i]);

  // update to, then increments from several regions.
  gcount = 1000;
#pragma omp target update to(gcount)
  for (int k = 0; k < 8; k++) {
#pragma omp target
    gcount += 1;
  }
#pragma omp target update from(gcount)
  CHECK(gcount == 1008, "gcount=%d after 8 increments", gcount);

  // Array global updated by halves from the host.
  for (int i = 0; i < G; i++) garr[i] = 1.0;
#pragma omp target update to(garr[0:G/2])
#pragma omp target
  for (int i = 0; i < G; i++) garr[i] += 1.0;
#pragma omp target update from(garr)
  for (int i = 0; i < G; i++) {
    double want = i < G / 2 ? 2.0 : i * 0.5 + 1.0;
    CHECK(garr[i] == want, "garr[%d]=%g want %g", i, garr[i], want);
  }

  // Declare-target functions called from regions, reading a global table.
  int r1 = 0, r2 = 0;
  double r3 = 0;
#pragma omp target map(from: r1, r2, r3)
  {
    r1 = square(12);
    r2 = helper(3);
    r3 = scaled(1.5);
  }
  CHECK(r1 == 144, "square(12)=%d", r1);
  CHECK(r2 == 10, "helper(3)=%d", r2);
  CHECK(r3 == 30.0, "scaled(1.5)=%g", r3);

  // A global table changed on the host and pushed.
  gtable[1] = 3;
#pragma omp target update to(gtable)
#pragma omp target map(from: r3)
  r3 = scaled(2.0);
  CHECK(r3 == 6.0, "scaled(2.0)=%g after update to(gtable)", r3);
  return finish("globals");
}
