// For `tests/resume.rs`: the host decides from data it reads back after every region. A
// vector x of N doubles and a right-hand side b are kept on the device (`target enter data`);
// each iteration one region relaxes x towards b in place (a damped 3-point smoothing of the
// error x - b, factor 0.98) and computes the residual, max |x_new - x_old|; the host reads the
// residual back and stops once it is below TOL (458 iterations with the defaults). The
// residual comes back either by the region's own mapping (MODE `map`: `map(from: r)`, a new
// device buffer every iteration) or from a small array kept on the device (MODE `update`:
// `target update from(res[0:1])` after the region). A resumed job must give the host the same
// residuals for the regions it skips, or it stops at another iteration. Each region sleeps
// DELAY_US microseconds (the run's length hardly depends on the machine's speed). Prints the
// residual every 50 iterations and at the end, then x's checksum; the host makes the same
// iterations and compares bit for bit. stdout does not depend on MODE (no times either).
//
//   resume_residual [MODE] [DELAY_US] [TOL] [N] [SEED]   (defaults map 6000 1e-6 8192 1)
#include "check.h"
#include <string.h>
#include <unistd.h>

#define MAX_ITERS 100000

// One relaxation of x in place; returns max |x_new - x_old| (no libm: the programs are linked
// without -lm).
static double relax(double *x, const double *b, long n, int delay) {
  const double q = 0.98;
  double prev_e = 0.0, res = 0.0;
  for (long i = 0; i < n; i++) {
    double e = x[i] - b[i];
    double next_e = i + 1 < n ? x[i + 1] - b[i + 1] : 0.0;
    double xn = b[i] + q * (0.5 * e + 0.25 * (prev_e + next_e));
    double d = xn - x[i];
    if (d < 0) d = -d;
    if (d > res) res = d;
    x[i] = xn;
    prev_e = e;
  }
  if (delay > 0) usleep(delay);
  return res;
}
#pragma omp declare target(relax)

__attribute__((noinline)) static double iterate_map(double *x, double *b, long n, int delay) {
  double r = -1.0;
#pragma omp target map(alloc: x[0:n], b[0:n]) map(from: r) firstprivate(n, delay)
  r = relax(x, b, n, delay);
  return r;
}

__attribute__((noinline)) static double iterate_update(double *x, double *b, double *res, long n, int delay) {
#pragma omp target map(alloc: x[0:n], b[0:n], res[0:1]) firstprivate(n, delay)
  res[0] = relax(x, b, n, delay);
#pragma omp target update from(res[0:1])
  return res[0];
}

int main(int argc, char **argv) {
  const char *mode = argc > 1 ? argv[1] : "map";
  int delay = argc > 2 ? atoi(argv[2]) : 6000;
  double tol = argc > 3 ? atof(argv[3]) : 1e-6;
  long n = argc > 4 ? atol(argv[4]) : 8192;
  int seed = argc > 5 ? atoi(argv[5]) : 1;
  int use_map = !strcmp(mode, "map");
  if ((!use_map && strcmp(mode, "update")) || delay < 0 || !(tol > 0) || n < 2) {
    fprintf(stderr, "usage: %s [map|update] [DELAY_US] [TOL] [N] [SEED]\n", argv[0]);
    return 2;
  }
  double *x = malloc(n * sizeof(double)), *b = malloc(n * sizeof(double));
  double *x0 = malloc(n * sizeof(double)), *res = malloc(sizeof(double));
  for (long i = 0; i < n; i++) {
    x[i] = x0[i] = (double)((i * 13 + seed) % 17) * 0.125;
    b[i] = 1.0 + (double)((i * 37 + seed * 11) % 101) / 101.0;
  }
  res[0] = -1.0;
#pragma omp target enter data map(to: x[0:n], b[0:n], res[0:1])

  int it = 0;
  double r = -1.0;
  while (it < MAX_ITERS) {
    r = use_map ? iterate_map(x, b, n, delay) : iterate_update(x, b, res, n, delay);
    it++;
    if (it % 50 == 0) printf("iteration %d residual %.6e\n", it, r);
    if (r < tol) break;
  }
#pragma omp target exit data map(from: x[0:n]) map(release: b[0:n], res[0:1])
  printf("stopped after %d iterations, residual %.6e (tolerance %.1e)\n", it, r, tol);
  double sum = 0.0;
  for (long i = 0; i < n; i++) sum += x[i] * (double)(i % 7 + 1);
  printf("x checksum %.6e, x[0] %.6e, x[n-1] %.6e\n", sum, x[0], x[n - 1]);
  CHECK(r < tol, "no convergence in %d iterations: residual %.6e", MAX_ITERS, r);

  // The same iterations on the host: the same residuals, the same stop, the same x.
  int hit = 0;
  double hr = -1.0;
  while (hit < MAX_ITERS) {
    hr = relax(x0, b, n, 0);
    hit++;
    if (hr < tol) break;
  }
  CHECK(hit == it, "the host stopped after %d iterations, the device after %d", hit, it);
  CHECK(memcmp(&hr, &r, sizeof r) == 0, "last residual %.17g on the host, %.17g from the device", hr, r);
  long bad = 0;
  for (long i = 0; i < n; i++) bad += memcmp(&x[i], &x0[i], sizeof(double)) != 0;
  CHECK(bad == 0, "%ld of %ld values of x differ from the host's", bad, n);
  return finish("resume_residual");
}
