// What one target region costs (issue 24): the program times its own offloaded part (after
// a warm-up region, so start-up is left out) and prints one line "us_per_region X".
//   region_costs resident BYTES REGIONS   one host thread, synchronous regions, each adding
//                                         1 to every element of a buffer kept on the device
//   region_costs readbig REGIONS          each region reads a 16 MiB resident buffer and
//                                         adds its sums into a 4 KiB one
//   region_costs threads BYTES REGIONS    4 host threads, each REGIONS synchronous regions
//                                         on its own resident buffer
//   region_costs floor BYTES REPS         no offloading: the same kernel on the host, then
//                                         one pass reading what it wrote, each timed; prints
//                                         "kernel_us X read_us Y ..." (the kernel's median,
//                                         the read pass's fastest run). Knowing exactly
//                                         what a kernel changed (its bytes, the pointers they
//                                         hold) reads the pages it wrote at least once: for a
//                                         kernel that rewrites a buffer whole, that pass is
//                                         the least any exact write detection adds to it
// Every mode checks its result on the host and exits 1 if it is wrong.
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void) { return omp_get_wtime(); }

static int resident(long bytes, int regions) {
  long n = bytes / sizeof(double);
  double *a = calloc(n, sizeof(double));
#pragma omp target enter data map(to: a[0:n])
#pragma omp target map(alloc: a[0:n])
  for (long i = 0; i < n; i++) a[i] += 1.0;
  double t0 = now();
  for (int r = 0; r < regions; r++) {
#pragma omp target map(alloc: a[0:n])
    for (long i = 0; i < n; i++) a[i] += 1.0;
  }
  double t = now() - t0;
#pragma omp target exit data map(from: a[0:n])
  int ok = a[0] == regions + 1 && a[n - 1] == regions + 1;
  printf("us_per_region %.3f\n", t / regions * 1e6);
  free(a);
  return !ok;
}

static int readbig(int regions) {
  long n = (16L << 20) / sizeof(double), m = 4096 / sizeof(double);
  double *big = malloc(n * sizeof(double)), *acc = calloc(m, sizeof(double));
  for (long i = 0; i < n; i++) big[i] = (double)(i % 7);
#pragma omp target enter data map(to: big[0:n], acc[0:m])
  double t0 = 0;
  for (int r = -1; r < regions; r++) {
    if (r == 0) t0 = now();
#pragma omp target map(alloc: big[0:n], acc[0:m])
    for (long j = 0; j < m; j++) {
      double s = 0;
      for (long i = j * (n / m); i < (j + 1) * (n / m); i++) s += big[i];
      acc[j] += s;
    }
  }
  double t = now() - t0;
#pragma omp target exit data map(from: acc[0:m]) map(delete: big[0:n])
  double want = 0;
  for (long i = 0; i < n / m; i++) want += big[i];
  int ok = acc[0] == want * (regions + 1);
  printf("us_per_region %.3f\n", t / regions * 1e6);
  return !ok;
}

static int threads(long bytes, int regions) {
  long n = bytes / sizeof(double);
  int bad = 0;
  double t0 = now();
#pragma omp parallel num_threads(4) reduction(+: bad)
  {
    double *a = calloc(n, sizeof(double));
#pragma omp target enter data map(to: a[0:n])
    for (int r = 0; r < regions; r++) {
#pragma omp target map(alloc: a[0:n])
      for (long i = 0; i < n; i++) a[i] += 1.0;
    }
#pragma omp target exit data map(from: a[0:n])
    bad += a[0] != regions || a[n - 1] != regions;
    free(a);
  }
  double t = now() - t0;
  printf("us_per_region %.3f\n", t / regions * 1e6);
  return bad != 0;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

// omp_get_wtime ticks in 2^-20 s here: too coarse for a 4 KiB pass.
static double fine_now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

// The read pass: every 8-byte word, as a hash or a scan for pointers must (an add is cheaper
// than either). Built for AVX2 where the processor has it (the rest of this file is built
// for baseline x86_64, as the kernels are), so that the floor is as low as this machine can
// read.
__attribute__((target("avx2"))) static unsigned long read_words_avx2(const unsigned long *w, long n) {
  unsigned long acc = 0;
  for (long i = 0; i < n; i++) acc += w[i];
  return acc;
}

static unsigned long read_words(const unsigned long *w, long n) {
  unsigned long acc = 0;
  for (long i = 0; i < n; i++) acc += w[i];
  return acc;
}

static int floor_pass(long bytes, int reps) {
  if (reps < 1) {
    fprintf(stderr, "region_costs floor: REPS must be at least 1\n");
    return 2;
  }
  int avx2 = __builtin_cpu_supports("avx2");
  long n = bytes / sizeof(double);
  double *a = calloc(n, sizeof(double));
  double *k = malloc(reps * sizeof(double)), *rd = malloc(reps * sizeof(double));
  unsigned long sink = 0;
  for (int r = -1; r < reps; r++) {
    double t0 = fine_now();
    for (long i = 0; i < n; i++) a[i] += 1.0;
    double t1 = fine_now();
    sink ^= avx2 ? read_words_avx2((const unsigned long *)a, n) : read_words((const unsigned long *)a, n);
    double t2 = fine_now();
    if (r >= 0) {
      k[r] = t1 - t0;
      rd[r] = t2 - t1;
    }
  }
  qsort(k, reps, sizeof(double), cmp_double);
  qsort(rd, reps, sizeof(double), cmp_double);
  // The read pass's fastest run: the floor is a lower bound.
  printf("kernel_us %.3f read_us %.3f read_median_us %.3f avx2 %d (sink %lu)\n", k[reps / 2] * 1e6, rd[0] * 1e6, rd[reps / 2] * 1e6, avx2, sink & 1);
  int ok = a[0] == reps + 1;
  free(a);
  free(k);
  free(rd);
  return !ok;
}

int main(int argc, char **argv) {
  if (argc == 4 && !strcmp(argv[1], "floor")) return floor_pass(atol(argv[2]), atoi(argv[3]));
  if (argc < 3) {
    fprintf(stderr, "usage: region_costs resident BYTES REGIONS | readbig REGIONS | threads BYTES REGIONS | floor BYTES REPS\n");
    return 2;
  }
  if (omp_get_num_devices() < 1) {
    fprintf(stderr, "region_costs: no offload device (host fallback is never timed)\n");
    return 3;
  }
  if (!strcmp(argv[1], "resident") && argc == 4) return resident(atol(argv[2]), atoi(argv[3]));
  if (!strcmp(argv[1], "readbig")) return readbig(atoi(argv[2]));
  if (!strcmp(argv[1], "threads") && argc == 4) return threads(atol(argv[2]), atoi(argv[3]));
  fprintf(stderr, "region_costs: unknown mode %s\n", argv[1]);
  return 2;
}
