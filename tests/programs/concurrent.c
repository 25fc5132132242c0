// Target regions launched concurrently from several host threads (synchronous regions inside
// a parallel for, and nowait regions joined by taskwait), each on its own data.
#include "check.h"
#include <omp.h>

#define CHUNKS 64
#define LEN 2048

int main(void) {
  CHECK(omp_get_num_devices() == 1, "omp_get_num_devices()=%d, want 1 (the cluster)", omp_get_num_devices());
  int on_host = -1;
#pragma omp target map(from: on_host)
  on_host = omp_is_initial_device();
  CHECK(on_host == 0, "omp_is_initial_device() in a region = %d", on_host);

  double *data = malloc(CHUNKS * LEN * sizeof(double));
  for (int i = 0; i < CHUNKS * LEN; i++) data[i] = i;
  // Synchronous regions from 4 threads at once; each chunk is its own allocation.
  double *chunk[CHUNKS];
  for (int c = 0; c < CHUNKS; c++) {
    chunk[c] = malloc(LEN * sizeof(double));
    for (int i = 0; i < LEN; i++) chunk[c][i] = c * LEN + i;
  }
#pragma omp parallel for num_threads(4) schedule(dynamic, 1)
  for (int c = 0; c < CHUNKS; c++) {
    double *p = chunk[c];
    for (int rep = 0; rep < 3; rep++) {
#pragma omp target map(tofrom: p[0:LEN]) firstprivate(rep)
      for (int i = 0; i < LEN; i++) p[i] = p[i] * 2 + rep;
    }
  }
  for (int c = 0; c < CHUNKS; c++)
    for (int i = 0; i < LEN; i++) {
      double v = c * LEN + i;
      v = ((v * 2 + 0) * 2 + 1) * 2 + 2;
      CHECK(chunk[c][i] == v, "chunk[%d][%d]=%g want %g", c, i, chunk[c][i], v);
    }

  // nowait regions on resident data, from a single producer thread, joined by taskwait.
  for (int c = 0; c < CHUNKS; c++) {
    double *p = chunk[c];
#pragma omp target enter data map(to: p[0:LEN])
  }
#pragma omp parallel num_threads(4)
#pragma omp single
  {
    for (int c = 0; c < CHUNKS; c++) {
      double *p = chunk[c];
#pragma omp target nowait depend(inout: p[0])
      for (int i = 0; i < LEN; i++) p[i] -= 1;
#pragma omp target nowait depend(inout: p[0])
      for (int i = 0; i < LEN; i++) p[i] /= 2;
    }
#pragma omp taskwait
  }
  for (int c = 0; c < CHUNKS; c++) {
    double *p = chunk[c];
#pragma omp target exit data map(from: p[0:LEN])
  }
  for (int c = 0; c < CHUNKS; c++)
    for (int i = 0; i < LEN; i++) {
      double v = c * LEN + i;
      v = (((v * 2 + 0) * 2 + 1) * 2 + 2 - 1) / 2;
      CHECK(chunk[c][i] == v, "after nowait: chunk[%d][%d]=%g want %g", c, i, chunk[c][i], v);
    }
  for (int c = 0; c < CHUNKS; c++) free(chunk[c]);
  free(data);
  return finish("concurrent");
}
