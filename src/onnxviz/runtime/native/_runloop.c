/* onnxviz.runtime.native._runloop: the node loop of unwatched runs, compiled.
 *
 *   compile(steps, n_slots) -> program: a frame's node list, read once
 *   run(program, start, values, executor, times, where, inplace_min, fold) -> int
 *   setup(ndarray_type, normalize_one): the two Python objects the loop compares with
 *   memo(fn, settle, entries): a node's call keeping its results (shape_memo.py; below)
 *   binary(op, dtypes, fallback): an arithmetic node's call (prepared.py's; below)
 *   arrays(probes, dtypes): binary's direct arithmetic of small arrays on (below)
 *   split_copy(data, axis, sizes, empty): a small Split's parts as contiguous copies
 *
 * A step is the tuple (mode, inplace, call, extra, ins, outs, free_after):
 *
 *   PLAIN  0  values[outs[0]] = call(*ins), through normalize_one unless an ndarray;
 *   MANY   1  outs = call(*ins), a sequence of the node's outputs;
 *   FUSED  2  outs = call(executor, [*ins]); when ``extra`` is set (the fused object,
 *             whose ``quick`` attribute is a callable or None), values[outs[0]] =
 *             extra.quick(*ins) first, and the call only when that returns None (a
 *             compiled call made on the node's first run: fusion.py's MatMulBias,
 *             fusion_elementwise's chains);
 *   KERNEL 3  outs = call(executor, extra, [*ins]): the executor's _call_kernel of node extra;
 *   FOLDED 4  outs = extra, the node's constant-folded outputs (only when ``fold``);
 *   PYTHON 5  the Python loop runs this node (control flow, functions, a node still to
 *             fold, anything else).
 *
 * ``ins`` are slots of ``values`` (-1: an absent input, None), ``outs`` the slots its
 * outputs go to (-1: unused), ``free_after`` the slots dead after it.  ``times`` is a
 * writable buffer of two doubles per step, its calls and time so far in ticks (times
 * seconds_per_tick() is seconds; the executor adds them to its profile when someone
 * reads it: a dict entry per call cost more than the rest of the loop).
 *
 * ``run`` runs the steps from ``start`` and returns the index of the first step it did
 * not run: the end, a PYTHON step, a FOLDED step when not ``fold``, a step of an
 * in-place candidate (``inplace``) with an ndarray first or second input of at least
 * ``inplace_min`` elements (inplace.py decides; -1: in-place runs are off), or a step
 * once ``executor.cancelled`` is true (read at the first step, then every 32 steps and
 * after any 100 us of steps).  The caller runs that node its own way and calls
 * again after it.  When a call raises, ``where[0]`` is set to the step's index and the
 * exception propagates (the caller names the node).
 *
 * Why: the Python loop cost about 1 us a node beyond the kernel (gathering the inputs,
 * the mode tests, two clock reads, the profile entry, freeing slots); small models of
 * 100-300 nodes of a few microseconds each spent a fifth of their run there (issue 21).
 *
 * No level-specific code: set_level exists for native.load's convention only. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>

#include "array_fields.h"

#include <stddef.h>
#include <stdint.h>
#include <string.h>
#ifdef _WIN32
#include <windows.h>
#else
#include <time.h>
#endif
#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__))
#define RUNLOOP_TSC 1
#include <cpuid.h>
#include <x86intrin.h>
#else
#define RUNLOOP_TSC 0
#endif

enum { M_PLAIN = 0, M_MANY, M_FUSED, M_KERNEL, M_FOLDED, M_PYTHON, M_COUNT };
enum { MAX_INPUTS = 64 }; /* more: a PYTHON step (a Concat or Sum of many inputs) */

typedef struct {
    int mode;
    int inplace;
    PyObject *call;  /* owned, or NULL */
    PyObject *extra; /* owned, or NULL */
    Py_ssize_t n_in, n_out, n_free;
    Py_ssize_t *in, *out, *free; /* into the program's slot pool */
} Step;

typedef struct {
    Py_ssize_t n_steps;
    Py_ssize_t n_slots; /* every slot is below this */
    Step *steps;
    Py_ssize_t *pool;
} Program;

static PyObject *ndarray_type = NULL;
static PyObject *normalize_one = NULL;
static PyObject *str_cancelled = NULL;
static PyObject *str_size = NULL;
static PyObject *str_quick = NULL;

static const char *CAPSULE = "onnxviz.runloop.program";

/* How often a run reads the executor's `cancelled` (run_steps): every CANCEL_STEPS steps,
 * and after 100 us of steps (cancel_ticks). */
#define CANCEL_STEPS 32
static double cancel_ticks = 1e-4;

static double now(void) {
#ifdef _WIN32
    LARGE_INTEGER f, c;
    QueryPerformanceFrequency(&f);
    QueryPerformanceCounter(&c);
    return (double)c.QuadPart / (double)f.QuadPart;
#else
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts); /* time.perf_counter's clock */
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
#endif
}

/* Step times are kept in ticks (`times`): the time-stamp counter where it runs at one
 * rate whatever the core does (CPUID's invariant TSC: a read is 10 ns on a Zen 4 VM,
 * clock_gettime 29, and a run reads once a step), else seconds.  seconds_per_tick()
 * converts, measured against `now` since the module loaded. */
static int use_tsc = 0;
static double base_seconds = 0.0, base_ticks = 0.0;

static inline double ticks(void) {
#if RUNLOOP_TSC
    if (use_tsc)
        return (double)__rdtsc();
#endif
    return now();
}

static void ticks_init(void) {
#if RUNLOOP_TSC
    unsigned int a, b, c, d;
    use_tsc = __get_cpuid(0x80000007, &a, &b, &c, &d) && (d & (1u << 8));
#endif
    base_seconds = now();
    base_ticks = ticks();
    if (use_tsc)
        cancel_ticks = 1e-4 * 1e9; /* 100 us at 1 GHz, 25-50 us at the usual 2-4 */
}

static PyObject *py_seconds_per_tick(PyObject *self, PyObject *noargs) {
    (void)self, (void)noargs;
    if (!use_tsc)
        return PyFloat_FromDouble(1.0);
    /* at least 5 ms since the module loaded: the two clocks' reads then agree to 1e-5 */
    double s = now(), t = ticks();
    while (s - base_seconds < 5e-3) {
        s = now();
        t = ticks();
    }
    return PyFloat_FromDouble(t > base_ticks ? (s - base_seconds) / (t - base_ticks) : 1e-9);
}

static void program_free(Program *p) {
    if (p == NULL)
        return;
    if (p->steps != NULL) {
        for (Py_ssize_t i = 0; i < p->n_steps; i++) {
            Py_XDECREF(p->steps[i].call);
            Py_XDECREF(p->steps[i].extra);
        }
    }
    PyMem_Free(p->steps);
    PyMem_Free(p->pool);
    PyMem_Free(p);
}

static void capsule_free(PyObject *capsule) {
    program_free((Program *)PyCapsule_GetPointer(capsule, CAPSULE));
}

/* The ints of a tuple of slots into pool[*used...]; -1 allowed when ``absent_ok``. */
static int read_slots(PyObject *t, Py_ssize_t n_slots, int absent_ok, Py_ssize_t *pool,
                      Py_ssize_t *used, Py_ssize_t **at, Py_ssize_t *count) {
    if (!PyTuple_Check(t)) {
        PyErr_SetString(PyExc_TypeError, "slots must be a tuple of ints");
        return -1;
    }
    Py_ssize_t n = PyTuple_GET_SIZE(t);
    *at = pool + *used;
    *count = n;
    for (Py_ssize_t k = 0; k < n; k++) {
        Py_ssize_t s = PyLong_AsSsize_t(PyTuple_GET_ITEM(t, k));
        if (s == -1 && PyErr_Occurred())
            return -1;
        if (s >= n_slots || s < (absent_ok ? -1 : 0)) {
            PyErr_Format(PyExc_ValueError, "slot %zd out of range (%zd slots)", s, n_slots);
            return -1;
        }
        pool[(*used)++] = s;
    }
    return 0;
}

