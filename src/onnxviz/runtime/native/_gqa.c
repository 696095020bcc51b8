/* onnxviz.runtime.native._gqa: com.microsoft GroupQueryAttention's common case in one
 * call (kernels/contrib_gqa.py decides what that is and keeps every check and error).
 *
 *   attend(query, key, value, past_key, past_value, cos, sin, present_key,
 *          present_value, out, batch, seq, heads, kv_heads, head, past, rot,
 *          interleaved, causal, window, scale)
 *
 * query [B, S, N*H], key and value [B, S, KV*H]; or key and value None and query the
 * packed [B, S, (N + 2 KV) * H].  past_key/past_value [B, KV, P, H] (P >= past) or None
 * (past 0); present_key/present_value [B, KV, R, H] (R >= past + S) are written: the past
 * rows copied, the S new rows (keys rotated) at [past, past + S), the rest zero, as the
 * numpy path's _fill_cache.  cos/sin: the rotary pair tables (_rotary.pair_tables) of
 * positions past..past+S-1, [S, rot], or None with rot 0.  out [B, S, N*H]: for each
 * query head n (reading KV head n / (N / KV)) and position t, softmax over the keys
 * j < past + S it may read (causal: j <= past + t; window w > 0: j > past + t - w) of
 * (rotated q) . k_j * scale, times V.  Every batch entry has `past` past keys.
 *
 * Why: a decoder runs this once per layer per token on tiny tensors (a 4-token prompt of
 * 4 heads of 16), where the numpy path's ~40 numpy calls cost ~40 us and the arithmetic
 * well under one (this call: ~2.5 us).  The rotation is the numpy path's bit for bit (x*C + x[partner]*S, a product
 * each then the sum; setup.py's -std=c11 does not contract them into fused multiply-adds,
 * vector_types.h says the same to clang), so present_key equals it exactly; the attention
 * sums in its own order (attention_rows.h), within float32 rounding of numpy's.
 * Scratch: a row of scores, the rotated query row and (for many query rows) the
 * transposed keys of one KV head, calloc'd per call.
 *
 * Levels (native/__init__.py): 0 generic C (4-lane vectors); 1 AVX2; 2 and 3 AVX-512F. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "levels.h"
#include "vector_types.h"
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#if ONNXVIZ_X86
#include <immintrin.h>
#endif

typedef struct {
    const float *q, *k, *v;                  /* token (b, t) at (b*S + t) * stride */
    Py_ssize_t q_stride, k_stride, v_stride; /* floats per token */
    const float *past_k, *past_v;            /* [B, KV, past_rows, H] or NULL */
    Py_ssize_t past_rows;
    const float *cos, *sin; /* [S, rot] pair tables, or NULL (rot 0) */
    float *present_k, *present_v; /* [B, KV, present_rows, H] */
    Py_ssize_t present_rows;
    float *out; /* [B, S, N*H] */
    Py_ssize_t batch, seq, heads, kv_heads, head, past, rot, window;
    int interleaved, causal;
    float scale;
} GqaJob;

static int level = 0;

/* Query rows per KV head from which its keys are transposed once (attention_rows.h):
 * measured (benchmarks/bench_gqa.py, AVX-512) a decode step of 4 rows after 1024 keys
 * ran 1.4x faster reading the keys as stored, a 64-token prompt of 256 rows 1.3x faster
 * transposed; from 8 to 16 both within the noise. */
#ifndef GQA_TRANSPOSE_ROWS
#define GQA_TRANSPOSE_ROWS 16
#endif

/* Whether the job's keys are transposed: enough query rows read each KV head. */
static inline __attribute__((always_inline)) int gqa_transposes(const GqaJob *job) {
    return job->heads / job->kv_heads * job->seq >= GQA_TRANSPOSE_ROWS;
}

/* y = x rotated at the table row of position t (the first rot dimensions; the rest
 * copied): y[j] = x[j] * C[j] + x[partner(j)] * S[j], the partner the other half of the
 * pair (j ^ 1 interleaved, j +- rot/2 otherwise), the products and sum _rotary.rotate
 * makes.  Plain C, inlined into every level (the same operations, so the same bits). */
static inline __attribute__((always_inline)) void gqa_rotate_row(const float *x,
                                                                 const GqaJob *job,
                                                                 Py_ssize_t t, float *y) {
    const Py_ssize_t rot = job->rot, half = rot / 2;
    if (rot) {
        const float *c = job->cos + t * rot, *s = job->sin + t * rot;
        if (job->interleaved) {
            for (Py_ssize_t j = 0; j < rot; j++) {
                float direct = x[j] * c[j];
                float crossed = x[j ^ 1] * s[j];
                y[j] = direct + crossed;
            }
        } else {
            for (Py_ssize_t j = 0; j < half; j++) {
                float direct = x[j] * c[j];
                float crossed = x[j + half] * s[j];
                y[j] = direct + crossed;
            }
            for (Py_ssize_t j = half; j < rot; j++) {
                float direct = x[j] * c[j];
                float crossed = x[j - half] * s[j];
                y[j] = direct + crossed;
            }
        }
    }
    memcpy(y + rot, x + rot, (size_t)(job->head - rot) * 4);
}

