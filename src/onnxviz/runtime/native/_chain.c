/* onnxviz.runtime.native._chain: a chain of elementwise float32 steps in one pass, for
 * fusion_elementwise's ElementwiseChain (a GELU exported as Div -> Erf -> Add -> Mul ->
 * Mul, a scale and shift, the same with a QDQ model's QuantizeLinear -> DequantizeLinear
 * pair after each op, ...).
 *
 *   run(x, y, program[, channels]) -> 0: y = the program's steps applied in turn to x (y
 *       may be x); 1 when a QDQ step met a NaN (y, and x when y is x, then partly written).
 *       channels = (tables, C, plane, last): the per-channel steps' tables (float32, C
 *       values each), x's channels and the values per channel plane; element i of x is
 *       in channel (i / plane) % C, or i % C when `last` (a channels-last buffer)
 *   held(program, expect, min_ndim, fallback, ndarray, empty_like): a node's call (below)
 *
 * program: bytes, 8 per step: op (uint8: ADD, SUB, MUL, DIV, ERF, NEG, ABS, RELU, TANH,
 * SIGMOID, QDQ, QDQ_ARGS below, SILU: v * sigmoid(v), a Sigmoid node and the Mul of its
 * input by it, the running value's two readers, SQUARE and CUBE: v * v and (v * v) * v, a
 * Pow by 2 or by 3 as the Pow kernel computes it),
 * kind (uint8: 0 no second operand, 1 a scalar, 2 the chain's input x, 3 a side value:
 * x combined with the scalar by the side op, 4 a value per channel: table `side byte` of
 * run's `channels`, a GroupNorm's gamma or beta of shape (C, 1, 1), 5 a tensor of x's
 * length: tensor `side byte` of run's `tensors`, another node's value the op reads element
 * by element: an LSTM cell's f * c + i * g), value_first (uint8: 1 when the running
 * value is the op's first operand), the side op (uint8: ADD, SUB, MUL or DIV in its low
 * bits, 0x10 when the scalar is its first operand; 0 unless kind 3), and the scalar
 * (float32, native byte order).  A side value is a node off the chain's path that only
 * this step reads: the written-out GELU's h = x * 0.5 in y = h * (1 + erf(x / sqrt 2)).
 *
 * A per-tensor 8-bit QuantizeLinear -> DequantizeLinear pair is two steps, QDQ then
 * QDQ_ARGS, both of kind 0: QDQ's third byte is 1 for int8 codes, 0 for uint8, its fourth
 * the quantizer's zero point (the code's byte: int8 as two's complement), its scalar the
 * quantizer's scale s; QDQ_ARGS's third byte is 0, its fourth the dequantizer's zero point
 * (a byte of the same type), its scalar the dequantizer's scale s2.  The pair's float32
 * steps, as the QuantizeLinear and DequantizeLinear kernels take them:
 *
 *   t = round half to even (v / s) + z, clipped to [-128, 127] or [0, 255];
 *   y = (t - z2) * s2
 *
 * (v / s an IEEE division; rounding by adding and taking away 1.5 * 2^23, exact below
 * 2^22, and from there up the value stays beyond the 8-bit range the clip gives either
 * way).  A NaN there would be cast to an integer, which is the platform's choice, so the
 * run stops and returns 1: the caller runs the nodes one by one.
 *
 * The numbers are the numpy block path's, bit for bit, at every level: each step rounds
 * once as numpy's ufunc does (add, subtract, multiply and divide are IEEE operations;
 * -std=c11 never contracts a product and a sum into an FMA), ERF is vector_math.h's erf,
 * which numpy's path calls too (kernels/math_erf.py), TANH and SIGMOID are vector_math.h's
 * tanh and sigmoid, which the Tanh and Sigmoid kernels run for float32 through this
 * module, NEG and ABS flip or clear the sign
 * bit as numpy does (NaN included), and RELU is np.maximum(v, 0) (NaN kept, -0 -> +0).
 *
 * Why: the numpy path walks 32K-element blocks with one ufunc call per step and block;
 * here every step runs over a 1K-element block that stays in L1, without a Python call
 * per step (a QDQ BERT's GELU is eight steps, four of them pairs, each a node of its own
 * otherwise). */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>

#include "levels.h"
#include "vector_types.h"
#include <stddef.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>


enum {
    OP_ADD, OP_SUB, OP_MUL, OP_DIV, OP_ERF, OP_NEG, OP_ABS, OP_RELU, OP_TANH, OP_SIGMOID,
    OP_QDQ, OP_QDQ_ARGS, OP_SILU, OP_SQUARE, OP_CUBE, OP_COUNT
};
enum { KIND_NONE, KIND_SCALAR, KIND_INPUT, KIND_SIDE, KIND_CHANNEL, KIND_TENSOR };
enum { MAX_TABLES = 16, MAX_TENSORS = 4 };

/* run's per-channel tables and x's geometry (channel of element i: see the header), and
 * its tensor operands (each of x's length, element i beside x's). */
typedef struct {
    const float *tables[MAX_TABLES];
    /* channels-last: each table repeated over BLOCK + C floats (run_steps makes them),
     * so a block's channel values are tiled[t] + start % C, no per-element fill */
    const float *tiled[MAX_TABLES];
    Py_ssize_t c, plane;
    int last;
    const float *tensors[MAX_TENSORS];
    int ntensors;
} channels_t;

/* buf[i] = table[channel of element start + i], i < n. */
static void fill_channels(const channels_t *ch, int table, float *buf, Py_ssize_t start,
                          Py_ssize_t n) {
    const float *vals = ch->tables[table];
    if (ch->last) {
        Py_ssize_t c = start % ch->c;
        for (Py_ssize_t i = 0; i < n; i++) {
            buf[i] = vals[c];
            if (++c == ch->c) c = 0;
        }
        return;
    }
    for (Py_ssize_t i = 0; i < n;) {
        const Py_ssize_t pos = start + i, plane = pos / ch->plane;
        Py_ssize_t end = (plane + 1) * ch->plane - start;
        if (end > n) end = n;
        const float v = vals[plane % ch->c];
        for (; i < end; i++) buf[i] = v;
    }
}
enum { SIDE_SCALAR_FIRST = 0x10 };
enum { BLOCK = 1024, MAX_STEPS = 64 };

