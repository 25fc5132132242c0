// Shared by the test programs: count mismatches, print what was wrong, PASS at the end.
#include <stdio.h>
#include <stdlib.h>
static int failures = 0;
#define CHECK(cond, ...)                                                        \
  do {                                                                          \
    if (!(cond)) {                                                              \
      failures++;                                                               \
      if (failures <= 20) {                                                     \
        printf("FAILED %s:%d: %s: ", __FILE__, __LINE__, #cond);                \
        printf(__VA_ARGS__);                                                    \
        printf("\n");                                                           \
      }                                                                         \
    }                                                                           \
  } while (0)
static int finish(const char *name) {
  if (failures) {
    printf("%s: %d check(s) failed\n", name, failures);
    fflush(stdout);
    return 1;
  }
  printf("%s: PASS\n", name);
  fflush(stdout);
  return 0;
}
