/* onnxviz.runtime.native._chain: a chain of elementwise float32 steps in one pass, for
 * fusion_elementwise's ElementwiseChain (a GELU exported as Div -> Erf -> Add -> Mul ->
 * Mul, a scale and shift, ...).
 *
 *   run(x, y, program): y = the program's steps applied in turn to x (y may be x)
 *   held(program, expect, min_ndim, fallback, ndarray, empty_like): a node's call (below)
 *
 * program: bytes, 8 per step: op (uint8: ADD, SUB, MUL, DIV, ERF, NEG, ABS, RELU, TANH,
 * SIGMOID below),
 * kind (uint8: 0 no second operand, 1 a scalar, 2 the chain's input x, 3 a side value:
 * x combined with the scalar by the side op), value_first (uint8: 1 when the running
 * value is the op's first operand), the side op (uint8: ADD, SUB, MUL or DIV in its low
 * bits, 0x10 when the scalar is its first operand; 0 unless kind 3), and the scalar
 * (float32, native byte order).  A side value is a node off the chain's path that only
 * this step reads: the written-out GELU's h = x * 0.5 in y = h * (1 + erf(x / sqrt 2)).
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
 * per step. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "levels.h"
#include "vector_types.h"
#include <stddef.h>
#include <stdint.h>
#include <string.h>


enum { OP_ADD, OP_SUB, OP_MUL, OP_DIV, OP_ERF, OP_NEG, OP_ABS, OP_RELU, OP_TANH, OP_SIGMOID, OP_COUNT };
enum { KIND_NONE, KIND_SCALAR, KIND_INPUT, KIND_SIDE };
enum { SIDE_SCALAR_FIRST = 0x10 };
enum { BLOCK = 1024, MAX_STEPS = 64 };

typedef struct {
    int op, kind, value_first, side_op, side_scalar_first;
    float scalar;
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
    ATTR static void RS(step)(const step_t *s, float *dst, const float *src, const float *o, \
                              float *side, Py_ssize_t n) {                                 \
        /* the scalar in every lane, -0 included (splat's 0 + c would make it +0) */       \
        float lanes[VW];                                                                   \
        for (int l = 0; l < VW; l++) lanes[l] = s->scalar;                                 \
        VF scalar, a;                                                                      \
        memcpy(&scalar, lanes, sizeof scalar);                                             \
        switch (s->op) {                                                                   \
        case OP_ERF:                                                                       \
            RS(erf_buffer)(src, dst, n);                                                   \
            return;                                                                        \
        case OP_TANH:                                                                      \
            RS(tanh_buffer)(src, dst, n);                                                  \
            return;                                                                        \
        case OP_SIGMOID:                                                                   \
            RS(sigmoid_buffer)(src, dst, n);                                               \
            return;                                                                        \
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
            return;                                                                        \
        default:                                                                           \
            if (s->kind == KIND_SCALAR) {                                                  \
                RS(binary_step)(s->op, 0, s->value_first, dst, src, NULL, scalar, n);      \
            } else if (s->kind == KIND_INPUT) {                                            \
                RS(binary_step)(s->op, 1, s->value_first, dst, src, o, scalar, n);         \
            } else { /* the side value x (op) scalar, then the step on it */               \
                RS(binary_step)(s->side_op, 0, !s->side_scalar_first, side, o, NULL,       \
                                scalar, n);                                                \
                RS(binary_step)(s->op, 1, s->value_first, dst, src, side, scalar, n);      \
            }                                                                              \
        }                                                                                  \
    }                                                                                      \
    ATTR static void RS(run)(const step_t *steps, int count, const float *x, float *y,      \
                             Py_ssize_t n) {                                               \
        float v[BLOCK] __attribute__((aligned(64))), o[BLOCK] __attribute__((aligned(64))); \
        float side[BLOCK] __attribute__((aligned(64)));                                    \
        for (Py_ssize_t start = 0; start < n; start += BLOCK) {                            \
            const Py_ssize_t len = n - start < BLOCK ? n - start : BLOCK;                  \
            const Py_ssize_t padded = (len + VW - 1) / VW * VW;                            \
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
            }                                                                              \
            const float *src = in;                                                         \
            for (int k = 0; k < count; k++) {                                              \
                float *dst = k == count - 1 ? out : v;                                     \
                RS(step)(&steps[k], dst, src, in, side, padded);                           \
                src = dst;                                                                 \
            }                                                                              \
            if (count == 0 && out != in) memcpy(out, in, (size_t)padded * 4);              \
            if (out == v) memcpy(y + start, v, (size_t)len * 4);                           \
        }                                                                                  \
    }

