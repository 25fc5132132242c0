// A 1-D stencil whose blocks stay on the device: `target enter data` once, then ITERS steps
// of one `target nowait` task per block reading its neighbours' edges from the previous step
// (double-buffered: `cur` and `nxt` arrays per block, swapped each step), a `declare target`
// global set with `target update to` and read by every kernel, a `target update from` of one
// block every 4 steps (a checksum line each), `target exit data` at the end. Integer
// arithmetic: exact. Args: NBLOCKS BLOCKSIZE ITERS DELAY_US.
#include "check.h"
#include <omp.h>
#include <unistd.h>

long long scale = 1;
#pragma omp declare target(scale)

static void step(const long long *l, const long long *c, const long long *r, long long *o, int m, int delay) {
  for (int i = 0; i < m; i++) {
    long long left = i > 0 ? c[i - 1] : (l ? l[m - 1] : 0);
    long long right = i < m - 1 ? c[i + 1] : (r ? r[0] : 0);
    o[i] = (left + 2 * c[i] + right + scale) % 1000003;
  }
  if (delay > 0) usleep(delay);
}
#pragma omp declare target(step)

int main(int argc, char **argv) {
  int nb = argc > 1 ? atoi(argv[1]) : 4, m = argc > 2 ? atoi(argv[2]) : 256;
  int iters = argc > 3 ? atoi(argv[3]) : 8, delay = argc > 4 ? atoi(argv[4]) : 0;
  long long **cur = malloc(nb * sizeof *cur), **nxt = malloc(nb * sizeof *nxt);
  for (int b = 0; b < nb; b++) {
    cur[b] = malloc(m * sizeof(long long));
    nxt[b] = calloc(m, sizeof(long long));
    for (int i = 0; i < m; i++) cur[b][i] = (b * m + i) % 97;
  }
  // Host reference.
  long long *ref = malloc((size_t)nb * m * sizeof *ref), *tmp = malloc((size_t)nb * m * sizeof *tmp);
  for (int b = 0; b < nb; b++)
    for (int i = 0; i < m; i++) ref[b * m + i] = cur[b][i];
  scale = 5;
#pragma omp target update to(scale)
  for (int b = 0; b < nb; b++) {
    long long *c = cur[b], *x = nxt[b];
#pragma omp target enter data map(to : c[0 : m], x[0 : m])
  }
#pragma omp parallel
#pragma omp single
  for (int t = 0; t < iters; t++) {
    for (int b = 0; b < nb; b++) {
      long long *l = b > 0 ? cur[b - 1] : cur[b], *c = cur[b], *r = b < nb - 1 ? cur[b + 1] : cur[b], *o = nxt[b];
      int hl = b > 0, hr = b < nb - 1;
#pragma omp target map(alloc : l[0 : m], c[0 : m], r[0 : m], o[0 : m]) depend(in : l[0], c[0], r[0]) \
    depend(out : o[0]) nowait firstprivate(hl, hr, m, delay)
      step(hl ? l : 0, c, hr ? r : 0, o, m, delay);
    }
#pragma omp taskwait
    long long **s = cur;
    cur = nxt;
    nxt = s;
    if (t % 4 == 3) {
      long long *c = cur[t % nb];
#pragma omp target update from(c[0 : m])
      long long sum = 0;
      for (int i = 0; i < m; i++) sum += c[i] * (i % 5 + 1);
      printf("step %d block %d checksum %lld\n", t, t % nb, sum);
    }
  }
  for (int b = 0; b < nb; b++) {
    long long *c = cur[b], *x = nxt[b];
#pragma omp target exit data map(from : c[0 : m]) map(delete : x[0 : m])
  }
  for (int t = 0; t < iters; t++) {
    for (int b = 0; b < nb; b++)
      for (int i = 0; i < m; i++) {
        int g = b * m + i;
        long long left = i > 0 ? ref[g - 1] : (b > 0 ? ref[g - 1] : 0);
        long long right = i < m - 1 ? ref[g + 1] : (b < nb - 1 ? ref[g + 1] : 0);
        tmp[g] = (left + 2 * ref[g] + right + 5) % 1000003;
      }
    long long *s = ref;
    ref = tmp;
    tmp = s;
  }
  long long sum = 0;
  int bad = 0;
  for (int b = 0; b < nb; b++)
    for (int i = 0; i < m; i++) {
      bad += cur[b][i] != ref[b * m + i];
      sum += cur[b][i];
    }
  CHECK(bad == 0, "%d wrong values", bad);
  printf("ft_stencil: %d blocks x %d, %d steps, sum %lld\n", nb, m, iters, sum);
  return finish("ft_stencil");
}
