/* onnxviz.runtime.native._gqa: com.microsoft GroupQueryAttention's common case in one
 * call (kernels/contrib_gqa.py decides what that is and keeps every check and error).
 *
 *   attend(query, key, value, past_key, past_value, cos, sin, present_key,
 *          present_value, out, batch, seq, heads, kv_heads, head, past, rot,
 *          interleaved, causal, window, scale[, bias, bias_b, bias_n, bias_t])
 *
 * query [B, S, N*H], key and value [B, S, KV*H]; or key and value None and query the
 * packed [B, S, (N + 2 KV) * H].  past_key/past_value [B, KV, P, H] (P >= past) or None
 * (past 0); present_key/present_value [B, KV, R, H] (R >= past + S) are written: the past
 * rows copied, the S new rows (keys rotated) at [past, past + S), the rest zero, as the
 * numpy path's _fill_cache.  cos/sin: the rotary pair tables (_rotary.pair_tables) of
 * positions past..past+S-1, [S, rot], or None with rot 0.  out [B, S, N*H]: for each
 * query head n (reading KV head n / (N / KV)) and position t, softmax over the keys
 * j < past + S it may read (causal: j <= past + t; window w > 0: j > past + t - w) of
 * (rotated q) . k_j * scale (+ the bias row's j-th value, when a bias is given), times
 * V.  Every batch entry has `past` past keys.  bias: float32 rows of past + S keys, row
 * (b, n, t) at the float offset b * bias_b + n * bias_n + t * bias_t (strides >= 0; 0
 * where the bias broadcasts): com.microsoft Attention's mask and attention_bias, which
 * kernels/contrib_attention.py runs here with kv_heads = heads and no rotation.
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
#include <structmember.h>

#include "levels.h"
#include "vector_types.h"
#include <math.h>
#include <stddef.h>
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
    /* Additive bias rows, or NULL: row (b, n, t) at b * bias_b + n * bias_n + t * bias_t
     * (a stride 0 for an axis the bias broadcasts), past + S keys each. */
    const float *bias;
    Py_ssize_t bias_b, bias_n, bias_t;
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

/* The job's caches and attention (its sizes checked), the GIL released when `release`;
 * 0, or -1 with MemoryError set.  The scratch: a row of scores and the rotated query row,
 * and the transposed keys of one KV head only when they are made (a large calloc is
 * fresh pages, faulted in per call). */
static int run_job(const GqaJob *job, int release) {
    const Py_ssize_t tpad = (job->past + job->seq + 15) / 16 * 16;
    Py_ssize_t scratch_n = 0;
    if (gqa_transposes(job) && product(job->head, tpad, &scratch_n) < 0) return -1;
    float *scratch = calloc((size_t)(scratch_n + 4 * (tpad + job->head)), sizeof(float));
    if (!scratch) {
        PyErr_NoMemory();
        return -1;
    }
    PyThreadState *state = release ? PyEval_SaveThread() : NULL;
    fill_caches(job);
#if ONNXVIZ_X86
    if (level >= 2)
        attend_avx512(job, scratch, tpad);
    else if (level == 1)
        attend_avx2(job, scratch, tpad);
    else
#endif
        attend_generic(job, scratch, tpad);
    if (state) PyEval_RestoreThread(state);
    free(scratch);
    return 0;
}

/* The bias's float32 buffer in `v`, its strides (>= 0) keeping every row (b, n, t) of
 * `keys` floats inside it; 0, or -1 with ValueError set. */