#define VECTOR_LEVEL_BODY CHAIN_LEVEL
#include "vector_levels.h"

/* The program's steps, checked; -1 with a ValueError set when it is not one. */
static int parse(const Py_buffer *prog, step_t *steps) {
    if (prog->len % 8 || prog->len / 8 > MAX_STEPS) {
        PyErr_SetString(PyExc_ValueError, "run: the program is 8 bytes a step, at most 64 steps");
        return -1;
    }
    const uint8_t *p = prog->buf;
    const int count = (int)(prog->len / 8);
    for (int k = 0; k < count; k++, p += 8) {
        step_t *s = &steps[k];
        s->op = p[0], s->kind = p[1], s->value_first = p[2] != 0;
        s->side_op = p[3] & 0x0f, s->side_scalar_first = (p[3] & SIDE_SCALAR_FIRST) != 0;
        memcpy(&s->scalar, p + 4, 4);
        const int unary = s->op == OP_ERF || s->op == OP_TANH || s->op == OP_SIGMOID ||
                          s->op == OP_NEG || s->op == OP_ABS ||
                          s->op == OP_RELU;
        if (s->op >= OP_COUNT || s->kind > KIND_SIDE || unary != (s->kind == KIND_NONE) ||
            (s->kind == KIND_SIDE ? s->side_op > OP_DIV || (p[3] & ~0x1f)
                                  : p[3] != 0)) {
            PyErr_Format(PyExc_ValueError, "run: step %d is not a step", k);
            return -1;
        }
    }
    return count;
}

static void run_steps(const step_t *steps, int count, const float *x, float *y, Py_ssize_t n) {
#if ONNXVIZ_X86
    if (level >= 2)
        run_avx512(steps, count, x, y, n);
    else if (level == 1)
        run_avx2(steps, count, x, y, n);
    else
#endif
        run_generic(steps, count, x, y, n);
}

/* ---- a held chain: a fused chain's program with its scalars -------------------------
 *
 * `held(program, expect, min_ndim, fallback, ndarray, empty_like)` makes the callable a
 * chain node runs first from the node loop (fusion_elementwise.ElementwiseChain.quick):
 * called with the node's inputs, the scalars being exactly the objects of `expect`
 * (those the program was made with), on a float32 C-contiguous ndarray x of at least
 * `min_ndim` dimensions (the scalars' most: no broadcast adds axes), it makes y by
 * numpy.empty_like and runs the program; any other call is fallback(*args).  The
 * Python call's checks, reshapes and the program's lookup were most of a SiLU's 5 us on
 * a decoder's 512 values. */
typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    step_t steps[MAX_STEPS];
    int count, min_ndim;
    PyObject *expect, *fallback, *ndarray, *empty_like;
} HeldChain;

static PyObject *held_vectorcall(PyObject *obj, PyObject *const *args, size_t nargsf,
                                 PyObject *kwnames) {
    HeldChain *self = (HeldChain *)obj;
    const Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    const Py_ssize_t n_expect = PyTuple_GET_SIZE(self->expect);
    int ok = !kwnames && nargs == 1 + n_expect && (PyObject *)Py_TYPE(args[0]) == self->ndarray;
    for (Py_ssize_t i = 0; ok && i < n_expect; i++)
        ok = args[1 + i] == PyTuple_GET_ITEM(self->expect, i);
    Py_buffer xv;
    if (ok && !onnxviz_array_view(args[0], self->ndarray, &xv, 'f', -1, NULL)) {
        ok = 0;
    } else if (ok && !(xv.len > 0 && xv.ndim >= self->min_ndim)) {
        PyBuffer_Release(&xv);
        ok = 0;
    }
    if (!ok) return PyObject_Vectorcall(self->fallback, args, nargsf, kwnames);
    PyObject *y = PyObject_CallOneArg(self->empty_like, args[0]);
    Py_buffer yv;
    if (y && PyObject_GetBuffer(y, &yv, PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE) < 0) Py_CLEAR(y);
    if (y) {
        if (yv.len != xv.len) { /* empty_like keeps x's layout: C-contiguous here */
            PyErr_SetString(PyExc_RuntimeError, "held chain: empty_like gave another length");
            Py_CLEAR(y);
        } else if (xv.len >= (1 << 16)) {
            Py_BEGIN_ALLOW_THREADS;
            run_steps(self->steps, self->count, xv.buf, yv.buf, xv.len / 4);
            Py_END_ALLOW_THREADS;
        } else {
            run_steps(self->steps, self->count, xv.buf, yv.buf, xv.len / 4);
        }
        PyBuffer_Release(&yv);
    }
    PyBuffer_Release(&xv);
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
    PyObject_GC_Del(obj);
}