/* The present caches: past rows, the new rows (keys rotated), zeros after. */
static void fill_caches(const GqaJob *job) {
    const Py_ssize_t H = job->head, S = job->seq, KV = job->kv_heads;
    const Py_ssize_t rows = job->present_rows, past = job->past;
    for (Py_ssize_t b = 0; b < job->batch; b++) {
        for (Py_ssize_t g = 0; g < KV; g++) {
            float *pk = job->present_k + (b * KV + g) * rows * H;
            float *pv = job->present_v + (b * KV + g) * rows * H;
            if (past) {
                const Py_ssize_t from = (b * KV + g) * job->past_rows * H;
                memcpy(pk, job->past_k + from, (size_t)(past * H) * 4);
                memcpy(pv, job->past_v + from, (size_t)(past * H) * 4);
            }
            for (Py_ssize_t t = 0; t < S; t++) {
                const Py_ssize_t token = b * S + t;
                gqa_rotate_row(job->k + token * job->k_stride + g * H, job, t,
                               pk + (past + t) * H);
                memcpy(pv + (past + t) * H, job->v + token * job->v_stride + g * H,
                       (size_t)H * 4);
            }
            const size_t tail = (size_t)((rows - past - S) * H) * 4;
            memset(pk + (past + S) * H, 0, tail);
            memset(pv + (past + S) * H, 0, tail);
        }
    }
}

/* The three levels over vector_levels.h, attention_rows.h after each level's vector_math.h;
 * its fused multiply-add and broadcast by the level (attention_rows.h's AR_FMA, AR_SET1). */
#define VECTOR_LEVEL_INCLUDE "attention_rows.h"
#define VECTOR_LEVEL_BODY
#include "vector_levels.h"
#undef VECTOR_LEVEL_INCLUDE

/* a * b into *out, or ValueError on overflow. */
static int product(Py_ssize_t a, Py_ssize_t b, Py_ssize_t *out) {
    if (__builtin_mul_overflow(a, b, out)) {
        PyErr_SetString(PyExc_ValueError, "attend: sizes overflow");
        return -1;
    }
    return 0;
}

/* A pair of optional float32 buffers given together (both None: 0 with bufs NULL),
 * each of `count` floats, or (count 0) of one length that is a multiple of `unit`. */
static int get_pair(PyObject *ao, PyObject *bo, Py_buffer *a, Py_buffer *b, Py_ssize_t count,
                    int writable, const char *name) {
    if (ao == Py_None && bo == Py_None) return 0;
    if (ao == Py_None || bo == Py_None) {
        PyErr_Format(PyExc_ValueError, "attend: %s must be given together", name);
        return -1;
    }
    if (onnxviz_get_floats(ao, a, count, count > 0, writable, name) < 0) return -1;
    if (onnxviz_get_floats(bo, b, count, count > 0, writable, name) < 0) return -1;
    if (a->len != b->len) {
        PyErr_Format(PyExc_ValueError, "attend: %s differ in length", name);
        return -1;
    }
    return 0;
}

