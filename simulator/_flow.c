/*
 * simulator._flow: the tx flow's search (simulator/txflow.py) compiled.
 *
 * The same label-setting search as txflow.py's accept/announce/fetch/advance, step for step:
 * the same entries pushed in the same order with the same (time, kind, seq) keys (seq is unique,
 * so the pop order is the Python heap's), the same delays computed with the same double
 * operations in the same order (built with -ffp-contract=off: no fused multiply-add), the same
 * frame accounting. Per spread the labels are dense per-node arrays (28 bytes a node) instead of
 * dicts, the entries a 4-ary heap of 128-bit keys. Frames answer (announcer, tick) and
 * (announcer, peer, tick) from the latest tick per node and per link (a node's ticks only go
 * forward in the simulation; exact sets take over if they ever go back), and (asker, announcer,
 * tick) from an open-addressing table.
 *
 * Model(neighbours, latency, upload, download, processing_ms, phase_of, upload_free): a
 * LinkModel's links as flat arrays; phase_of(node) is asked once per node, when the search first
 * needs its tick; upload_free is the LinkModel's own list (shared with the simulation's Network),
 * read and written in place at every send over a finite-rate link (LinkModel.send), so Python
 * sees each booking at once.
 * Spread(model, sizes, frames): one tx's search; accept(node, at) and advance(full, how, arg,
 * key, until) as txflow.py's, the gate of advance given by (full, how, arg) (see advance's doc).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <string.h>
#include <structmember.h>

#define TICK_MS 250.0
enum { K_ANNOUNCE = 0, K_INV = 1, K_GETDATA = 2, K_TX = 3 };
#define ITEM_BYTES 36 /* txflow.ITEM_BYTES: one more item of an inv or getdata frame */
enum { G_STOP = 0, G_PASS = 1, G_KEEP = 2 };
enum { HOW_GATE = 0, HOW_REFUSES = 1, HOW_LEARN = 2, HOW_KNOWLEDGE = 3 };
#define NO_SOURCE (-2)

/* ------------------------------------------------------------------------------------ Model */

typedef struct {
    PyObject_HEAD
    Py_ssize_t n;
    Py_ssize_t *start; /* n + 1 offsets into the edge arrays */
    int32_t *peer;     /* edge e of node v (start[v] <= e < start[v + 1]): v's neighbour */
    int32_t *src;      /* ... and v itself (the edge's source) */
    int32_t *canon;    /* NULL, or where v lists a peer twice: the first edge of (v, peer) */
    double *lat_out;   /* latency[v][peer] */
    double *lat_back;  /* latency[peer][v] */
    double *rate_out;  /* min(upload[v], download[peer]) */
    double *rate_back; /* min(upload[peer], download[v]) */
    double *phase;     /* NaN: not asked yet */
    double processing;
    long long inv_size; /* the size inv_out/inv_back are for (-1: none yet) */
    double *inv_out;    /* the inv delay v -> peer over each edge (LinkModel.inv_delays) */
    double *inv_back;   /* ... and peer -> v */
    PyObject *phase_of;
    PyObject *upload_free; /* a list: node -> when its uplink is free (LinkModel.upload_free) */
    PyObject **node_obj; /* one int object per node (the neighbour lists' own where found) */
} Model;

static void model_free_arrays(Model *m) {
    PyMem_Free(m->start);
    PyMem_Free(m->peer);
    PyMem_Free(m->src);
    PyMem_Free(m->canon);
    PyMem_Free(m->lat_out);
    PyMem_Free(m->lat_back);
    PyMem_Free(m->rate_out);
    PyMem_Free(m->rate_back);
    PyMem_Free(m->phase);
    PyMem_Free(m->inv_out);
    PyMem_Free(m->inv_back);
    m->inv_out = m->inv_back = NULL;
    if (m->node_obj != NULL) {
        for (Py_ssize_t i = 0; i < m->n; i++) Py_XDECREF(m->node_obj[i]);
        PyMem_Free(m->node_obj);
    }
    m->start = NULL;
    m->peer = m->src = m->canon = NULL;
    m->lat_out = m->lat_back = m->rate_out = m->rate_back = m->phase = NULL;
    m->node_obj = NULL;
}

/* The model refers to phase_of, which may refer back to it (LinkModel.phase_ms, and the
 * LinkModel keeps its model): the garbage collector must see the cycle. */
static int model_traverse(Model *m, visitproc visit, void *arg) {
    Py_VISIT(m->phase_of);
    Py_VISIT(m->upload_free);
    return 0;
}

static int model_clear(Model *m) {
    Py_CLEAR(m->phase_of);
    Py_CLEAR(m->upload_free);
    return 0;
}

static void model_dealloc(Model *m) {
    PyObject_GC_UnTrack(m);
    model_free_arrays(m);
    Py_XDECREF(m->phase_of);
    Py_XDECREF(m->upload_free);
    Py_TYPE(m)->tp_free((PyObject *)m);
}

/* Python's min(a, b): b if b < a else a. */
static inline double pymin(double a, double b) { return b < a ? b : a; }

static int item_double(PyObject *seq, Py_ssize_t i, double *out) {
    PyObject *item = PySequence_GetItem(seq, i);
    if (item == NULL) return -1;
    double v = PyFloat_AsDouble(item);
    Py_DECREF(item);
    if (v == -1.0 && PyErr_Occurred()) return -1;
    *out = v;
    return 0;
}

/* latency[src][dst] as a double. */
static int latency_of(PyObject *latency, Py_ssize_t src, PyObject *dst, double *out) {
    PyObject *row = PySequence_GetItem(latency, src);
    if (row == NULL) return -1;
    PyObject *v = PyObject_GetItem(row, dst);
    Py_DECREF(row);
    if (v == NULL) return -1;
    double d = PyFloat_AsDouble(v);
    Py_DECREF(v);
    if (d == -1.0 && PyErr_Occurred()) return -1;
    *out = d;
    return 0;
}

/* m->canon, if some node lists a peer twice: Frames remember a frame per (announcer, peer). */
static int model_canon(Model *m) {
    Py_ssize_t n = m->n, edges = m->start[n];
    int32_t *first = PyMem_Malloc(((size_t)n + 1) * sizeof(int32_t));
    int32_t *owner = PyMem_Malloc(((size_t)n + 1) * sizeof(int32_t));
    if (first == NULL || owner == NULL) {
        PyMem_Free(first);
        PyMem_Free(owner);
        PyErr_NoMemory();
        return -1;
    }
    int dup = 0;
    for (int pass = 0; pass < 2; pass++) {
        for (Py_ssize_t w = 0; w < n; w++) owner[w] = -1;
        for (Py_ssize_t v = 0; v < n; v++) {
            for (Py_ssize_t e = m->start[v]; e < m->start[v + 1]; e++) {
                int32_t w = m->peer[e];
                if (owner[w] != (int32_t)v) { /* v's first edge to w */
                    owner[w] = (int32_t)v;
                    first[w] = (int32_t)e;
                } else {
                    dup = 1;
                }
                if (pass == 1) m->canon[e] = first[w];
            }
        }
        if (!dup) break;
        if (pass == 0) {
            m->canon = PyMem_Malloc(((size_t)edges + 1) * sizeof(int32_t));
            if (m->canon == NULL) {
                PyMem_Free(first);
                PyMem_Free(owner);
                PyErr_NoMemory();
                return -1;
            }
        }
    }
    PyMem_Free(first);
    PyMem_Free(owner);
    return 0;
}