static PyObject *compile_program(PyObject *self, PyObject *args) {
    PyObject *steps;
    Py_ssize_t n_slots;
    if (!PyArg_ParseTuple(args, "O!n", &PyList_Type, &steps, &n_slots))
        return NULL;
    Py_ssize_t n = PyList_GET_SIZE(steps);
    Program *p = PyMem_Calloc(1, sizeof(Program));
    if (p == NULL)
        return PyErr_NoMemory();
    p->n_slots = n_slots;
    Py_ssize_t total = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *t = PyList_GET_ITEM(steps, i);
        if (!PyTuple_Check(t) || PyTuple_GET_SIZE(t) != 7) {
            PyErr_SetString(PyExc_TypeError, "a step is a tuple of 7 items");
            program_free(p);
            return NULL;
        }
        for (int k = 4; k < 7; k++) {
            PyObject *slots = PyTuple_GET_ITEM(t, k);
            if (!PyTuple_Check(slots)) {
                PyErr_SetString(PyExc_TypeError, "slots must be a tuple of ints");
                program_free(p);
                return NULL;
            }
            total += PyTuple_GET_SIZE(slots);
        }
    }
    p->steps = PyMem_Calloc(n > 0 ? n : 1, sizeof(Step));
    p->pool = PyMem_Calloc(total > 0 ? total : 1, sizeof(Py_ssize_t));
    if (p->steps == NULL || p->pool == NULL) {
        program_free(p);
        return PyErr_NoMemory();
    }
    p->n_steps = n;
    Py_ssize_t used = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *t = PyList_GET_ITEM(steps, i);
        Step *st = &p->steps[i];
        long mode = PyLong_AsLong(PyTuple_GET_ITEM(t, 0));
        if (mode == -1 && PyErr_Occurred()) {
            program_free(p);
            return NULL;
        }
        if (mode < 0 || mode >= M_COUNT) {
            PyErr_Format(PyExc_ValueError, "unknown step mode %ld", mode);
            program_free(p);
            return NULL;
        }
        st->mode = (int)mode;
        st->inplace = PyObject_IsTrue(PyTuple_GET_ITEM(t, 1));
        PyObject *call = PyTuple_GET_ITEM(t, 2), *extra = PyTuple_GET_ITEM(t, 3);
        st->call = call == Py_None ? NULL : (Py_INCREF(call), call);
        st->extra = extra == Py_None ? NULL : (Py_INCREF(extra), extra);
        if (st->inplace < 0 ||
            read_slots(PyTuple_GET_ITEM(t, 4), n_slots, 1, p->pool, &used, &st->in, &st->n_in) ||
            read_slots(PyTuple_GET_ITEM(t, 5), n_slots, 1, p->pool, &used, &st->out, &st->n_out) ||
            read_slots(PyTuple_GET_ITEM(t, 6), n_slots, 0, p->pool, &used, &st->free,
                       &st->n_free)) {
            program_free(p);
            return NULL;
        }
        int needs_call = st->mode <= M_KERNEL;
        if (st->mode != M_PYTHON &&
            ((needs_call && st->call == NULL) || (st->mode == M_KERNEL && st->extra == NULL) ||
             (st->mode == M_FOLDED && (st->extra == NULL || !PyList_Check(st->extra))) ||
             (st->mode == M_PLAIN && (st->n_out != 1 || st->out[0] < 0)) ||
             st->n_in > MAX_INPUTS)) {
            st->mode = M_PYTHON; /* the Python loop knows what to do, or what to say */
        }
    }
    PyObject *capsule = PyCapsule_New(p, CAPSULE, capsule_free);
    if (capsule == NULL)
        program_free(p);
    return capsule;
}

/* values[s] = v (a new reference, stolen). */
static inline void put(PyObject *values, Py_ssize_t s, PyObject *v) {
    PyObject *old = PyList_GET_ITEM(values, s);
    PyList_SET_ITEM(values, s, v);
    Py_XDECREF(old);
}

/* Store a list-like result's items in the step's output slots (zip: the shorter wins). */
static int put_many(PyObject *values, const Step *st, PyObject *outs) {
    PyObject *seq = PySequence_Fast(outs, "a node's outputs must be a sequence");
    if (seq == NULL)
        return -1;
    Py_ssize_t m = PySequence_Fast_GET_SIZE(seq);
    if (m > st->n_out)
        m = st->n_out;
    PyObject **items = PySequence_Fast_ITEMS(seq);
    for (Py_ssize_t k = 0; k < m; k++) {
        Py_ssize_t s = st->out[k];
        if (s >= 0) {
            Py_INCREF(items[k]);
            put(values, s, items[k]);
        }
    }
    Py_DECREF(seq);
    return 0;
}

/* Whether an in-place candidate's first or second input is an ndarray of at least
 * ``inplace_min`` elements (then inplace.py, in the Python loop, decides); -1 on error. */
static int inplace_sized(PyObject *const *ins, Py_ssize_t n_in, Py_ssize_t inplace_min) {
    for (Py_ssize_t k = 0; k < n_in && k < 2; k++) {
        if ((PyObject *)Py_TYPE(ins[k]) != ndarray_type)
            continue;
        PyObject *size = PyObject_GetAttr(ins[k], str_size);
        if (size == NULL)
            return -1;
        Py_ssize_t n = PyLong_AsSsize_t(size);
        Py_DECREF(size);
        if (n == -1 && PyErr_Occurred())
            return -1;
        if (n >= inplace_min)
            return 1;
    }
    return 0;
}

static PyObject *run_steps(PyObject *capsule, Py_ssize_t start, PyObject *values,
                           PyObject *executor, Py_buffer *tb, PyObject *where,
                           Py_ssize_t inplace_min, int fold);

static PyObject *run(PyObject *self, PyObject *args) {
    PyObject *capsule, *values, *executor, *where;
    Py_buffer tb;
    Py_ssize_t start, inplace_min;
    int fold;
    if (!PyArg_ParseTuple(args, "OnO!Ow*O!np", &capsule, &start, &PyList_Type, &values, &executor,
                          &tb, &PyList_Type, &where, &inplace_min, &fold))
        return NULL;
    PyObject *result_index = run_steps(capsule, start, values, executor, &tb, where, inplace_min,
                                       fold);
    PyBuffer_Release(&tb);
    return result_index;
}