/* A parsed step; a QDQ pair is one (op OP_QDQ), its two program steps' fields in q. */
typedef struct {
    int op, kind, value_first, side_op, side_scalar_first;
    float scalar;
    struct {
        float scale, zero, lo, hi, zero2, scale2;
    } q;
} step_t;

static int level = 0;

/* One step from src to dst over n floats (n a multiple of VW; o: the chain's input
 * there; src and dst may be one buffer).  Each binary step runs a loop made for its op,
 * operand kind and operand order (`binary_loop` inlined with those as constants): with
 * the tests inside the loop, a step over an L1 block cost 3-4 times its arithmetic.  A
 * side value is made into `side` first (one loop per side op and order). */
#define CHAIN_LEVEL                                                                        \
    ATTR static inline __attribute__((always_inline)) VF RS(binary)(int op, VF a, VF b) {  \
        switch (op) {                                                                      \
        case OP_ADD: return a + b;                                                         \
        case OP_SUB: return a - b;                                                         \
        case OP_MUL: return a * b;                                                         \
        default: return a / b;                                                             \
        }                                                                                  \
    }                                                                                      \
    /* dst = op(src, b) (value_first) or op(b, src); b the scalar or the array bs */       \
    ATTR static inline __attribute__((always_inline)) void RS(binary_loop)(                \
        const int op, const int array, const int value_first, float *dst, const float *src, \
        const float *bs, VF scalar, Py_ssize_t n) {                                        \
        for (Py_ssize_t i = 0; i < n; i += VW) {                                           \
            VF a, b = scalar;                                                              \
            memcpy(&a, src + i, sizeof a);                                                 \
            if (array) memcpy(&b, bs + i, sizeof b);                                       \
            a = value_first ? RS(binary)(op, a, b) : RS(binary)(op, b, a);                 \
            memcpy(dst + i, &a, sizeof a);                                                 \
        }                                                                                  \
    }                                                                                      \
    ATTR static void RS(binary_step)(int op, int array, int value_first, float *dst,       \
                                     const float *src, const float *bs, VF scalar,         \
                                     Py_ssize_t n) {                                       \
        switch (op * 4 + array * 2 + value_first) {                                        \
        case 0: RS(binary_loop)(OP_ADD, 0, 0, dst, src, bs, scalar, n); break;             \
        case 1: RS(binary_loop)(OP_ADD, 0, 1, dst, src, bs, scalar, n); break;             \
        case 2: RS(binary_loop)(OP_ADD, 1, 0, dst, src, bs, scalar, n); break;             \
        case 3: RS(binary_loop)(OP_ADD, 1, 1, dst, src, bs, scalar, n); break;             \
        case 4: RS(binary_loop)(OP_SUB, 0, 0, dst, src, bs, scalar, n); break;             \
        case 5: RS(binary_loop)(OP_SUB, 0, 1, dst, src, bs, scalar, n); break;             \
        case 6: RS(binary_loop)(OP_SUB, 1, 0, dst, src, bs, scalar, n); break;             \
        case 7: RS(binary_loop)(OP_SUB, 1, 1, dst, src, bs, scalar, n); break;             \
        case 8: RS(binary_loop)(OP_MUL, 0, 0, dst, src, bs, scalar, n); break;             \
        case 9: RS(binary_loop)(OP_MUL, 0, 1, dst, src, bs, scalar, n); break;             \
        case 10: RS(binary_loop)(OP_MUL, 1, 0, dst, src, bs, scalar, n); break;            \
        case 11: RS(binary_loop)(OP_MUL, 1, 1, dst, src, bs, scalar, n); break;            \
        case 12: RS(binary_loop)(OP_DIV, 0, 0, dst, src, bs, scalar, n); break;            \
        case 13: RS(binary_loop)(OP_DIV, 0, 1, dst, src, bs, scalar, n); break;            \
        case 14: RS(binary_loop)(OP_DIV, 1, 0, dst, src, bs, scalar, n); break;            \
        default: RS(binary_loop)(OP_DIV, 1, 1, dst, src, bs, scalar, n); break;            \
        }                                                                                  \
    }                                                                                      \
    /* c in every lane, -0 included (splat's 0 + c would make it +0) */                    \
    ATTR static inline __attribute__((always_inline)) VF RS(lanes_of)(float c) {           \
        float lanes[VW];                                                                   \
        for (int l = 0; l < VW; l++) lanes[l] = c;                                         \
        VF v;                                                                              \
        memcpy(&v, lanes, sizeof v);                                                       \
        return v;                                                                          \
    }                                                                                      \
    /* A QuantizeLinear -> DequantizeLinear pair over n floats (the header's steps);       \
     * whether a NaN met the rounding in the first `valid` (the rest: a short block's      \
     * padding, never stored). */                                                          \
    ATTR static int RS(qdq_step)(const step_t *s, float *dst, const float *src,            \
                                 Py_ssize_t n, Py_ssize_t valid) {                         \
        const VF scale = RS(lanes_of)(s->q.scale), scale2 = RS(lanes_of)(s->q.scale2);     \
        const VF magic = RS(splat)(12582912.0f), zero = RS(splat)(s->q.zero);              \
        const VF lo = RS(splat)(s->q.lo), hi = RS(splat)(s->q.hi);                         \
        const VF zero2 = RS(splat)(s->q.zero2);                                            \
        VI nan = {0};                                                                      \
        for (Py_ssize_t i = 0; i < n; i += VW) {                                           \
            VF t;                                                                          \
            memcpy(&t, src + i, sizeof t);                                                 \
            t = t / scale;                                                                 \
            t = (t + magic) - magic + zero; /* rounded (see the header), + z */            \
            VI bad = t != t;                                                               \
            if (i + VW > valid) { /* the block's last vector: its real lanes only */       \
                int32_t real[VW];                                                          \
                for (int l = 0; l < VW; l++) real[l] = i + l < valid ? -1 : 0;             \
                VI mask;                                                                   \
                memcpy(&mask, real, sizeof mask);                                          \
                bad &= mask;                                                               \
            }                                                                              \
            nan |= bad;                                                                    \
            t = RS(select)(t < lo, lo, t);                                                 \
            t = RS(select)(t > hi, hi, t);                                                 \
            t = (t - zero2) * scale2;                                                      \
            memcpy(dst + i, &t, sizeof t);                                                 \
        }                                                                                  \
        int32_t lanes[VW];                                                                 \
        memcpy(lanes, &nan, sizeof lanes);                                                 \
        int any = 0;                                                                       \
        for (int l = 0; l < VW; l++) any |= lanes[l];                                      \
        return any != 0;                                                                   \
    }                                                                                      \
    /* One step over n floats, the first `valid` of them real (the QDQ pair tests those    \
     * for a NaN); 1 when a NaN stops the run there, else 0. */                            \
    ATTR static int RS(step)(const step_t *s, float *dst, const float *src, const float *o, \
                             float *side, Py_ssize_t n, Py_ssize_t valid,                  \
                             const channels_t *ch, Py_ssize_t start,                       \
                             const float *const *tin) {                                    \
        const VF scalar = RS(lanes_of)(s->scalar);                                         \
        VF a;                                                                              \
        switch (s->op) {                                                                   \
        case OP_QDQ:                                                                       \
            return RS(qdq_step)(s, dst, src, n, valid);                                    \
        case OP_SILU: /* the Sigmoid node's values, then the Mul's product */              \
            RS(silu_buffer)(src, dst, n);                                                  \
            return 0;                                                                      \
        case OP_ERF:                                                                       \
            RS(erf_buffer)(src, dst, n);                                                   \
            return 0;                                                                      \
        case OP_TANH:                                                                      \
            RS(tanh_buffer)(src, dst, n);                                                  \
            return 0;                                                                      \
        case OP_SIGMOID:                                                                   \
            RS(sigmoid_buffer)(src, dst, n);                                               \
            return 0;                                                                      \
        case OP_SQUARE: /* Pow by 2 and by 3: v * v and (v * v) * v, the Pow kernel's */   \
        case OP_CUBE:                                                                      \
            for (Py_ssize_t i = 0; i < n; i += VW) {                                       \
                memcpy(&a, src + i, sizeof a);                                             \
                a = s->op == OP_SQUARE ? a * a : (a * a) * a;                              \
                memcpy(dst + i, &a, sizeof a);                                             \
            }                                                                              \
            return 0;                                                                      \
        case OP_NEG:                                                                       \
        case OP_ABS:                                                                       \
        case OP_RELU:                                                                      \
            for (Py_ssize_t i = 0; i < n; i += VW) {                                       \
                memcpy(&a, src + i, sizeof a);                                             \
                if (s->op == OP_NEG)                                                       \
                    a = (VF)((VI)a ^ (-0x7fffffff - 1));                                   \
                else if (s->op == OP_ABS)                                                  \
                    a = (VF)((VI)a & 0x7fffffff);                                          \
                else                                                                       \
                    a = RS(select)(a <= 0.0f, RS(splat)(0.0f), a);                         \
                memcpy(dst + i, &a, sizeof a);                                             \
            }                                                                              \
            return 0;                                                                      \
        default:                                                                           \
            if (s->kind == KIND_SCALAR) {                                                  \
                RS(binary_step)(s->op, 0, s->value_first, dst, src, NULL, scalar, n);      \
            } else if (s->kind == KIND_INPUT) {                                            \
                RS(binary_step)(s->op, 1, s->value_first, dst, src, o, scalar, n);         \
            } else if (s->kind == KIND_TENSOR) {                                           \
                RS(binary_step)(s->op, 1, s->value_first, dst, src, tin[s->side_op],       \
                                scalar, n);                                                \
            } else if (s->kind == KIND_CHANNEL && !ch->last && ch->plane % VW == 0) {      \
                /* planes of whole vectors: each channel's run of the block by its value \
                 * as a scalar step (filling a buffer had cost twice the op) */           \
                for (Py_ssize_t i = 0; i < n;) {                                           \
                    const Py_ssize_t plane = (start + i) / ch->plane;                      \
                    Py_ssize_t end = (plane + 1) * ch->plane - start;                      \
                    if (end > n) end = n;                                                  \
                    RS(binary_step)(s->op, 0, s->value_first, dst + i, src + i, NULL,      \
                                    RS(lanes_of)(ch->tables[s->side_op][plane % ch->c]),   \
                                    end - i);                                              \
                    i = end;                                                               \
                }                                                                          \
            } else if (s->kind == KIND_CHANNEL && ch->last && ch->tiled[s->side_op]) {     \
                RS(binary_step)(s->op, 1, s->value_first, dst, src,                        \
                                ch->tiled[s->side_op] + start % ch->c, scalar, n);         \
            } else if (s->kind == KIND_CHANNEL) {                                          \
                fill_channels(ch, s->side_op, side, start, n);                             \
                RS(binary_step)(s->op, 1, s->value_first, dst, src, side, scalar, n);      \
            } else { /* the side value x (op) scalar, then the step on it */               \
                RS(binary_step)(s->side_op, 0, !s->side_scalar_first, side, o, NULL,       \
                                scalar, n);                                                \
                RS(binary_step)(s->op, 1, s->value_first, dst, src, side, scalar, n);      \
            }                                                                              \
            return 0;                                                                      \
        }                                                                                  \
    }                                                                                      \
    /* The steps over x into y, a block at a time; 1 when a QDQ step met a NaN (y then     \
     * partly written: with y being x, x too), else 0. */                                  \
    ATTR static int RS(run)(const step_t *steps, int count, const float *x, float *y,      \
                            Py_ssize_t n, const channels_t *ch) {                          \
        float v[BLOCK] __attribute__((aligned(64))), o[BLOCK] __attribute__((aligned(64))); \
        float side[BLOCK] __attribute__((aligned(64)));                                    \
        float tpad[MAX_TENSORS][BLOCK] __attribute__((aligned(64)));                       \
        const float *tin[MAX_TENSORS];                                                     \
        for (Py_ssize_t start = 0; start < n; start += BLOCK) {                            \
            const Py_ssize_t len = n - start < BLOCK ? n - start : BLOCK;                  \
            const Py_ssize_t padded = (len + VW - 1) / VW * VW;                            \
            for (int t = 0; t < ch->ntensors; t++) tin[t] = ch->tensors[t] + start;        \
            /* A whole block: the first step reads the input where it lies and the last   \
             * writes the output there (two copies fewer, a fifth of a GELU's time).  A    \
             * last block short of a whole vector goes through the zero-padded buffers     \
             * (their padding lanes are never stored). */                                  \
            const float *in = x + start;                                                   \
            float *out = y + start;                                                        \
            if (padded != len) {                                                           \
                memcpy(o, in, (size_t)len * 4);                                            \
                memset(o + len, 0, (size_t)(padded - len) * 4);                            \
                in = o;                                                                    \
                out = v;                                                                   \
                for (int t = 0; t < ch->ntensors; t++) { /* the tensors padded alike */    \
                    memcpy(tpad[t], tin[t], (size_t)len * 4);                              \
                    memset(tpad[t] + len, 0, (size_t)(padded - len) * 4);                  \
                    tin[t] = tpad[t];                                                      \
                }                                                                          \
            }                                                                              \
            const float *src = in;                                                         \
            for (int k = 0; k < count; k++) {                                              \
                float *dst = k == count - 1 ? out : v;                                     \
                if (RS(step)(&steps[k], dst, src, in, side, padded, len, ch, start, tin))  \
                    return 1;                                                              \
                src = dst;                                                                 \
            }                                                                              \
            if (count == 0 && out != in) memcpy(out, in, (size_t)padded * 4);              \
            if (out == v) memcpy(y + start, v, (size_t)len * 4);                           \
        }                                                                                  \
        return 0;                                                                          \
    }