static int model_init(Model *m, PyObject *args, PyObject *kwds) {
    PyObject *neighbours, *latency, *upload, *download, *phase_of, *upload_free = Py_None;
    double processing;
    static char *kwlist[] = {"neighbours",    "latency",  "upload",      "download",
                             "processing_ms", "phase_of", "upload_free", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OOOOdO|O", kwlist, &neighbours, &latency,
                                     &upload, &download, &processing, &phase_of, &upload_free))
        return -1;
    if (upload_free != Py_None && !PyList_Check(upload_free)) {
        PyErr_SetString(PyExc_TypeError, "upload_free must be a list or None");
        return -1;
    }
    if (m->start != NULL) {
        PyErr_SetString(PyExc_RuntimeError, "Model is initialised once");
        return -1;
    }
    Py_ssize_t n = PySequence_Size(neighbours);
    if (n < 0) return -1;
    if (n >= INT32_MAX) {
        PyErr_SetString(PyExc_OverflowError, "too many nodes");
        return -1;
    }
    m->n = n;
    m->processing = processing;
    m->inv_size = -1;
    Py_INCREF(phase_of);
    Py_XSETREF(m->phase_of, phase_of);
    if (upload_free == Py_None) { /* LinkModel's default: all free at 0 */
        upload_free = PyList_New(n);
        if (upload_free == NULL) return -1;
        for (Py_ssize_t v = 0; v < n; v++) {
            PyObject *zero = PyFloat_FromDouble(0.0);
            if (zero == NULL) {
                Py_DECREF(upload_free);
                return -1;
            }
            PyList_SET_ITEM(upload_free, v, zero);
        }
    } else {
        Py_INCREF(upload_free);
    }
    Py_XSETREF(m->upload_free, upload_free);
    m->start = PyMem_Calloc((size_t)n + 1, sizeof(Py_ssize_t));
    m->phase = PyMem_Malloc(((size_t)n + 1) * sizeof(double));
    m->node_obj = PyMem_Calloc((size_t)n + 1, sizeof(PyObject *));
    double *up = PyMem_Malloc(((size_t)n + 1) * sizeof(double));
    double *down = PyMem_Malloc(((size_t)n + 1) * sizeof(double));
    PyObject **rows = PyMem_Calloc((size_t)n + 1, sizeof(PyObject *));
    int ok = 0;
    if (m->start == NULL || m->phase == NULL || m->node_obj == NULL || up == NULL ||
        down == NULL || rows == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t v = 0; v < n; v++) {
        m->phase[v] = NAN;
        if (item_double(upload, v, &up[v]) < 0 || item_double(download, v, &down[v]) < 0)
            goto done;
        PyObject *row = PySequence_GetItem(neighbours, v);
        if (row == NULL) goto done;
        rows[v] = PySequence_Fast(row, "neighbours[v] must be a sequence");
        Py_DECREF(row);
        if (rows[v] == NULL) goto done;
        m->start[v + 1] = m->start[v] + PySequence_Fast_GET_SIZE(rows[v]);
    }
    Py_ssize_t edges = m->start[n];
    if (edges >= INT32_MAX) { /* an edge index is a search entry's 32-bit payload */
        PyErr_SetString(PyExc_OverflowError, "too many links");
        goto done;
    }
    size_t cells = (size_t)edges + 1;
    m->peer = PyMem_Malloc(cells * sizeof(int32_t));
    m->src = PyMem_Malloc(cells * sizeof(int32_t));
    m->lat_out = PyMem_Malloc(cells * sizeof(double));
    m->lat_back = PyMem_Malloc(cells * sizeof(double));
    m->rate_out = PyMem_Malloc(cells * sizeof(double));
    m->rate_back = PyMem_Malloc(cells * sizeof(double));
    if (m->peer == NULL || m->src == NULL || m->lat_out == NULL || m->lat_back == NULL || m->rate_out == NULL ||
        m->rate_back == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t v = 0; v < n; v++) {
        PyObject **items = PySequence_Fast_ITEMS(rows[v]);
        Py_ssize_t e = m->start[v];
        PyObject *vobj = PyLong_FromSsize_t(v);
        if (vobj == NULL) goto done;
        for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(rows[v]); i++, e++) {
            PyObject *p = items[i];
            Py_ssize_t w = PyLong_AsSsize_t(p);
            if (w == -1 && PyErr_Occurred()) {
                Py_DECREF(vobj);
                goto done;
            }
            if (w < 0 || w >= n) {
                Py_DECREF(vobj);
                PyErr_Format(PyExc_IndexError, "neighbour %zd of node %zd is not a node", w, v);
                goto done;
            }
            if (m->node_obj[w] == NULL) {
                Py_INCREF(p);
                m->node_obj[w] = p;
            }
            m->peer[e] = (int32_t)w;
            m->src[e] = (int32_t)v;
            if (latency_of(latency, v, p, &m->lat_out[e]) < 0 ||
                latency_of(latency, w, vobj, &m->lat_back[e]) < 0) {
                Py_DECREF(vobj);
                goto done;
            }
            m->rate_out[e] = pymin(up[v], down[w]);
            m->rate_back[e] = pymin(up[w], down[v]);
        }
        Py_DECREF(vobj);
    }
    for (Py_ssize_t v = 0; v < n; v++) {
        if (m->node_obj[v] == NULL && (m->node_obj[v] = PyLong_FromSsize_t(v)) == NULL) goto done;
    }
    if (model_canon(m) < 0) goto done;
    ok = 1;
done:
    if (rows != NULL) {
        for (Py_ssize_t v = 0; v < n; v++) Py_XDECREF(rows[v]);
        PyMem_Free(rows);
    }
    PyMem_Free(up);
    PyMem_Free(down);
    if (!ok) {
        model_free_arrays(m);
        return -1;
    }
    return 0;
}

static PyObject *model_nodes(Model *m, void *closure) { return PyLong_FromSsize_t(m->n); }

static PyObject *model_upload_free(Model *m, void *closure) {
    if (m->upload_free == NULL) Py_RETURN_NONE;
    Py_INCREF(m->upload_free);
    return m->upload_free;
}

static PyGetSetDef model_getset[] = {
    {"nodes", (getter)model_nodes, NULL, "Nodes of the model.", NULL},
    {"upload_free", (getter)model_upload_free, NULL,
     "The list the sends book (the LinkModel's upload_free itself).", NULL},
    {NULL},
};

static PyTypeObject ModelType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "simulator._flow.Model",
    .tp_basicsize = sizeof(Model),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_traverse = (traverseproc)model_traverse,
    .tp_clear = (inquiry)model_clear,
    .tp_doc = "A LinkModel's links, latencies, link rates and tick phases as flat arrays.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)model_init,
    .tp_dealloc = (destructor)model_dealloc,
    .tp_getset = model_getset,
};

/* LinkModel.delay_ms over an edge: (transfer + latency) + processing. */
static inline double delay(double rate, double lat, double processing, long long size) {
    double transfer = rate == INFINITY ? 0.0 : (double)(size * 8) / rate;
    return transfer + lat + processing;
}

/* When src's uplink is free: Model.upload_free[src] as a double. */
static inline int uplink_read(Model *m, int32_t src, double *out) {
    PyObject *list = m->upload_free;
    if (list == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "the model was cleared");
        return -1;
    }
    if (src >= PyList_GET_SIZE(list)) {
        PyErr_SetString(PyExc_IndexError, "list index out of range");
        return -1;
    }
    PyObject *item = PyList_GET_ITEM(list, src);
    if (PyFloat_CheckExact(item)) {
        *out = PyFloat_AS_DOUBLE(item);
        return 0;
    }
    double start = PyFloat_AsDouble(item);
    if (start == -1.0 && PyErr_Occurred()) return -1;
    *out = start;
    return 0;
}

/* Model.upload_free[src] = done (uplink_read checked the list and the index). */
static inline int uplink_write(Model *m, int32_t src, double done) {
    PyObject *list = m->upload_free;
    PyObject *item = PyList_GET_ITEM(list, src);
    if (Py_REFCNT(item) == 1 && PyFloat_CheckExact(item)) {
        /* the list holds the only reference: nothing else can see the float change */
        ((PyFloatObject *)item)->ob_fval = done;
    } else {
        PyObject *f = PyFloat_FromDouble(done);
        if (f == NULL) return -1;
        PyList_SET_ITEM(list, src, f);
        Py_DECREF(item);
    }
    return 0;
}

/* LinkModel.send over an edge: `size` bytes from src at `at` over a link of `rate` and `lat`;
 * *out: when they are processed at the other end. A finite rate books the transfer on src's
 * uplink, the model's upload_free list, in place (the same operations in the same order as
 * Python: start = free[src]; if start < at: start = at; done = start + size * 8 / rate). */
static inline int send(Model *m, int32_t src, double rate, double lat, long long size, double at,
                       double *out) {
    if (rate == INFINITY) {
        *out = at + lat + m->processing;
        return 0;
    }
    double start;
    if (uplink_read(m, src, &start) < 0) return -1;
    if (start < at) start = at;
    double done = start + (double)(size * 8) / rate;
    if (uplink_write(m, src, done) < 0) return -1;
    *out = done + lat + m->processing;
    return 0;
}

