/* The store's dispatch core in C, one copy for the two compiled loops that dispatch committed records:
 * broker/fastpath.c ``dispatch_run`` (records decoded into StoredMessage objects: a leader, a standalone store)
 * and broker/raftpath.c ``dispatch_records`` (records still in their bytes: a DLedger follower).  Both do what
 * MessageStore._dispatch_one (broker/store/message_store.py) does for one record, its reference:
 *
 *   - the record's queue run (``runs[(topic, queue_id)]``, made by ``new_run(key)`` when missing): sd_run_for;
 *   - its state (``end``, ``first``, ``packed``) read and checked: sd_run_read;
 *   - a record whose queue offset lies too far past the queue's end is left to Python (sd_gap_refused), which
 *     refuses it and logs one warning (MAX_QUEUE_GAP in message_store.py, the same bound);
 *   - the 20-byte consume-queue entry appended, gaps filled as ConsumeQueue does, ``first``/``end`` moved:
 *     sd_run_append;
 *   - the index keys *#UNIQ_KEY, topic#key..., topic#UNIQ_KEY as (key, phy, ts) tuples: sd_add_keys.
 *
 * Every function is static: each extension includes its own copy, and the Makefile's STAMP and setup.py's
 * ``depends=`` list this header so that a change rebuilds both.  sd_init() interns the attribute names; each
 * module's init calls it. */
#ifndef ROCKETSCOPE_STORE_DISPATCH_H
#define ROCKETSCOPE_STORE_DISPATCH_H

#include <Python.h>
#include <stdint.h>
#include <string.h>
#include <limits.h>

/* The widest gap (queue offsets with no record) a dispatch fills in a queue that has entries; a record past it
 * is refused.  Must equal MAX_QUEUE_GAP in broker/store/message_store.py (tests/test_store_wild_offset.py checks
 * both paths at the bound).  1 << 20 entries is 20 MiB of GAP entries. */
#define SD_MAX_QUEUE_GAP (1LL << 20)

static PyObject *sd_a_end, *sd_a_first, *sd_a_packed;

static int sd_init(void) {
    if (sd_a_end == NULL && (sd_a_end = PyUnicode_InternFromString("end")) == NULL) return -1;
    if (sd_a_first == NULL && (sd_a_first = PyUnicode_InternFromString("first")) == NULL) return -1;
    if (sd_a_packed == NULL && (sd_a_packed = PyUnicode_InternFromString("packed")) == NULL) return -1;
    return 0;
}

static inline void sd_put_be32(unsigned char *p, uint32_t v) {
    p[0] = (unsigned char)(v >> 24); p[1] = (unsigned char)(v >> 16); p[2] = (unsigned char)(v >> 8);
    p[3] = (unsigned char)v;
}
static inline void sd_put_be64(unsigned char *p, uint64_t v) {
    sd_put_be32(p, (uint32_t)(v >> 32)); sd_put_be32(p + 4, (uint32_t)v);
}

/* An exact int attribute within [lo, hi]: its value in *out and, when obj is not NULL, a new reference to it in
 * *obj; 0 when absent, of another type (a subclass included) or out of range, with no error set. */
static int sd_exact_int_attr(PyObject *o, PyObject *name, long long lo, long long hi, PyObject **obj,
                             long long *out) {
    PyObject *v = PyObject_GetAttr(o, name);
    if (v == NULL) { PyErr_Clear(); return 0; }
    if (PyLong_CheckExact(v)) {
        int overflow = 0;
        long long x = PyLong_AsLongLongAndOverflow(v, &overflow);
        if (!overflow && !(x == -1 && PyErr_Occurred()) && x >= lo && x <= hi) {
            *out = x;
            if (obj != NULL) *obj = v; else Py_DECREF(v);
            return 1;
        }
        PyErr_Clear();
    }
    Py_DECREF(v);
    return 0;
}

/* runs[key], made by new_run(key) and stored when missing: a new reference, NULL with an error set. */
static PyObject *sd_run_for(PyObject *runs, PyObject *new_run, PyObject *key) {
    PyObject *run = PyDict_GetItemWithError(runs, key);
    if (run != NULL) return Py_NewRef(run);
    if (PyErr_Occurred()) return NULL;
    run = PyObject_CallOneArg(new_run, key);
    if (run != NULL && PyDict_SetItem(runs, key, run) < 0) Py_CLEAR(run);
    return run;
}

/* A run's state as the loop needs it; ``packed`` a new reference. */
typedef struct { PyObject *packed; long long end, first; } SdRun;

/* 1: the run is one the loop recognises (exact int end and first, a bytearray packed); 0: it is not, no error. */
static int sd_run_read(PyObject *run, SdRun *s) {
    s->packed = NULL;
    if (!sd_exact_int_attr(run, sd_a_end, LLONG_MIN, LLONG_MAX, NULL, &s->end)
        || !sd_exact_int_attr(run, sd_a_first, LLONG_MIN, LLONG_MAX, NULL, &s->first))
        return 0;
    PyObject *packed = PyObject_GetAttr(run, sd_a_packed);
    if (packed == NULL) { PyErr_Clear(); return 0; }
    if (!PyByteArray_CheckExact(packed)) { Py_DECREF(packed); return 0; }
    s->packed = packed;
    return 1;
}