static PyObject *run_steps(PyObject *capsule, Py_ssize_t start, PyObject *values,
                           PyObject *executor, Py_buffer *tb, PyObject *where,
                           Py_ssize_t inplace_min, int fold) {
    if (ndarray_type == NULL || normalize_one == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "_runloop.setup was not called");
        return NULL;
    }
    Program *p = (Program *)PyCapsule_GetPointer(capsule, CAPSULE);
    if (p == NULL)
        return NULL;
    if (PyList_GET_SIZE(values) < p->n_slots) {
        PyErr_Format(PyExc_ValueError, "%zd value slots for a program of %zd",
                     PyList_GET_SIZE(values), p->n_slots);
        return NULL;
    }
    if (tb->len < (Py_ssize_t)(2 * sizeof(double)) * p->n_steps) {
        PyErr_SetString(PyExc_ValueError, "times must hold two doubles per step");
        return NULL;
    }
    double *times = (double *)tb->buf;
    if (PyList_GET_SIZE(where) < 1) {
        PyErr_SetString(PyExc_ValueError, "where must be a list of one item");
        return NULL;
    }
    if (start < 0)
        start = 0;
    /* ins[0] is free for PY_VECTORCALL_ARGUMENTS_OFFSET; KERNEL and FUSED put the
     * executor and the node there instead. */
    PyObject *ins[MAX_INPUTS + 1];
    Py_ssize_t i = start;
    /* `cancelled` is read before the first step and then once CANCEL_STEPS steps or
     * CANCEL_SECONDS of steps have passed since the last read (so after any step that
     * took that long): the attribute's lookup on every step was a tenth of a small
     * node's cost (a GPT-2 decode step of 540 nodes), and a cancel still stops the run
     * within a fraction of a millisecond of work. */
    Py_ssize_t unchecked = CANCEL_STEPS;
    double unchecked_time = 0.0;
    double t0 = ticks();
    for (; i < p->n_steps; i++) {
        const Step *st = &p->steps[i];
        int mode = st->mode;
        if (mode == M_PYTHON || (mode == M_FOLDED && !fold))
            break;
        if (unchecked >= CANCEL_STEPS || unchecked_time >= cancel_ticks) {
            unchecked = 0;
            unchecked_time = 0.0;
            PyObject *flag = PyObject_GetAttr(executor, str_cancelled);
            if (flag == NULL)
                goto failed;
            int cancelled = PyObject_IsTrue(flag);
            Py_DECREF(flag);
            if (cancelled < 0)
                goto failed;
            if (cancelled)
                break;
        }
        unchecked++;
        Py_ssize_t n_in = st->n_in;
        for (Py_ssize_t k = 0; k < n_in; k++) {
            Py_ssize_t s = st->in[k];
            PyObject *v = s >= 0 ? PyList_GET_ITEM(values, s) : Py_None;
            ins[k + 1] = v != NULL ? v : Py_None;
            Py_INCREF(ins[k + 1]);
        }
        PyObject *result = NULL;
        if (st->inplace && inplace_min >= 0) {
            int big = inplace_sized(ins + 1, n_in, inplace_min);
            if (big != 0) {
                for (Py_ssize_t k = 0; k < n_in; k++)
                    Py_DECREF(ins[k + 1]);
                if (big < 0)
                    goto failed;
                break;
            }
        }
        int quick_one = 0; /* a FUSED step's quick call made its one output */
        switch (mode) {
        case M_PLAIN:
        case M_MANY:
            result = PyObject_Vectorcall(st->call, ins + 1,
                                         (size_t)n_in | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
            break;
        case M_FUSED:
            if (st->extra != NULL) {
                PyObject *quick = PyObject_GetAttr(st->extra, str_quick);
                if (quick == NULL)
                    break;
                if (quick != Py_None) {
                    result = PyObject_Vectorcall(
                        quick, ins + 1, (size_t)n_in | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
                    Py_DECREF(quick);
                    if (result == NULL)
                        break;
                    if (result != Py_None) {
                        quick_one = 1;
                        break;
                    }
                    Py_DECREF(result);
                    result = NULL;
                } else {
                    Py_DECREF(quick);
                }
            }
            /* fall through: the fused call */
        case M_KERNEL: { /* the inputs as a list, as the Python loop gives them */
            PyObject *list = PyList_New(n_in);
            if (list != NULL) {
                for (Py_ssize_t k = 0; k < n_in; k++) {
                    Py_INCREF(ins[k + 1]);
                    PyList_SET_ITEM(list, k, ins[k + 1]);
                }
                result = mode == M_FUSED
                             ? PyObject_CallFunctionObjArgs(st->call, executor, list, NULL)
                             : PyObject_CallFunctionObjArgs(st->call, executor, st->extra, list,
                                                            NULL);
                Py_DECREF(list);
            }
            break;
        }
        default: /* M_FOLDED */
            result = st->extra;
            Py_INCREF(result);
        }
        for (Py_ssize_t k = 0; k < n_in; k++)
            Py_DECREF(ins[k + 1]);
        if (result == NULL)
            goto failed;
        if (mode == M_PLAIN || quick_one) {
            if ((PyObject *)Py_TYPE(result) != ndarray_type) {
                PyObject *one = PyObject_CallOneArg(normalize_one, result);
                Py_DECREF(result);
                if (one == NULL)
                    goto failed;
                result = one;
            }
        }
        /* A step's time runs from the end of the one before (its inputs' gathering and
         * the loop's own work included): one clock read a step, where two were a tenth
         * of a small node's cost. */
        const double t1 = ticks();
        const double dt = t1 - t0;
        t0 = t1;
        unchecked_time += dt;
        if (mode == M_PLAIN) {
            put(values, st->out[0], result);
        } else if (quick_one) {
            if (st->n_out >= 1 && st->out[0] >= 0)
                put(values, st->out[0], result);
            else
                Py_DECREF(result);
        } else {
            int rc = put_many(values, st, result);
            Py_DECREF(result);
            if (rc < 0)
                goto failed;
        }
        times[2 * i] += 1.0;
        times[2 * i + 1] += dt;
        for (Py_ssize_t k = 0; k < st->n_free; k++) {
            Py_INCREF(Py_None);
            put(values, st->free[k], Py_None);
        }
    }
    return PyLong_FromSsize_t(i);
failed : {
    PyObject *exc_type, *exc_value, *exc_tb;
    PyErr_Fetch(&exc_type, &exc_value, &exc_tb);
    PyObject *index = PyLong_FromSsize_t(i);
    if (index != NULL)
        PyList_SetItem(where, 0, index);
    PyErr_Restore(exc_type, exc_value, exc_tb);
    return NULL;
}
}

/* iteration(program, frame, base, in_slots, feeds, out_slots, executor, times, where,
 *           inplace_min, fold) -> the body's outputs (a list), or the index of the step
 * the loop left (an int)
 *
 * One iteration of a control-flow body nobody watches, in a frame reused for every
 * iteration (control_flow.py's _Body): the slots are a copy of `base` (the constants
 * and captures) with `feeds` at `in_slots` (-1: not read; `feeds` is emptied), set as
 * `frame.values` before
 * the first step (so that a nested control node and the error path see them), then
 * run as `run` runs them; when every step ran, the values at `out_slots` (None for -1).
 * The copy, the inputs' placement and the outputs' reading were 1 us of Python per
 * iteration, about what onnxruntime takes for a whole iteration of a small body. */
static PyObject *str_values = NULL;
static int direct_on; /* (defined with binary's direct path below) */

static PyObject *iteration(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *capsule, *frame, *base, *in_slots, *feeds, *out_slots, *executor, *where;
    Py_buffer tb;
    Py_ssize_t inplace_min;
    int fold;
    if (!PyArg_ParseTuple(args, "OOO!O!O!O!Ow*O!np:iteration", &capsule, &frame, &PyList_Type,
                          &base, &PyTuple_Type, &in_slots, &PyList_Type, &feeds, &PyTuple_Type,
                          &out_slots, &executor, &tb, &PyList_Type, &where, &inplace_min, &fold))
        return NULL;
    PyObject *result = NULL;
    const Py_ssize_t n_slots = PyList_GET_SIZE(base);
    PyObject *values = PyList_GetSlice(base, 0, n_slots);
    if (values == NULL) goto done;
    const Py_ssize_t n_in = PyTuple_GET_SIZE(in_slots) < PyList_GET_SIZE(feeds)
                                ? PyTuple_GET_SIZE(in_slots)
                                : PyList_GET_SIZE(feeds);
    for (Py_ssize_t k = 0; k < n_in; k++) {
        const Py_ssize_t s = PyLong_AsSsize_t(PyTuple_GET_ITEM(in_slots, k));
        if (s == -1 && PyErr_Occurred()) goto done;
        if (s < 0) continue;
        if (s >= n_slots) {
            PyErr_SetString(PyExc_IndexError, "an input slot beyond the frame's");
            goto done;
        }
        PyObject *v = PyList_GET_ITEM(feeds, k);
        Py_INCREF(v);
        put(values, s, v);
    }
    /* The slots hold the inputs now and the feeds list lets go of them: when the caller
     * holds them nowhere else either, a small result among them (a Loop's carried
     * state, made by the last iteration's arithmetic) is the frame's alone and the
     * call that made it may write it again (`binary`). */
    if (PyList_SetSlice(feeds, 0, PyList_GET_SIZE(feeds), NULL) < 0) goto done;
    if (PyObject_SetAttr(frame, str_values, values) < 0) goto done;
    PyObject *index = run_steps(capsule, 0, values, executor, &tb, where, inplace_min, fold);
    if (index == NULL) goto done;
    Program *p = (Program *)PyCapsule_GetPointer(capsule, CAPSULE);
    const Py_ssize_t i = PyLong_AsSsize_t(index);
    if (p == NULL || i < p->n_steps) {
        result = index; /* (NULL with the error set when the capsule is not a program) */
        goto done;
    }
    Py_DECREF(index);
    const Py_ssize_t n_out = PyTuple_GET_SIZE(out_slots);
    result = PyList_New(n_out);
    if (result == NULL) goto done;
    for (Py_ssize_t k = 0; k < n_out; k++) {
        const Py_ssize_t s = PyLong_AsSsize_t(PyTuple_GET_ITEM(out_slots, k));
        if (s == -1 && PyErr_Occurred()) {
            Py_CLEAR(result);
            goto done;
        }
        PyObject *v = s >= 0 && s < n_slots ? PyList_GET_ITEM(values, s) : Py_None;
        PyList_SET_ITEM(result, k, Py_NewRef(v != NULL ? v : Py_None));
    }
done:
    Py_XDECREF(values);
    PyBuffer_Release(&tb);
    return result;
}

/* loop(program, frame, base, in_slots, out_slots, executor, times, where, inplace_min,
 *      fold, state, max_trip, use_cond, scans, counter, flag, truth) -> -1 when the loop
 * is done, else the index of the step the compiled loop left in iteration state[0]
 *
 * A Loop node's iterations nobody watches (control_flow.py's _run_loop), each as
 * `iteration` runs one, without a return to Python in between: the Python loop around
 * `iteration` (the counter's array, the feeds, the condition, the carried values) was
 * 1-1.5 us an iteration, where onnxruntime takes 1.5 us for a whole iteration of a
 * small body.  `state` is [i, keep_going, carried]: the iteration to run next, whether
 * the loop goes on, the carried values (a list, whose items move into the frame's
 * slots as the iteration starts and are replaced by its outputs).  Iteration i gets
 * counter(i), `flag` (the condition's array: true, since it runs) and the carried
 * values at in_slots; its outputs are the condition (truth(cond) decides whether the
 * loop goes on when `use_cond`, and cond is not None), the carried values, then one
 * value for each list of `scans`.  It runs while keep_going and i < max_trip (-1: no
 * limit).  On an error, where[1] is the failed iteration. */
static PyObject *loop(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *capsule, *frame, *base, *in_slots, *out_slots, *executor, *where, *state, *scans;
    PyObject *counter, *flag, *truth;
    Py_buffer tb;
    Py_ssize_t inplace_min, max_trip;
    int fold, use_cond;
    if (!PyArg_ParseTuple(args, "OOO!O!O!Ow*O!npO!npO!OOO:loop", &capsule, &frame, &PyList_Type,
                          &base, &PyTuple_Type, &in_slots, &PyTuple_Type, &out_slots, &executor,
                          &tb, &PyList_Type, &where, &inplace_min, &fold, &PyList_Type, &state,
                          &max_trip, &use_cond, &PyList_Type, &scans, &counter, &flag, &truth))
        return NULL;
    PyObject *result = NULL, *values = NULL;
    Program *p = (Program *)PyCapsule_GetPointer(capsule, CAPSULE);
    if (p == NULL) goto done;
    if (PyList_GET_SIZE(state) != 3 || !PyList_Check(PyList_GET_ITEM(state, 2)) ||
        PyList_GET_SIZE(where) < 2) {
        PyErr_SetString(PyExc_ValueError, "loop: state is [i, keep_going, carried]; where [0, 0]");
        goto done;
    }
    Py_ssize_t i = PyLong_AsSsize_t(PyList_GET_ITEM(state, 0));
    if (i == -1 && PyErr_Occurred()) goto done;
    int keep_going = PyObject_IsTrue(PyList_GET_ITEM(state, 1));
    if (keep_going < 0) goto done;
    PyObject *carried = PyList_GET_ITEM(state, 2);
    const Py_ssize_t n_carried = PyList_GET_SIZE(carried);
    const Py_ssize_t n_scan = PyList_GET_SIZE(scans);
    const Py_ssize_t n_slots = PyList_GET_SIZE(base);
    const Py_ssize_t n_in = PyTuple_GET_SIZE(in_slots), n_out = PyTuple_GET_SIZE(out_slots);
    if (n_in < 2 + n_carried || n_out < 1 + n_carried + n_scan) {
        PyErr_SetString(PyExc_ValueError, "loop: fewer body inputs or outputs than values");
        goto done;
    }
    for (Py_ssize_t k = 0; k < n_in + n_out; k++) { /* every slot within the frame's */
        PyObject *o = k < n_in ? PyTuple_GET_ITEM(in_slots, k) : PyTuple_GET_ITEM(out_slots, k - n_in);
        const Py_ssize_t s = PyLong_AsSsize_t(o);
        if (s == -1 && PyErr_Occurred()) goto done;
        if (s >= n_slots) {
            PyErr_SetString(PyExc_IndexError, "loop: a slot beyond the frame's");
            goto done;
        }
    }
#define SLOT(tuple, k) PyLong_AsSsize_t(PyTuple_GET_ITEM(tuple, k))
    Py_ssize_t stopped = -1;
    while (keep_going && (max_trip < 0 || i < max_trip)) {
        PyObject *index = PyLong_FromSsize_t(i);
        if (index == NULL) goto done;
        PyList_SetItem(where, 1, index);
        values = PyList_GetSlice(base, 0, n_slots);
        if (values == NULL) goto done;
        PyObject *count = PyObject_CallOneArg(counter, index);
        if (count == NULL) goto done;
        Py_ssize_t s = SLOT(in_slots, 0);
        if (s >= 0) put(values, s, count); else Py_DECREF(count);
        s = SLOT(in_slots, 1);
        if (s >= 0) put(values, s, Py_NewRef(flag));
        for (Py_ssize_t k = 0; k < n_carried; k++) { /* moved: the slot holds it alone */
            PyObject *v = PyList_GET_ITEM(carried, k);
            PyList_SET_ITEM(carried, k, Py_NewRef(Py_None));
            s = SLOT(in_slots, 2 + k);
            if (s >= 0) put(values, s, v); else Py_DECREF(v);
        }
        /* (the last iteration's slots go: their hold on this one's inputs with them) */
        if (PyObject_SetAttr(frame, str_values, values) < 0) goto done;
        index = run_steps(capsule, 0, values, executor, &tb, where, inplace_min, fold);
        if (index == NULL) goto done;
        const Py_ssize_t at = PyLong_AsSsize_t(index);
        Py_DECREF(index);
        if (at < p->n_steps) {
            stopped = at;
            break;
        }
        PyObject *cond = NULL;
        for (Py_ssize_t k = 0; k < n_out; k++) {
            s = SLOT(out_slots, k);
            PyObject *v = s >= 0 ? PyList_GET_ITEM(values, s) : NULL;
            v = v != NULL ? v : Py_None;
            if (k == 0)
                cond = v;
            else if (k <= n_carried)
                PyList_SetItem(carried, k - 1, Py_NewRef(v));
            else if (k <= n_carried + n_scan &&
                     PyList_Append(PyList_GET_ITEM(scans, k - 1 - n_carried), v) < 0)
                goto done;
        }
        if (use_cond && cond != Py_None) {
            if (direct_on && (PyObject *)Py_TYPE(cond) == ndarray_type &&
                array_fields(cond)->nd == 0) {
                keep_going = PyObject_IsTrue(cond); /* (a 0-d array's one value: truth's) */
            } else {
                PyObject *go = PyObject_CallOneArg(truth, cond);
                if (go == NULL) goto done;
                keep_going = PyObject_IsTrue(go);
                Py_DECREF(go);
            }
            if (keep_going < 0) goto done;
        }
        Py_CLEAR(values);
        i++;
    }
#undef SLOT
    PyObject *at_i = PyLong_FromSsize_t(i);
    if (at_i == NULL) goto done;
    PyList_SetItem(state, 0, at_i);
    PyList_SetItem(state, 1, PyBool_FromLong(keep_going));
    result = PyLong_FromSsize_t(stopped);
done:
    Py_XDECREF(values);
    PyBuffer_Release(&tb);
    return result;
}

/* ---- a kept result: shape_memo.py's `_by_inputs` in C -----------------------------------
 *
 * `memo(fn, settle, entries)` makes a callable that returns what `fn` returned for the
 * same input objects when every input is None or a read-only ndarray whose data nobody
 * can change (it owns it, or views a read-only ndarray): shape arithmetic on constants
 * and on kept results, whose values depend on nothing else.  A miss calls fn, then
 * settle(out) -> (out, keep) (the result made read-only, and whether it may be kept);
 * up to `entries` results are kept with their inputs (alive, so their identities stay
 * theirs), then forgotten all at once.  Any other call is fn(*args).  The Python
 * wrapper's checks were 1-1.5 us of each such node, twenty a run in a one-step LSTM.
 *
 * A call with the very objects of a kept entry returns its result at once: they were
 * frozen when kept, and a frozen array stays so (its flag and its owner's are never set
 * writable again by onnxviz; a caller who feeds an IR 3 model's initializer read-only,
 * then flips it writable and changes it, is not covered).  The frozen test (the buffer
 * protocol, `base`) was 80-100 ns an input, 170 such calls in a GPT-2 decode step.
 *
 * `memo_shape(fn, settle, entries)`: the same for a Shape or Size node, keyed by its one
 * input's shape (shape_memo.py's `_by_shape`): any ndarray's. */
enum { MEMO_INPUTS = 8, MEMO_ENTRIES = 16 };

typedef struct {
    Py_ssize_t n;
    PyObject *ins[MEMO_INPUTS];
    PyObject *out;
} MemoEntry;

typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    PyObject *fn, *settle;
    int limit, used;
    int by_shape; /* memo_shape: entries keyed by the input's shape (ins[0], a tuple) */
    MemoEntry entries[MEMO_ENTRIES];
} Memo;

