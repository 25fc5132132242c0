// nowait + depend: chains of dependent increments over several buffers, created inside
// parallel/single so that the regions are deferred tasks. 4 buffers x 50 increments, plus
// a final task that depends on all four chains; 201 target regions in all.
#include "check.h"
#include <omp.h>

#define NB 4
#define LEN 1000
#define STEPS 50

int main(void) {
  long *buf[NB];
  for (int b = 0; b < NB; b++) {
    buf[b] = malloc(LEN * sizeof(long));
    for (int i = 0; i < LEN; i++) buf[b][i] = b * 1000 + 1;
  }
  long total[1] = {0};
  long *b0 = buf[0], *b1 = buf[1], *b2 = buf[2], *b3 = buf[3];
#pragma omp target enter data map(to: b0[0:LEN], b1[0:LEN], b2[0:LEN], b3[0:LEN])
#pragma omp parallel num_threads(4)
#pragma omp single
  {
    for (int s = 0; s < STEPS; s++) {
      for (int b = 0; b < NB; b++) {
        long *p = buf[b];
        // Each step reads the previous value: the order matters (x = 2x + s is not
        // commutative), so a broken dependence shows up in the result.
#pragma omp target nowait depend(inout: p[0]) firstprivate(s)
        for (int i = 0; i < LEN; i++) p[i] = p[i] * 2 % 1000003 + s;
      }
    }
#pragma omp target nowait depend(in: b0[0], b1[0], b2[0], b3[0]) depend(out: total[0]) map(tofrom: total[0:1])
    {
      long t = 0;
      for (int i = 0; i < LEN; i++) t += b0[i] + b1[i] + b2[i] + b3[i];
      total[0] = t;
    }
#pragma omp taskwait
  }
#pragma omp target exit data map(from: b0[0:LEN], b1[0:LEN], b2[0:LEN], b3[0:LEN])
  long want_total = 0;
  for (int b = 0; b < NB; b++) {
    long v = b * 1000 + 1;
    for (int s = 0; s < STEPS; s++) v = v * 2 % 1000003 + s;
    for (int i = 0; i < LEN; i++) CHECK(buf[b][i] == v, "buf[%d][%d]=%ld want %ld", b, i, buf[b][i], v);
    want_total += v * LEN;
  }
  CHECK(total[0] == want_total, "total=%ld want %ld", total[0], want_total);
  for (int b = 0; b < NB; b++) free(buf[b]);
  return finish("depend_chain");
}
