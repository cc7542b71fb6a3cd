/*
 * simulator._engine: the event engine (simulator/engine.py) compiled.
 *
 * The same events in the same (time, seq) order as engine.py's Engine, the same API. An event is
 * a 40-byte record (the time as a double and as the object it was given, the sequence number,
 * the callback, the args tuple), so ordering compares doubles in place instead of following
 * pointers to tuples. The queue is a calendar of 1 ms buckets: the open bucket is a binary heap,
 * the next RING buckets are arrays appended to (a ring indexed by bucket), and anything later
 * waits in an overflow heap that is merged in when its bucket opens. Dropping (a set of ids of
 * time objects) and cancelling (a set of handles) are engine.py's, read from the same Python
 * sets. now_ms is the time object of the event running (as engine.py keeps it).
 *
 * Uplinks: Network.transmit (simulator/network.py) on the Network's own lists.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <structmember.h>

#define RING 16384 /* buckets of 1 ms ahead of the open one held in arrays (16 s) */
#define MASK (RING - 1)

typedef struct {
    double t;
    uint64_t seq;
    PyObject *time; /* the time object as given (its id names the event for dropping) */
    PyObject *cb;
    PyObject *args; /* a tuple */
} Ev;

typedef struct {
    Ev *a;
    Py_ssize_t n, cap;
} Vec;

typedef struct {
    PyObject_HEAD
    Vec open;     /* heap: events of buckets up to open_bucket */
    Vec overflow; /* heap: events of buckets at or past open_bucket + RING when scheduled */
    Vec *ring;    /* RING arrays: ring[b & MASK] holds bucket b, open_bucket < b < +RING */
    Py_ssize_t ring_count;
    int64_t open_bucket;
    uint64_t seq;
    long long events;
    double now;
    PyObject *now_obj;
    PyObject *dropped;   /* set of ids */
    PyObject *cancelled; /* set of handles */
} Engine;

static inline int ev_less(const Ev *x, const Ev *y) {
    return x->t < y->t || (x->t == y->t && x->seq < y->seq);
}

static int vec_push(Vec *v, const Ev *e) {
    if (v->n == v->cap) {
        Py_ssize_t cap = v->cap ? v->cap * 2 : 16;
        Ev *a = PyMem_Realloc(v->a, (size_t)cap * sizeof(Ev));
        if (a == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        v->a = a;
        v->cap = cap;
    }
    v->a[v->n++] = *e;
    return 0;
}

static void sift_up(Ev *a, Py_ssize_t i) {
    Ev e = a[i];
    while (i > 0) {
        Py_ssize_t p = (i - 1) >> 1;
        if (!ev_less(&e, &a[p])) break;
        a[i] = a[p];
        i = p;
    }
    a[i] = e;
}

static void sift_down(Ev *a, Py_ssize_t n, Py_ssize_t i) {
    Ev e = a[i];
    for (;;) {
        Py_ssize_t c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && ev_less(&a[c + 1], &a[c])) c++;
        if (!ev_less(&a[c], &e)) break;
        a[i] = a[c];
        i = c;
    }
    a[i] = e;
}

static int heap_push(Vec *v, const Ev *e) {
    if (vec_push(v, e) < 0) return -1;
    sift_up(v->a, v->n - 1);
    return 0;
}

static Ev heap_pop(Vec *v) {
    Ev top = v->a[0];
    v->n--;
    if (v->n > 0) {
        v->a[0] = v->a[v->n];
        sift_down(v->a, v->n, 0);
    }
    return top;
}

static void heapify(Vec *v) {
    for (Py_ssize_t i = v->n / 2 - 1; i >= 0; i--) sift_down(v->a, v->n, i);
}

static inline int64_t bucket_of(double t) { return (int64_t)floor(t); }

static void ev_clear(Ev *e) {
    Py_DECREF(e->time);
    Py_DECREF(e->cb);
    Py_DECREF(e->args);
}

/* Queue an event (references to time, cb and args are taken over). */
static int queue(Engine *s, Ev *e) {
    int64_t b = bucket_of(e->t);
    if (b <= s->open_bucket) return heap_push(&s->open, e);
    if (b - s->open_bucket < RING) {
        if (vec_push(&s->ring[b & MASK], e) < 0) return -1;
        s->ring_count++;
        return 0;
    }
    return heap_push(&s->overflow, e);
}

