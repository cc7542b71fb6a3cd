/*
 * miner._kernel: the nonce search for dagchain's 150-byte header (PROTOCOL.md §2.1).
 *
 * A self-contained BLAKE2b-256 written from the RFC 7693 reference algorithm (no key, no salt, no
 * personalisation: hashlib.blake2b(x, digest_size=32)). The header is two BLAKE2b blocks: bytes
 * 0..127 are compressed once per search (the midstate), and per nonce only the final block (bytes
 * 128..149, zero padded, counter 150, final flag) is compressed. The nonce (u64 LE at offset 142)
 * straddles message words m[1] (its low 2 bytes) and m[2] (its high 6 bytes); m[3..15] are zero,
 * which the compiler folds away in the fully unrolled rounds.
 *
 * The search releases the GIL, so Python threads hash in parallel.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define HEADER_SIZE 150
#define PREFIX_SIZE 142
#define BLOCK_SIZE 128

static const uint64_t IV[8] = {
    0x6a09e667f3bcc908ULL, 0xbb67ae8584caa73bULL, 0x3c6ef372fe94f82bULL, 0xa54ff53a5f1d36f1ULL,
    0x510e527fade682d1ULL, 0x9b05688c2b3e6c1fULL, 0x1f83d9abfb41bd6bULL, 0x5be0cd19137e2179ULL,
};

static const uint8_t SIGMA[12][16] = {
    {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15},
    {14, 10, 4, 8, 9, 15, 13, 6, 1, 12, 0, 2, 11, 7, 5, 3},
    {11, 8, 12, 0, 5, 2, 15, 13, 10, 14, 3, 6, 7, 1, 9, 4},
    {7, 9, 3, 1, 13, 12, 11, 14, 2, 6, 5, 10, 4, 0, 15, 8},
    {9, 0, 5, 7, 2, 4, 10, 15, 14, 1, 11, 12, 6, 8, 3, 13},
    {2, 12, 6, 10, 0, 11, 8, 3, 4, 13, 7, 5, 15, 14, 1, 9},
    {12, 5, 1, 15, 14, 13, 4, 10, 0, 7, 6, 3, 9, 2, 8, 11},
    {13, 11, 7, 14, 12, 1, 3, 9, 5, 0, 15, 4, 8, 6, 2, 10},
    {6, 15, 14, 9, 11, 3, 0, 8, 12, 2, 13, 7, 1, 4, 10, 5},
    {10, 2, 8, 4, 7, 6, 1, 5, 15, 11, 9, 14, 3, 12, 13, 0},
    {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15},
    {14, 10, 4, 8, 9, 15, 13, 6, 1, 12, 0, 2, 11, 7, 5, 3},
};

static inline uint64_t rotr64(uint64_t x, int n) { return (x >> n) | (x << (64 - n)); }

static inline uint64_t load64(const uint8_t *p) {
    return (uint64_t)p[0] | ((uint64_t)p[1] << 8) | ((uint64_t)p[2] << 16) | ((uint64_t)p[3] << 24) |
           ((uint64_t)p[4] << 32) | ((uint64_t)p[5] << 40) | ((uint64_t)p[6] << 48) |
           ((uint64_t)p[7] << 56);
}

static inline void store64(uint8_t *p, uint64_t w) {
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)(w >> (8 * i));
}

/* RFC 7693 §3.1: the mixing function G. */
#define G(a, b, c, d, x, y)                \
    do {                                   \
        a = a + b + (x);                   \
        d = rotr64(d ^ a, 32);             \
        c = c + d;                         \
        b = rotr64(b ^ c, 24);             \
        a = a + b + (y);                   \
        d = rotr64(d ^ a, 16);             \
        c = c + d;                         \
        b = rotr64(b ^ c, 63);             \
    } while (0)

#define ROUND(r)                                                              \
    do {                                                                      \
        G(v0, v4, v8, v12, m[SIGMA[r][0]], m[SIGMA[r][1]]);                   \
        G(v1, v5, v9, v13, m[SIGMA[r][2]], m[SIGMA[r][3]]);                   \
        G(v2, v6, v10, v14, m[SIGMA[r][4]], m[SIGMA[r][5]]);                  \
        G(v3, v7, v11, v15, m[SIGMA[r][6]], m[SIGMA[r][7]]);                  \
        G(v0, v5, v10, v15, m[SIGMA[r][8]], m[SIGMA[r][9]]);                  \
        G(v1, v6, v11, v12, m[SIGMA[r][10]], m[SIGMA[r][11]]);                \
        G(v2, v7, v8, v13, m[SIGMA[r][12]], m[SIGMA[r][13]]);                 \
        G(v3, v4, v9, v14, m[SIGMA[r][14]], m[SIGMA[r][15]]);                 \
    } while (0)