/* Whether MessageStore._dispatch_one refuses a record at queue offset qoff in a run whose end is ``end``: a
 * new entry (qoff >= end) that would leave more than SD_MAX_QUEUE_GAP gaps after the queue's last entry.
 * An empty queue (end 0) starts at its first entry without a gap (ConsumeQueue.append_packed). */
static inline int sd_gap_refused(long long qoff, long long end) {
    return end > 0 && qoff > end && qoff - end > SD_MAX_QUEUE_GAP;
}

/* The record's entry (phy, size, tag hash th) appended to the run at queue offset qoff >= s->end, the gaps
 * before it filled (ConsumeQueue's GAP: -1, 0, 0) when the run has entries already (otherwise append_packed
 * fills up to ``first``), ``first`` set when it was -1 (to qoffo when given, else a new int), ``end`` to
 * qoff + 1.  The caller has checked sd_gap_refused.  0, or -1 with an error set. */
static int sd_run_append(PyObject *run, const SdRun *s, long long qoff, PyObject *qoffo, long long phy,
                         uint32_t size, long long th) {
    PyObject *packed = s->packed;
    Py_ssize_t at = PyByteArray_GET_SIZE(packed);
    long long gaps = s->first < 0 ? 0 : qoff - s->end;
    if (gaps > (PY_SSIZE_T_MAX - at) / 20 - 1) { PyErr_NoMemory(); return -1; }
    if (PyByteArray_Resize(packed, at + (Py_ssize_t)(gaps + 1) * 20) < 0) return -1;
    unsigned char *o = (unsigned char *)PyByteArray_AS_STRING(packed) + at;
    for (long long g = 0; g < gaps; g++, o += 20) {
        sd_put_be64(o, (uint64_t)-1LL); sd_put_be32(o + 8, 0); sd_put_be64(o + 12, 0);
    }
    sd_put_be64(o, (uint64_t)phy); sd_put_be32(o + 8, size); sd_put_be64(o + 12, (uint64_t)th);
    if (s->first < 0) {
        PyObject *fo = qoffo != NULL ? Py_NewRef(qoffo) : PyLong_FromLongLong(qoff);
        int rc = fo != NULL ? PyObject_SetAttr(run, sd_a_first, fo) : -1;
        Py_XDECREF(fo);
        if (rc < 0) return -1;
    }
    PyObject *ne = PyLong_FromLongLong(qoff + 1);
    int rc = ne != NULL ? PyObject_SetAttr(run, sd_a_end, ne) : -1;
    Py_XDECREF(ne);
    return rc;
}

/* prefix + "#" + value (both valid UTF-8) as a str, appended to ``keys`` as (key, phy, ts); -1 on error */
static int sd_add_key(PyObject *keys, const char *a, Py_ssize_t an, const char *b, Py_ssize_t bn, PyObject *phy,
                      PyObject *ts) {
    char small[256];
    Py_ssize_t n = an + 1 + bn;
    char *t = n <= (Py_ssize_t)sizeof small ? small : PyMem_Malloc((size_t)n);
    if (t == NULL) { PyErr_NoMemory(); return -1; }
    memcpy(t, a, (size_t)an); t[an] = '#'; memcpy(t + an + 1, b, (size_t)bn);
    PyObject *key = PyUnicode_DecodeUTF8(t, n, "strict");
    if (t != small) PyMem_Free(t);
    if (key == NULL) return -1;
    PyObject *e = PyTuple_Pack(3, key, phy, ts);
    Py_DECREF(key);
    if (e == NULL) return -1;
    int rc = PyList_Append(keys, e);
    Py_DECREF(e);
    return rc;
}

/* A dispatched record's index keys, in _dispatch_one's order: *#id, topic#key for each item of ``ks`` split on
 * " " (empty items skipped, as str.split(" ") then ``if k`` does), topic#id; none for an empty id or ks.  The
 * texts are UTF-8 (a space byte is never inside a multi-byte sequence, so the split is the str's).  phy and ts
 * are made here only when a key is.  0, or -1 with an error set. */
static int sd_add_keys(PyObject *keys, const char *topic, Py_ssize_t topic_n, const char *id, Py_ssize_t idn,
                       const char *ks, Py_ssize_t ksn, long long phyv, long long tsv) {
    if (idn == 0 && ksn == 0) return 0;
    PyObject *phy = PyLong_FromLongLong(phyv), *ts = phy != NULL ? PyLong_FromLongLong(tsv) : NULL;
    int bad = ts == NULL;
    if (!bad && idn) bad = sd_add_key(keys, "*", 1, id, idn, phy, ts) < 0;
    for (Py_ssize_t j = 0; !bad && j < ksn;) {
        const char *sp = memchr(ks + j, ' ', (size_t)(ksn - j));
        Py_ssize_t e = sp != NULL ? sp - ks : ksn;
        if (e > j) bad = sd_add_key(keys, topic, topic_n, ks + j, e - j, phy, ts) < 0;
        j = e + 1;
    }
    if (!bad && idn) bad = sd_add_key(keys, topic, topic_n, id, idn, phy, ts) < 0;
    Py_XDECREF(phy); Py_XDECREF(ts);
    return bad ? -1 : 0;
}

#endif /* ROCKETSCOPE_STORE_DISPATCH_H */