static PyObject *str_shape = NULL;

static PyObject *str_base = NULL;

/* Whether x is read-only with no writable owner: 1, 0, or -1 on error. */
static int memo_frozen(PyObject *x) {
    if ((PyObject *)Py_TYPE(x) != ndarray_type) return 0;
    Py_buffer v;
    if (PyObject_GetBuffer(x, &v, PyBUF_RECORDS_RO) < 0) {
        PyErr_Clear();
        return 0;
    }
    const int readonly = v.readonly;
    PyBuffer_Release(&v);
    if (!readonly) return 0;
    PyObject *base = PyObject_GetAttr(x, str_base);
    if (base == NULL) return -1;
    int frozen = 1;
    if (base != Py_None) {
        frozen = 0;
        if ((PyObject *)Py_TYPE(base) == ndarray_type &&
            PyObject_GetBuffer(base, &v, PyBUF_RECORDS_RO) == 0) {
            frozen = v.readonly;
            PyBuffer_Release(&v);
        } else {
            PyErr_Clear();
        }
    }
    Py_DECREF(base);
    return frozen;
}

static void memo_forget(Memo *m) {
    for (int e = 0; e < m->used; e++) {
        MemoEntry *en = &m->entries[e];
        for (Py_ssize_t k = 0; k < en->n; k++) Py_CLEAR(en->ins[k]);
        Py_CLEAR(en->out);
        en->n = 0;
    }
    m->used = 0;
}

static PyObject *memo_vectorcall(PyObject *obj, PyObject *const *args, size_t nargsf,
                                 PyObject *kwnames) {
    Memo *m = (Memo *)obj;
    const Py_ssize_t n = PyVectorcall_NARGS(nargsf);
    if (kwnames || n > MEMO_INPUTS || ndarray_type == NULL)
        return PyObject_Vectorcall(m->fn, args, nargsf, kwnames);
    PyObject *shape = NULL; /* memo_shape's key */
    if (m->by_shape) {
        if (n != 1 || (PyObject *)Py_TYPE(args[0]) != ndarray_type)
            return PyObject_Vectorcall(m->fn, args, nargsf, kwnames);
        shape = PyObject_GetAttr(args[0], str_shape);
        if (shape == NULL) return NULL;
        for (int e = 0; e < m->used; e++) {
            const int same = PyObject_RichCompareBool(m->entries[e].ins[0], shape, Py_EQ);
            if (same < 0) {
                Py_DECREF(shape);
                return NULL;
            }
            if (same) {
                Py_DECREF(shape);
                return Py_NewRef(m->entries[e].out);
            }
        }
    } else {
        for (int e = 0; e < m->used; e++) {
            MemoEntry *en = &m->entries[e];
            if (en->n != n) continue;
            Py_ssize_t k = 0;
            while (k < n && en->ins[k] == args[k]) k++;
            if (k == n) return Py_NewRef(en->out);
        }
        for (Py_ssize_t k = 0; k < n; k++) {
            if (args[k] == Py_None) continue;
            const int frozen = memo_frozen(args[k]);
            if (frozen < 0) return NULL;
            if (!frozen) return PyObject_Vectorcall(m->fn, args, nargsf, kwnames);
        }
    }
    PyObject *out = PyObject_Vectorcall(m->fn, args, nargsf, kwnames);
    if (out == NULL) {
        Py_XDECREF(shape);
        return NULL;
    }
    if (shape != NULL && (PyObject *)Py_TYPE(out) != ndarray_type) {
        Py_DECREF(shape); /* (a Shape kernel's result is an ndarray; anything else: as is) */
        return out;
    }
    PyObject *settled = PyObject_CallOneArg(m->settle, out);
    Py_DECREF(out);
    if (settled == NULL) {
        Py_XDECREF(shape);
        return NULL;
    }
    if (!PyTuple_Check(settled) || PyTuple_GET_SIZE(settled) != 2) {
        Py_DECREF(settled);
        Py_XDECREF(shape);
        PyErr_SetString(PyExc_TypeError, "memo: settle must return (out, keep)");
        return NULL;
    }
    out = Py_NewRef(PyTuple_GET_ITEM(settled, 0));
    const int keep = PyObject_IsTrue(PyTuple_GET_ITEM(settled, 1));
    Py_DECREF(settled);
    if (keep < 0) {
        Py_DECREF(out);
        Py_XDECREF(shape);
        return NULL;
    }
    if (keep) {
        if (m->used >= m->limit) memo_forget(m);
        MemoEntry *en = &m->entries[m->used++];
        if (shape != NULL) {
            en->n = 1;
            en->ins[0] = shape; /* (its reference) */
            shape = NULL;
        } else {
            en->n = n;
            for (Py_ssize_t k = 0; k < n; k++) en->ins[k] = Py_NewRef(args[k]);
        }
        en->out = Py_NewRef(out);
    }
    Py_XDECREF(shape);
    return out;
}