static PyObject *py_attend(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *qo, *ko, *vo, *pko, *pvo, *co, *so, *nko, *nvo, *oo;
    Py_ssize_t batch, seq, heads, kv, head, past, rot, window;
    int interleaved, causal;
    float scale;
    if (!PyArg_ParseTuple(args, "OOOOOOOOOOnnnnnnnppnf:attend", &qo, &ko, &vo, &pko, &pvo,
                          &co, &so, &nko, &nvo, &oo, &batch, &seq, &heads, &kv, &head,
                          &past, &rot, &interleaved, &causal, &window, &scale))
        return NULL;
    if (batch < 1 || seq < 1 || heads < 1 || kv < 1 || head < 1 || heads % kv || past < 0 ||
        rot < 0 || rot > head || rot % 2) {
        PyErr_SetString(PyExc_ValueError, "attend: bad sizes");
        return NULL;
    }
    enum { Q, K, V, PK, PV, C, S, NK, NV, O, NVIEWS };
    Py_buffer v[NVIEWS];
    for (int i = 0; i < NVIEWS; i++) v[i].buf = NULL, v[i].obj = NULL;
    PyObject *result = NULL;
    float *scratch = NULL;
    Py_ssize_t tokens, q_width, kv_width, q_stride, count, unit, keys_n;
    const int packed = ko == Py_None;
    if (product(batch, seq, &tokens) < 0 || product(heads, head, &q_width) < 0 ||
        product(kv, head, &kv_width) < 0 || product(batch, kv_width, &unit) < 0)
        goto done;
    q_stride = packed ? q_width + 2 * kv_width : q_width;
    if (product(tokens, q_stride, &count) < 0) goto done;
    if (onnxviz_get_floats(qo, &v[Q], count, 1, 0, "attend query") < 0) goto done;
    if (!packed) {
        if (product(tokens, kv_width, &count) < 0) goto done;
        if (get_pair(ko, vo, &v[K], &v[V], count, 0, "key and value") < 0) goto done;
    } else if (vo != Py_None) {
        PyErr_SetString(PyExc_ValueError, "attend: value without key");
        goto done;
    }
    if (get_pair(pko, pvo, &v[PK], &v[PV], 0, 0, "past_key and past_value") < 0) goto done;
    const Py_ssize_t past_rows = v[PK].buf ? v[PK].len / 4 / unit : 0;
    if ((v[PK].buf && v[PK].len / 4 % unit) || past_rows < past) {
        PyErr_SetString(PyExc_ValueError, "attend: the past caches hold too few rows");
        goto done;
    }
    if (get_pair(nko, nvo, &v[NK], &v[NV], 0, 1, "present caches") < 0) goto done;
    if (!v[NK].buf) {
        PyErr_SetString(PyExc_ValueError, "attend: the present caches are required");
        goto done;
    }
    const Py_ssize_t present_rows = v[NK].len / 4 / unit;
    keys_n = past + seq;
    if (v[NK].len / 4 % unit || present_rows < keys_n) {
        PyErr_SetString(PyExc_ValueError, "attend: the present caches hold too few rows");
        goto done;
    }
    if (product(seq, rot, &count) < 0) goto done;
    if (get_pair(co, so, &v[C], &v[S], count, 0, "cos and sin") < 0) goto done;
    if ((v[C].buf != NULL) != (rot > 0)) {
        PyErr_SetString(PyExc_ValueError, "attend: cos and sin go with rot > 0");
        goto done;
    }
    if (product(tokens, q_width, &count) < 0) goto done;
    if (onnxviz_get_floats(oo, &v[O], count, 1, 1, "attend out") < 0) goto done;
    const float *q = v[Q].buf;
    GqaJob job = {
        .q = q,
        .k = packed ? q + q_width : v[K].buf,
        .v = packed ? q + q_width + kv_width : v[V].buf,
        .q_stride = q_stride,
        .k_stride = packed ? q_stride : kv_width,
        .v_stride = packed ? q_stride : kv_width,
        .past_k = v[PK].buf, .past_v = v[PV].buf, .past_rows = past_rows,
        .cos = v[C].buf, .sin = v[S].buf,
        .present_k = v[NK].buf, .present_v = v[NV].buf, .present_rows = present_rows,
        .out = v[O].buf,
        .batch = batch, .seq = seq, .heads = heads, .kv_heads = kv, .head = head,
        .past = past, .rot = rot, .window = window,
        .interleaved = interleaved, .causal = causal, .scale = scale,
    };
    /* A row of scores and the rotated query row, and the transposed keys of one KV head
     * only when they are made (a large calloc is fresh pages, faulted in per call). */
    const Py_ssize_t tpad = (keys_n + 15) / 16 * 16;
    Py_ssize_t scratch_n = 0;
    if (gqa_transposes(&job) && product(head, tpad, &scratch_n) < 0) goto done;
    scratch = calloc((size_t)(scratch_n + 4 * (tpad + head)), sizeof(float));
    if (!scratch) {
        PyErr_NoMemory();
        goto done;
    }
    Py_BEGIN_ALLOW_THREADS;
    fill_caches(&job);
#if ONNXVIZ_X86
    if (level >= 2)
        attend_avx512(&job, scratch, tpad);
    else if (level == 1)
        attend_avx2(&job, scratch, tpad);
    else
#endif
        attend_generic(&job, scratch, tpad);
    Py_END_ALLOW_THREADS;
    Py_INCREF(Py_None);
    result = Py_None;
done:
    free(scratch);
    for (int i = 0; i < NVIEWS; i++)
        if (v[i].obj != NULL) PyBuffer_Release(&v[i]);
    return result;
}

ONNXVIZ_LEVEL_FUNCTIONS

static PyMethodDef methods[] = {
    {"attend", py_attend, METH_VARARGS,
     "attend(query, key, value, past_key, past_value, cos, sin, present_key, "
     "present_value, out, batch, seq, heads, kv_heads, head, past, rot, interleaved, "
     "causal, window, scale): GroupQueryAttention's common case; see the module source."},
    ONNXVIZ_LEVEL_METHODS
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_gqa", NULL, -1, methods};

PyMODINIT_FUNC PyInit__gqa(void) { return PyModule_Create(&module); }