/* RFC 7693 §3.2: the compression function F, updating h in place (counter t < 2^64). */
static inline __attribute__((always_inline)) void compress(uint64_t h[8], const uint64_t m[16],
                                                           uint64_t t, int last) {
    uint64_t v0 = h[0], v1 = h[1], v2 = h[2], v3 = h[3], v4 = h[4], v5 = h[5], v6 = h[6],
             v7 = h[7];
    uint64_t v8 = IV[0], v9 = IV[1], v10 = IV[2], v11 = IV[3], v12 = IV[4] ^ t, v13 = IV[5],
             v14 = last ? ~IV[6] : IV[6], v15 = IV[7];
    ROUND(0);
    ROUND(1);
    ROUND(2);
    ROUND(3);
    ROUND(4);
    ROUND(5);
    ROUND(6);
    ROUND(7);
    ROUND(8);
    ROUND(9);
    ROUND(10);
    ROUND(11);
    h[0] ^= v0 ^ v8;
    h[1] ^= v1 ^ v9;
    h[2] ^= v2 ^ v10;
    h[3] ^= v3 ^ v11;
    h[4] ^= v4 ^ v12;
    h[5] ^= v5 ^ v13;
    h[6] ^= v6 ^ v14;
    h[7] ^= v7 ^ v15;
}

/* The midstate: BLAKE2b-256 parameter block folded into the IV, first 128 bytes compressed. */
typedef struct {
    uint64_t h[8];
    uint64_t m0;      /* header bytes 128..135 */
    uint64_t m1_low;  /* header bytes 136..141; the nonce's low 2 bytes go on top */
} midstate;

static void midstate_init(midstate *s, const uint8_t *prefix) {
    uint64_t m[16];
    for (int i = 0; i < 8; i++) s->h[i] = IV[i];
    s->h[0] ^= 0x01010000ULL ^ 32; /* depth 1, fanout 1, no key, 32-byte digest */
    for (int i = 0; i < 16; i++) m[i] = load64(prefix + 8 * i);
    compress(s->h, m, BLOCK_SIZE, 0);
    s->m0 = load64(prefix + 128);
    uint8_t tail[8] = {0};
    memcpy(tail, prefix + 136, 6);
    s->m1_low = load64(tail);
}

/* The final block for one nonce: h[0..3] of the result are the 32 digest bytes, little endian. */
static inline __attribute__((always_inline)) void finish(const midstate *s, uint64_t nonce,
                                                         uint64_t out[8]) {
    uint64_t m[16] = {0};
    m[0] = s->m0;
    m[1] = s->m1_low | (nonce << 48);
    m[2] = nonce >> 16;
    for (int i = 0; i < 8; i++) out[i] = s->h[i];
    compress(out, m, HEADER_SIZE, 1);
}

/* LE(digest) <= target, both as four little-endian 64-bit words (E1). */
static inline int meets(const uint64_t h[4], const uint64_t t[4]) {
    if (h[3] != t[3]) return h[3] < t[3];
    if (h[2] != t[2]) return h[2] < t[2];
    if (h[1] != t[1]) return h[1] < t[1];
    return h[0] <= t[0];
}

/* ---------------------------------------------------------------------------------------------
 * Many nonces at once: the same final-block compression on LANES nonces in the lanes of GCC/clang
 * vector types, compiled for AVX-512 (8 lanes, native 64-bit rotates) and AVX2 (4 lanes) and
 * picked at run time. Each batch is checked lane by lane in nonce order, so the answer is the
 * first solution in the range, exactly as the scalar loop finds it.
 * ------------------------------------------------------------------------------------------- */
#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
#define HAVE_SIMD 1

#define VROTR(x, n) (((x) >> (n)) | ((x) << (64 - (n))))
#define VG(a, b, c, d, x, y)               \
    do {                                   \
        a = a + b + (x);                   \
        d = VROTR(d ^ a, 32);              \
        c = c + d;                         \
        b = VROTR(b ^ c, 24);              \
        a = a + b + (y);                   \
        d = VROTR(d ^ a, 16);              \
        c = c + d;                         \
        b = VROTR(b ^ c, 63);              \
    } while (0)