/* The inv delays of every edge for `size`-byte invs (the last size asked is kept). */
static int inv_delays(Model *m, long long size) {
    if (m->inv_size == size) return 0;
    size_t cells = (size_t)m->start[m->n] + 1;
    if (m->inv_out == NULL) {
        m->inv_out = PyMem_Malloc(cells * sizeof(double));
        m->inv_back = PyMem_Malloc(cells * sizeof(double));
        if (m->inv_out == NULL || m->inv_back == NULL) {
            PyMem_Free(m->inv_out);
            PyMem_Free(m->inv_back);
            m->inv_out = m->inv_back = NULL;
            PyErr_NoMemory();
            return -1;
        }
    }
    for (Py_ssize_t e = 0; e < m->start[m->n]; e++) {
        m->inv_out[e] = delay(m->rate_out[e], m->lat_out[e], m->processing, size);
        m->inv_back[e] = delay(m->rate_back[e], m->lat_back[e], m->processing, size);
    }
    m->inv_size = size;
    return 0;
}

/* LinkModel.next_tick_ms; -1 (with an exception set) if the phase could not be had. */
static int next_tick(Model *m, int32_t node, double after, double *out) {
    double phase = m->phase[node];
    if (isnan(phase)) {
        if (m->phase_of == NULL) {
            PyErr_SetString(PyExc_RuntimeError, "the model was cleared");
            return -1;
        }
        PyObject *r = PyObject_CallOneArg(m->phase_of, m->node_obj[node]);
        if (r == NULL) return -1;
        phase = PyFloat_AsDouble(r);
        Py_DECREF(r);
        if (phase == -1.0 && PyErr_Occurred()) return -1;
        m->phase[node] = phase;
    }
    double steps = floor((after - phase) / TICK_MS);
    if (!isfinite(steps)) {
        PyErr_SetString(PyExc_OverflowError, "cannot convert float infinity to integer");
        return -1;
    }
    double at = phase + (steps + 1.0) * TICK_MS;
    if (at <= after) at += TICK_MS;
    *out = at;
    return 0;
}

/* ----------------------------------------------------------------------------------- Frames */

typedef struct {
    int32_t a, b; /* a == -1: an empty slot */
    double t;
} FKey;

typedef struct {
    FKey *slots;
    size_t cap, len; /* cap a power of two */
} FSet;

static inline uint64_t fkey_hash(int32_t a, int32_t b, double t) {
    if (t == 0.0) t = 0.0; /* -0.0 == 0.0 as a dict key */
    uint64_t bits;
    memcpy(&bits, &t, sizeof bits);
    uint64_t h = bits * 0x9E3779B97F4A7C15ULL;
    h ^= ((uint64_t)(uint32_t)a << 32 | (uint32_t)b) * 0xC2B2AE3D27D4EB4FULL;
    h ^= h >> 29;
    h *= 0xBF58476D1CE4E5B9ULL;
    h ^= h >> 32;
    return h;
}