static int bias_rows_fit(PyObject *bo, Py_buffer *v, Py_ssize_t batch, Py_ssize_t heads,
                         Py_ssize_t seq, Py_ssize_t keys, Py_ssize_t sb, Py_ssize_t sn,
                         Py_ssize_t st) {
    if (onnxviz_get_floats(bo, v, 0, 0, 0, "attend bias") < 0) return -1;
    Py_ssize_t end = keys, part;
    if (sb < 0 || sn < 0 || st < 0 || product(batch - 1, sb, &part) < 0 ||
        __builtin_add_overflow(end, part, &end) || product(heads - 1, sn, &part) < 0 ||
        __builtin_add_overflow(end, part, &end) || product(seq - 1, st, &part) < 0 ||
        __builtin_add_overflow(end, part, &end) || end > v->len / 4) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "attend: bad bias strides");
        return -1;
    }
    return 0;
}

static PyObject *py_attend(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *qo, *ko, *vo, *pko, *pvo, *co, *so, *nko, *nvo, *oo, *bo = Py_None;
    Py_ssize_t batch, seq, heads, kv, head, past, rot, window, bias_b = 0, bias_n = 0,
                                                              bias_t = 0;
    int interleaved, causal;
    float scale;
    if (!PyArg_ParseTuple(args, "OOOOOOOOOOnnnnnnnppnf|Onnn:attend", &qo, &ko, &vo, &pko,
                          &pvo, &co, &so, &nko, &nvo, &oo, &batch, &seq, &heads, &kv, &head,
                          &past, &rot, &interleaved, &causal, &window, &scale, &bo, &bias_b,
                          &bias_n, &bias_t))
        return NULL;
    if (batch < 1 || seq < 1 || heads < 1 || kv < 1 || head < 1 || heads % kv || past < 0 ||
        rot < 0 || rot > head || rot % 2) {
        PyErr_SetString(PyExc_ValueError, "attend: bad sizes");
        return NULL;
    }
    enum { Q, K, V, PK, PV, C, S, NK, NV, O, B, NVIEWS };
    Py_buffer v[NVIEWS];
    for (int i = 0; i < NVIEWS; i++) v[i].buf = NULL, v[i].obj = NULL;
    PyObject *result = NULL;
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
    if (bo != Py_None && bias_rows_fit(bo, &v[B], batch, heads, seq, keys_n, bias_b, bias_n,
                                       bias_t) < 0)
        goto done;
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
        .bias = v[B].buf, .bias_b = bias_b, .bias_n = bias_n, .bias_t = bias_t,
    };
    /* The GIL released only around work that outlasts its release (a tiny BERT's 4
     * heads over 4 tokens take about a microsecond). */
    if (run_job(&job, (double)tokens * (double)heads * (double)keys_n * (double)head >
                          65536.0) < 0)
        goto done;
    Py_INCREF(Py_None);
    result = Py_None;
done:
    for (int i = 0; i < NVIEWS; i++)
        if (v[i].obj != NULL) PyBuffer_Release(&v[i]);
    return result;
}

/* ---- a held attention: a GroupQueryAttention node's specialized call in C ----------
 *
 * `held(...)` makes the callable kernels/contrib_gqa.py's specialized call fronts: it
 * takes the calls that call would hand to `_attend_compiled` and that runs (float32
 * C-contiguous query, key and value of the node's heads, past caches [B, KV, P, H] or
 * none, int32/int64 seqlens_k of one per batch entry all giving the same past, the
 * cos/sin caches it was made with and their rotary tables, within the work limit of the
 * level), makes the outputs by numpy.empty and runs the same job `attend` runs: the same
 * numbers.  Every other call goes to `fallback` (the Python call, which also raises the
 * errors).  The Python call's lengths, checks, table slices and three numpy.empty were
 * more than half of a tiny Llama's 11 us attention. */
typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    int nq, nk, causal, interleaved, n_outputs, has_rot;
    Py_ssize_t local_window, cos_rows, rot;
    double scale;
    Py_ssize_t limits[4];
    PyObject *cos_k, *sin_k, *table_c, *table_s;
    Py_buffer tcv, tsv;
    PyObject *fallback, *ndarray, *empty, *dtype;
} HeldGqa;

