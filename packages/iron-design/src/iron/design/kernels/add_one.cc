// y = x + 1 over n int32 values: the kernel of iron.design.examples.add_one
// and split_join. Compiled with Peano for aie2 or aie2p.
#include <stdint.h>

extern "C" {

void add_one_i32(const int32_t *x, int32_t *y, int32_t n) {
  for (int32_t i = 0; i < n; i++)
    y[i] = x[i] + 1;
}

}
