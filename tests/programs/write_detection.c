// The edges of finding what a kernel wrote (issue 24): each case is its own function, so
// that its kernels are named after it in the task log (OMPCLUSTER_TASKS).
//   write_detection [ROUNDS]
#include "check.h"
#include <omp.h>
#include <string.h>

#define BIG (4L << 20) /* doubles: 32 MiB, 8192 pages */
#define PAGE_DOUBLES 512

int counter = 0;
#pragma omp declare target(counter)

// A kernel that writes the same bytes back changes nothing: no new version.
static void same_bytes(double *a, long n) {
#pragma omp target map(alloc: a[0:n])
  for (long i = 0; i < n; i += PAGE_DOUBLES) {
    volatile double *v = a;
    double x = v[i];
    v[i] = x + 1.0;
    v[i] = x;
  }
}

// A few pages of a big resident buffer written, many rounds, the buffer moving between
// workers meanwhile (a round-robin run).
static void sparse_writes(double *a, long n, int round) {
#pragma omp target map(alloc: a[0:n]) firstprivate(round)
  for (int k = 0; k < 4; k++) a[(long)(round * 7 + k * 1031) % n * 1] += round + k;
}

// Every page written, then fewer: the buffer goes from dense to sparse tracking.
static void dense_writes(double *a, long n, int round) {
#pragma omp target map(alloc: a[0:n]) firstprivate(round)
  for (long i = 0; i < n; i++) a[i] = a[i] * 0.5 + round;
}

// Written through a pointer stored in another buffer.
static void through_pointer(double **slot, double *target, long n) {
#pragma omp target map(alloc: slot[0:1]) map(alloc: target[0:n])
  slot[0] = target;
#pragma omp target map(alloc: slot[0:1])
  for (long i = 0; i < n; i += 3) slot[0][i] += 2.0;
}

// The threads of a parallel region writing.
static void parallel_writes(double *a, long n) {
#pragma omp target teams distribute parallel for map(alloc: a[0:n])
  for (long i = 0; i < n; i++) a[i] += 1.0;
}

// A global of the image.
static void global_write(int round) {
#pragma omp target firstprivate(round)
  counter += round;
}

// Memory the region allocated on the device, written by a later region.
static void device_memory(long **slot, long *out, int m) {
#pragma omp target map(alloc: slot[0:1]) firstprivate(m)
  {
    slot[0] = (long *)malloc(m * sizeof(long));
    for (int i = 0; i < m; i++) slot[0][i] = i;
  }
#pragma omp target map(alloc: slot[0:1]) firstprivate(m)
  for (int i = 0; i < m; i += 700) slot[0][i] = -i;
#pragma omp target map(alloc: slot[0:1]) map(from: out[0:m]) firstprivate(m)
  {
    for (int i = 0; i < m; i++) out[i] = slot[0][i];
    free(slot[0]);
  }
}

int main(int argc, char **argv) {
  int rounds = argc > 1 ? atoi(argv[1]) : 6;
  long n = BIG;
  double *a = malloc(n * sizeof(double)), *ref = malloc(n * sizeof(double));
  for (long i = 0; i < n; i++) a[i] = ref[i] = (double)(i % 977);
#pragma omp target enter data map(to: a[0:n])

  same_bytes(a, n);
  for (int r = 0; r < rounds; r++) {
    sparse_writes(a, n, r);
    for (int k = 0; k < 4; k++) ref[(long)(r * 7 + k * 1031) % n] += r + k;
  }
  for (int r = 0; r < rounds; r++) {
    if (r < 3) {
      dense_writes(a, n, r);
      for (long i = 0; i < n; i++) ref[i] = ref[i] * 0.5 + r;
    } else {
      sparse_writes(a, n, r);
      for (int k = 0; k < 4; k++) ref[(long)(r * 7 + k * 1031) % n] += r + k;
    }
  }
  same_bytes(a, n);
  parallel_writes(a, n);
  for (long i = 0; i < n; i++) ref[i] += 1.0;

  long m = 100000;
  double **slot = malloc(sizeof(double *));
  double *t = malloc(m * sizeof(double)), *tref = malloc(m * sizeof(double));
  for (long i = 0; i < m; i++) t[i] = tref[i] = i;
#pragma omp target enter data map(alloc: slot[0:1]) map(to: t[0:m])
  through_pointer(slot, t, m);
  for (long i = 0; i < m; i += 3) tref[i] += 2.0;
#pragma omp target exit data map(from: t[0:m]) map(delete: slot[0:1])

  int expect = 0;
  for (int r = 0; r < rounds; r++) {
    global_write(r + 1);
    expect += r + 1;
  }
#pragma omp target update from(counter)

  long **lslot = malloc(sizeof(long *));
  long *out = malloc(50000 * sizeof(long));
#pragma omp target enter data map(alloc: lslot[0:1])
  device_memory(lslot, out, 50000);
#pragma omp target exit data map(delete: lslot[0:1])

#pragma omp target exit data map(from: a[0:n])
  long bad = 0;
  for (long i = 0; i < n; i++) bad += a[i] != ref[i];
  CHECK(bad == 0, "%ld of %ld doubles of the big buffer differ", bad, n);
  bad = 0;
  for (long i = 0; i < m; i++) bad += t[i] != tref[i];
  CHECK(bad == 0, "%ld doubles written through a stored pointer differ", bad);
  CHECK(counter == expect, "global %d, expected %d", counter, expect);
  bad = 0;
  for (int i = 0; i < 50000; i++) bad += out[i] != (i % 700 == 0 ? -i : i);
  CHECK(bad == 0, "%ld longs of device-allocated memory differ", bad);
  return finish("write_detection");
}