static int held_view(HeldGqa *self, PyObject *x, Py_buffer *v, char f, int ndim,
                     const Py_ssize_t *sizes) {
    return onnxviz_array_view(x, self->ndarray, v, f, ndim, sizes);
}

/* The first `n` integers of an int32 or int64 C-contiguous ndarray (at least n), or 0. */
static int held_ints(HeldGqa *self, PyObject *x, Py_ssize_t n, long long *out) {
    if ((PyObject *)Py_TYPE(x) != self->ndarray) return 0;
    Py_buffer v;
    if (PyObject_GetBuffer(x, &v, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) {
        PyErr_Clear();
        return 0;
    }
    const char *f = v.format ? v.format : "B";
    const int i32 = f[0] == 'i' && !f[1] && v.itemsize == 4;
    const int i64 = (f[0] == 'l' || f[0] == 'q') && !f[1] && v.itemsize == 8;
    const int ok = (i32 || i64) && v.len / v.itemsize == n;
    if (ok)
        for (Py_ssize_t i = 0; i < n; i++)
            out[i] = i32 ? ((const int32_t *)v.buf)[i] : ((const int64_t *)v.buf)[i];
    PyBuffer_Release(&v);
    return ok;
}

static PyObject *held_new_array(HeldGqa *self, Py_ssize_t a, Py_ssize_t b, Py_ssize_t c,
                                Py_ssize_t d, int ndim) {
    const Py_ssize_t sizes[4] = {a, b, c, d};
    return onnxviz_new_array(self->empty, self->dtype, ndim, sizes);
}

enum { HELD_MAX_BATCH = 64 };

static PyObject *held_vectorcall(PyObject *obj, PyObject *const *args, size_t nargsf,
                                 PyObject *kwnames) {
    HeldGqa *self = (HeldGqa *)obj;
    const Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    if (kwnames || nargs < 7 ||
        (self->has_rot && (nargs < 9 || args[7] != self->cos_k || args[8] != self->sin_k)))
        return PyObject_Vectorcall(self->fallback, args, nargsf, kwnames);
    PyObject *result = NULL, *pk = NULL, *pv = NULL, *out = NULL;
    Py_buffer qv, kv, vv, pkv, pvv, nkv, nvv, ov;
    int got_q = 0, got_kv = 0, got_past = 0, got_new = 0, got_out = 0, take = 0;
    const Py_ssize_t any3[3] = {-1, -1, -1};
    if (!held_view(self, args[0], &qv, 'f', 3, any3)) goto other;
    got_q = 1;
    const Py_ssize_t b = qv.shape[0], s = qv.shape[1], width = qv.shape[2];
    const int nq = self->nq, nk = self->nk;
    const int packed = args[1] == Py_None;
    Py_ssize_t head;
    if (packed) {
        if (args[2] != Py_None) goto other;
        head = width / (nq + 2 * nk);
        if (width != (nq + 2 * nk) * head) goto other;
    } else {
        if (args[2] == Py_None) goto other;
        head = width / nq;
        const Py_ssize_t kshape[3] = {b, s, nk * head};
        if (!held_view(self, args[1], &kv, 'f', 3, kshape)) goto other;
        if (!held_view(self, args[2], &vv, 'f', 3, kshape)) {
            PyBuffer_Release(&kv);
            goto other;
        }
        got_kv = 1;
    }
    if (b < 1 || s < 1 || head < 1 || b > HELD_MAX_BATCH) goto other;
    long long seqlens[HELD_MAX_BATCH], total_max;
    if (args[5] == Py_None || args[6] == Py_None || !held_ints(self, args[5], b, seqlens))
        goto other;
    {
        /* total_sequence_length: its first value (one, as the op has it) */
        Py_buffer tv;
        if ((PyObject *)Py_TYPE(args[6]) != self->ndarray ||
            PyObject_GetBuffer(args[6], &tv, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) {
            PyErr_Clear();
            goto other;
        }
        const char *f = tv.format ? tv.format : "B";
        const int ok = tv.len >= tv.itemsize && tv.len > 0 && !f[1] &&
                       ((f[0] == 'i' && tv.itemsize == 4) ||
                        ((f[0] == 'l' || f[0] == 'q') && tv.itemsize == 8));
        if (ok)
            total_max = tv.itemsize == 4 ? ((const int32_t *)tv.buf)[0] : ((const int64_t *)tv.buf)[0];
        PyBuffer_Release(&tv);
        if (!ok) goto other;
    }
    /* _lengths, then _attend_compiled's conditions */
    Py_ssize_t start = 0;
    for (Py_ssize_t i = 0; i < b; i++) {
        const long long total = seqlens[i] + 1;
        const long long past = s == total_max ? 0 : total - s;
        if (past < 0) goto other; /* the Python call raises what this deserves */
        if (i == 0) start = (Py_ssize_t)past;
        if (total != start + s) goto other;
    }
    const int have_pk = args[3] != Py_None, have_pv = args[4] != Py_None;
    Py_ssize_t past_rows = 0;
    if (have_pk && have_pv) {
        const Py_ssize_t cache[4] = {b, nk, -1, head};
        if (!held_view(self, args[3], &pkv, 'f', 4, cache)) goto other;
        if (!held_view(self, args[4], &pvv, 'f', 4, cache)) {
            PyBuffer_Release(&pkv);
            goto other;
        }
        got_past = 1;
        past_rows = pkv.shape[2];
        if (pvv.shape[2] != past_rows || past_rows < start) goto other;
    } else if (start || have_pk || have_pv) {
        goto other;
    }
    const Py_ssize_t present_len = total_max > past_rows ? (Py_ssize_t)total_max : past_rows;
    if (start + s > present_len) goto other;
    const double keys_read = self->causal ? start + (s + 1) / 2.0 : (double)(start + s);
    const int grouped_step = s == 1 && nq > nk && level >= 1;
    if ((double)b * nq * s * keys_read * head > (double)self->limits[level & 3] && !grouped_step)
        goto other;
    const float *cos = NULL, *sin = NULL;
    if (self->has_rot) {
        if (start + s > self->cos_rows || self->rot > head) goto other;
        cos = (const float *)self->tcv.buf + start * self->rot;
        sin = (const float *)self->tsv.buf + start * self->rot;
    }
    take = 1;
    if (!(pk = held_new_array(self, b, nk, present_len, head, 4)) ||
        !(pv = held_new_array(self, b, nk, present_len, head, 4)) ||
        !(out = held_new_array(self, b, s, nq * head, 0, 3)))
        goto done;
    if (PyObject_GetBuffer(pk, &nkv, PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE) < 0) goto done;
    if (PyObject_GetBuffer(pv, &nvv, PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE) < 0) {
        PyBuffer_Release(&nkv);
        goto done;
    }
    got_new = 1;
    if (PyObject_GetBuffer(out, &ov, PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE) < 0) goto done;
    got_out = 1;
    {
        const Py_ssize_t q_width = nq * head, kv_width = nk * head;
        const Py_ssize_t q_stride = packed ? q_width + 2 * kv_width : q_width;
        const float *q = qv.buf;
        const Py_ssize_t window =
            self->local_window > 0 && self->local_window <= total_max - 1 ? self->local_window : -1;
        const double factor = self->scale != 0.0 ? self->scale : 1.0 / sqrt((double)head);
        GqaJob job = {
            .q = q,
            .k = packed ? q + q_width : kv.buf,
            .v = packed ? q + q_width + kv_width : vv.buf,
            .q_stride = q_stride,
            .k_stride = packed ? q_stride : kv_width,
            .v_stride = packed ? q_stride : kv_width,
            .past_k = got_past ? pkv.buf : NULL, .past_v = got_past ? pvv.buf : NULL,
            .past_rows = past_rows,
            .cos = cos, .sin = sin,
            .present_k = nkv.buf, .present_v = nvv.buf, .present_rows = present_len,
            .out = ov.buf,
            .batch = b, .seq = s, .heads = nq, .kv_heads = nk, .head = head,
            .past = start, .rot = self->has_rot ? self->rot : 0, .window = window,
            .interleaved = self->interleaved, .causal = self->causal, .scale = (float)factor,
        };
        if (run_job(&job, b * nq * s * (start + s) * head >= (1 << 20)) < 0) goto done;
    }
    if (self->n_outputs == 1) {
        result = Py_NewRef(out);
    } else if ((result = PyList_New(self->n_outputs))) {
        PyObject *outs[4] = {out, pk, pv, Py_None};
        for (int i = 0; i < self->n_outputs; i++)
            PyList_SET_ITEM(result, i, Py_NewRef(i < 4 ? outs[i] : Py_None));
    }
    goto done;
other:
    take = 0;
done:
    if (got_out) PyBuffer_Release(&ov);
    if (got_new) {
        PyBuffer_Release(&nkv);
        PyBuffer_Release(&nvv);
    }
    if (got_past) {
        PyBuffer_Release(&pkv);
        PyBuffer_Release(&pvv);
    }
    if (got_kv) {
        PyBuffer_Release(&kv);
        PyBuffer_Release(&vv);
    }
    if (got_q) PyBuffer_Release(&qv);
    Py_XDECREF(pk);
    Py_XDECREF(pv);
    Py_XDECREF(out);
    if (!take) return PyObject_Vectorcall(self->fallback, args, nargsf, kwnames);
    return result;
}

static int held_traverse(PyObject *obj, visitproc visit, void *arg) {
    HeldGqa *self = (HeldGqa *)obj;
    Py_VISIT(self->fallback);
    return 0;
}

static int held_clear(PyObject *obj) {
    Py_CLEAR(((HeldGqa *)obj)->fallback);
    return 0;
}

static void held_dealloc(PyObject *obj) {
    HeldGqa *self = (HeldGqa *)obj;
    PyObject_GC_UnTrack(obj);
    if (self->table_c) PyBuffer_Release(&self->tcv);
    if (self->table_s) PyBuffer_Release(&self->tsv);
    Py_CLEAR(self->table_c);
    Py_CLEAR(self->table_s);
    Py_CLEAR(self->cos_k);
    Py_CLEAR(self->sin_k);
    Py_CLEAR(self->ndarray);
    Py_CLEAR(self->empty);
    Py_CLEAR(self->dtype);
    held_clear(obj);
    PyObject_GC_Del(obj);
}

static PyMemberDef held_members[] = {
    {"fallback", T_OBJECT, offsetof(HeldGqa, fallback), READONLY,
     "What the calls this attention does not take go to."},
    {NULL, 0, 0, 0, NULL},
};

static PyTypeObject HeldGqaType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "onnxviz.runtime.native._gqa.HeldGqa",
    .tp_basicsize = sizeof(HeldGqa),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_vectorcall_offset = offsetof(HeldGqa, vectorcall),
    .tp_call = PyVectorcall_Call,
    .tp_traverse = held_traverse,
    .tp_clear = held_clear,
    .tp_dealloc = held_dealloc,
    .tp_members = held_members,
    .tp_doc = "A GroupQueryAttention node's call in C (held()).",
};

static PyObject *py_held(PyObject *self, PyObject *args) {
    (void)self;
    int nq, nk, causal, interleaved, n_outputs;
    Py_ssize_t local_window, cos_rows;
    double scale;
    PyObject *limits, *cos_k, *sin_k, *table_c, *table_s, *fallback, *ndarray, *empty, *dtype;
    if (!PyArg_ParseTuple(args, "iippndO!OOOOniOOOO:held", &nq, &nk, &causal, &interleaved,
                          &local_window, &scale, &PyTuple_Type, &limits, &cos_k, &sin_k,
                          &table_c, &table_s, &cos_rows, &n_outputs, &fallback, &ndarray,
                          &empty, &dtype))
        return NULL;
    if (nq < 1 || nk < 1 || nq % nk || n_outputs < 1 || n_outputs > 4 ||
        PyTuple_GET_SIZE(limits) != 4 || !PyCallable_Check(fallback) ||
        !PyCallable_Check(empty) || (table_c == Py_None) != (table_s == Py_None)) {
        PyErr_SetString(PyExc_ValueError, "held: bad heads, outputs, limits or callables");
        return NULL;
    }
    HeldGqa *obj = PyObject_GC_New(HeldGqa, &HeldGqaType);
    if (!obj) return NULL;
    obj->vectorcall = held_vectorcall;
    obj->nq = nq, obj->nk = nk, obj->causal = causal, obj->interleaved = interleaved;
    obj->n_outputs = n_outputs, obj->local_window = local_window, obj->scale = scale;
    obj->cos_rows = cos_rows;
    obj->has_rot = table_c != Py_None;
    obj->rot = 0;
    obj->table_c = obj->table_s = NULL;
    obj->cos_k = Py_NewRef(cos_k);
    obj->sin_k = Py_NewRef(sin_k);
    obj->fallback = Py_NewRef(fallback);
    obj->ndarray = Py_NewRef(ndarray);
    obj->empty = Py_NewRef(empty);
    obj->dtype = Py_NewRef(dtype);
    for (int i = 0; i < 4; i++) obj->limits[i] = PyLong_AsSsize_t(PyTuple_GET_ITEM(limits, i));
    PyObject_GC_Track((PyObject *)obj);
    if (PyErr_Occurred()) {
        Py_DECREF(obj);
        return NULL;
    }
    if (obj->has_rot) {
        /* the rotary tables of every position: [positions, rot] float32 rows */
        if (PyObject_GetBuffer(table_c, &obj->tcv, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) {
            Py_DECREF(obj);
            return NULL;
        }
        obj->table_c = Py_NewRef(table_c);
        if (PyObject_GetBuffer(table_s, &obj->tsv, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) {
            Py_DECREF(obj);
            return NULL;
        }
        obj->table_s = Py_NewRef(table_s);
        const Py_buffer *c = &obj->tcv, *s2 = &obj->tsv;
        if (c->ndim != 2 || s2->ndim != 2 || c->shape[0] != s2->shape[0] ||
            c->shape[1] != s2->shape[1] || !c->format || strcmp(c->format, "f") ||
            !s2->format || strcmp(s2->format, "f") || c->shape[0] < cos_rows ||
            c->shape[1] % 2) {
            PyErr_SetString(PyExc_ValueError, "held: the rotary tables are not float32 [P, rot]");
            Py_DECREF(obj);
            return NULL;
        }
        obj->rot = c->shape[1];
    }
    return (PyObject *)obj;
}

ONNXVIZ_LEVEL_FUNCTIONS

static PyMethodDef methods[] = {
    {"attend", py_attend, METH_VARARGS,
     "attend(query, key, value, past_key, past_value, cos, sin, present_key, "
     "present_value, out, batch, seq, heads, kv_heads, head, past, rot, interleaved, "
     "causal, window, scale): GroupQueryAttention's common case; see the module source."},
    {"held", py_held, METH_VARARGS,
     "held(num_heads, kv_num_heads, causal, interleaved, local_window_size, scale, limits, "
     "cos_cache, sin_cache, table_cos, table_sin, cos_rows, n_outputs, fallback, ndarray, "
     "empty, dtype) -> a GroupQueryAttention node's call in C; see the module source."},
    ONNXVIZ_LEVEL_METHODS
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_gqa", NULL, -1, methods};

PyMODINIT_FUNC PyInit__gqa(void) {
    if (PyType_Ready(&HeldGqaType) < 0) return NULL;
    return PyModule_Create(&module);
}
