// Many distinct target regions (kernels) in one image, called in a mixed order.
#include "check.h"
#include <omp.h>

#define N 256
#define KERNEL(name, expr)                                  \
  static void name(int *a) {                                \
    _Pragma("omp target map(tofrom: a[0:N])")               \
    for (int i = 0; i < N; i++) a[i] = (expr);              \
  }
KERNEL(k0, a[i] + 1)
KERNEL(k1, a[i] * 2)
KERNEL(k2, a[i] - 3)
KERNEL(k3, a[i] + i)
KERNEL(k4, a[i] ^ 5)
KERNEL(k5, a[i] * 3 + 1)
KERNEL(k6, a[i] / 2)
KERNEL(k7, a[i] - i)
KERNEL(k8, a[i] + 100)
KERNEL(k9, a[i] % 1000)
KERNEL(k10, a[i] << 1)
KERNEL(k11, a[i] + 7)

static int host_apply(int k, int v, int i) {
  switch (k) {
  case 0: return v + 1;
  case 1: return v * 2;
  case 2: return v - 3;
  case 3: return v + i;
  case 4: return v ^ 5;
  case 5: return v * 3 + 1;
  case 6: return v / 2;
  case 7: return v - i;
  case 8: return v + 100;
  case 9: return v % 1000;
  case 10: return v << 1;
  default: return v + 7;
  }
}

int main(void) {
  void (*ks[12])(int *) = {k0, k1, k2, k3, k4, k5, k6, k7, k8, k9, k10, k11};
  int a[N], want[N];
  for (int i = 0; i < N; i++) a[i] = want[i] = i;
  int order[36];
  for (int j = 0; j < 36; j++) order[j] = (j * 7 + 3) % 12;
  for (int j = 0; j < 36; j++) {
    ks[order[j]](a);
    for (int i = 0; i < N; i++) want[i] = host_apply(order[j], want[i], i);
  }
  for (int i = 0; i < N; i++) CHECK(a[i] == want[i], "a[%d]=%d want %d", i, a[i], want[i]);
  return finish("entries");
}
