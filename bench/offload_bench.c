// Offloading micro-benchmarks, run the same binary under the stock plugin and under ours.
//   offload_bench empty REPS [LIVE]   mean time of an empty target region (us), with LIVE
//                                     other 64-byte buffers mapped meanwhile (default 0)
//   offload_bench mapped REPS [N]     mean time of a region that maps its arrays itself:
//                                     map(to: a[0:N], b[0:N]) map(tofrom: c[0:N]), doubles
//                                     (default N = 256: 2 KiB each), c[i] += a[i] * b[i]
//   offload_bench bw REPS SIZE...     host->device and device->host bandwidth of
//                                     `target update to/from` on a device-resident buffer
//                                     that a region changed right before each update
//   offload_bench resubmit REPS SIZE  median time of a whole `target update to` of a buffer
//                                     a region just wrote on a worker (the host rewrites it)
//   offload_bench memory MIB          hold MIB MiB on one worker, then pause 4 s (RSS probe)
//   offload_bench churn N KIB         N alloc / touch / free cycles of KIB KiB, pause 4 s
//   offload_bench devices             how many devices libomptarget offers, and whether a
//                                     target region ran on the host (a check of the set-up)
// Exit status 3, with a message, when there is no offloading device (see no_device below):
// the stock side is LD_LIBRARY_PATH=/usr/lib/llvm-16/lib offload_bench ..., ours is
// ompcluster-run -np 2 offload_bench ...; OMP_TARGET_OFFLOAD=DISABLED times the host on purpose.
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <strings.h>
#include <time.h>
#include "../examples/no_device.h"

// Seconds on a monotonic clock with nanosecond resolution. Not omp_get_wtime: libomp 16's
// ticks are 2^-20 s (0.95 us) here, coarser than one small transfer, so single updates timed
// with it came out in multiples of a tick.
static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

// In a function of its own: clang-16 grows the stack by about 120 bytes per target region
// executed in one function's loop (with either plugin), so a loop of 100,000 regions in
// `main` overflows an 8 MiB stack.
__attribute__((noinline)) static void empty_region(void) {
  #pragma omp target
  { }
}

// A typical region: its arrays are mapped by the region (allocated, submitted, retrieved and
// deleted by libomptarget around each run), not by an enclosing data region.
__attribute__((noinline)) static void mapped_region(const double *a, const double *b, double *c, int n) {
  #pragma omp target map(to: a[0:n], b[0:n]) map(tofrom: c[0:n])
  for (int i = 0; i < n; i++) c[i] += a[i] * b[i];
}