static int fset_alloc(FSet *s, size_t cap) {
    FKey *slots = PyMem_Malloc(cap * sizeof(FKey));
    if (slots == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    for (size_t i = 0; i < cap; i++) slots[i].a = -1;
    s->slots = slots;
    s->cap = cap;
    s->len = 0;
    return 0;
}

static void fset_place(FSet *s, FKey k) {
    size_t mask = s->cap - 1, i = (size_t)fkey_hash(k.a, k.b, k.t) & mask;
    while (s->slots[i].a != -1) i = (i + 1) & mask;
    s->slots[i] = k;
    s->len++;
}

/* Rebuild into a table of at least `want` slots keeping the keys with t >= before. */
static int fset_rebuild(FSet *s, size_t want, double before) {
    size_t cap = 16;
    while (cap < want) cap <<= 1;
    FSet fresh;
    if (fset_alloc(&fresh, cap) < 0) return -1;
    for (size_t i = 0; i < s->cap; i++) {
        FKey k = s->slots[i];
        if (k.a != -1 && k.t >= before) fset_place(&fresh, k);
    }
    PyMem_Free(s->slots);
    *s = fresh;
    return 0;
}

/* Add (a, b, t): 1 if it was new, 0 if present, -1 on error. */
static int fset_add(FSet *s, int32_t a, int32_t b, double t) {
    size_t mask = s->cap - 1, i = (size_t)fkey_hash(a, b, t) & mask;
    for (;;) {
        FKey *k = &s->slots[i];
        if (k->a == -1) break;
        if (k->a == a && k->b == b && k->t == t) return 0;
        i = (i + 1) & mask;
    }
    if (2 * (s->len + 1) > s->cap) {
        if (fset_rebuild(s, 2 * s->cap, -INFINITY) < 0) return -1;
    }
    FKey k = {a, b, t};
    fset_place(s, k);
    return 1;
}

/* A list of frames remembered, each once (for count, prune and snapshot). */
typedef struct {
    FKey *items;
    size_t len, cap;
} FLog;

static int flog_add(FLog *l, int32_t a, int32_t b, double t) {
    if (l->len == l->cap) {
        size_t cap = l->cap == 0 ? 256 : 2 * l->cap;
        FKey *items = PyMem_Realloc(l->items, cap * sizeof(FKey));
        if (items == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        l->items = items;
        l->cap = cap;
    }
    FKey k = {a, b, t};
    l->items[l->len++] = k;
    return 0;
}

/* Keep the items with t >= before (the Python Frames.prune's test). */
static void flog_prune(FLog *l, double before) {
    size_t keep = 0;
    for (size_t i = 0; i < l->len; i++) {
        if (l->items[i].t >= before) l->items[keep++] = l->items[i];
    }
    l->len = keep;
}

/* A set of the items of a log (the exact fallback). */
static int fset_of_log(FSet *s, const FLog *l) {
    size_t cap = 16;
    while (cap < 2 * l->len + 2) cap <<= 1;
    if (fset_alloc(s, cap) < 0) return -1;
    for (size_t i = 0; i < l->len; i++) fset_place(s, l->items[i]);
    return 0;
}

/* The inv frames: (announcer, tick) and (announcer, peer, tick) sets, as the Python Frames.invs.
 * In the simulation a node's ticks that searches ask about never go back: every search pops its
 * entries within HORIZON_MS of the clock, and a node's ticks are TICK_MS apart. So per node the
 * latest tick of its frames remembered (last_inv) and per edge the latest tick its frame went
 * over it (last_peer) answer exactly: the same tick is there, a later one is new. Were a tick
 * ever asked below the latest (searches run out of step, as tests drive them), the Frames turn
 * to exact sets built from the logs and answer from them from then on (`exact`). */
typedef struct {
    PyObject_HEAD
    Model *model;      /* the model the arrays are for (set by the first Spread; NULL: none) */
    double *last_inv;  /* per node: its latest (announcer, tick) remembered (NaN: none) */
    double *last_peer; /* per canonical edge: its latest (announcer, peer, tick) (NaN: none) */
    FLog inv_log;      /* (announcer, -1, tick), each once */
    FLog peer_log;     /* (canonical edge, 0, tick), each once */
    int exact;         /* a tick went back: inv_keys and inv_peers answer */
    FSet inv_keys;     /* (announcer, -1, tick), once exact */
    FSet inv_peers;    /* (canonical edge, 0, tick), once exact */
    /* The getdata frames, (asker, announcer, announcer's tick), the same way: per edge announcer
     * -> asker the latest tick a getdata frame went back over it (last_getdata) answers while
     * the ticks asked only go forward. They may not (an inv can wait in its link's queue, so
     * two searches may fetch over one edge out of tick order: 8 of 51 M fetches in scenario
     * c's first 3,000 s); then the set built from the log answers until the next prune. */
    double *last_getdata; /* per edge (announcer -> asker): the latest tick (NaN: none) */
    FLog getdata_log;     /* (asker, announcer, tick), each once */
    int getdata_exact;    /* a tick went back since the last prune: getdata answers */
    FSet getdata;         /* (asker, announcer, tick), while getdata_exact */
} Frames;

static PyObject *frames_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    if (PyTuple_GET_SIZE(args) != 0 || (kwds != NULL && PyDict_GET_SIZE(kwds) != 0)) {
        PyErr_SetString(PyExc_TypeError, "Frames() takes no arguments");
        return NULL;
    }
    return type->tp_alloc(type, 0);
}

/* Bind the Frames to the model of a Spread that uses them (the first one's). */
static int frames_bind(Frames *f, Model *m) {
    if (f->model == m) return 0;
    if (f->model != NULL) {
        PyErr_SetString(PyExc_ValueError, "the frames are another model's");
        return -1;
    }
    size_t nodes = (size_t)m->n + 1, edges = (size_t)m->start[m->n] + 1;
    double *last_inv = PyMem_Malloc(nodes * sizeof(double));
    double *last_peer = PyMem_Malloc(edges * sizeof(double));
    double *last_getdata = PyMem_Malloc(edges * sizeof(double));
    if (last_inv == NULL || last_peer == NULL || last_getdata == NULL) {
        PyMem_Free(last_inv);
        PyMem_Free(last_peer);
        PyMem_Free(last_getdata);
        PyErr_NoMemory();
        return -1;
    }
    for (size_t i = 0; i < nodes; i++) last_inv[i] = NAN;
    for (size_t i = 0; i < edges; i++) last_peer[i] = last_getdata[i] = NAN;
    PyMem_Free(f->last_inv);
    PyMem_Free(f->last_peer);
    PyMem_Free(f->last_getdata);
    f->last_inv = last_inv;
    f->last_peer = last_peer;
    f->last_getdata = last_getdata;
    Py_INCREF(m);
    f->model = m;
    return 0;
}

/* The ticks went back: from now on the exact sets answer. */
static int frames_go_exact(Frames *f) {
    if (fset_of_log(&f->inv_keys, &f->inv_log) < 0) return -1;
    if (fset_of_log(&f->inv_peers, &f->peer_log) < 0) {
        PyMem_Free(f->inv_keys.slots);
        f->inv_keys.slots = NULL;
        return -1;
    }
    f->exact = 1;
    return 0;
}

/* Remember (a, tick) in a log with its latest ticks `last` (a's slot) and, once exact, its
 * set: 1 if it was new, 0 if present, -1 on error. */
static inline int frames_add(Frames *f, double *last, FLog *log, FSet *set, int32_t a, int32_t b,
                             double t) {
    double was = last[a];
    if (!f->exact) {
        if (t == was) return 0;
        if (t > was || isnan(was)) {
            if (flog_add(log, a, b, t) < 0) return -1;
            last[a] = t;
            return 1;
        }
        if (frames_go_exact(f) < 0) return -1;
    }
    int added = fset_add(set, a, b, t);
    if (added == 1) {
        if (flog_add(log, a, b, t) < 0) return -1;
        if (!(t <= was)) last[a] = t;
    }
    return added;
}

/* node's inv frames of tick t (the Python Frames.inv_peers(node, t)): 1 if new. */
static inline int frames_inv(Frames *f, int32_t node, double t) {
    return frames_add(f, f->last_inv, &f->inv_log, &f->inv_keys, node, -1, t);
}

/* asker's getdata frame for the items of announcer's tick t, over the edge e (announcer ->
 * asker): 1 if new (frames_add's steps over last_getdata, getdata_log and getdata). */
static inline int frames_getdata(Frames *f, int32_t e, int32_t asker, int32_t announcer,
                                 double t) {
    double was = f->last_getdata[e];
    if (!f->getdata_exact) {
        if (t == was) return 0;
        if (t > was || isnan(was)) {
            if (flog_add(&f->getdata_log, asker, announcer, t) < 0) return -1;
            f->last_getdata[e] = t;
            return 1;
        }
        if (fset_of_log(&f->getdata, &f->getdata_log) < 0) return -1;
        f->getdata_exact = 1;
    }
    int added = fset_add(&f->getdata, asker, announcer, t);
    if (added == 1) {
        if (flog_add(&f->getdata_log, asker, announcer, t) < 0) return -1;
        if (!(t <= was)) f->last_getdata[e] = t;
    }
    return added;
}

/* The frame of tick t over the canonical edge e (announcer -> peer): 1 if new. */
static inline int frames_peer(Frames *f, int32_t e, double t) {
    return frames_add(f, f->last_peer, &f->peer_log, &f->inv_peers, e, 0, t);
}

static int frames_traverse(Frames *f, visitproc visit, void *arg) {
    Py_VISIT(f->model);
    return 0;
}

static int frames_clear(Frames *f) {
    /* the arrays stay (sized for the model): a cleared Frames is not used again */
    Py_CLEAR(f->model);
    return 0;
}

static void frames_dealloc(Frames *f) {
    PyObject_GC_UnTrack(f);
    Py_XDECREF(f->model);
    PyMem_Free(f->last_inv);
    PyMem_Free(f->last_peer);
    PyMem_Free(f->last_getdata);
    PyMem_Free(f->getdata_log.items);
    PyMem_Free(f->inv_log.items);
    PyMem_Free(f->peer_log.items);
    PyMem_Free(f->inv_keys.slots);
    PyMem_Free(f->inv_peers.slots);
    PyMem_Free(f->getdata.slots);
    Py_TYPE(f)->tp_free((PyObject *)f);
}

static PyObject *frames_count(Frames *f, PyObject *unused) {
    return PyLong_FromSize_t(f->inv_log.len);
}

static PyObject *frames_prune(Frames *f, PyObject *arg) {
    double before = PyFloat_AsDouble(arg);
    if (before == -1.0 && PyErr_Occurred()) return NULL;
    flog_prune(&f->inv_log, before);
    flog_prune(&f->peer_log, before);
    flog_prune(&f->getdata_log, before);
    if (f->model != NULL) { /* the latest tick goes when it is before: then all its went */
        for (Py_ssize_t v = 0; v < f->model->n; v++) {
            if (!(f->last_inv[v] >= before)) f->last_inv[v] = NAN;
        }
        for (Py_ssize_t e = 0; e < f->model->start[f->model->n]; e++) {
            if (!(f->last_peer[e] >= before)) f->last_peer[e] = NAN;
            if (!(f->last_getdata[e] >= before)) f->last_getdata[e] = NAN;
        }
    }
    if (f->exact) {
        PyMem_Free(f->inv_keys.slots);
        PyMem_Free(f->inv_peers.slots);
        f->inv_keys.slots = f->inv_peers.slots = NULL;
        f->exact = 0;
        if (frames_go_exact(f) < 0) return NULL;
    }
    /* each edge's latest tick is again the latest in the log: the getdata set can go (a tick
     * below one kept brings it back) */
    PyMem_Free(f->getdata.slots);
    f->getdata.slots = NULL;
    f->getdata.cap = f->getdata.len = 0;
    f->getdata_exact = 0;
    Py_RETURN_NONE;
}

static PyObject *frames_exact(Frames *f, void *closure) { return PyBool_FromLong(f->exact); }

static PyObject *frames_getdata_exact(Frames *f, void *closure) {
    return PyBool_FromLong(f->getdata_exact);
}

/* (invs, getdata) as the Python Frames holds them: {(announcer, tick): {peers}}, {(asker,
 * announcer, tick)}. */
static PyObject *frames_snapshot(Frames *f, PyObject *unused) {
    PyObject *invs = PyDict_New(), *getdata = PySet_New(NULL), *key = NULL, *peers = NULL;
    if (invs == NULL || getdata == NULL) goto fail;
    for (size_t j = 0; j < f->inv_log.len; j++) {
        FKey k = f->inv_log.items[j];
        if ((key = Py_BuildValue("(id)", k.a, k.t)) == NULL) goto fail;
        if ((peers = PySet_New(NULL)) == NULL) goto fail;
        if (PyDict_SetItem(invs, key, peers) < 0) goto fail;
        Py_CLEAR(key);
        Py_CLEAR(peers);
    }
    for (size_t j = 0; j < f->peer_log.len; j++) {
        FKey k = f->peer_log.items[j];
        if (f->model == NULL) {
            PyErr_SetString(PyExc_RuntimeError, "inv peers without a model");
            goto fail;
        }
        if ((key = Py_BuildValue("(id)", f->model->src[k.a], k.t)) == NULL) goto fail;
        PyObject *found = PyDict_GetItemWithError(invs, key); /* borrowed */
        if (found == NULL) {
            if (!PyErr_Occurred()) PyErr_SetString(PyExc_RuntimeError, "inv peer without frame");
            goto fail;
        }
        Py_CLEAR(key);
        if ((key = PyLong_FromLong(f->model->peer[k.a])) == NULL || PySet_Add(found, key) < 0)
            goto fail;
        Py_CLEAR(key);
    }
    for (size_t j = 0; j < f->getdata_log.len; j++) {
        FKey k = f->getdata_log.items[j];
        if ((key = Py_BuildValue("(iid)", k.a, k.b, k.t)) == NULL || PySet_Add(getdata, key) < 0)
            goto fail;
        Py_CLEAR(key);
    }
    PyObject *out = PyTuple_Pack(2, invs, getdata);
    Py_DECREF(invs);
    Py_DECREF(getdata);
    return out;
fail:
    Py_XDECREF(invs);
    Py_XDECREF(getdata);
    Py_XDECREF(key);
    Py_XDECREF(peers);
    return NULL;
}

static PyMethodDef frames_methods[] = {
    {"count", (PyCFunction)frames_count, METH_NOARGS,
     "(announcer, tick) inv frames remembered (len of the Python Frames.invs)."},
    {"prune", (PyCFunction)frames_prune, METH_O, "Forget frames of ticks before before_ms."},
    {"snapshot", (PyCFunction)frames_snapshot, METH_NOARGS,
     "(invs, getdata) in the Python Frames' form."},
    {NULL},
};

static PyGetSetDef frames_getset[] = {
    {"exact", (getter)frames_exact, NULL,
     "True once a node's tick went back (searches out of step): exact sets answer since.", NULL},
    {"getdata_exact", (getter)frames_getdata_exact, NULL,
     "Whether a getdata tick went back since the last prune (the set answers).", NULL},
    {NULL},
};

static PyTypeObject FramesType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "simulator._flow.Frames",
    .tp_basicsize = sizeof(Frames),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_traverse = (traverseproc)frames_traverse,
    .tp_clear = (inquiry)frames_clear,
    .tp_doc = "Which frames were charged already, shared by all txs (txflow.Frames).",
    .tp_new = frames_new,
    .tp_dealloc = (destructor)frames_dealloc,
    .tp_methods = frames_methods,
    .tp_getset = frames_getset,
};

