/* vector_levels.h: the code of VECTOR_LEVEL_BODY (a macro the includer defines) made
 * once per instruction-set level over vector_math.h: generic C (4 lanes), AVX2 (8) and
 * AVX-512 (16), each with the names vector_math.h reads (SFX, VF, VI, VU, VW, ATTR; see
 * there) defined around it, and the file VECTOR_LEVEL_INCLUDE names (when defined) after
 * vector_math.h.  For _erf, _chain, _softmax, _gqa and activations.h; no include guard
 * (included once).
 *
 * The includer may define VECTOR_LEVEL_NAME(level), the suffix each level's functions
 * take (default: the level's name), and VECTOR_LEVEL_AVX512, the AVX-512 level's target
 * string (default: AVX-512F, BW, DQ, VL with AVX2 and FMA): activations.h makes its
 * own copies under act_* names for kernels compiled for AVX-512F alone. */

#ifndef VECTOR_LEVEL_NAME
#define VECTOR_LEVEL_NAME(level) level
#endif
#ifndef VECTOR_LEVEL_AVX512
#define VECTOR_LEVEL_AVX512 "avx512f,avx512bw,avx512dq,avx512vl,avx2,fma"
#endif

#define SFX VECTOR_LEVEL_NAME(generic)
#define VF v4f
#define VI v4i
#define VU v4u
#define VW 4
#define ATTR
#include "vector_math.h"
#ifdef VECTOR_LEVEL_INCLUDE
#include VECTOR_LEVEL_INCLUDE
#endif
VECTOR_LEVEL_BODY
#undef SFX
#undef VF
#undef VI
#undef VU
#undef VW
#undef ATTR

#if ONNXVIZ_X86
#define SFX VECTOR_LEVEL_NAME(avx2)
#define VF v8f
#define VI v8i
#define VU v8u
#define VW 8
#define ATTR __attribute__((target("avx2,fma")))
#include "vector_math.h"
#ifdef VECTOR_LEVEL_INCLUDE
#include VECTOR_LEVEL_INCLUDE
#endif
VECTOR_LEVEL_BODY
#undef SFX
#undef VF
#undef VI
#undef VU
#undef VW
#undef ATTR

#define SFX VECTOR_LEVEL_NAME(avx512)
#define VF v16f
#define VI v16i
#define VU v16u
#define VW 16
#define ATTR __attribute__((target(VECTOR_LEVEL_AVX512)))
#include "vector_math.h"
#ifdef VECTOR_LEVEL_INCLUDE
#include VECTOR_LEVEL_INCLUDE
#endif
VECTOR_LEVEL_BODY
#undef SFX
#undef VF
#undef VI
#undef VU
#undef VW
#undef ATTR
#endif