#define VECTOR_LEVEL_BODY CHAIN_LEVEL
#include "vector_levels.h"

/* A QDQ pair's two program steps (`p`: QDQ's 16 bytes) as one step; 0, or -1 when they
 * are not a pair's. */
static int parse_qdq(const uint8_t *p, step_t *s) {
    const int is_signed = p[2];
    if (p[1] != KIND_NONE || is_signed > 1 || p[8] != OP_QDQ_ARGS || p[9] != KIND_NONE ||
        p[10] != 0)
        return -1;
    s->op = OP_QDQ;
    s->kind = KIND_NONE;
    s->q.zero = is_signed ? (float)(int8_t)p[3] : (float)p[3];
    s->q.zero2 = is_signed ? (float)(int8_t)p[11] : (float)p[11];
    s->q.lo = is_signed ? -128.0f : 0.0f;
    s->q.hi = is_signed ? 127.0f : 255.0f;
    memcpy(&s->q.scale, p + 4, 4);
    memcpy(&s->q.scale2, p + 12, 4);
    return 0;
}

/* The program's steps, checked (a QDQ pair's two as one); their count, or -1 with a
 * ValueError set when it is not a program. */
static int parse(const Py_buffer *prog, step_t *steps, int tables, int tensors) {
    if (prog->len % 8 || prog->len / 8 > MAX_STEPS) {
        PyErr_SetString(PyExc_ValueError, "run: the program is 8 bytes a step, at most 64 steps");
        return -1;
    }
    const uint8_t *p = prog->buf;
    const int slots = (int)(prog->len / 8);
    int count = 0;
    for (int k = 0; k < slots; k++, p += 8) {
        step_t *s = &steps[count++];
        memset(s, 0, sizeof *s);
        if (p[0] == OP_QDQ) {
            if (k + 1 == slots || parse_qdq(p, s) < 0) {
                PyErr_Format(PyExc_ValueError, "run: step %d is not a QDQ pair's first", k);
                return -1;
            }
            k++, p += 8; /* its QDQ_ARGS step */
            continue;
        }
        s->op = p[0], s->kind = p[1], s->value_first = p[2] != 0;
        s->side_op = p[3] & 0x0f, s->side_scalar_first = (p[3] & SIDE_SCALAR_FIRST) != 0;
        memcpy(&s->scalar, p + 4, 4);
        const int unary = s->op == OP_ERF || s->op == OP_TANH || s->op == OP_SIGMOID ||
                          s->op == OP_NEG || s->op == OP_ABS ||
                          s->op == OP_RELU || s->op == OP_SILU || s->op == OP_SQUARE ||
                          s->op == OP_CUBE;
        if (s->kind == KIND_TENSOR) { /* p[3]: the tensor */
            s->side_op = p[3];
            s->side_scalar_first = 0;
            if (p[3] >= tensors || s->op > OP_DIV) {
                PyErr_Format(PyExc_ValueError, "run: step %d is not a step (its tensor)", k);
                return -1;
            }
            continue;
        }
        if (s->kind == KIND_CHANNEL) { /* p[3]: the table */
            s->side_op = p[3];
            s->side_scalar_first = 0;
            if (p[3] >= tables || s->op > OP_DIV) {
                PyErr_Format(PyExc_ValueError, "run: step %d is not a step (its table)", k);
                return -1;
            }
            continue;
        }
        if (s->op >= OP_COUNT || s->op == OP_QDQ_ARGS /* only after QDQ */ ||
            s->kind > KIND_SIDE || unary != (s->kind == KIND_NONE) ||
            (s->kind == KIND_SIDE ? s->side_op > OP_DIV || (p[3] & ~0x1f)
                                  : p[3] != 0)) {
            PyErr_Format(PyExc_ValueError, "run: step %d is not a step", k);
            return -1;
        }
    }
    return count;
}