/* ----------------------------------------------------------------------------------- Spread */

/* A search entry: one 128-bit key, compared as one integer. The high 64 bits are the time as an
 * unsigned key in the same order (time_key); the low 64 bits: kind (4 bits) << 60 | seq
 * (SEQ_BITS) << 32 | a 32-bit payload, the node (K_ANNOUNCE) or the edge announcer -> the other
 * end (K_INV, K_GETDATA, K_TX; the nodes are the model's src[e] and peer[e]). seq is unique in a
 * spread, so the order is (time, kind, seq) whatever the payload: Python's heap order. */
typedef unsigned __int128 Entry;
#define SEQ_BITS 28
#define SEQ_MAX ((1LL << SEQ_BITS) - 1)

/* Doubles as unsigned keys in their order (-0.0 as 0.0, equal in Python): the entries' order
 * (time, kind, seq) is then one 128-bit comparison, without a branch to mispredict. */
static inline uint64_t time_key(double t) {
    if (t == 0.0) t = 0.0;
    uint64_t b;
    memcpy(&b, &t, sizeof b);
    return (b >> 63) ? ~b : (b | 0x8000000000000000ULL);
}

/* time_key's inverse: the very double pushed (push refuses -0.0, the one time_key changes). */
static inline double key_time(uint64_t k) {
    uint64_t b = (k >> 63) ? (k & 0x7FFFFFFFFFFFFFFFULL) : ~k;
    double t;
    memcpy(&t, &b, sizeof t);
    return t;
}

static inline double entry_time(Entry e) { return key_time((uint64_t)(e >> 64)); }
static inline int entry_kind(Entry e) { return (int)((uint64_t)e >> 60); }
static inline int32_t entry_payload(Entry e) { return (int32_t)(uint32_t)(uint64_t)e; }

/* A node's labels in a spread, together: an announcement reads its neighbours' tick, source and
 * best at once (one cache line, mostly: 28 bytes). */
#pragma pack(push, 4)
typedef struct {
    double tick;    /* NaN: absent */
    double best;    /* INFINITY: absent */
    double arrival; /* NaN: absent */
    int32_t source; /* NO_SOURCE: absent; -1: where it entered */
} Label;
#pragma pack(pop)
_Static_assert(sizeof(Label) == 28, "a Label is 28 bytes");

typedef struct {
    PyObject_HEAD
    Model *model;
    Frames *frames; /* NULL: every message is a frame of its own */
    PyObject *sizes;
    long long size_inv, size_getdata, size_tx;
    Label *lab;      /* per node */
    Entry *heap;
    void *heap_raw; /* the heap's allocation (heap is aligned in it: heap_alloc) */
    size_t hlen, hcap;
    long long seq;
    long long waiting;
    long long invs, inv_frames, fetches, getdata_frames;
} Spread;

/* An array of `cap` entries where the four children 4i + 1 .. 4i + 4 of an entry share one
 * 64-byte cache line (heap + 1 is 64-aligned); *raw: the allocation, to free. */
static Entry *heap_alloc(size_t cap, void **raw) {
    char *p = PyMem_Malloc(cap * sizeof(Entry) + 64);
    *raw = p;
    if (p == NULL) return NULL;
    uintptr_t first = ((uintptr_t)p + sizeof(Entry) + 63) & ~(uintptr_t)63;
    return (Entry *)(first - sizeof(Entry));
}

static void spread_free_labels(Spread *s) {
    PyMem_Free(s->lab);
    PyMem_Free(s->heap_raw);
    s->heap_raw = NULL;
    s->lab = NULL;
    s->heap = NULL;
    s->hlen = s->hcap = 0;
}

static int spread_traverse(Spread *s, visitproc visit, void *arg) {
    Py_VISIT(s->model);
    Py_VISIT(s->frames);
    Py_VISIT(s->sizes);
    return 0;
}

static int spread_clear(Spread *s) {
    Py_CLEAR(s->sizes);
    return 0;
}

static void spread_dealloc(Spread *s) {
    PyObject_GC_UnTrack(s);
    spread_free_labels(s);
    Py_XDECREF(s->model);
    Py_XDECREF(s->frames);
    Py_XDECREF(s->sizes);
    Py_TYPE(s)->tp_free((PyObject *)s);
}

static int size_attr(PyObject *sizes, const char *name, long long *out) {
    PyObject *v = PyObject_GetAttrString(sizes, name);
    if (v == NULL) return -1;
    *out = PyLong_AsLongLong(v);
    Py_DECREF(v);
    if (*out == -1 && PyErr_Occurred()) return -1;
    if (*out < 0 || *out > (1LL << 50)) {
        PyErr_Format(PyExc_ValueError, "bad frame size %lld", *out);
        return -1;
    }
    return 0;
}

static int spread_init(Spread *s, PyObject *args, PyObject *kwds) {
    PyObject *model, *sizes, *frames = Py_None;
    static char *kwlist[] = {"model", "sizes", "frames", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O!O|O", kwlist, &ModelType, &model, &sizes,
                                     &frames))
        return -1;
    if (s->model != NULL) {
        PyErr_SetString(PyExc_RuntimeError, "Spread is initialised once");
        return -1;
    }
    if (frames != Py_None && !PyObject_TypeCheck(frames, &FramesType)) {
        PyErr_SetString(PyExc_TypeError, "frames must be a simulator._flow.Frames or None");
        return -1;
    }
    if (size_attr(sizes, "inv", &s->size_inv) < 0 ||
        size_attr(sizes, "getdata", &s->size_getdata) < 0 ||
        size_attr(sizes, "tx", &s->size_tx) < 0)
        return -1;
    Model *m = (Model *)model;
    if (m->start == NULL) {
        PyErr_SetString(PyExc_ValueError, "the model is not initialised");
        return -1;
    }
    size_t n = (size_t)m->n + 1;
    s->lab = PyMem_Malloc(n * sizeof(Label));
    s->hcap = 64;
    s->heap = heap_alloc(s->hcap, &s->heap_raw);
    if (s->lab == NULL ||
        s->heap == NULL) {
        spread_free_labels(s);
        PyErr_NoMemory();
        return -1;
    }
    for (size_t i = 0; i < n; i++) {
        s->lab[i].source = NO_SOURCE;
        s->lab[i].best = INFINITY;
        s->lab[i].tick = NAN;
        s->lab[i].arrival = NAN;
    }
    Py_INCREF(model);
    s->model = m;
    if (frames != Py_None) {
        if (frames_bind((Frames *)frames, m) < 0) {
            Py_CLEAR(s->model);
            spread_free_labels(s);
            return -1;
        }
        Py_INCREF(frames);
        s->frames = (Frames *)frames;
    }
    Py_INCREF(sizes);
    s->sizes = sizes;
    s->waiting = -1;
    return 0;
}

