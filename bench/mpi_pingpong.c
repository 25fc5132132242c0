// Raw MPI between rank 0 and rank 1, shaped like the plugin's transfers:
//   rtt: 8-byte message and 8-byte answer (one round trip), median over REPS
//   submit SIZE: rank 0 sends SIZE bytes, rank 1 answers 8 bytes
//   retrieve SIZE: rank 0 sends 8 bytes, rank 1 answers SIZE bytes
//   mpi_pingpong REPS SIZE...
// With MPI_PINGPONG_AS_RUNTIME=1 it runs as the plugin must: MPI_THREAD_MULTIPLE, and waits that
// poll (MPI_Irecv + MPI_Test, MPI_Isend + MPI_Test) instead of blocking in MPI, so that they
// can give up on a dead peer. Only the round trip is measured then (`rtt_runtime_us`). The
// plugin polls a receive it posted (since 2026-11-25; before, MPI_Improbe + MPI_Mrecv, which
// took 20-30% longer per round trip here): so does this reference.
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static void recv_polling(long *v, int src) {
  int flag = 0;
  MPI_Request r;
  MPI_Irecv(v, 1, MPI_LONG, src, 0, MPI_COMM_WORLD, &r);
  while (!flag) MPI_Test(&r, &flag, MPI_STATUS_IGNORE);
}

static void send_polling(long *v, int dst) {
  int flag = 0;
  MPI_Request r;
  MPI_Isend(v, 1, MPI_LONG, dst, 0, MPI_COMM_WORLD, &r);
  while (!flag) MPI_Test(&r, &flag, MPI_STATUS_IGNORE);
}

static void recv_blocking(long *v, int src) { MPI_Recv(v, 1, MPI_LONG, src, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE); }
static void send_blocking(long *v, int dst) { MPI_Send(v, 1, MPI_LONG, dst, 0, MPI_COMM_WORLD); }

// Median round trip of an 8-byte message and its answer between ranks 0 and 1, in us.
static double median_rtt_us(int rank, int reps, void (*send)(long *, int), void (*recv)(long *, int)) {
  long small = 0;
  double *t = malloc((reps * 10 + 10) * sizeof(double));
  for (int i = 0; i < reps * 10; i++) {
    double t0 = MPI_Wtime();
    if (rank == 0) {
      send(&small, 1);
      recv(&small, 1);
    } else if (rank == 1) {
      recv(&small, 0);
      send(&small, 0);
    }
    t[i] = MPI_Wtime() - t0;
  }
  qsort(t, reps * 10, sizeof(double), cmp);
  double median = t[reps * 5] * 1e6;
  free(t);
  return median;
}

int main(int argc, char **argv) {
  int reps = atoi(argv[1]);
  const char *rt = getenv("MPI_PINGPONG_AS_RUNTIME");
  int rank;
  if (rt && !strcmp(rt, "1")) {
    int provided;
    MPI_Init_thread(0, 0, MPI_THREAD_MULTIPLE, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    double rtt = median_rtt_us(rank, reps, send_polling, recv_polling);
    if (rank == 0) printf("rtt_runtime_us %.3f\n", rtt);
    MPI_Finalize();
    return 0;
  }
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  long small = 0;
  double rtt = median_rtt_us(rank, reps, send_blocking, recv_blocking);
  if (rank == 0) printf("rtt_us %.3f\n", rtt);
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