/* 1 when a QDQ step met a NaN, else 0 (run's result). */
static int run_level(const step_t *steps, int count, const float *x, float *y, Py_ssize_t n,
                     const channels_t *ch) {
#if ONNXVIZ_X86
    if (level >= 2)
        return run_avx512(steps, count, x, y, n, ch);
    if (level == 1)
        return run_avx2(steps, count, x, y, n, ch);
#endif
    return run_generic(steps, count, x, y, n, ch);
}

/* The steps over x into y (run_level); for a channels-last run with per-channel steps,
 * its tables tiled first (channels_t.tiled: the per-element fill of each block had cost
 * several times the step itself: a DenseNet's BatchNormalization and Mul -> Add -> Relu
 * after each channels-last Concat ran slower than numpy's strided passes).  The same
 * values read, so the same bits.  An allocation failure runs the per-element fill. */
static int run_steps(const step_t *steps, int count, const float *x, float *y, Py_ssize_t n,
                     const channels_t *ch) {
    if (!ch || !ch->last || ch->c < 1 || n < 2 * BLOCK) return run_level(steps, count, x, y, n, ch);
    int tables = 0;
    for (int i = 0; i < count; i++)
        if (steps[i].kind == KIND_CHANNEL && steps[i].side_op + 1 > tables)
            tables = steps[i].side_op + 1;
    if (!tables) return run_level(steps, count, x, y, n, ch);
    const Py_ssize_t span = BLOCK + ch->c;
    float *buf = malloc((size_t)(tables * span) * sizeof(float));
    if (!buf) return run_level(steps, count, x, y, n, ch);
    channels_t tiled = *ch;
    for (int t = 0; t < tables; t++) {
        float *row = buf + (Py_ssize_t)t * span;
        for (Py_ssize_t i = 0; i < span; i++) row[i] = ch->tables[t][i % ch->c];
        tiled.tiled[t] = row;
    }
    const int nan = run_level(steps, count, x, y, n, &tiled);
    free(buf);
    return nan;
}

