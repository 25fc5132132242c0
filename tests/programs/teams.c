// target teams distribute parallel for, with reductions and collapse.
#include "check.h"
#include <omp.h>

#define N 100000

int main(void) {
  double *a = malloc(N * sizeof(double));
  double *b = malloc(N * sizeof(double));
  for (int i = 0; i < N; i++) {
    a[i] = i;
    b[i] = 0;
  }
#pragma omp target teams distribute parallel for map(to: a[0:N]) map(from: b[0:N])
  for (int i = 0; i < N; i++) b[i] = 2 * a[i] + 1;
  for (int i = 0; i < N; i++) CHECK(b[i] == 2.0 * i + 1, "b[%d]=%g", i, b[i]);

  double sum = 0;
#pragma omp target teams distribute parallel for reduction(+: sum) map(to: b[0:N]) map(tofrom: sum)
  for (int i = 0; i < N; i++) sum += b[i];
  CHECK(sum == (double)N * N, "sum=%g want %g", sum, (double)N * N);

  long m[100][100];
#pragma omp target teams distribute parallel for collapse(2) map(from: m) num_teams(4) thread_limit(8)
  for (int i = 0; i < 100; i++)
    for (int j = 0; j < 100; j++) m[i][j] = (long)i * j;
  for (int i = 0; i < 100; i++)
    for (int j = 0; j < 100; j++) CHECK(m[i][j] == (long)i * j, "m[%d][%d]=%ld", i, j, m[i][j]);

  int maxv = -1;
#pragma omp target teams distribute parallel for reduction(max: maxv) map(tofrom: maxv)
  for (int i = 0; i < N; i++) {
    int v = (i * 7919) % 100003;
    if (v > maxv) maxv = v;
  }
  int want = -1;
  for (int i = 0; i < N; i++) {
    int v = (i * 7919) % 100003;
    if (v > want) want = v;
  }
  CHECK(maxv == want, "maxv=%d want %d", maxv, want);

  // parallel for inside a plain target region; team/thread ids are sane.
  int teams_seen = 0;
#pragma omp target teams num_teams(3) map(tofrom: teams_seen)
  {
    if (omp_get_team_num() == 0) teams_seen = omp_get_num_teams();
  }
  CHECK(teams_seen >= 1 && teams_seen <= 3, "num_teams=%d", teams_seen);
  free(a);
  free(b);
  return finish("teams");
}