static int memo_traverse(PyObject *obj, visitproc visit, void *arg) {
    Memo *m = (Memo *)obj;
    Py_VISIT(m->fn);
    Py_VISIT(m->settle);
    for (int e = 0; e < m->used; e++) {
        for (Py_ssize_t k = 0; k < m->entries[e].n; k++) Py_VISIT(m->entries[e].ins[k]);
        Py_VISIT(m->entries[e].out);
    }
    return 0;
}

static int memo_clear(PyObject *obj) {
    Memo *m = (Memo *)obj;
    memo_forget(m);
    Py_CLEAR(m->fn);
    Py_CLEAR(m->settle);
    return 0;
}

static void memo_dealloc(PyObject *obj) {
    PyObject_GC_UnTrack(obj);
    memo_clear(obj);
    PyObject_GC_Del(obj);
}

static PyObject *memo_kept(PyObject *obj, PyObject *unused) {
    (void)unused;
    return PyLong_FromLong(((Memo *)obj)->used);
}

static PyMethodDef memo_methods[] = {
    {"kept", memo_kept, METH_NOARGS, "How many results it keeps now."},
    {NULL, NULL, 0, NULL},
};

static PyMemberDef memo_members[] = {
    {"fallback", T_OBJECT, offsetof(Memo, fn), READONLY, "The call whose results it keeps."},
    {"by_shape", T_INT, offsetof(Memo, by_shape), READONLY,
     "1 when its results are kept by the input's shape (memo_shape), 0 by the inputs."},
    {NULL, 0, 0, 0, NULL},
};

static PyTypeObject MemoType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "onnxviz.runtime.native._runloop.Memo",
    .tp_basicsize = sizeof(Memo),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_vectorcall_offset = offsetof(Memo, vectorcall),
    .tp_call = PyVectorcall_Call,
    .tp_traverse = memo_traverse,
    .tp_clear = memo_clear,
    .tp_dealloc = memo_dealloc,
    .tp_methods = memo_methods,
    .tp_members = memo_members,
    .tp_doc = "A node's call keeping its results for the same read-only inputs (memo()).",
};

static PyObject *memo_new(PyObject *args, int by_shape) {
    PyObject *fn, *settle;
    int limit;
    if (!PyArg_ParseTuple(args, "OOi", &fn, &settle, &limit)) return NULL;
    if (!PyCallable_Check(fn) || !PyCallable_Check(settle) || limit < 1 ||
        limit > MEMO_ENTRIES) {
        PyErr_Format(PyExc_ValueError, "memo: callables and 1..%d entries", MEMO_ENTRIES);
        return NULL;
    }
    Memo *m = PyObject_GC_New(Memo, &MemoType);
    if (!m) return NULL;
    m->vectorcall = memo_vectorcall;
    m->fn = Py_NewRef(fn);
    m->settle = Py_NewRef(settle);
    m->limit = limit;
    m->used = 0;
    m->by_shape = by_shape;
    PyObject_GC_Track((PyObject *)m);
    return (PyObject *)m;
}

static PyObject *py_memo(PyObject *self, PyObject *args) {
    (void)self;
    return memo_new(args, 0);
}

static PyObject *py_memo_shape(PyObject *self, PyObject *args) {
    (void)self;
    return memo_new(args, 1);
}

/* ---- a Reshape node: tensor_shape.py's specialized call in C ------------------------------
 *
 * `reshape(fallback, allowzero)` makes a callable f(data, target) that, for an ndarray
 * data and a C-contiguous 1-D int64 ndarray target of at most RESHAPE_DIMS values that
 * Reshape takes (0 copies the input's size there unless allowzero, one -1 is inferred,
 * the element counts agree), returns data.reshape(those sizes), the view or copy the
 * kernel's data.reshape gives; anything else, an error included, is fallback(data,
 * target) (the kernel, which names the error).  The sizes are kept for the last frozen
 * target (memo_frozen: an initializer, a kept result of the shape arithmetic that
 * builds an exporter's targets; held, so its identity stays its own) and input shape.
 * Through the Python specialized call a Reshape cost 0.8-0.9 us, 30 of them in a
 * Hugging Face GPT-2 decode step. */
enum { RESHAPE_DIMS = 32 };

typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    PyObject *fallback;
    int allowzero;
    PyObject *target, *in_shape, *out_shape; /* the kept sizes, NULL before any */
} Reshape;

static PyObject *str_reshape = NULL;

/* The output sizes for `in_shape` (a tuple of ints) and the target's n values, as a new
 * tuple; NULL with no error set when Reshape does not take them (the kernel says why),
 * NULL with an error set on a failure. */
static PyObject *reshape_sizes(PyObject *in_shape, const int64_t *t, Py_ssize_t n,
                               int allowzero) {
    const Py_ssize_t rank = PyTuple_GET_SIZE(in_shape);
    int64_t total = 1, known = 1, dims[RESHAPE_DIMS];
    for (Py_ssize_t i = 0; i < rank; i++) {
        const Py_ssize_t d = PyLong_AsSsize_t(PyTuple_GET_ITEM(in_shape, i));
        if (d < 0) return NULL; /* (an error set, or none: not a size) */
        if (d && total > INT64_MAX / d) return NULL;
        total *= d;
    }
    Py_ssize_t unknown = -1;
    for (Py_ssize_t i = 0; i < n; i++) {
        int64_t d = t[i];
        if (d == 0 && !allowzero) {
            if (i >= rank) return NULL;
            d = PyLong_AsSsize_t(PyTuple_GET_ITEM(in_shape, i));
        }
        if (d == -1) {
            if (unknown >= 0) return NULL;
            unknown = i;
        } else if (d < 0) {
            return NULL;
        } else {
            if (d && known > INT64_MAX / d) return NULL;
            known *= d;
        }
        dims[i] = d;
    }
    if (unknown >= 0) {
        if (known == 0 || total % known) return NULL;
        dims[unknown] = total / known;
    } else if (known != total) {
        return NULL;
    }
    PyObject *out = PyTuple_New(n);
    if (out == NULL) return NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *v = PyLong_FromLongLong(dims[i]);
        if (v == NULL) {
            Py_DECREF(out);
            return NULL;
        }
        PyTuple_SET_ITEM(out, i, v);
    }
    return out;
}

static PyObject *reshape_vectorcall(PyObject *obj, PyObject *const *args, size_t nargsf,
                                    PyObject *kwnames) {
    Reshape *r = (Reshape *)obj;
    if (kwnames || PyVectorcall_NARGS(nargsf) != 2 || ndarray_type == NULL ||
        (PyObject *)Py_TYPE(args[0]) != ndarray_type ||
        (PyObject *)Py_TYPE(args[1]) != ndarray_type)
        return PyObject_Vectorcall(r->fallback, args, nargsf, kwnames);
    PyObject *in_shape = PyObject_GetAttr(args[0], str_shape);
    if (in_shape == NULL) return NULL;
    if (!PyTuple_Check(in_shape)) {
        Py_DECREF(in_shape);
        return PyObject_Vectorcall(r->fallback, args, nargsf, kwnames);
    }
    if (args[1] == r->target) { /* the kept target (frozen when kept): its sizes */
        const int same = PyObject_RichCompareBool(in_shape, r->in_shape, Py_EQ);
        if (same < 0) {
            Py_DECREF(in_shape);
            return NULL;
        }
        if (same) {
            Py_DECREF(in_shape);
            return PyObject_CallMethodOneArg(args[0], str_reshape, r->out_shape);
        }
    }
    Py_buffer tv;
    if (PyObject_GetBuffer(args[1], &tv, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) {
        PyErr_Clear();
        Py_DECREF(in_shape);
        return PyObject_Vectorcall(r->fallback, args, nargsf, kwnames);
    }
    const char *f = tv.format ? tv.format : "B";
    PyObject *sizes = NULL;
    if (tv.ndim == 1 && tv.itemsize == 8 && (f[0] == 'q' || f[0] == 'l') && !f[1] &&
        tv.len / 8 <= RESHAPE_DIMS) {
        sizes = reshape_sizes(in_shape, (const int64_t *)tv.buf, tv.len / 8, r->allowzero);
        if (sizes == NULL && PyErr_Occurred()) {
            PyBuffer_Release(&tv);
            Py_DECREF(in_shape);
            return NULL;
        }
    }
    PyBuffer_Release(&tv);
    if (sizes == NULL) {
        Py_DECREF(in_shape);
        return PyObject_Vectorcall(r->fallback, args, nargsf, kwnames);
    }
    PyObject *out = PyObject_CallMethodOneArg(args[0], str_reshape, sizes);
    const int frozen = out != NULL ? memo_frozen(args[1]) : 0;
    if (frozen < 0) {
        Py_DECREF(out);
        out = NULL;
    } else if (frozen) {
        Py_XSETREF(r->target, Py_NewRef(args[1]));
        Py_XSETREF(r->in_shape, Py_NewRef(in_shape));
        Py_XSETREF(r->out_shape, Py_NewRef(sizes));
    }
    Py_DECREF(in_shape);
    Py_DECREF(sizes);
    return out;
}

static int reshape_traverse(PyObject *obj, visitproc visit, void *arg) {
    Reshape *r = (Reshape *)obj;
    Py_VISIT(r->fallback);
    Py_VISIT(r->target);
    return 0;
}

static int reshape_clear(PyObject *obj) {
    Reshape *r = (Reshape *)obj;
    Py_CLEAR(r->fallback);
    Py_CLEAR(r->target);
    Py_CLEAR(r->in_shape);
    Py_CLEAR(r->out_shape);
    return 0;
}

static void reshape_dealloc(PyObject *obj) {
    PyObject_GC_UnTrack(obj);
    reshape_clear(obj);
    PyObject_GC_Del(obj);
}

static PyMemberDef reshape_members[] = {
    {"fallback", T_OBJECT, offsetof(Reshape, fallback), READONLY,
     "What the calls it does not take go to (the kernel)."},
    {"kept", T_OBJECT, offsetof(Reshape, target), READONLY,
     "The target whose output sizes it keeps, or None."},
    {NULL, 0, 0, 0, NULL},
};

static PyTypeObject ReshapeType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "onnxviz.runtime.native._runloop.Reshape",
    .tp_basicsize = sizeof(Reshape),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_vectorcall_offset = offsetof(Reshape, vectorcall),
    .tp_call = PyVectorcall_Call,
    .tp_traverse = reshape_traverse,
    .tp_clear = reshape_clear,
    .tp_dealloc = reshape_dealloc,
    .tp_members = reshape_members,
    .tp_doc = "A Reshape node's call (reshape()).",
};