/* ---- a held chain: a fused chain's program with its scalars -------------------------
 *
 * `held(program, expect, min_ndim, fallback, ndarray, empty_like[, tables])` makes the
 * callable a chain node runs first from the node loop (ElementwiseChain.quick):
 * called with the node's inputs, the scalars being exactly the objects of `expect`
 * (those the program was made with), on a float32 C-contiguous ndarray x of at least
 * `min_ndim` dimensions (the scalars' most: no broadcast adds axes), it makes y by
 * numpy.empty_like and runs the program; any other call, or a run that met a NaN in a
 * QDQ step, is fallback(*args) (its new y dropped).  The Python call's checks, reshapes
 * and the program's lookup were most of a SiLU's 5 us on a decoder's 512 values.  A
 * float32 x that is not C-contiguous runs row by row when its last axis is, or flat when
 * it is one dense buffer in another axis order (held_strided).  With
 * `tables` (the per-channel steps' values, copied: read-only constants of `expect`) x must
 * also be (N, C, ...) of the tables' C, channels first, or (N, C, H, W) channels-last
 * (held_strided);
 * a GroupNorm tail's 20 us of Python on 64 channels at 8 x 8 went. */
typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    step_t steps[MAX_STEPS];
    int count, min_ndim, ntables;
    Py_ssize_t channels; /* the per-channel steps' C (their tables' values: `values`) */
    float *values;       /* ntables x channels floats, copied when held was made */
    int ntensors;        /* the tensor operands: args[tensor_at[t]], x's shape each */
    Py_ssize_t tensor_at[MAX_TENSORS];
    PyObject *expect, *fallback, *ndarray, *empty_like;
} HeldChain;

/* Whether the strided buffer v is one dense block in some axis order: its strides,
 * smallest first, each the product of the smaller ones' extents (axes of size 1 aside). */
static int dense_in_some_order(const Py_buffer *v) {
    const int nd = v->ndim;
    int order[32];
    for (int d = 0; d < nd; d++) order[d] = d;
    for (int a = 1; a < nd; a++) /* insertion sort by stride, smallest first */
        for (int b = a; b > 0 && v->strides[order[b]] < v->strides[order[b - 1]]; b--) {
            const int t = order[b];
            order[b] = order[b - 1];
            order[b - 1] = t;
        }
    Py_ssize_t step = 4;
    for (int k = 0; k < nd; k++) {
        const int d = order[k];
        if (v->shape[d] == 1) continue;
        if (v->strides[d] != step) return 0;
        step *= v->shape[d];
    }
    return step == v->len;
}

/* The steps over a float32 x that is not C-contiguous, into y = empty_like(x), when x
 * is one of three layouts (else NULL with no error set: not taken, the fallback's call;
 * NULL with an error: failed).  Only for programs with no tensor operand (they follow
 * the C-order index), and with per-channel steps only for the third layout.
 *
 *   rows: x's last axis contiguous (a Split's or a Slice's part of each row: an LSTM
 *     cell's gates), y C-contiguous: row by row; each element's steps those of the flat
 *     run (a short row's tail through the padded block as the flat run's), so its bits.
 *   permuted: x one dense buffer in another axis order (a channels-last value: a conv
 *     chain's output, fusion_layout.py) and y laid out as x (numpy's 'K' order gives
 *     it): the flat run over the two buffers, element i of y from element i of x.  A
 *     YOLO's SiLU after every conv had gone through the Python call (6 us of checks and
 *     the transposing views a node).
 *   channels-last, for a program with per-channel steps: x a float32 (N, C, H, W) of the
 *     tables' C laid out as one dense (N, H, W, C) buffer (a conv chain's or a channel
 *     Concat's value), y laid out as x: the flat run with element i's channel i % C, the
 *     run the chain's Python call makes (so its bits).  A DenseNet's BatchNormalization ->
 *     Mul -> Add -> Relu after each channels-last Concat had gone through the Python
 *     call. */