/* Add an entry: at `t`, of `kind`, with its payload (a node or an edge, see Entry). */
static int push(Spread *s, double t, int kind, int32_t payload) {
    if (s->hlen == s->hcap) {
        size_t cap = s->hcap == 0 ? 64 : 2 * s->hcap;
        void *raw;
        Entry *heap = heap_alloc(cap, &raw);
        if (heap == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        if (s->hlen > 0) memcpy(heap, s->heap, s->hlen * sizeof(Entry));
        PyMem_Free(s->heap_raw);
        s->heap_raw = raw;
        s->heap = heap;
        s->hcap = cap;
    }
    if (s->seq >= SEQ_MAX) {
        PyErr_SetString(PyExc_OverflowError, "a search of more entries than its key holds");
        return -1;
    }
    if (t == 0.0 && signbit(t)) { /* its key is 0.0's: popped, it would be 0.0 */
        PyErr_SetString(PyExc_ValueError, "a search entry at -0.0 ms");
        return -1;
    }
    Entry e = (Entry)time_key(t) << 64 |
              ((uint64_t)kind << 60 | (uint64_t)++s->seq << 32 | (uint32_t)payload);
    size_t i = s->hlen++;
    Entry *h = s->heap;
    while (i > 0) { /* a 4-ary heap: the children of i are 4i + 1 .. 4i + 4 */
        size_t parent = (i - 1) / 4;
        if (!(e < h[parent])) break;
        h[i] = h[parent];
        i = parent;
    }
    h[i] = e;
    return 0;
}

/* The least entry out: the hole at the root goes down to a leaf along the least children,
 * then the last entry goes up from there (fewer comparisons than a plain sift-down). */
static Entry pop(Spread *s) {
    Entry *h = s->heap;
    Entry top = h[0];
    Entry last = h[--s->hlen];
    size_t n = s->hlen, i = 0;
    if (n == 0) return top;
    for (;;) {
        size_t c = 4 * i + 1, m;
        if (c + 3 < n) {
            size_t a = h[c + 1] < h[c] ? c + 1 : c;
            size_t b = h[c + 3] < h[c + 2] ? c + 3 : c + 2;
            m = h[b] < h[a] ? b : a;
        } else if (c < n) {
            m = c;
            for (size_t j = c + 1; j < n; j++) {
                if (h[j] < h[m]) m = j;
            }
        } else {
            break;
        }
        h[i] = h[m];
        i = m;
    }
    while (i > 0) {
        size_t parent = (i - 1) / 4;
        if (!(last < h[parent])) break;
        h[i] = h[parent];
        i = parent;
    }
    h[i] = last;
    return top;
}

static int ready(Spread *s) {
    if (s->model == NULL) {
        PyErr_SetString(PyExc_ValueError, "the Spread is not initialised");
        return -1;
    }
    return 0;
}

static int check_node(Spread *s, long long node) {
    if (ready(s) < 0) return -1;
    if (node < 0 || node >= s->model->n) {
        PyErr_Format(PyExc_IndexError, "node %lld is not in the model", node);
        return -1;
    }
    return 0;
}

/* txflow.accept */
static int do_accept(Spread *s, int32_t node, double at) {
    Label *l = &s->lab[node];
    if (isnan(l->arrival)) l->arrival = at;
    if (l->source == NO_SOURCE) l->source = -1;
    double tick;
    if (next_tick(s->model, node, at, &tick) < 0) return -1;
    return push(s, tick, K_ANNOUNCE, node);
}

/* txflow.announce. All its sends leave node's uplink: its free time (Model.upload_free) is read
 * at the first send over a finite-rate link and written back at the end (the same bookings:
 * nothing else reads it in between). */
static int do_announce(Spread *s, int32_t node, double tick_ms) {
    Model *m = s->model;
    Label *lab = s->lab;
    lab[node].tick = tick_ms;
    int32_t source = lab[node].source == NO_SOURCE ? -1 : lab[node].source;
    long long inv_size = s->size_inv;
    if (inv_delays(m, inv_size) < 0) return -1;
    const double *backs = m->inv_back;
    Frames *frames = s->frames;
    if (frames != NULL && frames->model != m) { /* cleared (a cycle freed) */
        PyErr_SetString(PyExc_RuntimeError, "the frames were cleared");
        return -1;
    }
    if (frames != NULL && frames_inv(frames, node, tick_ms) < 0) return -1;
    const int32_t *canon = m->canon;
    const double processing = m->processing;
    long long invs = 0, new_frames = 0;
    double free_at = 0.0; /* node's uplink, once read */
    int read = 0, ok = 0;
    for (Py_ssize_t e = m->start[node]; e < m->start[node + 1]; e++) {
        int32_t peer = m->peer[e];
        if (peer == source) continue;
        Label *p = &lab[peer];
        double told = p->tick;
        if (!isnan(told) && told + backs[e] < tick_ms) continue; /* its own inv reached us first: known to have it */
        invs++;
        long long size = inv_size;
        if (frames == NULL) {
            new_frames++;
        } else {
            int added = frames_peer(frames, canon == NULL ? (int32_t)e : canon[e], tick_ms);
            if (added < 0) goto done;
            new_frames += added;
            if (!added) size = ITEM_BYTES; /* one more item of that tick's frame */
        }
        double at, rate = m->rate_out[e];
        if (rate == INFINITY) { /* LinkModel.send, step for step */
            at = tick_ms + m->lat_out[e] + processing;
        } else {
            if (!read) {
                if (uplink_read(m, node, &free_at) < 0) goto done;
                read = 1;
            }
            double start = free_at;
            if (start < tick_ms) start = tick_ms;
            free_at = start + (double)(size * 8) / rate;
            at = free_at + m->lat_out[e] + processing;
        }
        if (p->source != NO_SOURCE) continue;
        if (at < p->best) {
            p->best = at;
            if (push(s, at, K_INV, (int32_t)e) < 0) goto done;
        }
    }
    ok = 1;
done:
    if (read && uplink_write(m, node, free_at) < 0) return -1;
    if (!ok) return -1;
    s->invs += invs;
    s->inv_frames += new_frames;
    return 0;
}

/* txflow.fetch; `edge` is announcer -> node. */
static int do_fetch(Spread *s, int32_t node, int32_t announcer, int32_t edge, double inv_ms) {
    Model *m = s->model;
    s->lab[node].source = announcer;
    s->fetches++;
    long long size = s->size_getdata;
    if (s->frames == NULL) {
        s->getdata_frames++;
    } else {
        int added = frames_getdata(s->frames, edge, node, announcer, s->lab[announcer].tick);
        if (added < 0) return -1;
        s->getdata_frames += added;
        if (!added) size = ITEM_BYTES;
    }
    double there;
    if (send(m, node, m->rate_back[edge], m->lat_back[edge], size, inv_ms, &there) < 0) return -1;
    return push(s, there, K_GETDATA, edge);
}

/* txflow.answer: node's getdata landed at announcer at `at`; `edge` is announcer -> node. */
static int do_answer(Spread *s, int32_t announcer, int32_t node, int32_t edge, double at) {
    Model *m = s->model;
    double there;
    if (send(m, announcer, m->rate_out[edge], m->lat_out[edge], s->size_tx, at, &there) < 0)
        return -1;
    return push(s, there, K_TX, edge);
}

/* The Knowledge attributes the gate reads, interned once (not made from C strings at every
 * advance). */
static PyObject *str_holders, *str_counts, *str_everywhere, *str_nodes, *str_width;

/* What the gate says of a relay node; -1 on error. */
typedef struct {
    int how;
    PyObject *arg, *key;
    PyObject *holders, *counts, *everywhere; /* HOW_KNOWLEDGE */
    Py_ssize_t nodes, width;
} Gate;

/* simulator.knowledge.Knowledge.learn(v, key), step for step: holders maps a key to a bytearray
 * bitmap of `width` bytes (bit v & 7 of byte v >> 3), counts to its number of bits set. */
static int knowledge_learn(Gate *g, int32_t v) {
    PyObject *found = PyDict_GetItemWithError(g->holders, g->key); /* borrowed */
    Py_ssize_t at = v >> 3;
    char bit = (char)(1 << (v & 7));
    long count;
    if (at >= g->width) {
        PyErr_SetString(PyExc_ValueError, "node past the knowledge's bitmaps");
        return -1;
    }
    if (found == NULL) {
        if (PyErr_Occurred()) return -1;
        int c = PySet_Contains(g->everywhere, g->key);
        if (c != 0) return c < 0 ? -1 : 0;
        PyObject *fresh = PyByteArray_FromStringAndSize(NULL, g->width);
        if (fresh == NULL) return -1;
        memset(PyByteArray_AS_STRING(fresh), 0, (size_t)g->width);
        int r = PyDict_SetItem(g->holders, g->key, fresh);
        Py_DECREF(fresh);
        if (r < 0) return -1;
        found = fresh; /* the dict holds it */
        count = 1;
    } else {
        if (!PyByteArray_CheckExact(found) || PyByteArray_GET_SIZE(found) != g->width) {
            PyErr_SetString(PyExc_TypeError, "knowledge holders must be bitmaps of its width");
            return -1;
        }
        if (PyByteArray_AS_STRING(found)[at] & bit) return 0;
        PyObject *n = PyDict_GetItemWithError(g->counts, g->key); /* borrowed */
        if (n == NULL) {
            if (!PyErr_Occurred()) PyErr_SetObject(PyExc_KeyError, g->key);
            return -1;
        }
        count = PyLong_AsLong(n);
        if (count == -1 && PyErr_Occurred()) return -1;
        count += 1;
    }
    PyByteArray_AS_STRING(found)[at] |= bit;
    if (count == g->nodes) {
        if (PyDict_DelItem(g->holders, g->key) < 0) return -1;
        if (PyDict_DelItem(g->counts, g->key) < 0) return -1;
        if (PySet_Add(g->everywhere, g->key) < 0) return -1;
    } else {
        PyObject *n = PyLong_FromLong(count);
        if (n == NULL) return -1;
        int r = PyDict_SetItem(g->counts, g->key, n);
        Py_DECREF(n);
        if (r < 0) return -1;
    }
    return 1;
}

static int gate_verdict(Gate *g, PyObject *node, int32_t v) {
    switch (g->how) {
    case HOW_REFUSES: {
        if (g->arg == Py_None) return G_PASS;
        int c = PySequence_Contains(g->arg, node);
        return c < 0 ? -1 : (c ? G_KEEP : G_PASS);
    }
    case HOW_KNOWLEDGE: {
        int r = knowledge_learn(g, v);
        return r < 0 ? -1 : (r ? G_PASS : G_KEEP);
    }
    case HOW_LEARN: {
        PyObject *r = PyObject_CallFunctionObjArgs(g->arg, node, g->key, NULL);
        if (r == NULL) return -1;
        int t = PyObject_IsTrue(r);
        Py_DECREF(r);
        return t < 0 ? -1 : (t ? G_PASS : G_KEEP);
    }
    default: {
        PyObject *r = PyObject_CallOneArg(g->arg, node);
        if (r == NULL) return -1;
        long v = PyLong_AsLong(r);
        Py_DECREF(r);
        if (v == -1 && PyErr_Occurred()) return -1;
        return v == G_STOP ? G_STOP : (v == G_PASS ? G_PASS : G_KEEP); /* as advance reads it */
    }
    }
}

/* Fill the gate's Knowledge fields from `knowledge` (new references; the caller releases
 * them, also on failure). */
static int gate_of_knowledge(Gate *g, PyObject *knowledge) {
    g->holders = PyObject_GetAttr(knowledge, str_holders);
    g->counts = PyObject_GetAttr(knowledge, str_counts);
    g->everywhere = PyObject_GetAttr(knowledge, str_everywhere);
    PyObject *nodes = PyObject_GetAttr(knowledge, str_nodes);
    if (nodes != NULL) {
        g->nodes = PyLong_AsSsize_t(nodes);
        Py_DECREF(nodes);
    }
    PyObject *width = PyObject_GetAttr(knowledge, str_width);
    if (width != NULL) {
        g->width = PyLong_AsSsize_t(width);
        Py_DECREF(width);
    }
    if (g->holders == NULL || g->counts == NULL || g->everywhere == NULL || nodes == NULL ||
        width == NULL || PyErr_Occurred())
        return -1;
    if (!PyDict_Check(g->holders) || !PyDict_Check(g->counts) ||
        !PyAnySet_Check(g->everywhere)) {
        PyErr_SetString(PyExc_TypeError,
                        "knowledge needs dicts holders and counts, a set everywhere");
        return -1;
    }
    return 0;
}

static void gate_release(Gate *g) {
    Py_CLEAR(g->holders);
    Py_CLEAR(g->counts);
    Py_CLEAR(g->everywhere);
}

static PyObject *spread_accept(Spread *s, PyObject *args) {
    long long node;
    double at;
    if (!PyArg_ParseTuple(args, "Ld", &node, &at)) return NULL;
    if (check_node(s, node) < 0 || do_accept(s, (int32_t)node, at) < 0) return NULL;
    Py_RETURN_NONE;
}

static PyObject *spread_advance(Spread *s, PyObject *args) {
    long long full;
    double until = INFINITY;
    Gate g = {0};
    g.key = Py_None;
    if (!PyArg_ParseTuple(args, "LiO|Od", &full, &g.how, &g.arg, &g.key, &until) ||
        ready(s) < 0)
        return NULL;
    PyObject *result = NULL;
    if (g.how == HOW_KNOWLEDGE) {
        if (gate_of_knowledge(&g, g.arg) < 0) goto done;
    } else if (g.how < HOW_GATE || g.how > HOW_KNOWLEDGE) {
        PyErr_Format(PyExc_ValueError, "bad gate kind %d", g.how);
        return NULL;
    }
    Model *m = s->model;
    PyObject **objs = m->node_obj;
    while (s->hlen > 0) {
        double t = entry_time(s->heap[0]);
        if (t > until) { /* the next entry lies past until: pause before it */
            result = Py_BuildValue("(iid)", -1, -1, t);
            goto done;
        }
        Entry e = pop(s);
        int kind = entry_kind(e);
        int32_t x = entry_payload(e);
        if (kind == K_ANNOUNCE) {
            if (do_announce(s, x, t) < 0) goto done;
        } else if (kind == K_INV) { /* the inv of src[x] landed at peer[x] */
            int32_t node = m->peer[x];
            if (s->lab[node].source == NO_SOURCE && do_fetch(s, node, m->src[x], x, t) < 0)
                goto done;
        } else if (kind == K_GETDATA) { /* peer[x]'s getdata landed at src[x] */
            if (do_answer(s, m->src[x], m->peer[x], x, t) < 0) goto done;
        } else if (isnan(s->lab[m->peer[x]].arrival)) { /* the tx of src[x] landed at peer[x] */
            int32_t node = m->peer[x];
            int verdict = node < full ? G_STOP : gate_verdict(&g, objs[node], node);
            if (verdict < 0) goto done;
            s->lab[node].arrival = t;
            if (verdict == G_STOP) {
                s->waiting = node;
                result = Py_BuildValue("(OOd)", objs[node], objs[m->src[x]], t);
                goto done;
            }
            if (verdict == G_PASS && do_accept(s, node, t) < 0) goto done;
        }
    }
    /* finished: only the labels are kept */
    PyMem_Free(s->heap_raw);
    s->heap_raw = NULL;
    s->heap = NULL;
    s->hcap = 0;
    result = Py_None;
    Py_INCREF(result);
done:
    gate_release(&g);
    return result;
}

/* Node -> the label at `offset` in each node's Label. */
static PyObject *labels_dict(Spread *s, size_t offset, int absent_is_inf) {
    if (ready(s) < 0) return NULL;
    PyObject *d = PyDict_New();
    if (d == NULL) return NULL;
    for (Py_ssize_t v = 0; v < s->model->n; v++) {
        double x;
        memcpy(&x, (const char *)&s->lab[v] + offset, sizeof x);
        if (absent_is_inf ? x == INFINITY : isnan(x)) continue;
        PyObject *f = PyFloat_FromDouble(x);
        if (f == NULL || PyDict_SetItem(d, s->model->node_obj[v], f) < 0) {
            Py_XDECREF(f);
            Py_DECREF(d);
            return NULL;
        }
        Py_DECREF(f);
    }
    return d;
}

static PyObject *spread_arrival(Spread *s, void *c) {
    return labels_dict(s, offsetof(Label, arrival), 0);
}
static PyObject *spread_tick(Spread *s, void *c) { return labels_dict(s, offsetof(Label, tick), 0); }
static PyObject *spread_best(Spread *s, void *c) { return labels_dict(s, offsetof(Label, best), 1); }

static PyObject *spread_source(Spread *s, void *c) {
    if (ready(s) < 0) return NULL;
    PyObject *d = PyDict_New();
    if (d == NULL) return NULL;
    for (Py_ssize_t v = 0; v < s->model->n; v++) {
        if (s->lab[v].source == NO_SOURCE) continue;
        PyObject *src = PyLong_FromLong(s->lab[v].source);
        if (src == NULL || PyDict_SetItem(d, s->model->node_obj[v], src) < 0) {
            Py_XDECREF(src);
            Py_DECREF(d);
            return NULL;
        }
        Py_DECREF(src);
    }
    return d;
}

static PyObject *spread_sizes(Spread *s, void *c) {
    if (s->sizes == NULL) Py_RETURN_NONE;
    Py_INCREF(s->sizes);
    return s->sizes;
}

static PyObject *spread_pending(Spread *s, void *c) { return PyLong_FromSize_t(s->hlen); }

static PyObject *spread_labels_bytes(Spread *s, void *c) {
    if (ready(s) < 0) return NULL;
    size_t n = (size_t)s->model->n + 1;
    return PyLong_FromSize_t(n * sizeof(Label) + s->hcap * sizeof(Entry));
}

static PyGetSetDef spread_getset[] = {
    {"arrival", (getter)spread_arrival, NULL, "Node -> when the tx landed there.", NULL},
    {"tick", (getter)spread_tick, NULL, "Node -> when it announced the tx.", NULL},
    {"best_inv", (getter)spread_best, NULL, "Node -> the earliest inv arrival pushed.", NULL},
    {"source", (getter)spread_source, NULL, "Node -> the neighbour it fetches from (-1).", NULL},
    {"sizes", (getter)spread_sizes, NULL, "The tx's frame sizes.", NULL},
    {"pending", (getter)spread_pending, NULL, "Search entries not taken yet.", NULL},
    {"labels_bytes", (getter)spread_labels_bytes, NULL, "Bytes of the label arrays and heap.",
     NULL},
    {NULL},
};

static PyMemberDef spread_members[] = {
    {"seq", T_LONGLONG, offsetof(Spread, seq), READONLY, "Entries pushed so far."},
    {"waiting", T_LONGLONG, offsetof(Spread, waiting), 0, "The full node waited for, or -1."},
    {"invs", T_LONGLONG, offsetof(Spread, invs), READONLY, "inv items sent."},
    {"inv_frames", T_LONGLONG, offsetof(Spread, inv_frames), READONLY, "... first of a frame."},
    {"fetches", T_LONGLONG, offsetof(Spread, fetches), READONLY, "getdata items sent."},
    {"getdata_frames", T_LONGLONG, offsetof(Spread, getdata_frames), READONLY,
     "... first of a frame."},
    {NULL},
};

static PyMethodDef spread_methods[] = {
    {"accept", (PyCFunction)spread_accept, METH_VARARGS,
     "accept(node, at_ms): txflow.accept (the node announces at its next tick)."},
    {"advance", (PyCFunction)spread_advance, METH_VARARGS,
     "advance(full, how, arg, key=None, until_ms=inf): txflow.advance. A landing at node < full "
     "stops; at other nodes how 0: arg(node) is the verdict; 1: KEEP if node in arg (a set or "
     "None) else PASS; 2: PASS if arg(node, key) else KEEP; 3: arg is a Knowledge, its "
     "learn(node, key). An entry after until_ms is not taken: (-1, -1, its time)."},
    {NULL},
};

static PyTypeObject SpreadType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "simulator._flow.Spread",
    .tp_basicsize = sizeof(Spread),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_traverse = (traverseproc)spread_traverse,
    .tp_clear = (inquiry)spread_clear,
    .tp_doc = "One tx's search (txflow.Spread) with dense per-node labels.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)spread_init,
    .tp_dealloc = (destructor)spread_dealloc,
    .tp_getset = spread_getset,
    .tp_members = spread_members,
    .tp_methods = spread_methods,
};