/* Open the next bucket once the open heap is empty; 0 if no event is left. */
static int advance(Engine *s) {
    int64_t next = INT64_MAX;
    if (s->ring_count > 0) {
        for (int64_t b = s->open_bucket + 1; b < s->open_bucket + RING; b++) {
            if (s->ring[b & MASK].n > 0) {
                next = b;
                break;
            }
        }
    }
    if (s->overflow.n > 0) {
        int64_t ob = bucket_of(s->overflow.a[0].t);
        if (ob < next) next = ob;
    }
    if (next == INT64_MAX) return 0;
    s->open_bucket = next;
    Vec *slot = &s->ring[next & MASK];
    if (slot->n > 0) { /* the slot's array becomes the open heap (which is empty) */
        PyMem_Free(s->open.a); /* not kept: each slot would keep its busiest bucket's size */
        s->ring_count -= slot->n;
        s->open = *slot;
        slot->a = NULL;
        slot->n = slot->cap = 0;
        heapify(&s->open);
    }
    while (s->overflow.n > 0 && bucket_of(s->overflow.a[0].t) == next) {
        Ev e = heap_pop(&s->overflow);
        if (heap_push(&s->open, &e) < 0) return -1;
    }
    return 1;
}

static int engine_traverse(Engine *s, visitproc visit, void *arg) {
    Vec *vs[2] = {&s->open, &s->overflow};
    for (int k = 0; k < 2; k++)
        for (Py_ssize_t i = 0; i < vs[k]->n; i++) {
            Py_VISIT(vs[k]->a[i].cb);
            Py_VISIT(vs[k]->a[i].args);
        }
    if (s->ring != NULL)
        for (Py_ssize_t r = 0; r < RING; r++)
            for (Py_ssize_t i = 0; i < s->ring[r].n; i++) {
                Py_VISIT(s->ring[r].a[i].cb);
                Py_VISIT(s->ring[r].a[i].args);
            }
    Py_VISIT(s->dropped);
    Py_VISIT(s->cancelled);
    return 0;
}

static void vec_clear(Vec *v) {
    Py_ssize_t n = v->n;
    Ev *a = v->a;
    v->n = 0;
    v->a = NULL;
    v->cap = 0;
    for (Py_ssize_t i = 0; i < n; i++) ev_clear(&a[i]);
    PyMem_Free(a);
}

static int engine_clear(Engine *s) {
    vec_clear(&s->open);
    vec_clear(&s->overflow);
    if (s->ring != NULL) {
        for (Py_ssize_t r = 0; r < RING; r++) vec_clear(&s->ring[r]);
    }
    s->ring_count = 0;
    Py_CLEAR(s->dropped);
    Py_CLEAR(s->cancelled);
    return 0;
}

static void engine_dealloc(Engine *s) {
    PyObject_GC_UnTrack(s);
    engine_clear(s);
    PyMem_Free(s->ring);
    s->ring = NULL;
    Py_CLEAR(s->now_obj);
    Py_TYPE(s)->tp_free((PyObject *)s);
}

static int engine_init(Engine *s, PyObject *args, PyObject *kwds) {
    PyObject *start = NULL;
    static char *kwlist[] = {"start_ms", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "|O", kwlist, &start)) return -1;
    if (start == NULL) {
        start = PyFloat_FromDouble(0.0);
        if (start == NULL) return -1;
    } else {
        Py_INCREF(start);
    }
    double t = PyFloat_AsDouble(start);
    if (t == -1.0 && PyErr_Occurred()) {
        Py_DECREF(start);
        return -1;
    }
    engine_clear(s);
    if (s->ring == NULL) {
        s->ring = PyMem_Calloc(RING, sizeof(Vec));
        if (s->ring == NULL) {
            Py_DECREF(start);
            PyErr_NoMemory();
            return -1;
        }
    }
    s->dropped = PySet_New(NULL);
    s->cancelled = PySet_New(NULL);
    if (s->dropped == NULL || s->cancelled == NULL) {
        Py_DECREF(start);
        return -1;
    }
    s->now = t;
    Py_XSETREF(s->now_obj, start);
    s->open_bucket = bucket_of(t) - 1;
    s->seq = 0;
    s->events = 0;
    return 0;
}