static PyObject *py_reshape(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *fallback;
    int allowzero;
    if (!PyArg_ParseTuple(args, "Op:reshape", &fallback, &allowzero)) return NULL;
    if (!PyCallable_Check(fallback)) {
        PyErr_SetString(PyExc_TypeError, "reshape: the fallback must be callable");
        return NULL;
    }
    Reshape *r = PyObject_GC_New(Reshape, &ReshapeType);
    if (!r) return NULL;
    r->vectorcall = reshape_vectorcall;
    r->fallback = Py_NewRef(fallback);
    r->allowzero = allowzero;
    r->target = r->in_shape = r->out_shape = NULL;
    PyObject_GC_Track((PyObject *)r);
    return (PyObject *)r;
}

/* ---- a binary arithmetic node: prepared.py's fast Add, Sub, Mul, Div in C ----------------
 *
 * `binary(op, dtypes, fallback)` makes a callable f(a, b) that, when a and b are both
 * exactly ndarrays of one dtype object found in the tuple `dtypes`, returns numpy's
 * operator on them (a + b, a - b, a * b, a / b: op 0-3, through the number protocol,
 * the same ufunc call the Python shortcut makes), and otherwise fallback(a, b) (the
 * kernel).  The Python shortcut's frame and checks were half of a small Add's time in
 * the node loop (the 5,000-node add chain: 0.67 us a node, onnxruntime 0.37).
 *
 * Small results (at most DIRECT_MAX elements) skip numpy's call as well, once
 * `arrays(probes, dtypes)` has vouched for numpy's array layout (array_fields.h): the
 * ufunc's dispatch, type resolution, error-state read and allocation were 0.2-0.25 us
 * of each such node, where the arithmetic is a few ns.  The call keeps its last small
 * result (`last`); when that array is one nobody else holds (its reference count is
 * the call's own one: no slot, caller, view or buffer has it), has the shape numpy
 * would give and is C-contiguous, aligned, writable and its own memory, the call writes
 * the new result into it and returns it again.  That takes equal shapes, an operand of
 * one element and no more dimensions than the other, or an operand whose axes after
 * its leading 1s are the other's last ones (a bias row repeated over the other's rows);
 * both C-contiguous and aligned, of float32, float64, int32 or int64 (the `arrays`
 * dtypes, or dtype objects the call has met equal to one).  Up to 4096 elements the loop here beats numpy's call even at
 * the plain C level (numpy's own dispatch and allocation are about 0.5 us).
 * The arithmetic is numpy's: one IEEE operation per element for floats, two's
 * complement wrapping for integers (computed unsigned).  Only the payload of a NaN made
 * from two NaN operands may differ: x86 gives one operand's, and which one numpy's own
 * loops give already varies with the length and which operand is broadcast.  Every other call is numpy's,
 * and its result, when it qualifies, becomes `last` (a 0-d result, which numpy gives as
 * a scalar, is made a 0-d array first, as the run loop would make it). */
enum { BINARY_KNOWN = 8, DIRECT_MAX = 4096 };
enum { D_F32, D_F64, D_I32, D_I64, D_TYPES };
static int direct_on = 0;                      /* a probe passed */
static PyObject *direct_dtypes[D_TYPES] = {0}; /* held: float32 float64 int32 int64 */

typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    int op;
    PyObject *dtypes, *fallback;
    /* dtype objects met that equal one of `dtypes` without being it (numpy makes new
     * ones: an unpickled array's, a ufunc result of such operands), held so that their
     * addresses stay theirs: a pointer comparison from then on */
    int n_known;
    PyObject *known[BINARY_KNOWN];
    int known_as[BINARY_KNOWN]; /* the direct type (D_*) each equals, or -1 */
    int known_kind[BINARY_KNOWN]; /* the index in `dtypes` each equals */
    PyObject *last; /* the last small result (above), or NULL */
} Binary;

/* The direct type of dtype object d, or -1; `op` 3 (/) takes floats only. */
static int direct_type(PyObject *d, int op) {
    for (int t = 0; t < (op == 3 ? D_I32 : D_TYPES); t++)
        if (direct_dtypes[t] == d) return t;
    return -1;
}

/* The direct type of dtype object d for this call: numpy's own object's, or that of
 * the one a known equal object equals (an unpickled array's dtype), or -1. */
static int direct_type_of(const Binary *bin, PyObject *d) {
    const int t = direct_type(d, bin->op);
    if (t >= 0) return t;
    for (int k = 0; k < bin->n_known; k++)
        if (bin->known[k] == d) return bin->known_as[k];
    return -1;
}

/* Element i of row r of the result: x from a, y from b, each either the full operand's
 * element (r * inner + i) or the repeated one's (i: a trailing-axes operand), or its one
 * element (ONE). */
#define DIRECT_ROWS(T, EXPR, XA, YB)                                                       \
    do {                                                                                   \
        for (Py_ssize_t r = 0; r < rows; r++) {                                            \
            const T *ra = (const T *)a->data + r * row_a;                                  \
            const T *rb = (const T *)b->data + r * row_b;                                  \
            T *ro = (T *)o->data + r * inner;                                              \
            for (Py_ssize_t i = 0; i < inner; i++) {                                       \
                const T x = XA, y = YB;                                                    \
                ro[i] = EXPR;                                                              \
            }                                                                              \
        }                                                                                  \
    } while (0)

#define DIRECT_LOOP(T, EXPR)                                                               \
    do {                                                                                   \
        if (one == 'a')                                                                    \
            DIRECT_ROWS(T, EXPR, ra[0], rb[i]);                                            \
        else if (one == 'b')                                                               \
            DIRECT_ROWS(T, EXPR, ra[i], rb[0]);                                            \
        else                                                                               \
            DIRECT_ROWS(T, EXPR, ra[i], rb[i]);                                            \
    } while (0)

#define DIRECT_OPS(T, U)                                                                   \
    switch (op) {                                                                          \
    case 0: DIRECT_LOOP(T, (T)((U)x + (U)y)); break;                                       \
    case 1: DIRECT_LOOP(T, (T)((U)x - (U)y)); break;                                       \
    case 2: DIRECT_LOOP(T, (T)((U)x * (U)y)); break;                                       \
    default: DIRECT_LOOP(T, x / y);                                                        \
    }

/* Whether `small` broadcasts to `full`'s shape by repeating along leading axes only:
 * after its leading 1s, its axes are full's last ones (no more axes than full's).  Its
 * element count is then the length of the rows it repeats over. */
static int trailing_of(const ArrayFields *small, const ArrayFields *full) {
    if (small->nd > full->nd) return 0;
    int k = 0;
    while (k < small->nd && small->dimensions[k] == 1) k++;
    const int tail = small->nd - k;
    for (int d = 0; d < tail; d++)
        if (small->dimensions[k + d] != full->dimensions[full->nd - tail + d]) return 0;
    return 1;
}

/* a op b into the held result `last` when the section above allows it: a new reference
 * to it, or NULL (no error set) when the call is numpy's. */