/* ----------------------------------------------------------------------------------- module */

/* Knowledge.learn_each(node, keys): Knowledge.learn(node, key) for each key in turn. */
static PyObject *learn_each(PyObject *unused, PyObject *args) {
    PyObject *knowledge, *keys;
    long long node;
    if (!PyArg_ParseTuple(args, "OLO", &knowledge, &node, &keys)) return NULL;
    if (node < 0 || node > INT32_MAX) {
        PyErr_Format(PyExc_ValueError, "node %lld past the knowledge's bitmaps", node);
        return NULL;
    }
    PyObject *seq = PySequence_Fast(keys, "keys must be a sequence");
    if (seq == NULL) return NULL;
    Gate g = {0};
    PyObject *result = NULL;
    if (gate_of_knowledge(&g, knowledge) < 0) goto done;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    PyObject **items = PySequence_Fast_ITEMS(seq);
    for (Py_ssize_t i = 0; i < n; i++) {
        g.key = items[i];
        if (knowledge_learn(&g, (int32_t)node) < 0) goto done;
    }
    result = Py_None;
    Py_INCREF(result);
done:
    gate_release(&g);
    Py_DECREF(seq);
    return result;
}

/* bit_of(holders, everywhere, at, bit, key): Knowledge.knows(node, key) with node's byte `at`
 * and bit `bit` given (a relay-only node's has_tx, bound once with functools.partial). */