static PyObject *tuple_of(PyObject *const *items, Py_ssize_t n) {
    PyObject *t = PyTuple_New(n);
    if (t == NULL) return NULL;
    for (Py_ssize_t i = 0; i < n; i++) PyTuple_SET_ITEM(t, i, Py_NewRef(items[i]));
    return t;
}

/* schedule_at's work: time object, its value, the callback, args as a new tuple reference. */
static PyObject *schedule_parts(Engine *s, PyObject *time, double t, PyObject *cb,
                                PyObject *cbargs) {
    if (!isfinite(t)) { /* engine.py's math.floor raises for these */
        PyErr_Format(isnan(t) ? PyExc_ValueError : PyExc_OverflowError,
                     "cannot schedule at %R ms", time);
        Py_DECREF(cbargs);
        return NULL;
    }
    if (t < s->now) {
        PyErr_Format(PyExc_ValueError, "cannot schedule at %R ms, now is %R ms", time,
                     s->now_obj);
        Py_DECREF(cbargs);
        return NULL;
    }
    Ev e = {t, s->seq, time, cb, cbargs};
    Py_INCREF(time);
    Py_INCREF(cb);
    if (queue(s, &e) < 0) {
        ev_clear(&e);
        return NULL;
    }
    return PyLong_FromUnsignedLongLong(s->seq++);
}

static PyObject *engine_schedule_at(Engine *s, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs < 2) {
        PyErr_SetString(PyExc_TypeError, "schedule_at(time_ms, callback, *args)");
        return NULL;
    }
    double t = PyFloat_AsDouble(args[0]);
    if (t == -1.0 && PyErr_Occurred()) return NULL;
    PyObject *cbargs = tuple_of(args + 2, nargs - 2);
    if (cbargs == NULL) return NULL;
    return schedule_parts(s, args[0], t, args[1], cbargs);
}

static PyObject *engine_schedule(Engine *s, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs < 2) {
        PyErr_SetString(PyExc_TypeError, "schedule(delay_ms, callback, *args)");
        return NULL;
    }
    double d = PyFloat_AsDouble(args[0]);
    if (d == -1.0 && PyErr_Occurred()) return NULL;
    if (d < 0) {
        PyErr_Format(PyExc_ValueError, "cannot schedule into the past (delay %R ms)", args[0]);
        return NULL;
    }
    /* engine.py: self.now_ms + delay_ms, the object Python's + makes */
    PyObject *time = PyNumber_Add(s->now_obj, args[0]);
    if (time == NULL) return NULL;
    double t = PyFloat_AsDouble(time);
    if (t == -1.0 && PyErr_Occurred()) {
        Py_DECREF(time);
        return NULL;
    }
    PyObject *cbargs = tuple_of(args + 2, nargs - 2);
    if (cbargs == NULL) {
        Py_DECREF(time);
        return NULL;
    }
    PyObject *r = schedule_parts(s, time, t, args[1], cbargs);
    Py_DECREF(time);
    return r;
}

static PyObject *engine_schedule_each(Engine *s, PyObject *args) {
    PyObject *cb, *timed;
    if (!PyArg_ParseTuple(args, "OO", &cb, &timed)) return NULL;
    PyObject *seq = PySequence_Fast(timed, "timed_args must be a sequence");
    if (seq == NULL) return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *pair = PySequence_Fast_GET_ITEM(seq, i);
        if (!PyTuple_Check(pair) || PyTuple_GET_SIZE(pair) != 2 ||
            !PyTuple_Check(PyTuple_GET_ITEM(pair, 1))) {
            PyErr_SetString(PyExc_TypeError, "timed_args: (time_ms, args tuple) pairs");
            Py_DECREF(seq);
            return NULL;
        }
        PyObject *time = PyTuple_GET_ITEM(pair, 0), *cbargs = PyTuple_GET_ITEM(pair, 1);
        double t = PyFloat_AsDouble(time);
        if (t == -1.0 && PyErr_Occurred()) {
            Py_DECREF(seq);
            return NULL;
        }
        Py_INCREF(cbargs);
        PyObject *r = schedule_parts(s, time, t, cb, cbargs);
        if (r == NULL) {
            Py_DECREF(seq);
            return NULL;
        }
        Py_DECREF(r);
    }
    Py_DECREF(seq);
    Py_RETURN_NONE;
}

