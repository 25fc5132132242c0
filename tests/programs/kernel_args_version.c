// A launch with a kernel-argument (KernelArgsTy) version no compiler we serve emits: the
// region `empty_region` launched by hand through libomptarget's __tgt_target_kernel with
// version 7. The runtime must stop the program with a message naming the version, the region
// and the compiler of its image, before the kernel runs.
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

struct entry {
  void *addr;
  char *name;
  size_t size;
  int32_t flags, reserved;
};
extern struct entry __start_omp_offloading_entries[], __stop_omp_offloading_entries[];

// libomptarget 16's KernelArgsTy.
typedef struct {
  uint32_t Version, NumArgs;
  void **ArgBasePtrs, **ArgPtrs;
  int64_t *ArgSizes, *ArgTypes;
  void **ArgNames, **ArgMappers;
  uint64_t Tripcount, Flags;
  uint32_t NumTeams[3], ThreadLimit[3], DynCGroupMem;
} KernelArgs;
extern int __tgt_target_kernel(void *loc, int64_t dev, int32_t teams, int32_t threads, void *host_ptr, KernelArgs *args);

void empty_region(void) {
#pragma omp target
  { }
}

int main(void) {
  int x = 0;
#pragma omp target map(tofrom: x)
  x = 1;
  printf("a region ran: x=%d\n", x);
  fflush(stdout);
  void *id = NULL;
  for (struct entry *e = __start_omp_offloading_entries; e < __stop_omp_offloading_entries; e++)
    if (e->name && strstr(e->name, "empty_region")) id = e->addr;
  if (!id) {
    printf("FAIL: no entry for empty_region\n");
    return 1;
  }
  KernelArgs k;
  memset(&k, 0, sizeof k);
  k.Version = 7;
  k.NumTeams[0] = 1;
  k.ThreadLimit[0] = 1;
  int rc = __tgt_target_kernel(NULL, omp_get_default_device(), 1, 1, id, &k);
  printf("after the launch: %d\n", rc);
  return 0;
}
