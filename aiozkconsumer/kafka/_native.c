/*
 * aiozkconsumer.kafka._native: magic-2 record batches decoded straight into what the consumer
 * hands out (MessageAndMetadata tuples, or Arrow column buffers), with CRC-32C checks.
 *
 * The record batch format is Kafka's (KIP-98, DefaultRecordBatch.java):
 *
 *   baseOffset int64 | batchLength int32 | partitionLeaderEpoch int32 | magic int8 |
 *   crc uint32 | attributes int16 | lastOffsetDelta int32 | baseTimestamp int64 |
 *   maxTimestamp int64 | producerId int64 | producerEpoch int16 | baseSequence int32 |
 *   recordCount int32 | records...
 *
 *   record: length varint | attributes int8 | timestampDelta varlong | offsetDelta varint |
 *           keyLength varint | key | valueLength varint | value |
 *           headerCount varint | (headerKeyLength varint | key | headerValueLength varint |
 *           value)*
 *
 * Varints are zigzag-encoded (as protobuf's sint32/sint64). The CRC (CRC-32C, Castagnoli)
 * covers the bytes from the attributes field to the end of the batch.
 *
 * Compressed batches are decompressed by the caller (aiokafka's codecs) and handed back with
 * Batch.with_records(); batches of magic 0/1 are not handled here (parse_record_set reports
 * them and the caller uses aiokafka's parser). Every read is bounds-checked: malformed data
 * raises ValueError, never reads outside the buffer.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

/* ---------------------------------------------------------------- CRC-32C */

static uint32_t crc_table[8][256];
static int crc_hardware = 0;

/* The hardware loop runs three lanes of LANE bytes at once (the instruction's latency is three
   cycles, its throughput one per cycle) and joins them with crc(A || B) = shift(crc(A)) ^
   crc0(B), where shift() is the CRC's (linear) update over LANE zero bytes, kept as tables. */
enum { LANE = 1024 };
static uint32_t lane_shift[4][256];

static uint32_t crc_software(uint32_t crc, const uint8_t *p, size_t n);

static void lane_shift_init(void) {
    static const uint8_t zeros[LANE];
    uint32_t basis[32];
    for (int b = 0; b < 32; b++) basis[b] = crc_software(1u << b, zeros, LANE);
    for (int k = 0; k < 4; k++)
        for (uint32_t v = 0; v < 256; v++) {
            uint32_t x = 0;
            for (int b = 0; b < 8; b++)
                if (v & (1u << b)) x ^= basis[8 * k + b];
            lane_shift[k][v] = x;
        }
}

static inline uint32_t lane_shift_apply(uint32_t c) {
    return lane_shift[0][c & 0xff] ^ lane_shift[1][(c >> 8) & 0xff] ^
           lane_shift[2][(c >> 16) & 0xff] ^ lane_shift[3][c >> 24];
}

static void crc_init(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
        crc_table[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = crc_table[0][i];
        for (int t = 1; t < 8; t++) {
            c = crc_table[0][c & 0xff] ^ (c >> 8);
            crc_table[t][i] = c;
        }
    }
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    __builtin_cpu_init();
    crc_hardware = __builtin_cpu_supports("sse4.2") ? 1 : 0;
#endif
    lane_shift_init();
}

static uint32_t crc_software(uint32_t crc, const uint8_t *p, size_t n) {
    while (n && ((uintptr_t)p & 7)) {
        crc = crc_table[0][(crc ^ *p++) & 0xff] ^ (crc >> 8);
        n--;
    }
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        w ^= crc; /* little-endian: the CRC's low byte meets the first byte */
        crc = crc_table[7][w & 0xff] ^ crc_table[6][(w >> 8) & 0xff] ^
              crc_table[5][(w >> 16) & 0xff] ^ crc_table[4][(w >> 24) & 0xff] ^
              crc_table[3][(w >> 32) & 0xff] ^ crc_table[2][(w >> 40) & 0xff] ^
              crc_table[1][(w >> 48) & 0xff] ^ crc_table[0][(w >> 56) & 0xff];
        p += 8;
        n -= 8;
    }
    while (n--) crc = crc_table[0][(crc ^ *p++) & 0xff] ^ (crc >> 8);
    return crc;
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
__attribute__((target("sse4.2"))) static uint32_t crc_sse42(uint32_t crc, const uint8_t *p,
                                                            size_t n) {
    uint64_t c = crc;
    while (n && ((uintptr_t)p & 7)) {
        c = __builtin_ia32_crc32qi((uint32_t)c, *p++);
        n--;
    }
    while (n >= 3 * LANE) {
        uint64_t c1 = 0, c2 = 0;
        for (size_t i = 0; i < LANE; i += 8) {
            uint64_t w0, w1, w2;
            memcpy(&w0, p + i, 8);
            memcpy(&w1, p + LANE + i, 8);
            memcpy(&w2, p + 2 * LANE + i, 8);
            c = __builtin_ia32_crc32di(c, w0);
            c1 = __builtin_ia32_crc32di(c1, w1);
            c2 = __builtin_ia32_crc32di(c2, w2);
        }
        c = lane_shift_apply(lane_shift_apply((uint32_t)c) ^ (uint32_t)c1) ^ (uint32_t)c2;
        p += 3 * LANE;
        n -= 3 * LANE;
    }
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        c = __builtin_ia32_crc32di(c, w);
        p += 8;
        n -= 8;
    }
    while (n--) c = __builtin_ia32_crc32qi((uint32_t)c, *p++);
    return (uint32_t)c;
}
#endif

static uint32_t crc32c(const uint8_t *p, size_t n) {
    uint32_t crc = 0xffffffffu;
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    if (crc_hardware) return ~crc_sse42(crc, p, n);
#endif
    return ~crc_software(crc, p, n);
}

/* ---------------------------------------------------------------- reading */

static inline int64_t be64(const uint8_t *p) {
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) v = (v << 8) | p[i];
    return (int64_t)v;
}
static inline int32_t be32(const uint8_t *p) {
    return (int32_t)(((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) |
                     (uint32_t)p[3]);
}
static inline int16_t be16(const uint8_t *p) { return (int16_t)(((uint16_t)p[0] << 8) | p[1]); }

/* A zigzag varint of up to 64 bits at *pos; returns 0 and sets *out, or -1 when malformed. */
static inline int read_varlong(const uint8_t *buf, Py_ssize_t end, Py_ssize_t *pos,
                               int64_t *out) {
    uint64_t v = 0;
    int shift = 0;
    Py_ssize_t i = *pos;
    while (1) {
        if (i >= end || shift > 63) return -1;
        uint8_t b = buf[i++];
        v |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) break;
        shift += 7;
    }
    *pos = i;
    *out = (int64_t)((v >> 1) ^ (~(v & 1) + 1));
    return 0;
}

static inline int read_varint(const uint8_t *buf, Py_ssize_t end, Py_ssize_t *pos,
                              int32_t *out) {
    /* Fast path: one byte. */
    Py_ssize_t i = *pos;
    if (i < end && !(buf[i] & 0x80)) {
        uint32_t v = buf[i];
        *pos = i + 1;
        *out = (int32_t)((v >> 1) ^ (~(v & 1) + 1));
        return 0;
    }
    int64_t v;
    if (read_varlong(buf, end, pos, &v) < 0 || v < INT32_MIN || v > INT32_MAX) return -1;
    *out = (int32_t)v;
    return 0;
}

/* ---------------------------------------------------------------- Batch */

