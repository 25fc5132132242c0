// Raw MPI between rank 0 and rank 1, shaped like the plugin's transfers:
//   rtt: 8-byte message and 8-byte answer (one round trip), median over REPS
//   submit SIZE: rank 0 sends SIZE bytes, rank 1 answers 8 bytes
//   retrieve SIZE: rank 0 sends 8 bytes, rank 1 answers SIZE bytes
//   mpi_pingpong REPS SIZE...
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int rank;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  int reps = atoi(argv[1]);
  long small = 0;
  double *t = malloc((reps * 10 + 10) * sizeof(double));
  for (int i = 0; i < reps * 10; i++) {
    double t0 = MPI_Wtime();
    if (rank == 0) {
      MPI_Send(&small, 1, MPI_LONG, 1, 0, MPI_COMM_WORLD);
      MPI_Recv(&small, 1, MPI_LONG, 1, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    } else if (rank == 1) {
      MPI_Recv(&small, 1, MPI_LONG, 0, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      MPI_Send(&small, 1, MPI_LONG, 0, 0, MPI_COMM_WORLD);
    }
    t[i] = MPI_Wtime() - t0;
  }
  qsort(t, reps * 10, sizeof(double), cmp);
  if (rank == 0) printf("rtt_us %.3f\n", t[reps * 5] * 1e6);
  for (int a = 2; a < argc; a++) {
    size_t n = strtoull(argv[a], 0, 10);
    char *buf = malloc(n);
    memset(buf, 1, n);
    double *ts = malloc(reps * sizeof(double)), *tr = malloc(reps * sizeof(double));
    for (int r = 0; r < reps; r++) {
      double t0 = MPI_Wtime();
      if (rank == 0) {
        MPI_Send(buf, (int)n, MPI_BYTE, 1, 1, MPI_COMM_WORLD);
        MPI_Recv(&small, 1, MPI_LONG, 1, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      } else if (rank == 1) {
        MPI_Recv(buf, (int)n, MPI_BYTE, 0, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        MPI_Send(&small, 1, MPI_LONG, 0, 1, MPI_COMM_WORLD);
      }
      double t1 = MPI_Wtime();
      if (rank == 0) {
        MPI_Send(&small, 1, MPI_LONG, 1, 2, MPI_COMM_WORLD);
        MPI_Recv(buf, (int)n, MPI_BYTE, 1, 2, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      } else if (rank == 1) {
        MPI_Recv(&small, 1, MPI_LONG, 0, 2, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        MPI_Send(buf, (int)n, MPI_BYTE, 0, 2, MPI_COMM_WORLD);
      }
      ts[r] = t1 - t0;
      tr[r] = MPI_Wtime() - t1;
    }
    qsort(ts, reps, sizeof(double), cmp);
    qsort(tr, reps, sizeof(double), cmp);
    if (rank == 0) printf("bw %zu submit_GBps %.4f retrieve_GBps %.4f\n", n, n / ts[reps / 2] / 1e9, n / tr[reps / 2] / 1e9);
    free(buf); free(ts); free(tr);
  }
  MPI_Finalize();
  return 0;
}