static PyObject *bit_of(PyObject *unused, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 5) {
        PyErr_Format(PyExc_TypeError, "bit_of takes 5 arguments (%zd given)", nargs);
        return NULL;
    }
    PyObject *holders = args[0], *everywhere = args[1], *key = args[4];
    if (!PyDict_Check(holders) || !PyAnySet_Check(everywhere)) {
        PyErr_SetString(PyExc_TypeError, "bit_of needs a dict of bitmaps and a set");
        return NULL;
    }
    Py_ssize_t at = PyLong_AsSsize_t(args[2]);
    if (at == -1 && PyErr_Occurred()) return NULL;
    long bit = PyLong_AsLong(args[3]);
    if (bit == -1 && PyErr_Occurred()) return NULL;
    PyObject *found = PyDict_GetItemWithError(holders, key); /* borrowed */
    if (found == NULL) {
        if (PyErr_Occurred()) return NULL;
        int c = PySet_Contains(everywhere, key);
        if (c < 0) return NULL;
        return PyBool_FromLong(c);
    }
    if (!PyByteArray_CheckExact(found)) {
        PyErr_SetString(PyExc_TypeError, "knowledge holders must be bitmaps");
        return NULL;
    }
    if (at < 0 || at >= PyByteArray_GET_SIZE(found)) {
        PyErr_SetString(PyExc_IndexError, "bytearray index out of range");
        return NULL;
    }
    return PyBool_FromLong(PyByteArray_AS_STRING(found)[at] & bit);
}

static PyMethodDef module_methods[] = {
    {"bit_of", (PyCFunction)(void (*)(void))bit_of, METH_FASTCALL,
     "bit_of(holders, everywhere, at, bit, key): Knowledge.knows for the node of byte at, bit."},
    {"learn_each", learn_each, METH_VARARGS,
     "learn_each(knowledge, node, keys): Knowledge.learn(node, key) for each key in turn."},
    {NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "simulator._flow",
    "The tx flow's earliest-arrival search (simulator/txflow.py) compiled.", -1, module_methods,
};

PyMODINIT_FUNC PyInit__flow(void) {
    if (PyType_Ready(&ModelType) < 0 || PyType_Ready(&FramesType) < 0 ||
        PyType_Ready(&SpreadType) < 0)
        return NULL;
    if (str_holders == NULL && ((str_holders = PyUnicode_InternFromString("holders")) == NULL ||
                                (str_counts = PyUnicode_InternFromString("counts")) == NULL ||
                                (str_everywhere = PyUnicode_InternFromString("everywhere")) ==
                                    NULL ||
                                (str_nodes = PyUnicode_InternFromString("_nodes")) == NULL ||
                                (str_width = PyUnicode_InternFromString("_width")) == NULL))
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL) return NULL;
    if (PyModule_AddObjectRef(m, "Model", (PyObject *)&ModelType) < 0 ||
        PyModule_AddObjectRef(m, "Frames", (PyObject *)&FramesType) < 0 ||
        PyModule_AddObjectRef(m, "Spread", (PyObject *)&SpreadType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
