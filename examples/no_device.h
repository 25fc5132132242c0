// Shared by the examples and the benchmark programs: the runs they are timed in must offload.
// With no device (on Debian 12, libomptarget 16 finds the stock x86_64 plugin only with
// /usr/lib/llvm-16/lib on LD_LIBRARY_PATH) every region would silently run on the host.
// OMP_TARGET_OFFLOAD=DISABLED asks for the host on purpose (a host baseline); otherwise no
// device is an error. Call it once, before anything else; exit with status 3 if it returns 1.
#ifndef OMPCLUSTER_NO_DEVICE_H
#define OMPCLUSTER_NO_DEVICE_H
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <strings.h>

static int no_device(const char *prog) {
  const char *off = getenv("OMP_TARGET_OFFLOAD");
  if ((off && !strcasecmp(off, "DISABLED")) || omp_get_num_devices() > 0) return 0;
  fprintf(stderr, "%s: no offloading device (omp_get_num_devices() is 0): the target regions would run on "
          "the host. Run it under ompcluster-run, or under the stock x86_64 plugin with "
          "LD_LIBRARY_PATH=/usr/lib/llvm-16/lib; set OMP_TARGET_OFFLOAD=DISABLED to run it on the host on "
          "purpose.\n", prog);
  return 1;
}
#endif
