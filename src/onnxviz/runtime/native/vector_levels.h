/* vector_levels.h: the code of VECTOR_LEVEL_BODY (a macro the includer defines) made
 * once per instruction-set level over vector_math.h: generic C (4 lanes), AVX2 (8) and
 * AVX-512 (16), each with the names vector_math.h reads (SFX, VF, VI, VU, VW, ATTR; see
 * there) defined around it, and the file VECTOR_LEVEL_INCLUDE names (when defined) after
 * vector_math.h.  For _erf, _chain, _softmax and _gqa; no include guard (included once). */

#define SFX generic
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
#define SFX avx2
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

#define SFX avx512
#define VF v16f
#define VI v16i
#define VU v16u
#define VW 16
#define ATTR __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx2,fma")))
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