static PyObject *held_strided(const HeldChain *self, PyObject *x, int *nan) {
    Py_buffer xv;
    if (PyObject_GetBuffer(x, &xv, PyBUF_STRIDES | PyBUF_FORMAT) < 0) {
        PyErr_Clear();
        return NULL;
    }
    const char *f = xv.format ? xv.format : "B";
    const int nd = xv.ndim;
    const int ok = f[0] == 'f' && !f[1] && nd >= 1 && nd >= self->min_ndim && xv.len > 0 &&
                   nd <= 32;
    int last_ok = 0; /* with tables: x is channels-last (N, C, H, W) of the tables' C */
    if (ok && self->ntables && nd == 4 && xv.shape[1] == self->channels) {
        const Py_ssize_t c = xv.shape[1], want[4] = {4 * c * xv.shape[2] * xv.shape[3], 4,
                                                    4 * c * xv.shape[3], 4 * c};
        last_ok = 1;
        for (int d = 0; last_ok && d < 4; d++)
            last_ok = xv.shape[d] == 1 || xv.strides[d] == want[d];
    }
    const int rows_ok = ok && !self->ntables && (xv.strides[nd - 1] == 4 || xv.shape[nd - 1] == 1);
    if (!rows_ok && !last_ok && !(ok && !self->ntables && dense_in_some_order(&xv))) {
        PyBuffer_Release(&xv);
        return NULL;
    }
    PyObject *y = PyObject_CallOneArg(self->empty_like, x);
    if (!y) {
        PyBuffer_Release(&xv);
        return NULL;
    }
    Py_buffer yv;
    int by_rows = 0, flat = 0;
    if (PyObject_GetBuffer(y, &yv, PyBUF_STRIDES | PyBUF_WRITABLE) < 0) {
        PyErr_Clear();
    } else if (yv.len != xv.len || yv.ndim != nd) {
        PyBuffer_Release(&yv);
    } else {
        by_rows = rows_ok && PyBuffer_IsContiguous(&yv, 'C');
        flat = !by_rows;
        for (int d = 0; flat && d < nd; d++)
            flat = xv.shape[d] == 1 || yv.strides[d] == xv.strides[d];
        if (!by_rows && !flat) PyBuffer_Release(&yv);
    }
    if (!by_rows && !flat) {
        Py_DECREF(y);
        PyBuffer_Release(&xv);
        return NULL;
    }
    channels_t ch;
    memset(&ch, 0, sizeof ch);
    if (last_ok) { /* element i's channel i % C */
        ch.c = self->channels;
        ch.plane = 1;
        ch.last = 1;
        for (int t = 0; t < self->ntables; t++) ch.tables[t] = self->values + (Py_ssize_t)t * ch.c;
    }
    if (flat && xv.len >= (1 << 16)) {
        Py_BEGIN_ALLOW_THREADS;
        *nan = run_steps(self->steps, self->count, (const float *)xv.buf, (float *)yv.buf,
                         xv.len / 4, &ch);
        Py_END_ALLOW_THREADS;
    } else if (flat) {
        *nan = run_steps(self->steps, self->count, (const float *)xv.buf, (float *)yv.buf,
                         xv.len / 4, &ch);
    } else {
        const Py_ssize_t cols = xv.shape[nd - 1], rows = xv.len / 4 / cols;
        Py_ssize_t index[32] = {0};
        const char *base = xv.buf;
        for (Py_ssize_t r = 0; r < rows && !*nan; r++) {
            Py_ssize_t offset = 0;
            for (int d = 0; d < nd - 1; d++) offset += index[d] * xv.strides[d];
            *nan = run_steps(self->steps, self->count, (const float *)(base + offset),
                             (float *)yv.buf + r * cols, cols, &ch);
            for (int d = nd - 2; d >= 0; d--) { /* the next row's index, last axis first */
                if (++index[d] < xv.shape[d]) break;
                index[d] = 0;
            }
        }
    }
    PyBuffer_Release(&yv);
    PyBuffer_Release(&xv);
    return y;
}

static PyObject *held_vectorcall(PyObject *obj, PyObject *const *args, size_t nargsf,
                                 PyObject *kwnames) {
    HeldChain *self = (HeldChain *)obj;
    const Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    const Py_ssize_t n_expect = PyTuple_GET_SIZE(self->expect);
    int ok = !kwnames && nargs == 1 + n_expect + self->ntensors &&
             (PyObject *)Py_TYPE(args[0]) == self->ndarray;
    /* the scalars in order at the places that are not the tensors' */
    for (Py_ssize_t i = 1, j = 0, t = 0; ok && i < nargs; i++) {
        if (t < self->ntensors && self->tensor_at[t] == i)
            t++;
        else
            ok = args[i] == PyTuple_GET_ITEM(self->expect, j++);
    }
    Py_buffer xv, nv[MAX_TENSORS];
    int got = 0;
    channels_t ch;
    memset(&ch, 0, sizeof ch);
    if (ok && !onnxviz_array_view(args[0], self->ndarray, &xv, 'f', -1, NULL)) {
        if (!self->ntensors) { /* not C-contiguous: row by row, or channels-last */
            int nan = 0;
            PyObject *y = held_strided(self, args[0], &nan);
            if (y && !nan) return y;
            Py_XDECREF(y);
            if (PyErr_Occurred()) return NULL;
        }
        ok = 0;
    } else if (ok && !(xv.len > 0 && xv.ndim >= self->min_ndim)) {
        PyBuffer_Release(&xv);
        ok = 0;
    } else if (ok && self->ntables) {
        /* per-channel steps: an (N, C, ...) x of the tables' C, channels first */
        ok = xv.ndim >= 3 && xv.shape[1] == self->channels;
        ch.c = self->channels;
        ch.plane = 1;
        for (int d = 2; ok && d < xv.ndim; d++) ch.plane *= xv.shape[d];
        ok = ok && ch.plane > 0;
        for (int t = 0; ok && t < self->ntables; t++)
            ch.tables[t] = self->values + (Py_ssize_t)t * self->channels;
        if (!ok) PyBuffer_Release(&xv);
    }
    if (ok && self->ntensors) {
        /* each a float32 C-contiguous ndarray of x's shape, or of x's shape without some of
         * its leading ones (broadcast, it is x's elements in x's order: a recurrent step's
         * [4, 128] input beside a [1, 4, 128] product) */
        for (; got < self->ntensors; got++) {
            Py_buffer *t = &nv[got];
            if (!onnxviz_array_view(args[self->tensor_at[got]], self->ndarray, t, 'f', -1, NULL))
                break;
            const int lead = xv.ndim - t->ndim;
            int fits = lead >= 0 && t->len == xv.len;
            for (int d = 0; fits && d < xv.ndim; d++)
                fits = d < lead ? xv.shape[d] == 1 : xv.shape[d] == t->shape[d - lead];
            if (!fits) {
                PyBuffer_Release(t);
                break;
            }
            ch.tensors[got] = t->buf;
        }
        ch.ntensors = got;
        if (got < self->ntensors) {
            for (int t = 0; t < got; t++) PyBuffer_Release(&nv[t]);
            PyBuffer_Release(&xv);
            ok = 0;
        }
    }
    if (!ok) return PyObject_Vectorcall(self->fallback, args, nargsf, kwnames);
    PyObject *y = PyObject_CallOneArg(self->empty_like, args[0]);
    Py_buffer yv;
    int nan = 0;
    if (y && PyObject_GetBuffer(y, &yv, PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE) < 0) Py_CLEAR(y);
    if (y) {
        if (yv.len != xv.len) { /* empty_like keeps x's layout: C-contiguous here */
            PyErr_SetString(PyExc_RuntimeError, "held chain: empty_like gave another length");
            Py_CLEAR(y);
        } else if (xv.len >= (1 << 16)) {
            Py_BEGIN_ALLOW_THREADS;
            nan = run_steps(self->steps, self->count, xv.buf, yv.buf, xv.len / 4, &ch);
            Py_END_ALLOW_THREADS;
        } else {
            nan = run_steps(self->steps, self->count, xv.buf, yv.buf, xv.len / 4, &ch);
        }
        PyBuffer_Release(&yv);
    }
    for (int t = 0; t < got; t++) PyBuffer_Release(&nv[t]);
    PyBuffer_Release(&xv);
    if (nan) { /* a QDQ step met a NaN: the nodes run one by one (the fallback's call) */
        Py_CLEAR(y);
        return PyObject_Vectorcall(self->fallback, args, nargsf, kwnames);
    }
    return y;
}

