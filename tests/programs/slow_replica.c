// Replicas left running (`OMPCLUSTER_FT_REPLICAS=2` without voting): argv[1] regions of argv[2]
// ms each, one after the other (so that each finds two free workers and gets a replica), each
// on its own buffer; the first region run on rank argv[3] but the program's first (a kernel's
// first run has all its replicas awaited: it teaches what the kernel writes) sleeps argv[4] ms
// more there, as a slow or overloaded worker would. It creates $SLOW_MARK as it starts that
// sleep and $SLOW_MARK.done as it ends it. The program says whether that replica was still
// running when all its regions were done: a region goes on with the first result.
#include "check.h"
#include <fcntl.h>
#include <omp.h>
#include <unistd.h>

int main(int argc, char **argv) {
  int n = argc > 1 ? atoi(argv[1]) : 12;
  int ms = argc > 2 ? atoi(argv[2]) : 50;
  int slow_rank = argc > 3 ? atoi(argv[3]) : 2;
  int slow_ms = argc > 4 ? atoi(argv[4]) : 4000;
  const char *mark = getenv("SLOW_MARK");
  CHECK(mark != NULL, "SLOW_MARK is not set");
  int **out = malloc(n * sizeof(int *));
  for (int t = 0; t < n; t++) out[t] = calloc(1, sizeof(int));
  for (int t = 0; t < n; t++) {
    int *d = out[t];
#pragma omp target map(tofrom: d[0:1]) firstprivate(t, ms, slow_rank, slow_ms)
    {
      const char *r = getenv("OMPI_COMM_WORLD_RANK");
      const char *m = getenv("SLOW_MARK");
      if (t > 0 && r && m && atoi(r) == slow_rank) {
        int fd = open(m, O_CREAT | O_EXCL | O_WRONLY, 0600);
        if (fd >= 0) {
          close(fd);
          usleep(slow_ms * 1000);
          char done[4096];
          snprintf(done, sizeof done, "%s.done", m);
          int f2 = open(done, O_CREAT | O_WRONLY, 0600);
          if (f2 >= 0) close(f2);
        }
      }
      usleep(ms * 1000);
      d[0] = 3 * t + 1;
    }
  }
  char done[4096];
  snprintf(done, sizeof done, "%s.done", mark);
  int started = access(mark, F_OK) == 0, ended = access(done, F_OK) == 0;
  printf("slow replica: %s\n", !started ? "never started" : ended ? "ended before the program went on" : "still running when the program went on");
  for (int t = 0; t < n; t++) CHECK(*out[t] == 3 * t + 1, "region %d wrote %d", t, *out[t]);
  for (int t = 0; t < n; t++) free(out[t]);
  free(out);
  return finish("slow_replica");
}