static PyObject *engine_cancel(Engine *s, PyObject *handle) {
    if (PySet_Add(s->cancelled, handle) < 0) return NULL;
    Py_RETURN_NONE;
}

static PyObject *ev_tuple(const Ev *e) {
    PyObject *seq = PyLong_FromUnsignedLongLong(e->seq);
    if (seq == NULL) return NULL;
    return Py_BuildValue("(ONOO)", e->time, seq, e->cb, e->args);
}

/* Every queued event, as engine.py's (time_ms, seq, callback, args) tuples, in no order. */
static PyObject *engine_queued(Engine *s, PyObject *unused) {
    PyObject *out = PyList_New(0);
    if (out == NULL) return NULL;
    Vec *vs[2] = {&s->open, &s->overflow};
    for (int k = 0; k < 2; k++)
        for (Py_ssize_t i = 0; i < vs[k]->n; i++) {
            PyObject *t = ev_tuple(&vs[k]->a[i]);
            if (t == NULL || PyList_Append(out, t) < 0) {
                Py_XDECREF(t);
                Py_DECREF(out);
                return NULL;
            }
            Py_DECREF(t);
        }
    for (Py_ssize_t r = 0; r < RING; r++)
        for (Py_ssize_t i = 0; i < s->ring[r].n; i++) {
            PyObject *t = ev_tuple(&s->ring[r].a[i]);
            if (t == NULL || PyList_Append(out, t) < 0) {
                Py_XDECREF(t);
                Py_DECREF(out);
                return NULL;
            }
            Py_DECREF(t);
        }
    return out;
}

static PyObject *engine_revive(Engine *s, PyObject *wanted) {
    long back = 0;
    if (PySet_GET_SIZE(s->dropped) == 0) return PyLong_FromLong(0);
    PyObject *all = engine_queued(s, NULL);
    if (all == NULL) return NULL;
    /* the queue is not changed while the callables run on a copy of it */
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(all); i++) {
        PyObject *ev = PyList_GET_ITEM(all, i);
        PyObject *key = PyLong_FromVoidPtr(PyTuple_GET_ITEM(ev, 0));
        if (key == NULL) goto fail;
        int in = PySet_Contains(s->dropped, key);
        if (in < 0) {
            Py_DECREF(key);
            goto fail;
        }
        if (in) {
            PyObject *r = PyObject_CallOneArg(wanted, ev);
            if (r == NULL) {
                Py_DECREF(key);
                goto fail;
            }
            int yes = PyObject_IsTrue(r);
            Py_DECREF(r);
            if (yes < 0 || (yes && PySet_Discard(s->dropped, key) < 0)) {
                Py_DECREF(key);
                goto fail;
            }
            back += yes;
        }
        Py_DECREF(key);
    }
    Py_DECREF(all);
    return PyLong_FromLong(back);
fail:
    Py_DECREF(all);
    return NULL;
}

static Py_ssize_t engine_len(Engine *s) { return s->open.n + s->ring_count + s->overflow.n; }

static PyObject *engine_peek_time(Engine *s, PyObject *unused) {
    if (s->open.n == 0) {
        int r = advance(s);
        if (r < 0) return NULL;
        if (r == 0) Py_RETURN_NONE;
    }
    return Py_NewRef(s->open.a[0].time);
}