int main(int argc, char **argv) {
  if (no_device("offload_bench")) return 3;
  if (argc == 2 && !strcmp(argv[1], "devices")) {
    int initial = -1;
    #pragma omp target map(from: initial)
    { initial = omp_is_initial_device(); }
    printf("devices %d region_on_host %d\n", omp_get_num_devices(), initial);
    return 0;
  }
  if (argc < 3) { fprintf(stderr, "usage: see the source\n"); return 2; }
  if (!strcmp(argv[1], "empty")) {
    int reps = atoi(argv[2]);
    int live = argc > 3 ? atoi(argv[3]) : 0;
    char **bufs = malloc((live + 1) * sizeof(char *));
    for (int i = 0; i < live; i++) {
      bufs[i] = calloc(64, 1);
      char *b = bufs[i];
      #pragma omp target enter data map(to: b[0:64])
    }
    for (int i = 0; i < 200; i++) empty_region();
    double t0 = now();
    for (int i = 0; i < reps; i++) empty_region();
    double t = now() - t0;
    printf("empty_us %.3f\n", t / reps * 1e6);
    for (int i = 0; i < live; i++) {
      char *b = bufs[i];
      #pragma omp target exit data map(delete: b[0:64])
      free(b);
    }
    free(bufs);
    return 0;
  }
  if (!strcmp(argv[1], "mapped")) {
    int reps = atoi(argv[2]);
    int n = argc > 3 ? atoi(argv[3]) : 256;
    double *a = malloc(n * sizeof(double)), *b = malloc(n * sizeof(double)), *c = calloc(n, sizeof(double));
    for (int i = 0; i < n; i++) { a[i] = i; b[i] = 2; }
    for (int i = 0; i < 100; i++) mapped_region(a, b, c, n);
    double t0 = now();
    for (int i = 0; i < reps; i++) mapped_region(a, b, c, n);
    double t = now() - t0;
    // Every run added 2 i to c[i]: check one element, so a wrong transfer cannot go unseen.
    double want = 2.0 * (n - 1) * (reps + 100);
    if (c[n - 1] != want) { printf("FAIL mapped c[%d] = %g, want %g\n", n - 1, c[n - 1], want); return 1; }
    printf("mapped_us %.3f\n", t / reps * 1e6);
    free(a); free(b); free(c);
    return 0;
  }
  if (!strcmp(argv[1], "bw")) {
    int reps = atoi(argv[2]);
    for (int a = 3; a < argc; a++) {
      size_t n = strtoull(argv[a], 0, 10);
      char *buf = malloc(n);
      memset(buf, 1, n);
      #pragma omp target enter data map(to: buf[0:n])
      // One region makes the buffer resident on a worker.
      #pragma omp target map(tofrom: buf[0:n])
      { buf[0] = 2; }
      double *ts = malloc(reps * sizeof(double)), *tr = malloc(reps * sizeof(double));
      for (int r = 0; r < reps; r++) {
        buf[r % n] = (char)r;
        // Each update meets the buffer changed by a region on the device (not timed): under
        // our plugin its current version is then on the worker only, so the update to goes to
        // the worker, and the update from comes from it (without the region, it would be
        // served from the head's copy that the update to left there).
        #pragma omp target map(tofrom: buf[0:n])
        { buf[0] += 1; }
        double t0 = now();
        #pragma omp target update to(buf[0:n])
        double t1 = now();
        // `to`, not `tofrom`: under our plugin a region whose `from` buffer is retrieved right
        // after it sends that buffer back with its reply, so the (untimed) region would carry
        // the transfer and the update from below would time a copy on the head.
        #pragma omp target map(to: buf[0:n])
        { buf[0] += 1; }
        double t2 = now();
        #pragma omp target update from(buf[0:n])
        double t3 = now();
        ts[r] = t1 - t0;
        tr[r] = t3 - t2;
      }
      qsort(ts, reps, sizeof(double), cmp);
      qsort(tr, reps, sizeof(double), cmp);
      printf("bw %zu submit_GBps %.4f retrieve_GBps %.4f\n", n, n / ts[reps / 2] / 1e9, n / tr[reps / 2] / 1e9);
      #pragma omp target exit data map(delete: buf[0:n])
      free(buf); free(ts); free(tr);
    }
    return 0;
  }
  if (!strcmp(argv[1], "resubmit") && argc > 3) {
    int reps = atoi(argv[2]);
    size_t n = strtoull(argv[3], 0, 10);
    char *buf = malloc(n);
    memset(buf, 1, n);
    #pragma omp target enter data map(to: buf[0:n])
    double *ts = malloc(reps * sizeof(double));
    for (int r = 0; r < reps; r++) {
      #pragma omp target map(alloc: buf[0:n]) firstprivate(r)
      { buf[0] = (char)r; }
      buf[1] = (char)r;
      double t0 = now();
      #pragma omp target update to(buf[0:n])
      ts[r] = now() - t0;
    }
    qsort(ts, reps, sizeof(double), cmp);
    printf("resubmit %zu ms %.4f\n", n, ts[reps / 2] * 1e3);
    #pragma omp target exit data map(delete: buf[0:n])
    free(buf); free(ts);
    return 0;
  }
  if (!strcmp(argv[1], "memory")) {
    size_t n = (size_t)atoi(argv[2]) << 20;
    char *buf = malloc(n);
    memset(buf, 3, n);
    #pragma omp target enter data map(to: buf[0:n])
    #pragma omp target map(tofrom: buf[0:n])
    { for (size_t i = 0; i < n; i += 4096) buf[i] = 4; }
    printf("HOLDING %zu\n", n);
    fflush(stdout);
    sleep(4);
    #pragma omp target exit data map(delete: buf[0:n])
    return 0;
  }
  if (!strcmp(argv[1], "churn")) {
    int cycles = atoi(argv[2]);
    size_t n = (size_t)atoi(argv[3]) << 10;
    int dev = omp_get_default_device();
    for (int c = 0; c < cycles; c++) {
      char *d = omp_target_alloc(n, dev);
      #pragma omp target is_device_ptr(d)
      { for (size_t i = 0; i < n; i += 4096) d[i] = 1; }
      omp_target_free(d, dev);
      if (c == 100 || c == cycles - 1) {
        printf("CHURN %d\n", c + 1);
        fflush(stdout);
        sleep(4);
      }
    }
    return 0;
  }
  fprintf(stderr, "unknown mode %s\n", argv[1]);
  return 2;
}