enum { HEADER_SIZE = 61, LOG_OVERHEAD = 12, CRC_AT = 17, CRC_FROM = 21 };

typedef struct {
    PyObject_HEAD
    Py_buffer view;         /* the bytes the records are read from (held) */
    Py_ssize_t start, end;  /* the batch in the fetched record set (header included) */
    Py_ssize_t rec_start;   /* the first record in view */
    Py_ssize_t rec_end;     /* end of the records in view */
    Py_ssize_t pos;         /* the next record in view (the cursor) */
    int32_t index;          /* records read so far */
    int64_t base_offset;
    int32_t last_offset_delta;
    int64_t base_timestamp;
    int64_t max_timestamp;
    int64_t producer_id;
    int32_t record_count;
    int16_t attributes;
    int8_t magic;
    uint32_t crc;
    int64_t last_offset;    /* the offset of the last record handed out, -1 when none */
    int8_t aborted;         /* of an aborted transaction (read_committed): stepped over */
} BatchObject;

static PyTypeObject BatchType;

static void Batch_dealloc(BatchObject *self) {
    if (self->view.obj) PyBuffer_Release(&self->view);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *MalformedBatch; /* ValueError subclass: args (message, base, last offset) */

static PyObject *malformed(BatchObject *b, const char *what) {
    PyObject *msg = PyUnicode_FromFormat(
        "malformed record batch at offset %lld: %s (record %d of %d)",
        (long long)b->base_offset, what, (int)b->index, (int)b->record_count);
    if (!msg) return NULL;
    PyObject *args = Py_BuildValue("(NLL)", msg, (long long)b->base_offset,
                                   (long long)(b->base_offset + b->last_offset_delta));
    if (args) {
        PyErr_SetObject(MalformedBatch, args);
        Py_DECREF(args);
    }
    return NULL;
}

/* Py_buffer of obj, contiguous bytes. */
static int get_bytes(PyObject *obj, Py_buffer *view) {
    return PyObject_GetBuffer(obj, view, PyBUF_SIMPLE);
}

/* Records of one batch, decoded in place. */
typedef struct {
    int64_t offset;
    int64_t timestamp;
    const uint8_t *key;     /* NULL: null key */
    int32_t key_len;
    const uint8_t *value;   /* NULL: null value */
    int32_t value_len;
    Py_ssize_t headers_at;  /* position of the first header in the view */
    int32_t header_count;
    Py_ssize_t next;        /* position after the record */
} Record;

static int decode_record(BatchObject *b, Py_ssize_t pos, Record *r) {
    const uint8_t *buf = (const uint8_t *)b->view.buf;
    Py_ssize_t end = b->rec_end;
    int32_t length, offset_delta, klen, vlen, hcount;
    int64_t ts_delta;
    if (read_varint(buf, end, &pos, &length) < 0 || length < 0 || pos + length > end) {
        malformed(b, "record length");
        return -1;
    }
    Py_ssize_t stop = pos + length;
    pos += 1; /* attributes (unused) */
    if (read_varlong(buf, stop, &pos, &ts_delta) < 0 ||
        read_varint(buf, stop, &pos, &offset_delta) < 0 ||
        read_varint(buf, stop, &pos, &klen) < 0 || klen < -1 || pos + (klen > 0 ? klen : 0) > stop) {
        malformed(b, "record fields");
        return -1;
    }
    r->key = klen >= 0 ? buf + pos : NULL;
    r->key_len = klen;
    if (klen > 0) pos += klen;
    if (read_varint(buf, stop, &pos, &vlen) < 0 || vlen < -1 ||
        pos + (vlen > 0 ? vlen : 0) > stop) {
        malformed(b, "record value");
        return -1;
    }
    r->value = vlen >= 0 ? buf + pos : NULL;
    r->value_len = vlen;
    if (vlen > 0) pos += vlen;
    if (read_varint(buf, stop, &pos, &hcount) < 0 || hcount < 0) {
        malformed(b, "header count");
        return -1;
    }
    r->headers_at = pos;
    r->header_count = hcount;
    r->offset = b->base_offset + offset_delta;
    r->timestamp = (b->attributes & 0x08) ? b->max_timestamp : b->base_timestamp + ts_delta;
    r->next = stop;
    return 0;
}

/* Walk a record's headers: calls back with (key, klen, value or NULL, vlen). */
typedef int (*header_fn)(void *ctx, const uint8_t *k, int32_t klen, const uint8_t *v,
                         int32_t vlen);

static int walk_headers(BatchObject *b, const Record *r, header_fn fn, void *ctx) {
    const uint8_t *buf = (const uint8_t *)b->view.buf;
    Py_ssize_t pos = r->headers_at, stop = r->next;
    for (int32_t h = 0; h < r->header_count; h++) {
        int32_t klen, vlen;
        if (read_varint(buf, stop, &pos, &klen) < 0 || klen < 0 || pos + klen > stop) {
            malformed(b, "header key");
            return -1;
        }
        const uint8_t *k = buf + pos;
        pos += klen;
        if (read_varint(buf, stop, &pos, &vlen) < 0 || vlen < -1 ||
            pos + (vlen > 0 ? vlen : 0) > stop) {
            malformed(b, "header value");
            return -1;
        }
        const uint8_t *v = vlen >= 0 ? buf + pos : NULL;
        if (vlen > 0) pos += vlen;
        if (fn(ctx, k, klen, v, vlen) < 0) return -1;
    }
    return 0;
}

static int add_header_tuple(void *ctx, const uint8_t *k, int32_t klen, const uint8_t *v,
                            int32_t vlen) {
    PyObject *list = (PyObject *)ctx;
    PyObject *key = PyUnicode_DecodeUTF8((const char *)k, klen, "strict");
    if (!key) return -1;
    PyObject *value;
    if (v) {
        value = PyBytes_FromStringAndSize((const char *)v, vlen);
        if (!value) {
            Py_DECREF(key);
            return -1;
        }
    } else {
        value = Py_NewRef(Py_None);
    }
    PyObject *pair = PyTuple_Pack(2, key, value);
    Py_DECREF(key);
    Py_DECREF(value);
    if (!pair) return -1;
    int rc = PyList_Append(list, pair);
    Py_DECREF(pair);
    return rc;
}

static PyObject *headers_tuple(BatchObject *b, const Record *r) {
    if (r->header_count == 0) return PyTuple_New(0);
    PyObject *list = PyList_New(0);
    if (!list) return NULL;
    if (walk_headers(b, r, add_header_tuple, list) < 0) {
        Py_DECREF(list);
        return NULL;
    }
    PyObject *t = PyList_AsTuple(list);
    Py_DECREF(list);
    return t;
}

static PyObject *bytes_or_none(const uint8_t *p, int32_t n) {
    if (!p) return Py_NewRef(Py_None);
    return PyBytes_FromStringAndSize((const char *)p, n);
}

static double monotonic_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

enum { STATUS_DONE = 0, STATUS_FULL = 1, STATUS_GATE = 2, STATUS_END = 3 };

/* Records of one batch into `out` as MessageAndMetadata tuples, from its cursor on.
   Returns a STATUS_* (or -1 with an exception set); *appended counts what was added. */
static int batch_messages(BatchObject *self, PyObject *out, PyTypeObject *mam, PyObject *topic,
                          PyObject *partition, PyObject *const ts_types[2],
                          long long min_offset, Py_ssize_t limit, double deadline,
                          Py_ssize_t *appended) {
    PyObject *ts_type = ts_types[(self->attributes & 0x08) ? 1 : 0];
    int check_clock = deadline < 1e300;
    Record r;
    *appended = 0;
    while (self->index < self->record_count) {
        if (*appended >= limit) return STATUS_FULL;
        if (decode_record(self, self->pos, &r) < 0) return -1;
        if (r.offset < min_offset) {
            self->pos = r.next;
            self->index++;
            continue;
        }
        if (check_clock && monotonic_now() >= deadline) return STATUS_GATE;
        PyObject *m = mam->tp_alloc(mam, 8);
        if (!m) return -1;
        PyObject *items[8];
        items[0] = Py_NewRef(topic);
        items[1] = Py_NewRef(partition);
        items[2] = PyLong_FromLongLong(r.offset);
        items[3] = bytes_or_none(r.key, r.key_len);
        items[4] = bytes_or_none(r.value, r.value_len);
        items[5] = PyLong_FromLongLong(r.timestamp);
        items[6] = Py_NewRef(ts_type);
        items[7] = headers_tuple(self, &r);
        int bad = 0;
        for (int i = 0; i < 8; i++) {
            if (!items[i]) bad = 1;
            PyTuple_SET_ITEM(m, i, items[i] ? items[i] : Py_NewRef(Py_None));
        }
        /* Only atoms inside (str, int, bytes, None, tuples of them): nothing for the cyclic
           GC to find, so keep it off the GC's young generation (as CPython untracks such
           tuples itself, later, at a collection). */
        if (!bad && r.header_count == 0) PyObject_GC_UnTrack(m);
        if (bad || PyList_Append(out, m) < 0) {
            Py_DECREF(m);
            return -1;
        }
        Py_DECREF(m);
        self->pos = r.next;
        self->index++;
        self->last_offset = r.offset;
        (*appended)++;
    }
    return STATUS_DONE;
}

static PyObject *TS_TYPES[2];

static int check_mam(PyTypeObject *mam) {
    if (!PyType_IsSubtype(mam, &PyTuple_Type)) {
        PyErr_SetString(PyExc_TypeError, "mam_type must be a tuple subclass");
        return -1;
    }
    return 0;
}

/* ---------------------------------------------------------------- Columns */

/* A growable byte buffer backed by a bytearray (handed to pyarrow without a copy). */
typedef struct {
    PyObject *ba;
    Py_ssize_t len;
} GrowBuf;

/*
 * Buffers of 64 KiB and more are recycled. Every such bytearray this module makes (column
 * buffers, receive buffers) is also kept in a small pool; once nothing but the pool holds it
 * (the Arrow batch, or the fetched chunk, was dropped: its reference count is back to 1, so
 * no export or view of it is left either), the next buffer of about its size reuses it.
 * Its pages are mapped already: a fresh multi-MiB allocation costs page faults and the
 * kernel's zeroing on every batch, about as much as the copy into it. The pool keeps at most
 * POOL_BYTES of buffers (oldest dropped first).
 */
enum { POOL_SLOTS = 64, POOL_MIN = 64 * 1024 };
static const Py_ssize_t POOL_BYTES = 32 * 1024 * 1024;
static PyObject *pool[POOL_SLOTS];
static Py_ssize_t pool_size[POOL_SLOTS]; /* each one's allocation when added */
static int pool_n = 0;
static Py_ssize_t pool_bytes = 0;

static Py_ssize_t ba_alloc(PyObject *ba) { return ((PyByteArrayObject *)ba)->ob_alloc; }

static void pool_drop(int i) {
    pool_bytes -= pool_size[i];
    Py_DECREF(pool[i]);
    memmove(&pool[i], &pool[i + 1], (size_t)(pool_n - i - 1) * sizeof(PyObject *));
    memmove(&pool_size[i], &pool_size[i + 1], (size_t)(pool_n - i - 1) * sizeof(Py_ssize_t));
    pool_n--;
}

static void pool_add(PyObject *ba) {
    Py_ssize_t size = ba_alloc(ba);
    if (size > POOL_BYTES / 2) return; /* too big to keep */
    while (pool_n > 0 && (pool_n == POOL_SLOTS || pool_bytes + size > POOL_BYTES)) pool_drop(0);
    pool[pool_n] = Py_NewRef(ba);
    pool_size[pool_n++] = size;
    pool_bytes += size;
}

/* A bytearray of n bytes, contents undefined (not zero-filled). */
static PyObject *ba_new(Py_ssize_t n) {
    if (n >= POOL_MIN) {
        int best = -1;
        for (int i = 0; i < pool_n; i++) {
            PyObject *ba = pool[i];
            Py_ssize_t alloc = ba_alloc(ba);
            /* Free, big enough, and not so big that the resize would reallocate it down. */
            if (Py_REFCNT(ba) == 1 && alloc > n && alloc / 2 <= n &&
                (best < 0 || alloc < ba_alloc(pool[best])))
                best = i;
        }
        if (best >= 0) {
            PyObject *ba = Py_NewRef(pool[best]);
            pool_drop(best);
            if (PyByteArray_Resize(ba, n) < 0) {
                Py_DECREF(ba);
                return NULL;
            }
            pool_add(ba);
            return ba;
        }
    }
    PyObject *ba = PyByteArray_FromStringAndSize(NULL, n);
    if (ba && n >= POOL_MIN) pool_add(ba);
    return ba;
}

static int gb_init(GrowBuf *g, Py_ssize_t cap) {
    g->ba = ba_new(cap);
    g->len = 0;
    return g->ba ? 0 : -1;
}

static inline int gb_reserve(GrowBuf *g, Py_ssize_t extra) {
    Py_ssize_t need = g->len + extra;
    Py_ssize_t cap = PyByteArray_GET_SIZE(g->ba);
    if (need <= cap) return 0;
    Py_ssize_t ncap = cap < 64 ? 64 : cap;
    while (ncap < need) ncap *= 2;
    if (ncap >= POOL_MIN && Py_REFCNT(g->ba) > 1) {
        /* Pooled: move to a new (pooled) buffer rather than grow one the pool counts. */
        PyObject *bigger = ba_new(ncap);
        if (!bigger) return -1;
        memcpy(PyByteArray_AS_STRING(bigger), PyByteArray_AS_STRING(g->ba), (size_t)g->len);
        Py_SETREF(g->ba, bigger);
        return 0;
    }
    if (PyByteArray_Resize(g->ba, ncap) < 0) return -1;
    if (ncap >= POOL_MIN) pool_add(g->ba);
    return 0;
}

static inline uint8_t *gb_ptr(GrowBuf *g) { return (uint8_t *)PyByteArray_AS_STRING(g->ba); }

static inline int gb_put(GrowBuf *g, const void *p, Py_ssize_t n) {
    if (gb_reserve(g, n) < 0) return -1;
    if (n) memcpy(gb_ptr(g) + g->len, p, (size_t)n);
    g->len += n;
    return 0;
}

/* Take the buffer (trimmed) and start a new one. */
static PyObject *gb_take(GrowBuf *g) {
    if (PyByteArray_Resize(g->ba, g->len) < 0) return NULL;
    PyObject *out = g->ba;
    if (gb_init(g, 0) < 0) {
        g->ba = out; /* keep a valid state */
        return NULL;
    }
    return out;
}

/* A nullable variable-size column: validity bitmap, int32 offsets, data. */
typedef struct {
    GrowBuf validity, offsets, data;
    Py_ssize_t nulls;
} VarColumn;

static int vc_init(VarColumn *c, Py_ssize_t rows, Py_ssize_t data) {
    int32_t zero = 0;
    if (gb_init(&c->validity, rows / 8 + 1) < 0 || gb_init(&c->offsets, 4 * rows + 4) < 0 ||
        gb_init(&c->data, data) < 0)
        return -1;
    c->nulls = 0;
    return gb_put(&c->offsets, &zero, 4);
}

static void vc_clear(VarColumn *c) {
    Py_CLEAR(c->validity.ba);
    Py_CLEAR(c->offsets.ba);
    Py_CLEAR(c->data.ba);
}

/* Append value i (0-based row index) or a null (p == NULL). */
static inline int vc_add(VarColumn *c, Py_ssize_t i, const uint8_t *p, Py_ssize_t n) {
    if ((i & 7) == 0) {
        if (gb_reserve(&c->validity, 1) < 0) return -1;
        gb_ptr(&c->validity)[c->validity.len++] = 0;
    }
    if (p) {
        gb_ptr(&c->validity)[i >> 3] |= (uint8_t)(1u << (i & 7));
        if (gb_put(&c->data, p, n) < 0) return -1;
    } else {
        c->nulls++;
    }
    int32_t off = (int32_t)c->data.len;
    return gb_put(&c->offsets, &off, 4);
}

typedef struct {
    PyObject_HEAD
    int headers;               /* gather the headers column */
    Py_ssize_t rows;
    GrowBuf offsets;           /* int64 */
    GrowBuf timestamps;        /* int64 microseconds */
    VarColumn keys, values;
    /* headers: list<struct<key: string, value: binary>> */
    VarColumn hlist_dummy;     /* unused data; validity of the list + list offsets */
    Py_ssize_t header_entries;
    VarColumn hkeys, hvalues;
    /* Sizes of the last batch taken: the next one starts with that much room, so that a
       steady stream of batches allocates each buffer once instead of doubling it. */
    Py_ssize_t hint_rows, hint_keys, hint_values;
    long long last_offset; /* of the last row added, -1 when none */
} ColumnsObject;

static PyTypeObject ColumnsType;

static int columns_reset(ColumnsObject *self) {
    Py_ssize_t rows = self->hint_rows;
    self->rows = 0;
    self->last_offset = -1;
    self->header_entries = 0;
    if (gb_init(&self->offsets, 8 * rows) < 0 || gb_init(&self->timestamps, 8 * rows) < 0)
        return -1;
    if (vc_init(&self->keys, rows, self->hint_keys) < 0 ||
        vc_init(&self->values, rows, self->hint_values) < 0)
        return -1;
    if (vc_init(&self->hlist_dummy, self->headers ? rows : 0, 0) < 0 ||
        vc_init(&self->hkeys, 0, 0) < 0 || vc_init(&self->hvalues, 0, 0) < 0)
        return -1;
    return 0;
}

static void columns_clear(ColumnsObject *self) {
    Py_CLEAR(self->offsets.ba);
    Py_CLEAR(self->timestamps.ba);
    vc_clear(&self->keys);
    vc_clear(&self->values);
    vc_clear(&self->hlist_dummy);
    vc_clear(&self->hkeys);
    vc_clear(&self->hvalues);
}

static int Columns_init(ColumnsObject *self, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"include_headers", NULL};
    int headers = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "|p", kwlist, &headers)) return -1;
    columns_clear(self);
    self->headers = headers;
    return columns_reset(self);
}

