#include <stdio.h>
#include "local.h"
#include "include/vec.h"

int main(void) {
  vec2 a = {1, 2};
  vec2 s = vec_add(a, a);
  return LOCAL_MAX;
}
