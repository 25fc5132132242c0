// Objects made with `new` in one target region, used (virtual calls) and deleted in others,
// which may run on other workers: in OpenMP this is device memory, valid on the whole device.
//   device_new [N] [ROUNDS] [SLEEP_US]   (SLEEP_US: each region of the rounds sleeps that
//                                         long, so that failures can hit a run from outside)
// Round r: region A (one per i, nowait) makes p[i] = new Derived or new Base; region B (one
// per i, nowait) calls p[i]->f(), follows a chain of small objects built with malloc/calloc/
// realloc in region A, and deletes/frees them. A few objects live across rounds (kept[i]).
#include "check.h"
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <omp.h>
#include <unistd.h>

#pragma omp declare target
struct Base {
  int x = 3;
  virtual int f() { return x; }
  virtual ~Base() {}
};
struct Derived : Base {
  int y = 4;
  int f() override { return x * 10 + y; }
};
struct Node {
  Node *next;
  int value;
};
#pragma omp end declare target

int main(int argc, char **argv) {
  int n = argc > 1 ? std::atoi(argv[1]) : 8;
  int rounds = argc > 2 ? std::atoi(argv[2]) : 2;
  int sleep_us = argc > 3 ? std::atoi(argv[3]) : 0;
  if (n < 1 || rounds < 1 || sleep_us < 0) {
    std::fprintf(stderr, "usage: device_new [N>=1] [ROUNDS>=1] [SLEEP_US>=0]\n");
    return 2;
  }
  Base **p = new Base *[n];
  Node **chain = new Node *[n];
  double **big = new double *[n];
  int *r = new int[n];
  long *sum = new long[n];
  int *aligned_ok = new int[n];
  Base **kept = new Base *[n];
  int kept_r[1] = {0};
  // Objects kept for the whole run, made on some worker, used from any other.
#pragma omp target enter data map(alloc: kept[0:n])
  for (int i = 0; i < n; i++) {
#pragma omp target map(alloc: kept[i:1]) nowait
    { kept[i] = new Derived(); kept[i]->x = i; }
  }
#pragma omp taskwait
#pragma omp target update from(kept[0:n])
  for (int round = 0; round < rounds; round++) {
    for (int i = 0; i < n; i++) {
      // Region A: a Base or a Derived, a chain of (i % 5) + 1 nodes, and a big array.
#pragma omp target map(from: p[i:1], chain[i:1], big[i:1], aligned_ok[i:1]) firstprivate(i, round, sleep_us) nowait
      {
        if (sleep_us) usleep(sleep_us);
        p[i] = (i % 2) ? new Derived() : new Base();
        p[i]->x += round;
        Node *head = nullptr;
        for (int k = 0; k <= i % 5; k++) {
          Node *nd = (Node *)((k % 2) ? std::calloc(1, sizeof(Node)) : std::malloc(sizeof(Node)));
          nd->next = head;
          nd->value = k + 1;
          head = nd;
        }
        chain[i] = head;
        double *b = (double *)std::malloc(100 * sizeof(double));
        for (int k = 0; k < 100; k++) b[k] = k;
        b = (double *)std::realloc(b, 3000 * sizeof(double)); // grows past a page
        for (int k = 100; k < 3000; k++) b[k] = k;
        big[i] = b;
        // Aligned allocations, freed in the same region.
        void *a1 = std::aligned_alloc(64, 256);
        void *a2 = nullptr;
        int pm = posix_memalign(&a2, 8192, 100);
        aligned_ok[i] = a1 && a2 && pm == 0 && ((uintptr_t)a1 % 64 == 0) && ((uintptr_t)a2 % 8192 == 0);
        if (a1) std::memset(a1, 1, 256);
        if (a2) std::memset(a2, 2, 100);
        std::free(a1);
        std::free(a2);
        int *tmp = new int[1000]; // made and deleted in one region
        tmp[999] = 7;
        aligned_ok[i] = aligned_ok[i] && tmp[999] == 7;
        delete[] tmp;
      }
    }
#pragma omp taskwait
    for (int i = 0; i < n; i++) {
      // Region B: uses and frees what region A made (its data arrive through the pointers).
      Base *q = p[i];
      Node *c = chain[i];
      double *b = big[i];
      Base *k = kept[(i + 1) % n];
#pragma omp target is_device_ptr(q, c, b, k) map(from: r[i:1], sum[i:1]) firstprivate(sleep_us) nowait
      {
        if (sleep_us) usleep(sleep_us);
        r[i] = q->f() + k->f() * 1000;
        delete q;
        long s = 0;
        while (c) {
          Node *nx = c->next;
          s += c->value;
          std::free(c);
          c = nx;
        }
        double t = 0;
        for (int j = 0; j < 3000; j++) t += b[j];
        std::free(b);
        sum[i] = s * 100000000L + (long)t;
      }
    }
#pragma omp taskwait
    for (int i = 0; i < n; i++) {
      int x = 3 + round;
      int k = (i + 1) % n;
      int want = ((i % 2) ? x * 10 + 4 : x) + (k * 10 + 4) * 1000;
      int len = i % 5 + 1;
      long want_sum = (long)(len * (len + 1) / 2) * 100000000L + 2999L * 3000L / 2;
      CHECK(r[i] == want, "round %d: r[%d] = %d, expected %d", round, i, r[i], want);
      CHECK(sum[i] == want_sum, "round %d: sum[%d] = %ld, expected %ld", round, i, sum[i], want_sum);
      CHECK(aligned_ok[i], "round %d: aligned allocations of region %d", round, i);
    }
  }
  // The kept objects: still there, then deleted by one region.
#pragma omp target map(alloc: kept[0:n]) map(from: kept_r[0:1])
  {
    int s = 0;
    for (int i = 0; i < n; i++) {
      s += kept[i]->f();
      delete kept[i];
    }
    kept_r[0] = s;
  }
  int want_kept = 0;
  for (int i = 0; i < n; i++) want_kept += i * 10 + 4;
  CHECK(kept_r[0] == want_kept, "kept objects: %d, expected %d", kept_r[0], want_kept);
#pragma omp target exit data map(delete: kept[0:n])
  return finish("device_new");
}
