// Scalars passed by value (firstprivate / literals) and scalars mapped back.
#include "check.h"
#include <omp.h>

int main(void) {
  int i = 41;
  double d = 2.5;
  char c = 'x';
  long l = 1L << 40;
  float f = 0.25f;
  unsigned char uc = 200;
  short s = -1234;

  int ri = 0;
  double rd = 0;
  char rc = 0;
  long rl = 0;
  float rf = 0;
  int ruc = 0;
  int rs = 0;
#pragma omp target firstprivate(i, d, c, l, f, uc, s) map(from: ri, rd, rc, rl, rf, ruc, rs)
  {
    ri = i + 1;
    rd = d * 4.0;
    rc = c + 1;
    rl = l + 7;
    rf = f * 2.0f;
    ruc = uc + 50;
    rs = s * 2;
  }
  CHECK(ri == 42, "ri=%d", ri);
  CHECK(rd == 10.0, "rd=%g", rd);
  CHECK(rc == 'y', "rc=%d", rc);
  CHECK(rl == (1L << 40) + 7, "rl=%ld", rl);
  CHECK(rf == 0.5f, "rf=%g", rf);
  CHECK(ruc == 250, "ruc=%d", ruc);
  CHECK(rs == -2468, "rs=%d", rs);

  // Implicit firstprivate (scalars not mapped) and literal constants in the region.
  int k = 7;
  double x = -1.5;
  int out[4] = {0, 0, 0, 0};
#pragma omp target map(from: out)
  {
    out[0] = k * 3;
    out[1] = (int)(x * 4.0);
    out[2] = 123456;
    out[3] = sizeof(long);
  }
  CHECK(out[0] == 21, "out[0]=%d", out[0]);
  CHECK(out[1] == -6, "out[1]=%d", out[1]);
  CHECK(out[2] == 123456, "out[2]=%d", out[2]);
  CHECK(out[3] == 8, "out[3]=%d", out[3]);

  // A firstprivate scalar modified in the region does not change the host copy.
  int fp = 5;
  int seen = 0;
#pragma omp target firstprivate(fp) map(from: seen)
  {
    fp += 100;
    seen = fp;
  }
  CHECK(fp == 5, "host fp=%d", fp);
  CHECK(seen == 105, "seen=%d", seen);

  // map(tofrom:) of a scalar, many values in a loop (different tasks).
  long acc = 0;
  for (int it = 1; it <= 20; it++) {
#pragma omp target map(tofrom: acc) firstprivate(it)
    acc += it;
  }
  CHECK(acc == 210, "acc=%ld", acc);
  return finish("scalars");
}