static PyObject *engine_run(Engine *s, PyObject *args, PyObject *kwds) {
    PyObject *until = Py_None, *progress = Py_None;
    static char *kwlist[] = {"until_ms", "progress", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "|OO", kwlist, &until, &progress)) return NULL;
    double limit = INFINITY;
    if (until != Py_None) {
        limit = PyFloat_AsDouble(until);
        if (limit == -1.0 && PyErr_Occurred()) return NULL;
    }
    long long events = s->events;
    for (;;) {
        if (s->open.n == 0) {
            int r = advance(s);
            if (r < 0) goto fail;
            if (r == 0) break;
        }
        if (s->open.a[0].t > limit) break;
        Ev e = heap_pop(&s->open);
        if (PySet_GET_SIZE(s->dropped) > 0) {
            PyObject *key = PyLong_FromVoidPtr(e.time);
            int in = key == NULL ? -1 : PySet_Discard(s->dropped, key);
            Py_XDECREF(key);
            if (in != 0) {
                ev_clear(&e);
                if (in < 0) goto fail;
                continue;
            }
        }
        if (PySet_GET_SIZE(s->cancelled) > 0) {
            PyObject *key = PyLong_FromUnsignedLongLong(e.seq);
            int in = key == NULL ? -1 : PySet_Discard(s->cancelled, key);
            Py_XDECREF(key);
            if (in != 0) {
                ev_clear(&e);
                if (in < 0) goto fail;
                continue;
            }
        }
        s->now = e.t;
        Py_SETREF(s->now_obj, e.time); /* takes the event's reference */
        PyObject *r = PyObject_Call(e.cb, e.args, NULL);
        Py_DECREF(e.cb);
        Py_DECREF(e.args);
        if (r == NULL) goto fail;
        Py_DECREF(r);
        events++;
        if (progress != Py_None && !(events & 4095)) {
            s->events = events;
            PyObject *pr = PyObject_CallOneArg(progress, s->now_obj);
            if (pr == NULL) goto fail;
            Py_DECREF(pr);
        }
    }
    s->events = events;
    if (until != Py_None && s->now < limit) {
        s->now = limit;
        Py_INCREF(until);
        Py_SETREF(s->now_obj, until);
    }
    Py_RETURN_NONE;
fail:
    s->events = events;
    return NULL;
}

static PyObject *engine_get_now(Engine *s, void *closure) { return Py_NewRef(s->now_obj); }

static int engine_set_now(Engine *s, PyObject *value, void *closure) {
    if (value == NULL) {
        PyErr_SetString(PyExc_AttributeError, "cannot delete now_ms");
        return -1;
    }
    double t = PyFloat_AsDouble(value);
    if (t == -1.0 && PyErr_Occurred()) return -1;
    s->now = t;
    Py_INCREF(value);
    Py_SETREF(s->now_obj, value);
    return 0;
}

static PyGetSetDef engine_getset[] = {
    {"now_ms", (getter)engine_get_now, (setter)engine_set_now, "the virtual clock (ms)", NULL},
    {NULL}};

static PyMemberDef engine_members[] = {
    {"events", T_LONGLONG, offsetof(Engine, events), 0, "events run so far"},
    {"dropped", T_OBJECT, offsetof(Engine, dropped), READONLY,
     "ids of the time objects of queued events to skip"},
    {NULL}};

static PyMethodDef engine_methods[] = {
    {"schedule", (PyCFunction)(void (*)(void))engine_schedule, METH_FASTCALL,
     "schedule(delay_ms, callback, *args) -> handle"},
    {"schedule_at", (PyCFunction)(void (*)(void))engine_schedule_at, METH_FASTCALL,
     "schedule_at(time_ms, callback, *args) -> handle"},
    {"schedule_each", (PyCFunction)engine_schedule_each, METH_VARARGS,
     "schedule_each(callback, [(time_ms, args), ...])"},
    {"cancel", (PyCFunction)engine_cancel, METH_O, "cancel(handle)"},
    {"revive", (PyCFunction)engine_revive, METH_O, "revive(wanted) -> count"},
    {"queued", (PyCFunction)engine_queued, METH_NOARGS, "every queued event, in no order"},
    {"peek_time", (PyCFunction)engine_peek_time, METH_NOARGS, "time of the next event"},
    {"run", (PyCFunction)(void (*)(void))engine_run, METH_VARARGS | METH_KEYWORDS,
     "run(until_ms=None, progress=None)"},
    {NULL}};