static int held_traverse(PyObject *obj, visitproc visit, void *arg) {
    HeldChain *self = (HeldChain *)obj;
    Py_VISIT(self->expect);
    Py_VISIT(self->fallback);
    return 0;
}

static int held_clear(PyObject *obj) {
    HeldChain *self = (HeldChain *)obj;
    Py_CLEAR(self->expect);
    Py_CLEAR(self->fallback);
    return 0;
}

static void held_dealloc(PyObject *obj) {
    HeldChain *self = (HeldChain *)obj;
    PyObject_GC_UnTrack(obj);
    Py_CLEAR(self->ndarray);
    Py_CLEAR(self->empty_like);
    held_clear(obj);
    PyMem_Free(self->values);
    PyObject_GC_Del(obj);
}

static PyMemberDef held_members[] = {
    {"fallback", T_OBJECT, offsetof(HeldChain, fallback), READONLY,
     "What the calls this chain does not take go to."},
    {NULL, 0, 0, 0, NULL},
};

static PyTypeObject HeldChainType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "onnxviz.runtime.native._chain.HeldChain",
    .tp_basicsize = sizeof(HeldChain),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_vectorcall_offset = offsetof(HeldChain, vectorcall),
    .tp_call = PyVectorcall_Call,
    .tp_traverse = held_traverse,
    .tp_clear = held_clear,
    .tp_dealloc = held_dealloc,
    .tp_members = held_members,
    .tp_doc = "A chain's program with its scalars (held()).",
};

static PyObject *py_held(PyObject *self, PyObject *args) {
    (void)self;
    Py_buffer prog;
    PyObject *expect, *fallback, *ndarray, *empty_like, *tables = NULL, *places = NULL;
    int min_ndim;
    if (!PyArg_ParseTuple(args, "y*O!iOOO|O!O!:held", &prog, &PyTuple_Type, &expect, &min_ndim,
                          &fallback, &ndarray, &empty_like, &PyTuple_Type, &tables,
                          &PyTuple_Type, &places))
        return NULL;
    const Py_ssize_t ntables = tables ? PyTuple_GET_SIZE(tables) : 0;
    const Py_ssize_t ntensors = places ? PyTuple_GET_SIZE(places) : 0;
    Py_ssize_t tensor_at[MAX_TENSORS];
    for (Py_ssize_t t = 0; t < ntensors && t < MAX_TENSORS; t++) {
        tensor_at[t] = PyLong_AsSsize_t(PyTuple_GET_ITEM(places, t));
        if (tensor_at[t] == -1 && PyErr_Occurred()) {
            PyBuffer_Release(&prog);
            return NULL;
        }
        if (tensor_at[t] < 1 || (t > 0 && tensor_at[t] <= tensor_at[t - 1])) {
            PyBuffer_Release(&prog);
            PyErr_SetString(PyExc_ValueError, "held: tensor places rise from 1");
            return NULL;
        }
    }
    step_t steps[MAX_STEPS];
    const int count = ntables <= MAX_TABLES && ntensors <= MAX_TENSORS
                          ? parse(&prog, steps, (int)ntables, (int)ntensors)
                          : -2;
    PyBuffer_Release(&prog);
    if (count == -2) PyErr_SetString(PyExc_ValueError, "held: at most 16 tables and 4 tensors");
    if (count < 0) return NULL;
    if (!PyCallable_Check(fallback) || !PyCallable_Check(empty_like)) {
        PyErr_SetString(PyExc_ValueError, "held: fallback and empty_like must be callables");
        return NULL;
    }
    /* the tables' values, copied: each C float32 values, one C */
    float *values = NULL;
    Py_ssize_t channels = 0;
    for (Py_ssize_t t = 0; t < ntables; t++) {
        Py_buffer tv;
        if (onnxviz_get_floats(PyTuple_GET_ITEM(tables, t), &tv, 0, 0, 0, "table") < 0) {
            PyMem_Free(values);
            return NULL;
        }
        const Py_ssize_t c = tv.len / 4;
        if (t == 0) {
            channels = c;
            values = c > 0 ? PyMem_Malloc((size_t)(ntables * c) * sizeof(float)) : NULL;
            if (c > 0 && values == NULL) {
                PyBuffer_Release(&tv);
                return PyErr_NoMemory();
            }
        }
        if (c != channels || c < 1) {
            PyBuffer_Release(&tv);
            PyMem_Free(values);
            PyErr_SetString(PyExc_ValueError, "held: tables of one length, at least 1");
            return NULL;
        }
        memcpy(values + t * c, tv.buf, (size_t)c * sizeof(float));
        PyBuffer_Release(&tv);
    }
    HeldChain *obj = PyObject_GC_New(HeldChain, &HeldChainType);
    if (!obj) {
        PyMem_Free(values);
        return NULL;
    }
    obj->vectorcall = held_vectorcall;
    obj->ntables = (int)ntables;
    obj->ntensors = (int)ntensors;
    for (Py_ssize_t t = 0; t < ntensors; t++) obj->tensor_at[t] = tensor_at[t];
    obj->channels = channels;
    obj->values = values;
    memcpy(obj->steps, steps, sizeof(step_t) * (size_t)count);
    obj->count = count;
    obj->min_ndim = min_ndim;
    obj->expect = Py_NewRef(expect);
    obj->fallback = Py_NewRef(fallback);
    obj->ndarray = Py_NewRef(ndarray);
    obj->empty_like = Py_NewRef(empty_like);
    PyObject_GC_Track((PyObject *)obj);
    return (PyObject *)obj;
}

