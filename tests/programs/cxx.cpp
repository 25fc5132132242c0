// C++: std::vector data mapped, a class with methods called in a region, template kernels.
#include <cmath>
#include <cstdio>
#include <numeric>
#include <vector>

static int failures = 0;
#define CHECK(cond, ...)                                                   \
  do {                                                                     \
    if (!(cond)) {                                                         \
      if (++failures <= 20) {                                              \
        std::printf("FAILED line %d: %s: ", __LINE__, #cond);              \
        std::printf(__VA_ARGS__);                                          \
        std::printf("\n");                                                 \
      }                                                                    \
    }                                                                      \
  } while (0)

#pragma omp declare target
class Particle {
public:
  double x, v;
  void step(double dt) { x += v * dt; }
  double energy() const { return 0.5 * v * v; }
};

template <typename T> T twice(T x) { return x + x; }
#pragma omp end declare target

template <typename T> void scale_kernel(T *data, int n, T factor) {
#pragma omp target map(tofrom: data[0:n])
  for (int i = 0; i < n; i++) data[i] = twice(data[i]) * factor;
}

template <typename T> T sum_kernel(const T *data, int n) {
  T s = 0;
#pragma omp target map(to: data[0:n]) map(tofrom: s)
  {
    T t = 0;
    for (int i = 0; i < n; i++) t += data[i];
    s = t;
  }
  return s;
}

int main() {
  const int n = 3000;
  std::vector<double> v(n);
  std::iota(v.begin(), v.end(), 0.0);
  double *vp = v.data();
#pragma omp target map(tofrom: vp[0:n])
  for (int i = 0; i < n; i++) vp[i] = vp[i] * vp[i];
  for (int i = 0; i < n; i++) CHECK(v[i] == double(i) * i, "v[%d]=%g", i, v[i]);

  std::vector<int> vi(n, 3);
  scale_kernel(vi.data(), n, 5);
  for (int i = 0; i < n; i++) CHECK(vi[i] == 30, "vi[%d]=%d", i, vi[i]);
  std::vector<float> vf(n, 0.5f);
  scale_kernel(vf.data(), n, 4.0f);
  for (int i = 0; i < n; i++) CHECK(vf[i] == 4.0f, "vf[%d]=%g", i, vf[i]);
  long long si = sum_kernel(vi.data(), n);
  CHECK(si == 30LL * n, "sum_kernel<int>=%lld", si);
  double sd = sum_kernel(v.data(), n);
  double want = 0;
  for (int i = 0; i < n; i++) want += double(i) * i;
  CHECK(sd == want, "sum_kernel<double>=%g want %g", sd, want);

  std::vector<Particle> ps(100);
  for (int i = 0; i < 100; i++) ps[i] = Particle{double(i), 1.0 + i};
  Particle *pp = ps.data();
  double energy = 0;
#pragma omp target map(tofrom: pp[0:100]) map(tofrom: energy)
  {
    double e = 0;
    for (int i = 0; i < 100; i++) {
      pp[i].step(0.5);
      e += pp[i].energy();
    }
    energy = e;
  }
  double want_e = 0;
  for (int i = 0; i < 100; i++) {
    CHECK(ps[i].x == i + 0.5 * (1.0 + i), "ps[%d].x=%g", i, ps[i].x);
    want_e += 0.5 * (1.0 + i) * (1.0 + i);
  }
  CHECK(energy == want_e, "energy=%g want %g", energy, want_e);

  // A single object mapped and its method called on the device.
  Particle one{1.0, 2.0};
#pragma omp target map(tofrom: one)
  for (int k = 0; k < 4; k++) one.step(0.25);
  CHECK(one.x == 3.0, "one.x=%g", one.x);

  if (failures) {
    std::printf("cxx: %d check(s) failed\n", failures);
    return 1;
  }
  std::printf("cxx: PASS\n");
  return 0;
}