#define VROUND(r)                                                             \
    do {                                                                      \
        VG(v0, v4, v8, v12, m[SIGMA[r][0]], m[SIGMA[r][1]]);                  \
        VG(v1, v5, v9, v13, m[SIGMA[r][2]], m[SIGMA[r][3]]);                  \
        VG(v2, v6, v10, v14, m[SIGMA[r][4]], m[SIGMA[r][5]]);                 \
        VG(v3, v7, v11, v15, m[SIGMA[r][6]], m[SIGMA[r][7]]);                 \
        VG(v0, v5, v10, v15, m[SIGMA[r][8]], m[SIGMA[r][9]]);                 \
        VG(v1, v6, v11, v12, m[SIGMA[r][10]], m[SIGMA[r][11]]);               \
        VG(v2, v7, v8, v13, m[SIGMA[r][12]], m[SIGMA[r][13]]);                \
        VG(v3, v4, v9, v14, m[SIGMA[r][14]], m[SIGMA[r][15]]);                \
    } while (0)

/* Defines search_<NAME>(s, t, start, count, &nonce): count must be a multiple of LANES. */
#define DEFINE_LANE_SEARCH(NAME, LANES, TARGET)                                                  \
    typedef uint64_t vec_##NAME __attribute__((vector_size(8 * LANES)));                         \
    __attribute__((target(TARGET))) static int search_##NAME(                                    \
        const midstate *s, const uint64_t t[4], uint64_t start, uint64_t count, uint64_t *out) { \
        typedef vec_##NAME vec;                                                                  \
        vec iota, zero = {0};                                                                    \
        for (int l = 0; l < LANES; l++) iota[l] = (uint64_t)l;                                   \
        for (uint64_t i = 0; i < count; i += LANES) {                                            \
            vec nonce = iota + (start + i);                                                      \
            vec m[16];                                                                           \
            for (int k = 0; k < 16; k++) m[k] = zero;                                            \
            m[0] = zero + s->m0;                                                                 \
            m[1] = (nonce << 48) | s->m1_low;                                                    \
            m[2] = nonce >> 16;                                                                  \
            vec v0 = zero + s->h[0], v1 = zero + s->h[1], v2 = zero + s->h[2],                   \
                v3 = zero + s->h[3], v4 = zero + s->h[4], v5 = zero + s->h[5],                   \
                v6 = zero + s->h[6], v7 = zero + s->h[7];                                        \
            vec v8 = zero + IV[0], v9 = zero + IV[1], v10 = zero + IV[2], v11 = zero + IV[3],    \
                v12 = zero + (IV[4] ^ HEADER_SIZE), v13 = zero + IV[5], v14 = zero + ~IV[6],     \
                v15 = zero + IV[7];                                                              \
            VROUND(0); VROUND(1); VROUND(2); VROUND(3); VROUND(4); VROUND(5);                    \
            VROUND(6); VROUND(7); VROUND(8); VROUND(9); VROUND(10); VROUND(11);                  \
            vec d3 = (zero + s->h[3]) ^ v3 ^ v11;                                                \
            for (int l = 0; l < LANES; l++) {                                                    \
                if (d3[l] > t[3]) continue;                                                      \
                vec d0 = (zero + s->h[0]) ^ v0 ^ v8, d1 = (zero + s->h[1]) ^ v1 ^ v9,            \
                    d2 = (zero + s->h[2]) ^ v2 ^ v10;                                            \
                uint64_t h[4] = {d0[l], d1[l], d2[l], d3[l]};                                    \
                if (meets(h, t)) {                                                               \
                    *out = start + i + (uint64_t)l;                                              \
                    return 1;                                                                    \
                }                                                                                \
            }                                                                                    \
        }                                                                                        \
        return 0;                                                                                \
    }

DEFINE_LANE_SEARCH(avx512, 8, "avx512f")
DEFINE_LANE_SEARCH(avx2, 4, "avx2")
#endif

typedef enum { KERNEL_SCALAR = 0, KERNEL_AVX2 = 1, KERNEL_AVX512 = 2 } kernel_kind;
static kernel_kind active_kernel = KERNEL_SCALAR;
static const char *const KERNEL_NAMES[] = {"scalar", "avx2x4", "avx512x8"};

static void pick_kernel(void) {
#ifdef HAVE_SIMD
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f"))
        active_kernel = KERNEL_AVX512;
    else if (__builtin_cpu_supports("avx2"))
        active_kernel = KERNEL_AVX2;
#endif
}

/* The first solution in [start, start + count) with the given lane kernel (tail done scalar). */
static int search_range(const midstate *s, const uint64_t t[4], uint64_t start, uint64_t count,
                        kernel_kind kind, uint64_t *out) {
    uint64_t done = 0;
#ifdef HAVE_SIMD
    if (kind != KERNEL_SCALAR) {
        uint64_t lanes = kind == KERNEL_AVX512 ? 8 : 4;
        uint64_t bulk = count - count % lanes;
        int found = kind == KERNEL_AVX512 ? search_avx512(s, t, start, bulk, out)
                                          : search_avx2(s, t, start, bulk, out);
        if (found) return 1;
        done = bulk;
    }
#endif
    uint64_t h[8];
    for (uint64_t i = done; i < count; i++) {
        finish(s, start + i, h);
        if (meets(h, t)) {
            *out = start + i;
            return 1;
        }
    }
    return 0;
}

