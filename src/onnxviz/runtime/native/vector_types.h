/* vector_types.h: the compiler vector types vector_math.h runs on, one per level: 4 lanes
 * (generic C: SSE2 or NEON), 8 (AVX2) and 16 (AVX-512) of float, int32 and uint32.  A
 * type wider than the baseline only passes between functions of its own level. */
#ifndef ONNXVIZ_NATIVE_VECTOR_TYPES_H
#define ONNXVIZ_NATIVE_VECTOR_TYPES_H

#include <stdint.h>

/* Every includer computes with these types at each level and means its products and
 * sums as written (no contraction into fused multiply-adds, so every level gives the
 * same bits); the wide types never cross a call between levels. */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF /* GCC: off already under -std=c11 (setup.py) */
#endif
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wpsabi" /* wide vectors stay within their level */
#endif

typedef float v4f __attribute__((vector_size(16)));
typedef int32_t v4i __attribute__((vector_size(16)));
typedef uint32_t v4u __attribute__((vector_size(16)));
typedef float v8f __attribute__((vector_size(32)));
typedef int32_t v8i __attribute__((vector_size(32)));
typedef uint32_t v8u __attribute__((vector_size(32)));
typedef float v16f __attribute__((vector_size(64)));
typedef int32_t v16i __attribute__((vector_size(64)));
typedef uint32_t v16u __attribute__((vector_size(64)));

#endif
