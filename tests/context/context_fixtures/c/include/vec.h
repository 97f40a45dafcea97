#ifndef VEC_H
#define VEC_H

/* A 2-D vector. */
typedef struct { double x, y; } vec2;

vec2 vec_add(vec2 a, vec2 b);

#endif