static PyObject *binary_direct(Binary *bin, PyObject *xa, PyObject *xb) {
    const ArrayFields *a = array_fields(xa), *b = array_fields(xb);
    const ArrayFields *o = bin->last ? array_fields(bin->last) : NULL;
    const int need = AF_C_CONTIGUOUS | AF_ALIGNED;
    if (o == NULL || Py_REFCNT(bin->last) != 1 || (a->flags & need) != need ||
        (b->flags & need) != need || (o->flags & AF_FLAGS_SEEN) != AF_FLAGS_SEEN)
        return NULL;
    /* one direct type for both operands and the kept result (dtype objects that are
     * numpy's own or equal to them) */
    const int t = direct_type_of(bin, a->descr);
    if (t < 0 || (b->descr != a->descr && direct_type_of(bin, b->descr) != t) ||
        (o->descr != a->descr && direct_type_of(bin, o->descr) != t))
        return NULL;
    const Py_ssize_t na = array_fields_size(a), nb = array_fields_size(b);
    const ArrayFields *shape; /* the operand whose shape the result has */
    Py_ssize_t rows = 1, inner, row_a = 0, row_b = 0;
    int one = 0; /* 'a' or 'b': that operand is one element */
    if (array_fields_same_shape(a, b)) {
        shape = a, inner = na;
    } else if (nb == 1 && b->nd <= a->nd) {
        shape = a, inner = na, one = 'b';
    } else if (na == 1 && a->nd <= b->nd) {
        shape = b, inner = nb, one = 'a';
    } else if (nb > 0 && trailing_of(b, a)) { /* b repeats over rows of a */
        shape = a, inner = nb, rows = na / nb, row_a = nb;
    } else if (na > 0 && trailing_of(a, b)) {
        shape = b, inner = na, rows = nb / na, row_b = na;
    } else {
        return NULL;
    }
    if (!array_fields_same_shape(o, shape)) return NULL;
    const int op = bin->op;
    switch (t) {
    case D_F32: DIRECT_OPS(float, float); break;
    case D_F64: DIRECT_OPS(double, double); break;
    case D_I32: DIRECT_OPS(int32_t, uint32_t); break;
    default: DIRECT_OPS(int64_t, uint64_t);
    }
    return Py_NewRef(bin->last);
}

/* numpy's result r of a direct-type call, kept as `last` when small: r, or its 0-d array
 * (a new reference either way), or NULL with the error set. */
static PyObject *binary_keep(Binary *bin, PyObject *r) {
    if (r == NULL || !direct_on) return r;
    if ((PyObject *)Py_TYPE(r) != ndarray_type) {
        PyObject *one = PyObject_CallOneArg(normalize_one, r);
        Py_DECREF(r);
        if (one == NULL || (PyObject *)Py_TYPE(one) != ndarray_type) return one;
        r = one;
    }
    const ArrayFields *f = array_fields(r);
    if (array_fields_size(f) <= DIRECT_MAX && direct_type_of(bin, f->descr) >= 0 &&
        (f->flags & AF_FLAGS_SEEN) == AF_FLAGS_SEEN)
        Py_XSETREF(bin->last, Py_NewRef(r));
    return r;
}

static PyObject *str_dtype = NULL;

/* Which of the op's dtypes dtype object d is (its index in `dtypes`): by identity, then
 * by a known object equal to one (numpy makes new ones: an unpickled array's, a result
 * of such operands), then by equality, once, keeping d as known; -1 for none, -2 on an
 * error.  Two operands of equal dtypes take numpy's operator even when one dtype object
 * is numpy's own and the other an equal copy (an unpickled feed's, against a
 * constant's): a Loop's carried state fed so had every iteration through the kernel. */
static int binary_kind(Binary *b, PyObject *d) {
    const Py_ssize_t n = PyTuple_GET_SIZE(b->dtypes);
    for (Py_ssize_t k = 0; k < n; k++)
        if (PyTuple_GET_ITEM(b->dtypes, k) == d) return (int)k;
    for (int k = 0; k < b->n_known; k++)
        if (b->known[k] == d) return b->known_kind[k];
    for (Py_ssize_t k = 0; k < n; k++) {
        PyObject *t = PyTuple_GET_ITEM(b->dtypes, k);
        const int eq = PyObject_RichCompareBool(d, t, Py_EQ);
        if (eq < 0) return -2;
        if (!eq) continue;
        if (b->n_known < BINARY_KNOWN) {
            b->known[b->n_known] = Py_NewRef(d);
            b->known_kind[b->n_known] = (int)k;
            b->known_as[b->n_known] = direct_type(t, b->op);
            b->n_known++;
        }
        return (int)k;
    }
    return -1;
}

static PyObject *binary_vectorcall(PyObject *obj, PyObject *const *args, size_t nargsf,
                                   PyObject *kwnames) {
    Binary *b = (Binary *)obj;
    if (kwnames || PyVectorcall_NARGS(nargsf) != 2 || ndarray_type == NULL ||
        (PyObject *)Py_TYPE(args[0]) != ndarray_type ||
        (PyObject *)Py_TYPE(args[1]) != ndarray_type)
        return PyObject_Vectorcall(b->fallback, args, nargsf, kwnames);
    if (direct_on && b->last != NULL) { /* (arithmetic only: a comparison keeps none) */
        PyObject *r = binary_direct(b, args[0], args[1]);
        if (r != NULL) return r;
    }
    PyObject *da = PyObject_GetAttr(args[0], str_dtype);
    if (da == NULL) return NULL;
    PyObject *db = PyObject_GetAttr(args[1], str_dtype);
    if (db == NULL) {
        Py_DECREF(da);
        return NULL;
    }
    /* (a and b keep da and db alive; the pointers compared are held objects') */
    Py_DECREF(da);
    Py_DECREF(db);
    const int ka = binary_kind(b, da);
    if (ka == -2) return NULL;
    const int kb = db == da ? ka : binary_kind(b, db);
    if (kb == -2) return NULL;
    const int ok = ka >= 0 && ka == kb;
    if (!ok) return PyObject_Vectorcall(b->fallback, args, nargsf, kwnames);
    PyObject *r;
    switch (b->op) {
    case 0: r = PyNumber_Add(args[0], args[1]); break;
    case 1: r = PyNumber_Subtract(args[0], args[1]); break;
    case 2: r = PyNumber_Multiply(args[0], args[1]); break;
    case 3: r = PyNumber_TrueDivide(args[0], args[1]); break;
    /* Less, LessOrEqual, Equal, Greater, GreaterOrEqual: numpy's comparison ufunc, a
     * bool array (a 0-d one's numpy scalar is made an array by the loop's step) */
    case 4: return PyObject_RichCompare(args[0], args[1], Py_LT);
    case 5: return PyObject_RichCompare(args[0], args[1], Py_LE);
    case 6: return PyObject_RichCompare(args[0], args[1], Py_EQ);
    case 7: return PyObject_RichCompare(args[0], args[1], Py_GT);
    default: return PyObject_RichCompare(args[0], args[1], Py_GE);
    }
    return binary_keep(b, r);
}

static int binary_traverse(PyObject *obj, visitproc visit, void *arg) {
    Binary *b = (Binary *)obj;
    Py_VISIT(b->dtypes);
    Py_VISIT(b->fallback);
    for (int k = 0; k < b->n_known; k++) Py_VISIT(b->known[k]);
    Py_VISIT(b->last);
    return 0;
}

static int binary_clear(PyObject *obj) {
    Binary *b = (Binary *)obj;
    Py_CLEAR(b->dtypes);
    Py_CLEAR(b->fallback);
    for (int k = 0; k < b->n_known; k++) Py_CLEAR(b->known[k]);
    b->n_known = 0;
    Py_CLEAR(b->last);
    return 0;
}

static void binary_dealloc(PyObject *obj) {
    PyObject_GC_UnTrack(obj);
    binary_clear(obj);
    PyObject_GC_Del(obj);
}

static PyMemberDef binary_members[] = {
    {"fallback", T_OBJECT, offsetof(Binary, fallback), READONLY,
     "What the calls it does not take go to (the kernel)."},
    {NULL, 0, 0, 0, NULL},
};

static PyTypeObject BinaryType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "onnxviz.runtime.native._runloop.Binary",
    .tp_basicsize = sizeof(Binary),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_vectorcall_offset = offsetof(Binary, vectorcall),
    .tp_call = PyVectorcall_Call,
    .tp_traverse = binary_traverse,
    .tp_clear = binary_clear,
    .tp_dealloc = binary_dealloc,
    .tp_members = binary_members,
    .tp_doc = "An arithmetic node's call: numpy's operator on two ndarrays of one of its "
              "dtypes, else the fallback (binary()).",
};

static PyObject *py_binary(PyObject *self, PyObject *args) {
    (void)self;
    int op;
    PyObject *dtypes, *fallback;
    if (!PyArg_ParseTuple(args, "iO!O:binary", &op, &PyTuple_Type, &dtypes, &fallback))
        return NULL;
    if (op < 0 || op > 8 || !PyCallable_Check(fallback)) {
        PyErr_SetString(PyExc_ValueError,
                        "binary: op 0-8 (+ - * / < <= == > >=) and a callable fallback");
        return NULL;
    }
    Binary *b = PyObject_GC_New(Binary, &BinaryType);
    if (!b) return NULL;
    b->vectorcall = binary_vectorcall;
    b->op = op;
    b->dtypes = Py_NewRef(dtypes);
    b->fallback = Py_NewRef(fallback);
    b->n_known = 0;
    b->last = NULL;
    PyObject_GC_Track((PyObject *)b);
    return (PyObject *)b;
}

/* ---- a small Split's parts as contiguous copies -----------------------------------------
 *
 * `split_copy(data, axis, sizes, empty)` -> list: the parts of the C-contiguous ndarray
 * `data` along `axis` of the lengths in the tuple `sizes` (summing to that dimension),
 * each a new C-contiguous array of data's dtype made by `empty(shape, dtype)` (numpy's),
 * the bytes copied row by row.  tensor_shape's Split calls it for the small parts a later
 * axis makes (an LSTM cell's gates): numpy's slicing and strided copies took 2.6-3.2 us
 * for three or four parts of a [4, 512] value.  A data it cannot read is a ValueError. */