static PySequenceMethods engine_as_sequence = {.sq_length = (lenfunc)engine_len};

static PyTypeObject EngineType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "simulator._engine.Engine",
    .tp_basicsize = sizeof(Engine),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "The discrete-event engine of simulator/engine.py, compiled.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)engine_init,
    .tp_dealloc = (destructor)engine_dealloc,
    .tp_traverse = (traverseproc)engine_traverse,
    .tp_clear = (inquiry)engine_clear,
    .tp_methods = engine_methods,
    .tp_members = engine_members,
    .tp_getset = engine_getset,
    .tp_as_sequence = &engine_as_sequence,
};

/* ------------------------------------------------------------------------------ Uplinks */
/* simulator/network.py's Network.transmit, compiled: the same double operations in the same
 * order (built with -ffp-contract=off), on the Network's own lists (latency: node -> {peer:
 * ms}; upload, download: bits per ms; upload_free: when each uplink is free, written in place
 * and shared with the tx flow's kernel), counting messages and bytes here. */

typedef struct {
    PyObject_HEAD
    PyObject *latency;     /* list of dicts */
    PyObject *upload;      /* list of floats */
    PyObject *download;    /* list of floats */
    PyObject *upload_free; /* list of floats */
    double processing;
    long long messages;
    long long bytes_sent;
} Uplinks;

static int uplinks_traverse(Uplinks *u, visitproc visit, void *arg) {
    Py_VISIT(u->latency);
    Py_VISIT(u->upload);
    Py_VISIT(u->download);
    Py_VISIT(u->upload_free);
    return 0;
}

static int uplinks_clear(Uplinks *u) {
    Py_CLEAR(u->latency);
    Py_CLEAR(u->upload);
    Py_CLEAR(u->download);
    Py_CLEAR(u->upload_free);
    return 0;
}

static void uplinks_dealloc(Uplinks *u) {
    PyObject_GC_UnTrack(u);
    uplinks_clear(u);
    Py_TYPE(u)->tp_free((PyObject *)u);
}

static int uplinks_init(Uplinks *u, PyObject *args, PyObject *kwds) {
    PyObject *latency, *upload, *download, *upload_free;
    double processing;
    static char *kwlist[] = {"latency", "upload", "download", "upload_free", "processing_ms",
                             NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O!O!O!O!d", kwlist, &PyList_Type, &latency,
                                     &PyList_Type, &upload, &PyList_Type, &download,
                                     &PyList_Type, &upload_free, &processing))
        return -1;
    Py_ssize_t n = PyList_GET_SIZE(latency);
    if (PyList_GET_SIZE(upload) != n || PyList_GET_SIZE(download) != n ||
        PyList_GET_SIZE(upload_free) != n) {
        PyErr_SetString(PyExc_ValueError, "latency, upload, download, upload_free: one per node");
        return -1;
    }
    Py_XSETREF(u->latency, Py_NewRef(latency));
    Py_XSETREF(u->upload, Py_NewRef(upload));
    Py_XSETREF(u->download, Py_NewRef(download));
    Py_XSETREF(u->upload_free, Py_NewRef(upload_free));
    u->processing = processing;
    u->messages = u->bytes_sent = 0;
    return 0;
}

static int list_double(PyObject *list, Py_ssize_t i, double *out) {
    if (i < 0 || i >= PyList_GET_SIZE(list)) {
        PyErr_SetString(PyExc_IndexError, "node index out of range");
        return -1;
    }
    PyObject *v = PyList_GET_ITEM(list, i);
    *out = PyFloat_Check(v) ? PyFloat_AS_DOUBLE(v) : PyFloat_AsDouble(v);
    return (*out == -1.0 && PyErr_Occurred()) ? -1 : 0;
}