static PyObject *py_run(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *xo, *yo, *chan = Py_None, *tensors = NULL;
    Py_buffer prog;
    if (!PyArg_ParseTuple(args, "OOy*|OO!:run", &xo, &yo, &prog, &chan, &PyTuple_Type, &tensors))
        return NULL;
    channels_t ch;
    memset(&ch, 0, sizeof ch);
    Py_buffer tv[MAX_TABLES];
    Py_ssize_t ntables = 0;
    PyObject *tables = NULL;
    if (chan != Py_None) {
        if (!PyArg_ParseTuple(chan, "O!nnp:channels", &PyTuple_Type, &tables, &ch.c, &ch.plane,
                              &ch.last)) {
            PyBuffer_Release(&prog);
            return NULL;
        }
        ntables = PyTuple_GET_SIZE(tables);
        if (ntables > MAX_TABLES || ch.c < 1 || ch.plane < 1) {
            PyBuffer_Release(&prog);
            PyErr_SetString(PyExc_ValueError,
                            "run: channels: at most 16 tables, C and plane at least 1");
            return NULL;
        }
        for (Py_ssize_t t = 0; t < ntables; t++) {
            if (onnxviz_get_floats(PyTuple_GET_ITEM(tables, t), &tv[t], ch.c, 1, 0, "table") <
                0) {
                for (Py_ssize_t q = 0; q < t; q++) PyBuffer_Release(&tv[q]);
                PyBuffer_Release(&prog);
                return NULL;
            }
            ch.tables[t] = tv[t].buf;
        }
    }
    const Py_ssize_t ntensors = tensors ? PyTuple_GET_SIZE(tensors) : 0;
    step_t steps[MAX_STEPS];
    const int count = ntensors <= MAX_TENSORS ? parse(&prog, steps, (int)ntables, (int)ntensors)
                                              : -2;
    if (count == -2) PyErr_SetString(PyExc_ValueError, "run: at most 4 tensors");
    PyBuffer_Release(&prog);
    PyObject *result = NULL;
    Py_buffer xv, yv, nv[MAX_TENSORS];
    Py_ssize_t got = 0;
    if (count >= 0 && onnxviz_get_float_pair(xo, yo, &xv, &yv, "run") == 0) {
        const Py_ssize_t n = xv.len / 4;
        for (; got < ntensors; got++) {
            if (onnxviz_get_floats(PyTuple_GET_ITEM(tensors, got), &nv[got], n, 1, 0, "tensor") <
                0)
                break;
            ch.tensors[got] = nv[got].buf;
        }
        ch.ntensors = (int)got;
        if (got < ntensors) {
            /* (the error is set) */
        } else if (chan != Py_None && n % (ch.c * (ch.last ? 1 : ch.plane))) {
            PyErr_SetString(PyExc_ValueError, "run: x is not whole images of C x plane values");
        } else {
            int nan;
            Py_BEGIN_ALLOW_THREADS;
            nan = run_steps(steps, count, xv.buf, yv.buf, n, &ch);
            Py_END_ALLOW_THREADS;
            result = PyLong_FromLong(nan);
        }
        PyBuffer_Release(&xv);
        PyBuffer_Release(&yv);
    }
    for (Py_ssize_t t = 0; t < got; t++) PyBuffer_Release(&nv[t]);
    for (Py_ssize_t t = 0; t < ntables; t++) PyBuffer_Release(&tv[t]);
    return result;
}

ONNXVIZ_LEVEL_FUNCTIONS

static PyMethodDef methods[] = {
    {"run", py_run, METH_VARARGS,
     "run(x, y, program, channels=None, tensors=()) -> 0: y = program's elementwise steps "
     "applied to x (tensors: the TENSOR steps' operands, float32 of x's length), "
     "float32 contiguous buffers of one length (y may be x); 1 when a QDQ step met a NaN (y, "
     "and x when y is x, then partly written).  channels = (tables, C, plane, last): the "
     "per-channel steps' tables and x's geometry."},
    {"held", py_held, METH_VARARGS,
     "held(program, expect, min_ndim, fallback, ndarray, empty_like, tables=(), "
     "tensor_places=()) -> a callable f(x, *args): args the objects of expect, and at "
     "tensor_places float32 C-contiguous ndarrays of x's shape (the TENSOR steps' operands); "
     "the program run on a float32 C-contiguous ndarray x of at least "
     "min_ndim dimensions into a new array "
     "(empty_like(x)); any other call (other scalars, dtype, layout, an empty x), or a "
     "NaN met by a QDQ step, is fallback(*args)."},
    ONNXVIZ_LEVEL_METHODS
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_chain", NULL, -1, methods};

PyMODINIT_FUNC PyInit__chain(void) {
    if (PyType_Ready(&HeldChainType) < 0) return NULL;
    return PyModule_Create(&module);
}