static PyObject *py_split_copy(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *data, *sizes, *empty;
    int axis;
    if (!PyArg_ParseTuple(args, "OiO!O:split_copy", &data, &axis, &PyTuple_Type, &sizes, &empty))
        return NULL;
    Py_buffer v;
    if (PyObject_GetBuffer(data, &v, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) {
        PyErr_Clear();
        PyErr_SetString(PyExc_ValueError, "split_copy: data must be a C-contiguous array");
        return NULL;
    }
    PyObject *parts = NULL, *dtype = NULL, *shape = NULL;
    const Py_ssize_t k = PyTuple_GET_SIZE(sizes);
    Py_ssize_t total = 0, lead = 1, inner = v.itemsize;
    if (axis < 0 || axis >= v.ndim) {
        PyErr_SetString(PyExc_ValueError, "split_copy: axis out of range");
        goto done;
    }
    for (Py_ssize_t i = 0; i < k; i++) {
        Py_ssize_t n = PyLong_AsSsize_t(PyTuple_GET_ITEM(sizes, i));
        if (n < 0) {
            if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "split_copy: a negative size");
            goto done;
        }
        total += n;
    }
    if (total != v.shape[axis]) {
        PyErr_SetString(PyExc_ValueError, "split_copy: the sizes do not add up to the axis");
        goto done;
    }
    for (int d = 0; d < axis; d++) lead *= v.shape[d];
    for (int d = axis + 1; d < v.ndim; d++) inner *= v.shape[d];
    dtype = PyObject_GetAttr(data, str_dtype);
    parts = PyList_New(k);
    shape = PyTuple_New(v.ndim);
    if (dtype == NULL || parts == NULL || shape == NULL) goto failed;
    for (int d = 0; d < v.ndim; d++) {
        if (d == axis) continue;
        PyObject *dim = PyLong_FromSsize_t(v.shape[d]);
        if (dim == NULL) goto failed;
        PyTuple_SET_ITEM(shape, d, dim);
    }
    /* Parts of one length: one (k, ...) array, its items the parts (one call of empty;
     * each call was a fifth of a microsecond) */
    int equal = k > 1;
    for (Py_ssize_t i = 1; equal && i < k; i++)
        equal = PyLong_AsSsize_t(PyTuple_GET_ITEM(sizes, i)) ==
                PyLong_AsSsize_t(PyTuple_GET_ITEM(sizes, 0));
    PyObject *stack = NULL;
    if (equal) {
        PyObject *stacked = PyTuple_New(v.ndim + 1), *dim0 = PyLong_FromSsize_t(k);
        if (stacked == NULL || dim0 == NULL) {
            Py_XDECREF(stacked);
            Py_XDECREF(dim0);
            goto failed;
        }
        PyTuple_SET_ITEM(stacked, 0, dim0);
        for (int d = 0; d < v.ndim; d++) {
            PyObject *dim = d == axis ? Py_NewRef(PyTuple_GET_ITEM(sizes, 0))
                                      : Py_NewRef(PyTuple_GET_ITEM(shape, d));
            PyTuple_SET_ITEM(stacked, d + 1, dim);
        }
        PyObject *call_args[2] = {stacked, dtype};
        stack = PyObject_Vectorcall(empty, call_args, 2, NULL);
        Py_DECREF(stacked);
        if (stack == NULL) goto failed;
    }
    Py_ssize_t start = 0;
    for (Py_ssize_t i = 0; i < k; i++) {
        const Py_ssize_t n = PyLong_AsSsize_t(PyTuple_GET_ITEM(sizes, i));
        PyObject *part;
        if (stack != NULL) {
            part = PySequence_GetItem(stack, i);
        } else {
            PyObject *dim = PyLong_FromSsize_t(n);
            if (dim == NULL) goto failed;
            Py_XSETREF(((PyTupleObject *)shape)->ob_item[axis], dim);
            PyObject *call_args[2] = {shape, dtype};
            part = PyObject_Vectorcall(empty, call_args, 2, NULL);
        }
        if (part == NULL) {
            Py_XDECREF(stack);
            goto failed;
        }
        PyList_SET_ITEM(parts, i, part);
        Py_buffer pv;
        if (PyObject_GetBuffer(part, &pv, PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE) < 0) {
            Py_XDECREF(stack);
            goto failed;
        }
        const Py_ssize_t row = n * inner, stride = v.shape[axis] * inner;
        if (pv.len != lead * row) {
            PyBuffer_Release(&pv);
            Py_XDECREF(stack);
            PyErr_SetString(PyExc_ValueError, "split_copy: empty gave another size");
            goto failed;
        }
        const char *src = (const char *)v.buf + start * inner;
        char *dst = pv.buf;
        for (Py_ssize_t r = 0; r < lead && row; r++) memcpy(dst + r * row, src + r * stride, row);
        PyBuffer_Release(&pv);
        start += n;
    }
    Py_XDECREF(stack);
    goto done;
failed:
    Py_CLEAR(parts);
done:
    Py_XDECREF(shape);
    Py_XDECREF(dtype);
    PyBuffer_Release(&v);
    return parts;
}

static PyObject *setup(PyObject *self, PyObject *args) {
    PyObject *type, *normalize;
    if (!PyArg_ParseTuple(args, "O!O", &PyType_Type, &type, &normalize))
        return NULL;
    if (!PyCallable_Check(normalize)) {
        PyErr_SetString(PyExc_TypeError, "normalize_one must be callable");
        return NULL;
    }
    Py_INCREF(type);
    Py_XSETREF(ndarray_type, type);
    Py_INCREF(normalize);
    Py_XSETREF(normalize_one, normalize);
    Py_RETURN_NONE;
}

/* arrays(probes, dtypes): turns the small arrays' direct arithmetic on when every probe
 * agrees with array_fields.h's layout (after setup), with `dtypes` the four dtype objects
 * float32, float64, int32 and int64; returns whether it is on. */
static PyObject *py_arrays(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *probes, *dtypes;
    if (!PyArg_ParseTuple(args, "OO!:arrays", &probes, &PyTuple_Type, &dtypes)) return NULL;
    if (ndarray_type == NULL || PyTuple_GET_SIZE(dtypes) != D_TYPES) {
        PyErr_SetString(PyExc_ValueError, "arrays: call setup first; four dtypes");
        return NULL;
    }
    const int ok = array_fields_probe(probes, ndarray_type);
    if (ok < 0) return NULL;
    for (int t = 0; t < D_TYPES; t++)
        Py_XSETREF(direct_dtypes[t], Py_NewRef(PyTuple_GET_ITEM(dtypes, t)));
    direct_on = ok;
    return PyBool_FromLong(ok);
}

static PyObject *set_level(PyObject *self, PyObject *arg) { Py_RETURN_NONE; }

static PyMethodDef methods[] = {
    {"compile", compile_program, METH_VARARGS, "compile(steps, n_slots) -> program"},
    {"run", run, METH_VARARGS,
     "run(program, start, values, executor, times, where, inplace_min, fold) -> index"},
    {"iteration", iteration, METH_VARARGS,
     "iteration(program, frame, base, in_slots, feeds, out_slots, executor, times, where, "
     "inplace_min, fold) -> outputs or index (see the source)"},
    {"loop", loop, METH_VARARGS,
     "loop(program, frame, base, in_slots, out_slots, executor, times, where, inplace_min, "
     "fold, state, max_trip, use_cond, scans, counter, flag, truth) -> -1 or the stopped "
     "step (see the source)"},
    {"setup", setup, METH_VARARGS, "setup(ndarray_type, normalize_one)"},
    {"memo", py_memo, METH_VARARGS,
     "memo(fn, settle, entries) -> fn keeping its results for the same read-only inputs "
     "(see the source; shape_memo.py)."},
    {"reshape", py_reshape, METH_VARARGS,
     "reshape(fallback, allowzero) -> f(data, target): a Reshape node's call (see the "
     "source)."},
    {"memo_shape", py_memo_shape, METH_VARARGS,
     "memo_shape(fn, settle, entries) -> fn(x) keeping its results by x's shape (a Shape "
     "or Size node; see the source)."},
    {"split_copy", py_split_copy, METH_VARARGS,
     "split_copy(data, axis, sizes, empty) -> the parts of a C-contiguous array along axis, "
     "each a new C-contiguous array (see the source)."},
    {"binary", py_binary, METH_VARARGS,
     "binary(op, dtypes, fallback) -> f(a, b): numpy's + - * / < <= == > >= (op 0-8) on two "
     "ndarrays of one dtype of `dtypes`, else fallback(a, b)."},
    {"arrays", py_arrays, METH_VARARGS,
     "arrays(probes, dtypes) -> whether binary's direct arithmetic of small arrays is on "
     "(see the source)."},
    {"seconds_per_tick", py_seconds_per_tick, METH_NOARGS,
     "seconds_per_tick() -> the seconds of one unit of run's step times"},
    {"set_level", set_level, METH_O, "set_level(n): no level-specific code here"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_runloop", NULL, -1, methods};

PyMODINIT_FUNC PyInit__runloop(void) {
    ticks_init();
    str_cancelled = PyUnicode_InternFromString("cancelled");
    str_values = PyUnicode_InternFromString("values");
    str_size = PyUnicode_InternFromString("size");
    str_quick = PyUnicode_InternFromString("quick");
    str_base = PyUnicode_InternFromString("base");
    str_dtype = PyUnicode_InternFromString("dtype");
    str_shape = PyUnicode_InternFromString("shape");
    str_reshape = PyUnicode_InternFromString("reshape");
    if (str_cancelled == NULL || str_size == NULL || str_quick == NULL || str_base == NULL ||
        str_dtype == NULL || str_shape == NULL || str_reshape == NULL || str_values == NULL)
        return NULL;
    if (PyType_Ready(&MemoType) < 0 || PyType_Ready(&BinaryType) < 0 ||
        PyType_Ready(&ReshapeType) < 0)
        return NULL;
    return PyModule_Create(&module);
}
