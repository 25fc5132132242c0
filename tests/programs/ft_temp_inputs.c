// Regions whose inputs are temporaries mapped by the region itself (allocated, submitted and
// deleted around each region), accumulating into outputs that stay on the device: a worker
// lost late in the run takes the only copies of outputs whose lineage runs through inputs the
// program deleted long before. Recovery must still have their bytes, at their addresses, to
// run those regions again; and inputs whose regions no longer feed any live buffer need not
// be kept. Args: NOUT N ROUNDS DELAY_US.
#include "check.h"
#include <omp.h>
#include <unistd.h>

static double input(int r, int k, int i) { return (double)((r * 31 + k * 7 + i) % 97) / 8.0; }

int main(int argc, char **argv) {
  int nout = argc > 1 ? atoi(argv[1]) : 6, n = argc > 2 ? atoi(argv[2]) : 512;
  int rounds = argc > 3 ? atoi(argv[3]) : 20, delay = argc > 4 ? atoi(argv[4]) : 0;
  double *out = calloc((size_t)nout * n, sizeof(double));
  // One temporary per region, not one reused per output behind `taskwait depend`: LLVM 16's
  // libomp then aborted about 1 run in 3 under this plugin (assertions in kmp_alloc.cpp and
  // kmp_tasking.cpp), a race in __kmpc_omp_taskwait_deps_51 with `target nowait` tasks fixed
  // upstream after 16 (llvm-project issue 85963); long-running target tasks make it likelier.
  double *tmp = malloc((size_t)rounds * nout * n * sizeof(double));
  CHECK(out && tmp, "out of memory");
  for (int k = 0; k < nout; k++) {
    double *o = out + (size_t)k * n;
#pragma omp target enter data map(to : o[0 : n])
  }
#pragma omp parallel
#pragma omp single
  for (int r = 0; r < rounds; r++)
    for (int k = 0; k < nout; k++) {
      double *o = out + (size_t)k * n, *t = tmp + ((size_t)r * nout + k) * n;
      for (int i = 0; i < n; i++) t[i] = input(r, k, i);
#pragma omp target map(to : t[0 : n]) map(alloc : o[0 : n]) firstprivate(n, delay) \
    depend(inout : o[0]) nowait
      {
        for (int i = 0; i < n; i++) o[i] = o[i] * 0.5 + t[i];
        if (delay > 0) usleep(delay);
      }
    }
  for (int k = 0; k < nout; k++) {
    double *o = out + (size_t)k * n;
#pragma omp target exit data map(from : o[0 : n])
  }
  double sum = 0;
  for (int k = 0; k < nout; k++)
    for (int i = 0; i < n; i++) {
      double e = 0;
      for (int r = 0; r < rounds; r++) e = e * 0.5 + input(r, k, i);
      double got = out[(size_t)k * n + i];
      CHECK(got == e, "out[%d][%d] = %g, expected %g", k, i, got, e);
      sum += got;
    }
  printf("ft_temp_inputs: %.6f\n", sum);
  free(out);
  free(tmp);
  return finish("ft_temp_inputs");
}
