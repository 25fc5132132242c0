// Teams and threads as libomp sizes them on the device: a league of as many teams as asked
// for (capped by KMP_TEAMS_THREAD_LIMIT, by default the number of cores) updating a counter
// atomically (LLVM's offloading/target-teams-atomic.c), and teams with a thread limit and a
// parallel region inside. Prints what libomp chose; the test compares it, and libomp's
// warnings, with the stock plugin's on the same machine.
#include <omp.h>
#include <stdio.h>

int main(void) {
  int x = 0, num_teams = 0;
#pragma omp target teams num_teams(256) map(tofrom: x, num_teams)
  {
#pragma omp atomic update
    ++x;
    if (omp_get_team_num() == 0) num_teams = omp_get_num_teams();
  }
  printf("atomic: num_teams=%d x=%d\n", num_teams, x);

  int teams = 0, threads[2] = {0, 0};
#pragma omp target teams num_teams(2) thread_limit(256) map(tofrom: teams, threads)
  {
#pragma omp parallel
    if (omp_get_thread_num() == 0 && omp_get_team_num() < 2) threads[omp_get_team_num()] = omp_get_num_threads();
    if (omp_get_team_num() == 0) teams = omp_get_num_teams();
  }
  printf("parallel in teams: teams=%d threads=%d,%d\n", teams, threads[0], threads[1]);
  printf("%s\n", x == num_teams && teams >= 1 && threads[0] >= 1 ? "PASS" : "FAIL");
  return 0;
}
