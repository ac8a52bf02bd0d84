/*
 * aiozkconsumer._handout: the hand-out of a record `async for` read ahead, in C.
 *
 * ConsumerIterator (iterator.py) decodes up to a chunk's worth of records ahead of the reader
 * and hands them out one per `__anext__`. Written in Python, that step costs a coroutine per
 * record (frame, StopIteration, the awaiting machinery), several times the work it does. Here
 * `ReadAhead` is ConsumerIterator's base type: its `am_anext` hands the next record read ahead
 * out directly, with the same checks as iterator.py's pure-Python `_ReadAhead.__anext__`:
 *
 *   - the partition's gate is open and its lease deadline (monotonic seconds) not reached;
 *   - the partition is still owned (`active`) and its position did not move since the records
 *     were read (`truncations`);
 *   - the partition's consumed offset is set past the record (to `_ahead_end` after the last).
 *
 * and returns a `Ready` awaitable holding the record, which completes at once (`am_send`, so
 * no StopIteration is made). When no record read ahead can go out, it returns
 * `self._next_record()`, the Python coroutine that waits. The read-ahead lives in the
 * members below, named as the Python attributes they replace.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <time.h>

static PyObject *str_gate, *str_open, *str_deadline, *str_active, *str_truncations,
    *str_consumed_offset, *str_next_record, *str_end_ahead, *one;

static double monotonic_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ------------------------------------------------------------------ Ready */

typedef struct {
    PyObject_HEAD
    PyObject *value; /* the record; NULL once delivered */
} ReadyObject;

static PyTypeObject ReadyType;

static void Ready_dealloc(ReadyObject *self) {
    Py_XDECREF(self->value);
    PyObject_Free(self);
}

static PyObject *Ready_await(PyObject *self) { return Py_NewRef(self); }

static PySendResult Ready_send(ReadyObject *self, PyObject *arg, PyObject **result) {
    PyObject *value = self->value;
    self->value = NULL;
    *result = value ? value : Py_NewRef(Py_None);
    return PYGEN_RETURN;
}

/* The iterator protocol (used where am_send is not, e.g. under a tracer): the value comes
   as StopIteration(value), made explicitly since the record is a tuple. */
static PyObject *Ready_iternext(ReadyObject *self) {
    PyObject *value = self->value;
    if (!value) return NULL;
    self->value = NULL;
    PyObject *stop = PyObject_CallOneArg(PyExc_StopIteration, value);
    Py_DECREF(value);
    if (stop) {
        PyErr_SetObject(PyExc_StopIteration, stop);
        Py_DECREF(stop);
    }
    return NULL;
}

static PyAsyncMethods Ready_async = {
    .am_await = Ready_await,
    .am_send = (sendfunc)Ready_send,
};

static PyTypeObject ReadyType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "aiozkconsumer._handout.Ready",
    .tp_basicsize = sizeof(ReadyObject),
    .tp_dealloc = (destructor)Ready_dealloc,
    .tp_as_async = &Ready_async,
    .tp_iter = PyObject_SelfIter,
    .tp_iternext = (iternextfunc)Ready_iternext,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "An awaitable that completes at once with a record.",
};

/* --------------------------------------------------------------- ReadAhead */

typedef struct {
    PyObject_HEAD
    PyObject *ahead;             /* list of records, reversed: the next one last */
    PyObject *ahead_pti;         /* their PartitionTopicInfo (None when nothing is ahead) */
    PyObject *ahead_end;         /* int: the consumed offset once all are handed out */
    PyObject *ahead_truncations; /* int: the partition's truncations when they were read */
    double polled_at;            /* monotonic seconds of the reader's last ask */
} ReadAheadObject;

static int ReadAhead_traverse(ReadAheadObject *self, visitproc visit, void *arg) {
    Py_VISIT(self->ahead);
    Py_VISIT(self->ahead_pti);
    Py_VISIT(self->ahead_end);
    Py_VISIT(self->ahead_truncations);
    return 0;
}

static int ReadAhead_clear(ReadAheadObject *self) {
    Py_CLEAR(self->ahead);
    Py_CLEAR(self->ahead_pti);
    Py_CLEAR(self->ahead_end);
    Py_CLEAR(self->ahead_truncations);
    return 0;
}