/* transmit(src, dst, size, count, now_ms) -> when they are processed at dst */
static PyObject *uplinks_transmit(Uplinks *u, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 5) {
        PyErr_SetString(PyExc_TypeError, "transmit(src, dst, size, count, now_ms)");
        return NULL;
    }
    Py_ssize_t src = PyLong_AsSsize_t(args[0]);
    if (src == -1 && PyErr_Occurred()) return NULL;
    Py_ssize_t dst = PyLong_AsSsize_t(args[1]);
    if (dst == -1 && PyErr_Occurred()) return NULL;
    long long size = PyLong_AsLongLong(args[2]);
    if (size == -1 && PyErr_Occurred()) return NULL;
    long long count = PyLong_AsLongLong(args[3]);
    if (count == -1 && PyErr_Occurred()) return NULL;
    double now = PyFloat_AsDouble(args[4]);
    if (now == -1.0 && PyErr_Occurred()) return NULL;
    if (size < 0 || size > ((long long)1 << 50)) {
        PyErr_SetString(PyExc_ValueError, "size out of range");
        return NULL;
    }
    if (src < 0 || src >= PyList_GET_SIZE(u->latency)) {
        PyErr_SetString(PyExc_IndexError, "node index out of range");
        return NULL;
    }
    u->messages += count;
    u->bytes_sent += size;
    PyObject *row = PyList_GET_ITEM(u->latency, src);
    if (!PyDict_Check(row)) {
        PyErr_SetString(PyExc_TypeError, "latency[src] must be a dict");
        return NULL;
    }
    PyObject *lat_obj = PyDict_GetItemWithError(row, args[1]);
    if (lat_obj == NULL) {
        if (!PyErr_Occurred()) PyErr_SetObject(PyExc_KeyError, args[1]);
        return NULL;
    }
    double latency = PyFloat_AsDouble(lat_obj);
    if (latency == -1.0 && PyErr_Occurred()) return NULL;
    double up, down;
    if (list_double(u->upload, src, &up) < 0 || list_double(u->download, dst, &down) < 0)
        return NULL;
    double rate = up < down ? up : down;
    if (rate == INFINITY) return PyFloat_FromDouble(now + latency + u->processing);
    double start;
    if (list_double(u->upload_free, src, &start) < 0) return NULL;
    if (start < now) start = now;
    double done = start + (double)(size * 8) / rate;
    PyObject *done_obj = PyFloat_FromDouble(done);
    if (done_obj == NULL) return NULL;
    if (PyList_SetItem(u->upload_free, src, done_obj) < 0) return NULL; /* steals done_obj */
    return PyFloat_FromDouble(done + latency + u->processing);
}

static PyMemberDef uplinks_members[] = {
    {"messages", T_LONGLONG, offsetof(Uplinks, messages), 0, "messages sent through transmit"},
    {"bytes_sent", T_LONGLONG, offsetof(Uplinks, bytes_sent), 0, "their bytes"},
    {NULL}};

static PyMethodDef uplinks_methods[] = {
    {"transmit", (PyCFunction)(void (*)(void))uplinks_transmit, METH_FASTCALL,
     "transmit(src, dst, size, count, now_ms) -> float: Network.transmit"},
    {NULL}};

static PyTypeObject UplinksType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "simulator._engine.Uplinks",
    .tp_basicsize = sizeof(Uplinks),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "Network.transmit of simulator/network.py, compiled.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)uplinks_init,
    .tp_dealloc = (destructor)uplinks_dealloc,
    .tp_traverse = (traverseproc)uplinks_traverse,
    .tp_clear = (inquiry)uplinks_clear,
    .tp_methods = uplinks_methods,
    .tp_members = uplinks_members,
};

static struct PyModuleDef engine_module = {PyModuleDef_HEAD_INIT, "simulator._engine",
                                           "The event engine, compiled.", -1, NULL};

PyMODINIT_FUNC PyInit__engine(void) {
    if (PyType_Ready(&EngineType) < 0 || PyType_Ready(&UplinksType) < 0) return NULL;
    PyObject *m = PyModule_Create(&engine_module);
    if (m == NULL) return NULL;
    Py_INCREF(&EngineType);
    if (PyModule_AddObject(m, "Engine", (PyObject *)&EngineType) < 0) {
        Py_DECREF(&EngineType);
        Py_DECREF(m);
        return NULL;
    }
    Py_INCREF(&UplinksType);
    if (PyModule_AddObject(m, "Uplinks", (PyObject *)&UplinksType) < 0) {
        Py_DECREF(&UplinksType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