PyDoc_STRVAR(hash_header_doc,
             "hash_header(header: bytes) -> bytes\n\n"
             "BLAKE2b-256 of a 150-byte header through the midstate path the search uses.");

static PyObject *k_hash_header(PyObject *self, PyObject *args) {
    Py_buffer buf;
    if (!PyArg_ParseTuple(args, "y*", &buf)) return NULL;
    if (buf.len != HEADER_SIZE) {
        PyBuffer_Release(&buf);
        PyErr_Format(PyExc_ValueError, "a header is %d bytes, got %zd", HEADER_SIZE, buf.len);
        return NULL;
    }
    midstate s;
    uint64_t h[8];
    midstate_init(&s, (const uint8_t *)buf.buf);
    finish(&s, load64((const uint8_t *)buf.buf + PREFIX_SIZE), h);
    PyBuffer_Release(&buf);
    uint8_t digest[32];
    for (int i = 0; i < 4; i++) store64(digest + 8 * i, h[i]);
    return PyBytes_FromStringAndSize((const char *)digest, 32);
}

PyDoc_STRVAR(search_doc,
             "search(prefix: bytes, target: bytes, start: int, count: int) -> int | None\n\n"
             "The first nonce in [start, start + count) whose header hash, read little endian,\n"
             "is <= target (32 bytes, little endian), or None. prefix is the 142 header bytes\n"
             "before the nonce; start + count must not exceed 2**64. Releases the GIL.\n"
             "kind (optional): 0 scalar, 1 AVX2 x4, 2 AVX-512 x8; default the best this CPU has.");

static PyObject *k_search(PyObject *self, PyObject *args) {
    Py_buffer prefix, target;
    unsigned long long start, count;
    int kind_arg = -1;
    if (!PyArg_ParseTuple(args, "y*y*KK|i", &prefix, &target, &start, &count, &kind_arg))
        return NULL;
    kernel_kind kind = active_kernel;
    if (kind_arg >= 0) {
        if (kind_arg > (int)active_kernel) {
            PyBuffer_Release(&prefix);
            PyBuffer_Release(&target);
            PyErr_Format(PyExc_ValueError, "lane kernel %d is not supported by this CPU", kind_arg);
            return NULL;
        }
        kind = (kernel_kind)kind_arg;
    }
    if (prefix.len != PREFIX_SIZE || target.len != 32) {
        PyErr_Format(PyExc_ValueError, "need a %d-byte prefix and a 32-byte target, got %zd and %zd",
                     PREFIX_SIZE, prefix.len, target.len);
        PyBuffer_Release(&prefix);
        PyBuffer_Release(&target);
        return NULL;
    }
    if (count > 0 && start + (count - 1) < start) {
        PyBuffer_Release(&prefix);
        PyBuffer_Release(&target);
        PyErr_SetString(PyExc_OverflowError, "start + count exceeds 2**64");
        return NULL;
    }
    midstate s;
    uint64_t t[4];
    midstate_init(&s, (const uint8_t *)prefix.buf);
    for (int i = 0; i < 4; i++) t[i] = load64((const uint8_t *)target.buf + 8 * i);
    PyBuffer_Release(&prefix);
    PyBuffer_Release(&target);

    int found = 0;
    uint64_t nonce = start;
    Py_BEGIN_ALLOW_THREADS
    found = search_range(&s, t, start, count, kind, &nonce);
    Py_END_ALLOW_THREADS
    if (!found) Py_RETURN_NONE;
    return PyLong_FromUnsignedLongLong(nonce);
}

static PyMethodDef methods[] = {
    {"hash_header", k_hash_header, METH_VARARGS, hash_header_doc},
    {"search", k_search, METH_VARARGS, search_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "miner._kernel",
    "BLAKE2b-256 nonce search over a 150-byte header (midstate of the first 128 bytes; GIL "
    "released).",
    -1, methods,
};

PyMODINIT_FUNC PyInit__kernel(void) {
    pick_kernel();
    PyObject *m = PyModule_Create(&module);
    if (m == NULL) return NULL;
    if (PyModule_AddStringConstant(m, "LANES", KERNEL_NAMES[active_kernel]) < 0 ||
        PyModule_AddIntConstant(m, "ACTIVE", (long)active_kernel) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