static void ReadAhead_dealloc(ReadAheadObject *self) {
    PyObject_GC_UnTrack(self);
    ReadAhead_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* Whether the record read ahead may go out now: 1 yes, 0 no, -1 an error is set. */
static int may_hand_out(ReadAheadObject *self, PyObject *pti, double now) {
    PyObject *gate = PyObject_GetAttr(pti, str_gate);
    if (!gate) return -1;
    PyObject *open = PyObject_GetAttr(gate, str_open);
    if (!open) {
        Py_DECREF(gate);
        return -1;
    }
    int ok = PyObject_IsTrue(open);
    Py_DECREF(open);
    if (ok == 1) {
        PyObject *deadline = PyObject_GetAttr(gate, str_deadline);
        if (!deadline) {
            Py_DECREF(gate);
            return -1;
        }
        double d = PyFloat_AsDouble(deadline);
        Py_DECREF(deadline);
        if (d == -1.0 && PyErr_Occurred()) ok = -1;
        else ok = now < d;
    }
    Py_DECREF(gate);
    if (ok != 1) return ok;
    PyObject *active = PyObject_GetAttr(pti, str_active);
    if (!active) return -1;
    ok = PyObject_IsTrue(active);
    Py_DECREF(active);
    if (ok != 1) return ok;
    PyObject *truncations = PyObject_GetAttr(pti, str_truncations);
    if (!truncations) return -1;
    ok = PyObject_RichCompareBool(truncations, self->ahead_truncations, Py_EQ);
    Py_DECREF(truncations);
    return ok;
}

static PyObject *ReadAhead_anext(ReadAheadObject *self) {
    double now = monotonic_now();
    self->polled_at = now; /* the reader asks: poll liveness's clock starts anew */
    PyObject *ahead = self->ahead;
    PyObject *pti = self->ahead_pti;
    if (ahead && PyList_CheckExact(ahead) && PyList_GET_SIZE(ahead) > 0 && pti &&
        pti != Py_None && self->ahead_truncations) {
        Py_INCREF(pti);
        int ok = may_hand_out(self, pti, now);
        if (ok < 0) {
            Py_DECREF(pti);
            return NULL;
        }
        /* may_hand_out ran Python code (attribute lookups): the read-ahead may have been
           replaced meanwhile (then `ahead` is not read: it may be gone). */
        Py_ssize_t n = ahead == self->ahead ? PyList_GET_SIZE(ahead) : 0;
        if (ok && n > 0) {
            PyObject *msg = PyList_GET_ITEM(ahead, n - 1); /* its reference passes to us */
            Py_SET_SIZE((PyVarObject *)ahead, n - 1);
            PyObject *offset;
            if (n > 1) {
                PyObject *at = PyTuple_Check(msg) && PyTuple_GET_SIZE(msg) > 2
                                   ? PyTuple_GET_ITEM(msg, 2)
                                   : NULL;
                offset = at ? PyNumber_Add(at, one) : NULL;
                if (!at) PyErr_SetString(PyExc_TypeError, "a record read ahead is not a record");
            } else {
                offset = Py_XNewRef(self->ahead_end);
                if (!offset) PyErr_SetString(PyExc_AttributeError, "_ahead_end");
            }
            int r = offset ? PyObject_SetAttr(pti, str_consumed_offset, offset) : -1;
            Py_XDECREF(offset);
            Py_DECREF(pti);
            if (r == 0 && n == 1) {
                /* The last one: _end_ahead() empties the read-ahead and marks the meters. */
                PyObject *none = PyObject_CallMethodNoArgs((PyObject *)self, str_end_ahead);
                if (!none) r = -1;
                Py_XDECREF(none);
            }
            if (r < 0) {
                Py_DECREF(msg);
                return NULL;
            }
            ReadyObject *ready = PyObject_New(ReadyObject, &ReadyType);
            if (!ready) {
                Py_DECREF(msg);
                return NULL;
            }
            ready->value = msg;
            return (PyObject *)ready;
        }
        Py_DECREF(pti);
    }
    return PyObject_CallMethodNoArgs((PyObject *)self, str_next_record);
}

static PyMemberDef ReadAhead_members[] = {
    {"_ahead", T_OBJECT_EX, offsetof(ReadAheadObject, ahead), 0,
     "The records read ahead, reversed (the next one last)."},
    {"_ahead_pti", T_OBJECT_EX, offsetof(ReadAheadObject, ahead_pti), 0,
     "Their PartitionTopicInfo (None when nothing is read ahead)."},
    {"_ahead_end", T_OBJECT_EX, offsetof(ReadAheadObject, ahead_end), 0,
     "The consumed offset once all are handed out."},
    {"_ahead_truncations", T_OBJECT_EX, offsetof(ReadAheadObject, ahead_truncations), 0,
     "The partition's truncations when they were read."},
    {"_polled_at", T_DOUBLE, offsetof(ReadAheadObject, polled_at), 0,
     "Monotonic seconds of the reader's last ask (0.0: never)."},
    {NULL, 0, 0, 0, NULL},
};

static PyAsyncMethods ReadAhead_async = {
    .am_anext = (unaryfunc)ReadAhead_anext,
};

static PyTypeObject ReadAheadType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "aiozkconsumer._handout.ReadAhead",
    .tp_basicsize = sizeof(ReadAheadObject),
    .tp_dealloc = (destructor)ReadAhead_dealloc,
    .tp_traverse = (traverseproc)ReadAhead_traverse,
    .tp_clear = (inquiry)ReadAhead_clear,
    .tp_as_async = &ReadAhead_async,
    .tp_members = ReadAhead_members,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .tp_new = PyType_GenericNew,
    .tp_doc = "ConsumerIterator's base: __anext__ hands out a record read ahead "
              "(subclasses define _next_record() and _end_ahead()).",
};

/* ----------------------------------------------------------------- module */

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "aiozkconsumer._handout",
    "The hand-out of a record async for read ahead (ConsumerIterator's base type).", -1, NULL,
};

PyMODINIT_FUNC PyInit__handout(void) {
    if (!(str_gate = PyUnicode_InternFromString("gate")) ||
        !(str_open = PyUnicode_InternFromString("open")) ||
        !(str_deadline = PyUnicode_InternFromString("deadline")) ||
        !(str_active = PyUnicode_InternFromString("active")) ||
        !(str_truncations = PyUnicode_InternFromString("truncations")) ||
        !(str_consumed_offset = PyUnicode_InternFromString("consumed_offset")) ||
        !(str_next_record = PyUnicode_InternFromString("_next_record")) ||
        !(str_end_ahead = PyUnicode_InternFromString("_end_ahead")) ||
        !(one = PyLong_FromLong(1)))
        return NULL;
    if (PyType_Ready(&ReadyType) < 0 || PyType_Ready(&ReadAheadType) < 0) return NULL;
    PyObject *m = PyModule_Create(&module_def);
    if (!m) return NULL;
    if (PyModule_AddObjectRef(m, "ReadAhead", (PyObject *)&ReadAheadType) < 0 ||
        PyModule_AddObjectRef(m, "Ready", (PyObject *)&ReadyType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