static void Columns_dealloc(ColumnsObject *self) {
    columns_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int check_header(void *ctx, const uint8_t *k, int32_t klen, const uint8_t *v,
                        int32_t vlen) {
    (void)ctx;
    (void)v;
    (void)vlen;
    PyObject *check = PyUnicode_DecodeUTF8((const char *)k, klen, "strict");
    if (!check) return -1;
    Py_DECREF(check);
    return 0;
}

static int add_header_column(void *ctx, const uint8_t *k, int32_t klen, const uint8_t *v,
                             int32_t vlen) {
    ColumnsObject *c = (ColumnsObject *)ctx;
    Py_ssize_t i = c->header_entries++;
    if (vc_add(&c->hkeys, i, k, klen) < 0) return -1;
    return vc_add(&c->hvalues, i, v, vlen);
}

/* The list entry of row i: its validity (null when it has no headers) and end offset. */
static int close_header_list(ColumnsObject *c, Py_ssize_t row, int has) {
    VarColumn *l = &c->hlist_dummy;
    if ((row & 7) == 0) {
        if (gb_reserve(&l->validity, 1) < 0) return -1;
        gb_ptr(&l->validity)[l->validity.len++] = 0;
    }
    if (has)
        gb_ptr(&l->validity)[row >> 3] |= (uint8_t)(1u << (row & 7));
    else
        l->nulls++;
    int32_t off = (int32_t)c->header_entries;
    return gb_put(&l->offsets, &off, 4);
}

static inline int columns_row(ColumnsObject *c, int64_t offset, int64_t ts_ms,
                              const uint8_t *k, Py_ssize_t klen, const uint8_t *v,
                              Py_ssize_t vlen) {
    int64_t us = ts_ms * 1000;
    Py_ssize_t i = c->rows;
    if (gb_put(&c->offsets, &offset, 8) < 0 || gb_put(&c->timestamps, &us, 8) < 0 ||
        vc_add(&c->keys, i, k, klen) < 0 || vc_add(&c->values, i, v, vlen) < 0)
        return -1;
    c->last_offset = offset;
    return 0;
}

/* Room for data in int32 Arrow offsets. */
static inline int columns_fits(ColumnsObject *c, Py_ssize_t klen, Py_ssize_t vlen) {
    return c->keys.data.len + klen <= INT32_MAX && c->values.data.len + vlen <= INT32_MAX;
}

/* Records of one batch into the columns, from its cursor on. Returns a STATUS_* (or -1);
   *added counts the rows added. */
static int batch_columns(BatchObject *self, ColumnsObject *c, long long min_offset,
                         Py_ssize_t limit, long long end_offset, Py_ssize_t *added) {
    Record r;
    *added = 0;
    while (self->index < self->record_count) {
        if (*added >= limit) return STATUS_FULL;
        if (decode_record(self, self->pos, &r) < 0) return -1;
        if (r.offset >= end_offset) return STATUS_END;
        if (r.offset >= min_offset) {
            Py_ssize_t kl = r.key_len > 0 ? r.key_len : 0, vl = r.value_len > 0 ? r.value_len : 0;
            if (c->rows > 0 && !columns_fits(c, kl, vl)) return STATUS_FULL;
            /* Headers are checked (bounds, UTF-8 keys: the key column is Arrow utf8) before
               anything of the row is added, so that an error leaves whole rows only. */
            if (c->headers && walk_headers(self, &r, check_header, NULL) < 0) return -1;
            if (columns_row(c, r.offset, r.timestamp, r.key, kl, r.value, vl) < 0) return -1;
            if (c->headers) {
                if (walk_headers(self, &r, add_header_column, c) < 0) return -1;
                if (close_header_list(c, c->rows, r.header_count > 0) < 0) return -1;
            }
            c->rows++;
            (*added)++;
            self->last_offset = r.offset;
        }
        self->pos = r.next;
        self->index++;
    }
    return STATUS_DONE;
}

/* The batch at batches[index] when the native loops can read it: an uncompressed, non-control
   native batch. Control batches, and batches marked aborted (read_committed), are stepped over
   (*consumed moves past them). */
enum { STATUS_FOREIGN = 4, STATUS_TS_TYPE = 5, STATUS_ERROR = 6 };

/*
 * take_messages_from(batches, index, out, mam_type, topic, partition, min_offset, limit,
 *                    deadline) -> (appended, index, status, consumed)
 *
 * The records of batches[index:] (a list), batch after batch, into `out`, until `limit`
 * records are appended (STATUS_FULL), the deadline passes (STATUS_GATE), the list ends
 * (STATUS_DONE), or an item the loop cannot read is reached (STATUS_FOREIGN: a compressed
 * batch, a batch of aiokafka's, a skipped batch; `index` points at it). Control batches and
 * batches marked aborted (Batch.mark_aborted, read_committed) are stepped over. `consumed`:
 * the offset after the last record appended or batch stepped over, -1 when none. A
 * malformed record raises MalformedBatch (a ValueError) when nothing was appended in this
 * call; otherwise the call returns what it has with STATUS_ERROR and the next one raises.
 */
static PyObject *take_messages_from(PyObject *mod, PyObject *args) {
    (void)mod;
    PyObject *batches, *out, *topic, *partition;
    PyTypeObject *mam;
    Py_ssize_t index, limit, total = 0, got;
    long long min_offset, consumed = -1;
    double deadline;
    if (!PyArg_ParseTuple(args, "O!nO!O!UOLnd", &PyList_Type, &batches, &index, &PyList_Type,
                          &out, &PyType_Type, &mam, &topic, &partition, &min_offset, &limit,
                          &deadline))
        return NULL;
    if (check_mam(mam) < 0) return NULL;
    int status = STATUS_DONE;
    while (1) {
        if (index >= PyList_GET_SIZE(batches)) {
            status = STATUS_DONE;
            break;
        }
        if (total >= limit) {
            status = STATUS_FULL;
            break;
        }
        PyObject *item = PyList_GET_ITEM(batches, index);
        if (Py_TYPE(item) != &BatchType) {
            status = STATUS_FOREIGN;
            break;
        }
        BatchObject *b = (BatchObject *)item;
        if ((b->attributes & 0x20) || b->aborted) {
            /* A control batch (a transaction marker) or an aborted transaction's batch. */
            long long next = b->base_offset + b->last_offset_delta + 1;
            if (next > consumed) consumed = next;
            index++;
            continue;
        }
        if (b->attributes & 0x07) {
            status = STATUS_FOREIGN;
            break;
        }
        int st = batch_messages(b, out, mam, topic, partition, TS_TYPES,
                                min_offset > consumed ? min_offset : consumed, limit - total,
                                deadline, &got);
        if (st < 0) {
            if (total + got == 0) return NULL;
            /* Hand over what was read; the next call starts at the bad record and raises. */
            PyErr_Clear();
            st = STATUS_ERROR;
        }
        total += got;
        if (got && b->last_offset + 1 > consumed) consumed = b->last_offset + 1;
        if (st == STATUS_DONE) {
            index++;
            continue;
        }
        status = st;
        break;
    }
    return Py_BuildValue("(nniL)", total, index, status, consumed);
}

/*
 * take_columns_from(batches, index, columns, min_offset, limit, end_offset=2**63-1)
 *   -> (added, index, status, consumed, timestamp_type)
 *
 * As take_messages_from, into the columns. It also stops before a batch whose timestamp
 * type differs from that of the rows added so far (STATUS_TS_TYPE: the caller records the
 * run and calls again) and at end_offset (STATUS_END). `timestamp_type` is that of the rows
 * added (-1 when none).
 */
static PyObject *take_columns_from(PyObject *mod, PyObject *args) {
    (void)mod;
    PyObject *batches;
    ColumnsObject *c;
    Py_ssize_t index, limit, total = 0, got;
    long long min_offset, end_offset = INT64_MAX, consumed = -1;
    int ts_type = -1;
    if (!PyArg_ParseTuple(args, "O!nO!Ln|L", &PyList_Type, &batches, &index, &ColumnsType, &c,
                          &min_offset, &limit, &end_offset))
        return NULL;
    int status = STATUS_DONE;
    while (1) {
        if (index >= PyList_GET_SIZE(batches)) {
            status = STATUS_DONE;
            break;
        }
        if (total >= limit) {
            status = STATUS_FULL;
            break;
        }
        PyObject *item = PyList_GET_ITEM(batches, index);
        if (Py_TYPE(item) != &BatchType) {
            status = STATUS_FOREIGN;
            break;
        }
        BatchObject *b = (BatchObject *)item;
        long long next = b->base_offset + b->last_offset_delta + 1;
        if ((b->attributes & 0x20) || b->aborted) {
            if (b->base_offset >= end_offset) {
                status = STATUS_END;
                break;
            }
            if (next > consumed) consumed = next;
            index++;
            continue;
        }
        if (b->attributes & 0x07) {
            status = STATUS_FOREIGN;
            break;
        }
        int type = (b->attributes & 0x08) ? 1 : 0;
        if (total > 0 && type != ts_type) {
            status = STATUS_TS_TYPE;
            break;
        }
        int st = batch_columns(b, c, min_offset > consumed ? min_offset : consumed,
                               limit - total, end_offset, &got);
        if (st < 0) {
            if (total + got == 0) return NULL;
            PyErr_Clear(); /* as take_messages_from */
            st = STATUS_ERROR;
        }
        if (got) {
            ts_type = type;
            total += got;
            if (b->last_offset + 1 > consumed) consumed = b->last_offset + 1;
        }
        if (st == STATUS_DONE) {
            index++;
            continue;
        }
        status = st;
        break;
    }
    return Py_BuildValue("(nniLi)", total, index, status, consumed, ts_type);
}

/* append(offset, timestamp_ms, key, value, headers): one record from elsewhere. */
static PyObject *Columns_append(ColumnsObject *self, PyObject *args) {
    long long offset, ts;
    PyObject *key, *value, *headers;
    if (!PyArg_ParseTuple(args, "LLOOO", &offset, &ts, &key, &value, &headers)) return NULL;
    Py_buffer kb = {0}, vb = {0};
    int ok = -1;
    if (key != Py_None && PyObject_GetBuffer(key, &kb, PyBUF_SIMPLE) < 0) return NULL;
    if (value != Py_None && PyObject_GetBuffer(value, &vb, PyBUF_SIMPLE) < 0) goto done;
    ok = columns_row(self, offset, ts, key != Py_None ? kb.buf : NULL, kb.len,
                     value != Py_None ? vb.buf : NULL, vb.len);
    if (ok == 0 && self->headers) {
        Py_ssize_t n = 0;
        if (headers != Py_None) {
            PyObject *seq = PySequence_Fast(headers, "headers must be a sequence");
            if (!seq) {
                ok = -1;
                goto done;
            }
            n = PySequence_Fast_GET_SIZE(seq);
            for (Py_ssize_t i = 0; i < n && ok == 0; i++) {
                PyObject *kv = PySequence_Fast_GET_ITEM(seq, i);
                PyObject *hk, *hv;
                if (!PyArg_ParseTuple(kv, "UO", &hk, &hv)) {
                    ok = -1;
                    break;
                }
                Py_ssize_t klen;
                const char *ks = PyUnicode_AsUTF8AndSize(hk, &klen);
                if (!ks) {
                    ok = -1;
                    break;
                }
                Py_ssize_t e = self->header_entries++;
                ok = vc_add(&self->hkeys, e, (const uint8_t *)ks, klen);
                if (ok == 0) {
                    if (hv == Py_None) {
                        ok = vc_add(&self->hvalues, e, NULL, 0);
                    } else {
                        Py_buffer hb;
                        if (PyObject_GetBuffer(hv, &hb, PyBUF_SIMPLE) < 0) {
                            ok = -1;
                        } else {
                            ok = vc_add(&self->hvalues, e, hb.buf, hb.len);
                            PyBuffer_Release(&hb);
                        }
                    }
                }
            }
            Py_DECREF(seq);
        }
        if (ok == 0) ok = close_header_list(self, self->rows, n > 0);
    }
    if (ok == 0) self->rows++;
done:
    if (kb.obj) PyBuffer_Release(&kb);
    if (vb.obj) PyBuffer_Release(&vb);
    if (ok < 0) return NULL;
    Py_RETURN_NONE;
}

static PyObject *vc_take(VarColumn *c, Py_ssize_t rows) {
    PyObject *validity = gb_take(&c->validity);
    PyObject *offsets = gb_take(&c->offsets);
    PyObject *data = gb_take(&c->data);
    PyObject *out = NULL;
    if (validity && offsets && data)
        out = Py_BuildValue("(OOOn)", c->nulls ? validity : Py_None, offsets, data, c->nulls);
    Py_XDECREF(validity);
    Py_XDECREF(offsets);
    Py_XDECREF(data);
    (void)rows;
    return out;
}

/*
 * take() -> (rows, offsets, timestamps, keys, values, headers)
 *   offsets, timestamps: bytearrays of int64 (microseconds for timestamps);
 *   keys, values: (validity or None, int32 offsets, data, null count);
 *   headers: None, or (list validity or None, list offsets, list null count, entries,
 *            header keys (as keys), header values (as values)).
 * The columns start empty again.
 */
static PyObject *Columns_take(ColumnsObject *self, PyObject *Py_UNUSED(ignored)) {
    Py_ssize_t rows = self->rows, entries = self->header_entries;
    self->hint_rows = rows;
    self->hint_keys = self->keys.data.len;
    self->hint_values = self->values.data.len;
    PyObject *offsets = gb_take(&self->offsets);
    PyObject *timestamps = gb_take(&self->timestamps);
    PyObject *keys = vc_take(&self->keys, rows);
    PyObject *values = vc_take(&self->values, rows);
    PyObject *headers = NULL, *out = NULL;
    if (self->headers) {
        VarColumn *l = &self->hlist_dummy;
        PyObject *lvalid = gb_take(&l->validity);
        PyObject *loffs = gb_take(&l->offsets);
        PyObject *hk = vc_take(&self->hkeys, entries);
        PyObject *hv = vc_take(&self->hvalues, entries);
        if (lvalid && loffs && hk && hv)
            headers = Py_BuildValue("(OOnnOO)", l->nulls ? lvalid : Py_None, loffs, l->nulls,
                                    entries, hk, hv);
        Py_XDECREF(lvalid);
        Py_XDECREF(loffs);
        Py_XDECREF(hk);
        Py_XDECREF(hv);
    } else {
        headers = Py_NewRef(Py_None);
    }
    if (offsets && timestamps && keys && values && headers)
        out = Py_BuildValue("(nOOOOO)", rows, offsets, timestamps, keys, values, headers);
    Py_XDECREF(offsets);
    Py_XDECREF(timestamps);
    Py_XDECREF(keys);
    Py_XDECREF(values);
    Py_XDECREF(headers);
    if (!out) return NULL;
    /* Fresh, empty columns (the taken bytearrays now belong to the caller). */
    columns_clear(self);
    if (columns_reset(self) < 0) {
        Py_DECREF(out);
        return NULL;
    }
    return out;
}

static Py_ssize_t Columns_len(ColumnsObject *self) { return self->rows; }

static PyObject *Columns_get_data_bytes(ColumnsObject *self, void *closure) {
    (void)closure;
    return PyLong_FromSsize_t(self->keys.data.len + self->values.data.len);
}

static PyMethodDef Columns_methods[] = {
    {"append", (PyCFunction)Columns_append, METH_VARARGS,
     "append(offset, timestamp_ms, key, value, headers): add one record (keys and values "
     "bytes-like or None; headers a sequence of (str, bytes | None) or None)."},
    {"take", (PyCFunction)Columns_take, METH_NOARGS,
     "take() -> the gathered buffers (see the module docstring); the columns start empty."},
    {NULL, NULL, 0, NULL},
};

static PyMemberDef Columns_members[] = {
    {"last_offset", T_LONGLONG, offsetof(ColumnsObject, last_offset), READONLY,
     "the offset of the last row added, -1 when none"},
    {NULL, 0, 0, 0, NULL},
};

static PyGetSetDef Columns_getset[] = {
    {"data_bytes", (getter)Columns_get_data_bytes, NULL, "key and value bytes gathered", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PySequenceMethods Columns_as_sequence = {.sq_length = (lenfunc)Columns_len};

static PyTypeObject ColumnsType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "aiozkconsumer.kafka._native.Columns",
    .tp_basicsize = sizeof(ColumnsObject),
    .tp_dealloc = (destructor)Columns_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Columns(include_headers=False): records gathered into Arrow buffers.",
    .tp_methods = Columns_methods,
    .tp_getset = Columns_getset,
    .tp_members = Columns_members,
    .tp_as_sequence = &Columns_as_sequence,
    .tp_init = (initproc)Columns_init,
    .tp_new = PyType_GenericNew,
};

/* ---------------------------------------------------------------- Batch, cont. */

static PyObject *Batch_with_records(BatchObject *self, PyObject *arg) {
    /* A batch of the same header whose records are `arg` (the decompressed payload). */
    BatchObject *b = PyObject_New(BatchObject, &BatchType);
    if (!b) return NULL;
    memset(&b->view, 0, sizeof(b->view));
    if (get_bytes(arg, &b->view) < 0) {
        Py_DECREF(b);
        return NULL;
    }
    b->start = self->start;
    b->end = self->end;
    b->pos = 0;
    b->rec_start = 0;
    b->rec_end = b->view.len;
    b->index = 0;
    b->base_offset = self->base_offset;
    b->last_offset_delta = self->last_offset_delta;
    b->base_timestamp = self->base_timestamp;
    b->max_timestamp = self->max_timestamp;
    b->producer_id = self->producer_id;
    b->record_count = self->record_count;
    b->attributes = (int16_t)(self->attributes & ~0x07); /* no longer compressed */
    b->magic = self->magic;
    b->crc = self->crc;
    b->last_offset = -1;
    b->aborted = self->aborted;
    return (PyObject *)b;
}

static PyObject *Batch_records_bytes(BatchObject *self, PyObject *Py_UNUSED(ignored)) {
    /* The records part of the batch (for a compressed one: the compressed payload). */
    return PyBytes_FromStringAndSize((const char *)self->view.buf + self->start + HEADER_SIZE,
                                     self->end - self->start - HEADER_SIZE);
}

static PyObject *Batch_is_control(BatchObject *self, void *c) {
    (void)c;
    return PyBool_FromLong(self->attributes & 0x20);
}
static PyObject *Batch_compression(BatchObject *self, void *c) {
    (void)c;
    return PyLong_FromLong(self->attributes & 0x07);
}
static PyObject *Batch_timestamp_type(BatchObject *self, void *c) {
    (void)c;
    return PyLong_FromLong((self->attributes & 0x08) ? 1 : 0);
}
static PyObject *Batch_next_offset(BatchObject *self, void *c) {
    (void)c;
    return PyLong_FromLongLong(self->base_offset + self->last_offset_delta + 1);
}
static PyObject *Batch_is_transactional(BatchObject *self, void *c) {
    (void)c;
    return PyBool_FromLong(self->attributes & 0x10);
}
static PyObject *Batch_get_aborted(BatchObject *self, void *c) {
    (void)c;
    return PyBool_FromLong(self->aborted);
}
/* The type of a control batch's first record (its key: version int16, type int16): 0 ABORT,
   1 COMMIT, as ControlRecordType; -1 for a batch that is not an uncompressed control batch
   with such a record. */
static PyObject *Batch_control_type(BatchObject *self, void *c) {
    (void)c;
    if (!(self->attributes & 0x20) || (self->attributes & 0x07) || self->record_count < 1)
        return PyLong_FromLong(-1);
    Record r;
    int32_t saved_index = self->index;
    self->index = 0;
    int rc = decode_record(self, self->rec_start, &r);
    self->index = saved_index;
    if (rc < 0) {
        PyErr_Clear();
        return PyLong_FromLong(-1);
    }
    if (!r.key || r.key_len < 4) return PyLong_FromLong(-1);
    return PyLong_FromLong(be16(r.key + 2));
}
static PyObject *Batch_mark_aborted(BatchObject *self, PyObject *Py_UNUSED(ignored)) {
    /* read_committed: the batch belongs to an aborted transaction; the take loops step over
       it as over a control batch (the consumed offset moves past it, no record is read). */
    self->aborted = 1;
    Py_RETURN_NONE;
}
static PyObject *Batch_exhausted(BatchObject *self, void *c) {
    (void)c;
    return PyBool_FromLong(self->index >= self->record_count);
}

static PyMemberDef Batch_members[] = {
    {"base_offset", T_LONGLONG, offsetof(BatchObject, base_offset), READONLY, "first offset"},
    {"last_offset_delta", T_INT, offsetof(BatchObject, last_offset_delta), READONLY, NULL},
    {"base_timestamp", T_LONGLONG, offsetof(BatchObject, base_timestamp), READONLY, NULL},
    {"max_timestamp", T_LONGLONG, offsetof(BatchObject, max_timestamp), READONLY, NULL},
    {"producer_id", T_LONGLONG, offsetof(BatchObject, producer_id), READONLY, NULL},
    {"record_count", T_INT, offsetof(BatchObject, record_count), READONLY, NULL},
    {"attributes", T_SHORT, offsetof(BatchObject, attributes), READONLY, NULL},
    {"magic", T_BYTE, offsetof(BatchObject, magic), READONLY, NULL},
    {"crc", T_UINT, offsetof(BatchObject, crc), READONLY, "the stored CRC-32C"},
    {"start", T_PYSSIZET, offsetof(BatchObject, start), READONLY, "position in the record set"},
    {"end", T_PYSSIZET, offsetof(BatchObject, end), READONLY, "end in the record set"},
    {"index", T_INT, offsetof(BatchObject, index), READONLY, "records read so far"},
    {"last_offset", T_LONGLONG, offsetof(BatchObject, last_offset), READONLY,
     "the offset of the last record taken, -1 when none"},
    {NULL, 0, 0, 0, NULL},
};

static PyGetSetDef Batch_getset[] = {
    {"is_control_batch", (getter)Batch_is_control, NULL, "a transaction marker batch", NULL},
    {"compression", (getter)Batch_compression, NULL, "codec id (0 none)", NULL},
    {"timestamp_type", (getter)Batch_timestamp_type, NULL, "0 CreateTime, 1 LogAppendTime",
     NULL},
    {"next_offset", (getter)Batch_next_offset, NULL, "the offset after the last one", NULL},
    {"exhausted", (getter)Batch_exhausted, NULL, "every record has been read", NULL},
    {"is_transactional", (getter)Batch_is_transactional, NULL,
     "written by a transactional producer (attributes bit 0x10)", NULL},
    {"aborted", (getter)Batch_get_aborted, NULL,
     "marked as a batch of an aborted transaction (mark_aborted)", NULL},
    {"control_type", (getter)Batch_control_type, NULL,
     "a control batch's marker type: 0 ABORT, 1 COMMIT; -1 otherwise", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyMethodDef Batch_methods[] = {
    {"with_records", (PyCFunction)Batch_with_records, METH_O,
     "with_records(payload) -> this batch over its decompressed records"},
    {"records_bytes", (PyCFunction)Batch_records_bytes, METH_NOARGS,
     "records_bytes() -> bytes of the records part (compressed or not)"},
    {"mark_aborted", (PyCFunction)Batch_mark_aborted, METH_NOARGS,
     "mark_aborted(): a batch of an aborted transaction; the take loops step over it"},
    {NULL, NULL, 0, NULL},
};

static PyObject *Batch_repr(BatchObject *self) {
    return PyUnicode_FromFormat("<native Batch offsets %lld..%lld, %d records, attributes %d>",
                                (long long)self->base_offset,
                                (long long)(self->base_offset + self->last_offset_delta),
                                (int)self->record_count, (int)self->attributes);
}

static PyTypeObject BatchType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "aiozkconsumer.kafka._native.Batch",
    .tp_basicsize = sizeof(BatchObject),
    .tp_dealloc = (destructor)Batch_dealloc,
    .tp_repr = (reprfunc)Batch_repr,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A magic-2 record batch with a cursor over its records (parse_record_set).",
    .tp_methods = Batch_methods,
    .tp_members = Batch_members,
    .tp_getset = Batch_getset,
};

/* ---------------------------------------------------------------- module */

/*
 * parse_record_set(data, check_crcs) -> (batches, end, legacy_at, corrupt)
 *   batches: a Batch per complete magic-2 batch, in order;
 *   end: the position after the last complete batch (a trailing partial batch is left);
 *   legacy_at: the position of the first batch of magic 0/1 (parsing stops there), or -1.
 *   corrupt: with check_crcs, the batches (also in batches) whose CRC-32C does not match.
 * Raises ValueError for a batch whose header is malformed.
 *
 * Two passes: the batch headers (with the GIL: each makes a Batch), then the CRCs of all the
 * complete batches with the GIL released (several GiB/s, but the one pass over every fetched
 * byte), so that a fetch thread checking one record set lets the event loop run meanwhile.
 * The buffer is pinned by the view held across both passes (a bytearray cannot be resized
 * while exported), and every Batch holds a view of its own too.
 */
enum { CRC_UNLOCKED_MIN = 32 * 1024 }; /* fewer bytes: not worth releasing the GIL */

static PyObject *parse_record_set(PyObject *mod, PyObject *args) {
    (void)mod;
    PyObject *data;
    int check = 1;
    if (!PyArg_ParseTuple(args, "O|p", &data, &check)) return NULL;
    Py_buffer view;
    if (get_bytes(data, &view) < 0) return NULL;
    const uint8_t *buf = (const uint8_t *)view.buf;
    Py_ssize_t n = view.len, pos = 0, legacy_at = -1, checked_bytes = 0;
    Py_ssize_t nb = 0;
    uint32_t *crcs = NULL; /* the computed CRC of each batch (check only) */
    PyObject *batches = PyList_New(0), *bad = PyList_New(0);
    if (!batches || !bad) goto error;
    while (pos + 17 <= n) {
        int32_t length = be32(buf + pos + 8);
        int8_t magic = (int8_t)buf[pos + 16];
        if (length < 0) {
            PyErr_Format(PyExc_ValueError, "record set: negative batch length at %zd", pos);
            goto error;
        }
        Py_ssize_t stop = pos + LOG_OVERHEAD + (Py_ssize_t)length;
        if (stop > n) break; /* a trailing partial batch */
        if (magic < 2) {
            legacy_at = pos;
            break;
        }
        if (length < HEADER_SIZE - LOG_OVERHEAD) {
            PyErr_Format(PyExc_ValueError, "record set: batch at %zd shorter than its header",
                         pos);
            goto error;
        }
        BatchObject *b = PyObject_New(BatchObject, &BatchType);
        if (!b) goto error;
        if (PyObject_GetBuffer(data, &b->view, PyBUF_SIMPLE) < 0) {
            memset(&b->view, 0, sizeof(b->view));
            Py_DECREF(b);
            goto error;
        }
        const uint8_t *h = buf + pos;
        b->start = pos;
        b->end = stop;
        b->pos = pos + HEADER_SIZE;
        b->rec_start = pos + HEADER_SIZE;
        b->rec_end = stop;
        b->index = 0;
        b->base_offset = be64(h);
        b->magic = magic;
        b->crc = (uint32_t)be32(h + CRC_AT);
        b->attributes = be16(h + 21);
        b->last_offset_delta = be32(h + 23);
        b->base_timestamp = be64(h + 27);
        b->max_timestamp = be64(h + 35);
        b->producer_id = be64(h + 43);
        b->record_count = be32(h + 57);
        b->last_offset = -1;
        b->aborted = 0;
        if (b->record_count < 0) b->record_count = 0;
        if (PyList_Append(batches, (PyObject *)b) < 0) {
            Py_DECREF(b);
            goto error;
        }
        Py_DECREF(b);
        checked_bytes += stop - pos - CRC_FROM;
        pos = stop;
    }
    nb = PyList_GET_SIZE(batches);
    if (check && nb) {
        crcs = PyMem_Malloc((size_t)nb * sizeof(uint32_t));
        Py_ssize_t *starts = PyMem_Malloc((size_t)nb * 2 * sizeof(Py_ssize_t));
        if (!crcs || !starts) {
            PyMem_Free(starts);
            PyErr_NoMemory();
            goto error;
        }
        for (Py_ssize_t i = 0; i < nb; i++) {
            BatchObject *b = (BatchObject *)PyList_GET_ITEM(batches, i);
            starts[2 * i] = b->start;
            starts[2 * i + 1] = b->end;
        }
        if (checked_bytes >= CRC_UNLOCKED_MIN) {
            Py_BEGIN_ALLOW_THREADS
            for (Py_ssize_t i = 0; i < nb; i++)
                crcs[i] = crc32c(buf + starts[2 * i] + CRC_FROM,
                                 (size_t)(starts[2 * i + 1] - starts[2 * i] - CRC_FROM));
            Py_END_ALLOW_THREADS
        } else {
            for (Py_ssize_t i = 0; i < nb; i++)
                crcs[i] = crc32c(buf + starts[2 * i] + CRC_FROM,
                                 (size_t)(starts[2 * i + 1] - starts[2 * i] - CRC_FROM));
        }
        PyMem_Free(starts);
        for (Py_ssize_t i = 0; i < nb; i++) {
            PyObject *b = PyList_GET_ITEM(batches, i);
            if (crcs[i] != ((BatchObject *)b)->crc && PyList_Append(bad, b) < 0) goto error;
        }
        PyMem_Free(crcs);
        crcs = NULL;
    }
    PyBuffer_Release(&view);
    return Py_BuildValue("(NnnN)", batches, pos, legacy_at, bad);
error:
    PyMem_Free(crcs);
    PyBuffer_Release(&view);
    Py_XDECREF(batches);
    Py_XDECREF(bad);
    return NULL;
}

static PyObject *py_alloc(PyObject *mod, PyObject *arg) {
    (void)mod;
    Py_ssize_t n = PyLong_AsSsize_t(arg);
    if (n == -1 && PyErr_Occurred()) return NULL;
    if (n < 0) {
        PyErr_SetString(PyExc_ValueError, "alloc: negative size");
        return NULL;
    }
    return ba_new(n); /* not zero-filled, unlike bytearray(n); recycled when free */
}

static PyObject *py_crc32c(PyObject *mod, PyObject *arg) {
    (void)mod;
    Py_buffer view;
    if (get_bytes(arg, &view) < 0) return NULL;
    uint32_t c;
    Py_BEGIN_ALLOW_THREADS
    c = crc32c((const uint8_t *)view.buf, (size_t)view.len);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&view);
    return PyLong_FromUnsignedLong(c);
}

static PyMethodDef module_methods[] = {
    {"parse_record_set", parse_record_set, METH_VARARGS,
     "parse_record_set(data, check_crcs=True) -> (batches, end, legacy_at, corrupt)"},
    {"crc32c", py_crc32c, METH_O, "crc32c(data) -> the CRC-32C (Castagnoli) of data"},
    {"take_messages_from", take_messages_from, METH_VARARGS,
     "take_messages_from(batches, index, out, mam_type, topic, partition, min_offset, limit, "
     "deadline) -> (appended, index, status, consumed)"},
    {"take_columns_from", take_columns_from, METH_VARARGS,
     "take_columns_from(batches, index, columns, min_offset, limit, end_offset=2**63-1) -> "
     "(added, index, status, consumed, timestamp_type)"},
    {"alloc", py_alloc, METH_O,
     "alloc(n) -> a bytearray of n bytes, not zero-filled (to be received into)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "aiozkconsumer.kafka._native",
    "Magic-2 record batches decoded into MessageAndMetadata tuples or Arrow buffers.", -1,
    module_methods,
};

PyMODINIT_FUNC PyInit__native(void) {
    crc_init();
    TS_TYPES[0] = PyLong_FromLong(0);
    TS_TYPES[1] = PyLong_FromLong(1);
    if (!TS_TYPES[0] || !TS_TYPES[1]) return NULL;
    MalformedBatch = PyErr_NewExceptionWithDoc(
        "aiozkconsumer.kafka._native.MalformedBatch",
        "A record batch that does not parse; args: (message, base offset, last offset).",
        PyExc_ValueError, NULL);
    if (!MalformedBatch) return NULL;
    if (PyType_Ready(&BatchType) < 0 || PyType_Ready(&ColumnsType) < 0) return NULL;
    PyObject *m = PyModule_Create(&module_def);
    if (!m) return NULL;
    if (PyModule_AddObjectRef(m, "Batch", (PyObject *)&BatchType) < 0 ||
        PyModule_AddObjectRef(m, "Columns", (PyObject *)&ColumnsType) < 0 ||
        PyModule_AddIntConstant(m, "HARDWARE_CRC32C", crc_hardware) < 0 ||
        PyModule_AddIntConstant(m, "STATUS_DONE", STATUS_DONE) < 0 ||
        PyModule_AddIntConstant(m, "STATUS_FULL", STATUS_FULL) < 0 ||
        PyModule_AddIntConstant(m, "STATUS_GATE", STATUS_GATE) < 0 ||
        PyModule_AddIntConstant(m, "STATUS_END", STATUS_END) < 0 ||
        PyModule_AddIntConstant(m, "STATUS_FOREIGN", STATUS_FOREIGN) < 0 ||
        PyModule_AddIntConstant(m, "STATUS_TS_TYPE", STATUS_TS_TYPE) < 0 ||
        PyModule_AddIntConstant(m, "STATUS_ERROR", STATUS_ERROR) < 0 ||
        PyModule_AddObjectRef(m, "MalformedBatch", MalformedBatch) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