static PyTypeObject HeldChainType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "onnxviz.runtime.native._chain.HeldChain",
    .tp_basicsize = sizeof(HeldChain),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_vectorcall_offset = offsetof(HeldChain, vectorcall),
    .tp_call = PyVectorcall_Call,
    .tp_traverse = held_traverse,
    .tp_clear = held_clear,
    .tp_dealloc = held_dealloc,
    .tp_doc = "A chain's program with its scalars (held()).",
};

static PyObject *py_held(PyObject *self, PyObject *args) {
    (void)self;
    Py_buffer prog;
    PyObject *expect, *fallback, *ndarray, *empty_like;
    int min_ndim;
    if (!PyArg_ParseTuple(args, "y*O!iOOO:held", &prog, &PyTuple_Type, &expect, &min_ndim,
                          &fallback, &ndarray, &empty_like))
        return NULL;
    step_t steps[MAX_STEPS];
    const int count = parse(&prog, steps);
    PyBuffer_Release(&prog);
    if (count < 0) return NULL;
    if (!PyCallable_Check(fallback) || !PyCallable_Check(empty_like)) {
        PyErr_SetString(PyExc_ValueError, "held: fallback and empty_like must be callables");
        return NULL;
    }
    HeldChain *obj = PyObject_GC_New(HeldChain, &HeldChainType);
    if (!obj) return NULL;
    obj->vectorcall = held_vectorcall;
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
    PyObject *xo, *yo;
    Py_buffer prog;
    if (!PyArg_ParseTuple(args, "OOy*:run", &xo, &yo, &prog)) return NULL;
    step_t steps[MAX_STEPS];
    const int count = parse(&prog, steps);
    PyBuffer_Release(&prog);
    if (count < 0) return NULL;
    Py_buffer xv, yv;
    if (onnxviz_get_float_pair(xo, yo, &xv, &yv, "run") < 0) return NULL;
    const float *x = xv.buf;
    float *y = yv.buf;
    const Py_ssize_t n = xv.len / 4;
    Py_BEGIN_ALLOW_THREADS;
    run_steps(steps, count, x, y, n);
    Py_END_ALLOW_THREADS;
    PyBuffer_Release(&xv);
    PyBuffer_Release(&yv);
    Py_RETURN_NONE;
}

ONNXVIZ_LEVEL_FUNCTIONS

static PyMethodDef methods[] = {
    {"run", py_run, METH_VARARGS,
     "run(x, y, program): y = program's elementwise steps applied to x, float32 contiguous "
     "buffers of one length (y may be x)."},
    {"held", py_held, METH_VARARGS,
     "held(program, expect, min_ndim, fallback, ndarray, empty_like) -> a callable "
     "f(x, *expect): the program run on a float32 C-contiguous ndarray x of at least "
     "min_ndim dimensions into a new array "
     "(empty_like(x)); any other call (other scalars, dtype, layout, an empty x) is "
     "fallback(*args)."},
    ONNXVIZ_LEVEL_METHODS
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_chain", NULL, -1, methods};

PyMODINIT_FUNC PyInit__chain(void) {
    if (PyType_Ready(&HeldChainType) < 0) return NULL;
    return PyModule_Create(&module);
}
