/* rocketscope.broker.raftpath: the Raft peer frames' RaftBatch codec, compiled (issue 20).
 *
 * One job: turn the Raft messages a member sends into the bytes of one peer frame, and a received
 * frame's payload back into Raft messages, without building protobuf objects.  Session 19's profile
 * (docs/BENCHMARKS.md, "DLedger leader and followers per message") found the peer frames' protobuf
 * work (upb attribute setting, MergeFromString, from_pb) among the largest per-frame costs left on
 * all three members of a DLedger group.
 *
 * The bytes are those of broker/protocol/dledger.proto's RaftBatch exactly as the protobuf runtime
 * serialises them (fields in number order, proto3 defaults left out, every repeated entry written even
 * when empty), so a member using this module and one using the protobuf path interoperate: the wire
 * does not change.  The decoder follows the protobuf runtime's parsing rules where a peer's bytes can
 * differ: unknown fields (and known numbers with another wire type) are skipped, the last value of a
 * repeated scalar wins, strings must be UTF-8, a length past the end or a malformed tag is an error.
 * Unlike fastpath.c, every input gets an answer here (no None fallback): the pure-Python reference in
 * broker/dledger/raft_codec.py uses the protobuf runtime, and tests/test_raft_codec_equivalence.py checks
 * that both give the same bytes, the same messages, and reject the same malformed frames.
 *
 * broker/dledger/raft_codec.py selects this module or the reference (ROCKETSCOPE_PURE_PYTHON=1).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>
#include <limits.h>

#include "store_dispatch.h"

/* set once by bind(): the Python types the decoder builds, and the enum members by value */
static PyObject *Message_cls, *Entry_cls, *types_seq, *kinds_seq;

/* ------------------------------------------------------------------ varints */
static inline Py_ssize_t varint_len(uint64_t v) {
    Py_ssize_t n = 1;
    while (v >= 0x80) { v >>= 7; n++; }
    return n;
}
static inline unsigned char *put_varint(unsigned char *p, uint64_t v) {
    while (v >= 0x80) { *p++ = (unsigned char)(v | 0x80); v >>= 7; }
    *p++ = (unsigned char)v;
    return p;
}

/* ------------------------------------------------------------------ encode */
typedef struct {
    int64_t type, term, log_term, index, commit, reject_hint;
    int reject, force;
    const char *frm, *to;
    Py_ssize_t frm_n, to_n;
    PyObject *entries;  /* borrowed: the message's tuple or list of Entry */
    Py_ssize_t n_entries;
    Py_ssize_t entries_size;  /* bytes of the repeated field 7, tags and lengths included */
    Py_ssize_t size;          /* the RaftMessage's own bytes (without its tag and length) */
} Msg;

/* a Python int as int64 (the proto's int64 and int32 fields; an int32 keeps its low 32 bits signed) */
static int get_i64(PyObject *o, const char *field, int64_t *out) {
    long long v = PyLong_AsLongLong(o);
    if (v == -1 && PyErr_Occurred()) {
        if (PyErr_ExceptionMatches(PyExc_OverflowError)) {
            PyErr_Clear();
            PyErr_Format(PyExc_ValueError, "field %s: %R is out of the int64 range", field, o);
        } else if (PyErr_ExceptionMatches(PyExc_TypeError)) {
            PyErr_Clear();
            PyErr_Format(PyExc_TypeError, "field %s: expected an int, got %.80s", field, Py_TYPE(o)->tp_name);
        }
        return -1;
    }
    *out = (int64_t)v;
    return 0;
}

static int get_i32(PyObject *o, const char *field, int64_t *out) {
    if (get_i64(o, field, out) < 0) return -1;
    if (*out < INT32_MIN || *out > INT32_MAX) {
        PyErr_Format(PyExc_ValueError, "field %s: %R is out of the int32 range", field, o);
        return -1;
    }
    return 0;
}

/* interned attribute names */
static PyObject *a_type, *a_frm, *a_to, *a_term, *a_log_term, *a_index, *a_entries, *a_commit, *a_reject,
    *a_reject_hint, *a_force;

static int get_str(PyObject *m, PyObject *name, const char *field, const char **s, Py_ssize_t *n,
                   PyObject **keep) {
    PyObject *o = PyObject_GetAttr(m, name);
    if (o == NULL) return -1;
    if (!PyUnicode_Check(o)) {
        PyErr_Format(PyExc_TypeError, "field %s: expected a str, got %.80s", field, Py_TYPE(o)->tp_name);
        Py_DECREF(o);
        return -1;
    }
    *s = PyUnicode_AsUTF8AndSize(o, n);  /* cached in the str object; valid while it lives */
    if (*s == NULL) { Py_DECREF(o); return -1; }
    *keep = o;  /* the message holds a reference too, but attributes may be computed: keep ours */
    return 0;
}

static int get_bool(PyObject *m, PyObject *name, int *out) {
    PyObject *o = PyObject_GetAttr(m, name);
    if (o == NULL) return -1;
    int v = PyObject_IsTrue(o);
    Py_DECREF(o);
    if (v < 0) return -1;
    *out = v;
    return 0;
}

static int get_int(PyObject *m, PyObject *name, const char *field, int64_t *out, int i32) {
    PyObject *o = PyObject_GetAttr(m, name);
    if (o == NULL) return -1;
    int rc = i32 ? get_i32(o, field, out) : get_i64(o, field, out);
    Py_DECREF(o);
    return rc;
}

static inline Py_ssize_t int_field_len(int64_t v) { return v ? 1 + varint_len((uint64_t)v) : 0; }

/* the size of one Entry (a 4-tuple: index, term, kind, data) as a RaftEntry, checking its values */
static Py_ssize_t entry_size(PyObject *e, int64_t *vals, const char **data, Py_ssize_t *data_n) {
    if (!PyTuple_Check(e) || PyTuple_GET_SIZE(e) != 4) {
        PyErr_Format(PyExc_TypeError, "field entries: expected Entry tuples, got %.80s", Py_TYPE(e)->tp_name);
        return -1;
    }
    if (get_i64(PyTuple_GET_ITEM(e, 0), "entries.index", &vals[0]) < 0) return -1;
    if (get_i64(PyTuple_GET_ITEM(e, 1), "entries.term", &vals[1]) < 0) return -1;
    if (get_i32(PyTuple_GET_ITEM(e, 2), "entries.kind", &vals[2]) < 0) return -1;
    PyObject *d = PyTuple_GET_ITEM(e, 3);
    if (!PyBytes_Check(d)) {
        PyErr_Format(PyExc_TypeError, "field entries.data: expected bytes, got %.80s", Py_TYPE(d)->tp_name);
        return -1;
    }
    *data = PyBytes_AS_STRING(d);
    *data_n = PyBytes_GET_SIZE(d);
    return int_field_len(vals[0]) + int_field_len(vals[1]) + int_field_len(vals[2])
        + (*data_n ? 1 + varint_len((uint64_t)*data_n) + *data_n : 0);
}

static unsigned char *put_int_field(unsigned char *p, unsigned tag, int64_t v) {
    if (v) { *p++ = (unsigned char)tag; p = put_varint(p, (uint64_t)v); }
    return p;
}

static unsigned char *put_str_field(unsigned char *p, unsigned tag, const char *s, Py_ssize_t n) {
    if (n) { *p++ = (unsigned char)tag; p = put_varint(p, (uint64_t)n); memcpy(p, s, (size_t)n); p += n; }
    return p;
}

/* read one Message's fields into ``m`` (references kept in ``keep[0..1]``), sizing it */
static int msg_read(PyObject *o, Msg *m, PyObject **keep) {
    if (get_int(o, a_type, "type", &m->type, 1) < 0) return -1;
    if (get_str(o, a_frm, "frm", &m->frm, &m->frm_n, &keep[0]) < 0) return -1;
    if (get_str(o, a_to, "to", &m->to, &m->to_n, &keep[1]) < 0) return -1;
    if (get_int(o, a_term, "term", &m->term, 0) < 0) return -1;
    if (get_int(o, a_log_term, "log_term", &m->log_term, 0) < 0) return -1;
    if (get_int(o, a_index, "index", &m->index, 0) < 0) return -1;
    if (get_int(o, a_commit, "commit", &m->commit, 0) < 0) return -1;
    if (get_bool(o, a_reject, &m->reject) < 0) return -1;
    if (get_int(o, a_reject_hint, "reject_hint", &m->reject_hint, 0) < 0) return -1;
    if (get_bool(o, a_force, &m->force) < 0) return -1;
    PyObject *entries = PyObject_GetAttr(o, a_entries);
    if (entries == NULL) return -1;
    keep[2] = entries;
    if (!PyTuple_Check(entries) && !PyList_Check(entries)) {
        PyErr_Format(PyExc_TypeError, "field entries: expected a tuple or list, got %.80s",
                     Py_TYPE(entries)->tp_name);
        return -1;
    }
    m->entries = entries;
    m->n_entries = PySequence_Fast_GET_SIZE(entries);
    Py_ssize_t es = 0;
    for (Py_ssize_t j = 0; j < m->n_entries; j++) {
        int64_t vals[3];
        const char *data;
        Py_ssize_t dn;
        Py_ssize_t s = entry_size(PySequence_Fast_GET_ITEM(entries, j), vals, &data, &dn);
        if (s < 0) return -1;
        es += 1 + varint_len((uint64_t)s) + s;
    }
    m->entries_size = es;
    m->size = int_field_len(m->type) + (m->frm_n ? 1 + varint_len((uint64_t)m->frm_n) + m->frm_n : 0)
        + (m->to_n ? 1 + varint_len((uint64_t)m->to_n) + m->to_n : 0) + int_field_len(m->term)
        + int_field_len(m->log_term) + int_field_len(m->index) + es + int_field_len(m->commit)
        + (m->reject ? 2 : 0) + int_field_len(m->reject_hint) + (m->force ? 2 : 0);
    return 0;
}

static unsigned char *msg_write(unsigned char *p, const Msg *m) {
    p = put_int_field(p, 0x08, m->type);
    p = put_str_field(p, 0x12, m->frm, m->frm_n);
    p = put_str_field(p, 0x1a, m->to, m->to_n);
    p = put_int_field(p, 0x20, m->term);
    p = put_int_field(p, 0x28, m->log_term);
    p = put_int_field(p, 0x30, m->index);
    for (Py_ssize_t j = 0; j < m->n_entries; j++) {
        int64_t vals[3];
        const char *data;
        Py_ssize_t dn;
        /* checked by msg_read: cannot fail here */
        Py_ssize_t s = entry_size(PySequence_Fast_GET_ITEM(m->entries, j), vals, &data, &dn);
        *p++ = 0x3a;
        p = put_varint(p, (uint64_t)s);
        p = put_int_field(p, 0x08, vals[0]);
        p = put_int_field(p, 0x10, vals[1]);
        p = put_int_field(p, 0x18, vals[2]);
        p = put_str_field(p, 0x22, data, dn);
    }
    p = put_int_field(p, 0x40, m->commit);
    if (m->reject) { *p++ = 0x48; *p++ = 1; }
    p = put_int_field(p, 0x50, m->reject_hint);
    if (m->force) { *p++ = 0x58; *p++ = 1; }
    return p;
}

/* encode_frame(head, messages, max_messages, max_bytes) -> (frame, count, carries)
 *
 * ``head`` is a serialised RaftBatch without messages (its fields 1-4); the frame is the 4-byte big-endian
 * length and a RaftBatch of ``head`` plus the first ``count`` of ``messages``: up to ``max_messages``, and
 * no more once their entries' data reach ``max_bytes`` (broker/dledger/peer_link.py's limits); ``carries``
 * says whether any of them has entries. */
static PyObject *encode_frame(PyObject *self, PyObject *args) {
    Py_buffer head;
    PyObject *messages;
    Py_ssize_t max_messages, max_bytes;
    if (!PyArg_ParseTuple(args, "y*Onn:encode_frame", &head, &messages, &max_messages, &max_bytes)) return NULL;
    PyObject *result = NULL, *seq = NULL, **keep = NULL;
    Msg *ms = NULL;
    Py_ssize_t count = 0, n_keep = 0;
    seq = PySequence_Fast(messages, "messages must be a sequence");
    if (seq == NULL) goto done;
    Py_ssize_t avail = PySequence_Fast_GET_SIZE(seq);
    Py_ssize_t cap = avail < max_messages ? avail : max_messages;
    if (cap < 0) cap = 0;
    ms = PyMem_Calloc((size_t)(cap ? cap : 1), sizeof(Msg));
    keep = PyMem_Calloc((size_t)(cap ? cap : 1) * 3, sizeof(PyObject *));
    if (ms == NULL || keep == NULL) { PyErr_NoMemory(); goto done; }
    Py_ssize_t total = head.len, data_bytes = 0;
    int carries = 0;
    while (count < cap && data_bytes < max_bytes) {
        Msg *m = &ms[count];
        n_keep = 3 * (count + 1);
        if (msg_read(PySequence_Fast_GET_ITEM(seq, count), m, &keep[3 * count]) < 0) {
            PyObject *type, *value, *tb;
            PyErr_Fetch(&type, &value, &tb);
            PyErr_NormalizeException(&type, &value, &tb);
            PyErr_Format(type, "message %zd: %S", count, value);
            Py_XDECREF(type); Py_XDECREF(value); Py_XDECREF(tb);
            goto done;
        }
        for (Py_ssize_t j = 0; j < m->n_entries; j++) {
            PyObject *e = PySequence_Fast_GET_ITEM(m->entries, j);
            data_bytes += PyBytes_GET_SIZE(PyTuple_GET_ITEM(e, 3));
        }
        if (m->n_entries) carries = 1;
        total += 1 + varint_len((uint64_t)m->size) + m->size;
        count++;
    }
    if (total > 0xffffffffLL) { PyErr_SetString(PyExc_ValueError, "the batch is larger than a frame can say"); goto done; }
    PyObject *out = PyBytes_FromStringAndSize(NULL, 4 + total);
    if (out == NULL) goto done;
    unsigned char *p = (unsigned char *)PyBytes_AS_STRING(out);
    p[0] = (unsigned char)(total >> 24); p[1] = (unsigned char)(total >> 16);
    p[2] = (unsigned char)(total >> 8); p[3] = (unsigned char)total;
    p += 4;
    memcpy(p, head.buf, (size_t)head.len);
    p += head.len;
    for (Py_ssize_t i = 0; i < count; i++) {
        *p++ = 0x2a;
        p = put_varint(p, (uint64_t)ms[i].size);
        p = msg_write(p, &ms[i]);
    }
    result = Py_BuildValue("(Nni)", out, count, carries);
done:
    if (keep != NULL) {
        for (Py_ssize_t i = 0; i < n_keep; i++) Py_XDECREF(keep[i]);
        PyMem_Free(keep);
    }
    PyMem_Free(ms);
    Py_XDECREF(seq);
    PyBuffer_Release(&head);
    return result;
}

/* ------------------------------------------------------------------ decode */
typedef struct { const unsigned char *p, *end; } Rd;

#define MAX_DEPTH 100  /* the protobuf runtime's default recursion limit */

static int rd_varint(Rd *r, uint64_t *out) {
    uint64_t v = 0;
    for (int i = 0; i < 10; i++) {
        if (r->p >= r->end) return -1;
        unsigned char b = *r->p++;
        v |= (uint64_t)(b & 0x7f) << (7 * i);
        if (!(b & 0x80)) { *out = v; return 0; }
    }
    return -1;  /* an 11th byte: not a varint */
}

/* where a decode error happened, for the message: "messages[3].entries[0].data" */
typedef struct { char where[96]; } Ctx;

static PyObject *malformed(const Ctx *c, const char *what) {
    PyErr_Format(PyExc_ValueError, "not a RaftBatch: %s%s%s", c->where, c->where[0] ? ": " : "", what);
    return NULL;
}

static int skip_field(Rd *r, uint32_t wt, uint32_t field, int depth, const Ctx *c);

/* skip the rest of a group started by field ``field`` (unknown fields may be groups) */
static int skip_group(Rd *r, uint32_t field, int depth, const Ctx *c) {
    if (depth > MAX_DEPTH) { malformed(c, "groups nested too deep"); return -1; }
    for (;;) {
        uint64_t tag;
        if (rd_varint(r, &tag) < 0) { malformed(c, "a truncated tag in a group"); return -1; }
        if (tag > 0xffffffffULL || (tag >> 3) == 0) { malformed(c, "a bad tag in a group"); return -1; }
        uint32_t wt = (uint32_t)tag & 7, fn = (uint32_t)(tag >> 3);
        if (wt == 4) {
            if (fn != field) { malformed(c, "a group ends with another field's end tag"); return -1; }
            return 0;
        }
        if (skip_field(r, wt, fn, depth + 1, c) < 0) return -1;
    }
}

static int skip_field(Rd *r, uint32_t wt, uint32_t field, int depth, const Ctx *c) {
    uint64_t v;
    switch (wt) {
    case 0:
        if (rd_varint(r, &v) < 0) { malformed(c, "a truncated varint"); return -1; }
        return 0;
    case 1:
        if (r->end - r->p < 8) { malformed(c, "a truncated fixed64"); return -1; }
        r->p += 8;
        return 0;
    case 2:
        if (rd_varint(r, &v) < 0) { malformed(c, "a truncated length"); return -1; }
        if (v > (uint64_t)(r->end - r->p)) { malformed(c, "a length past the end of the frame"); return -1; }
        r->p += v;
        return 0;
    case 3:
        return skip_group(r, field, depth, c);
    case 5:
        if (r->end - r->p < 4) { malformed(c, "a truncated fixed32"); return -1; }
        r->p += 4;
        return 0;
    default:
        malformed(c, wt == 4 ? "an end-group tag outside a group" : "an invalid wire type");
        return -1;
    }
}

/* the next tag; 1 at the end of the reader, -1 on error */
static int next_tag(Rd *r, uint32_t *fn, uint32_t *wt, const Ctx *c) {
    if (r->p >= r->end) return 1;
    uint64_t tag;
    if (rd_varint(r, &tag) < 0) { malformed(c, "a truncated tag"); return -1; }
    if (tag > 0xffffffffULL || (tag >> 3) == 0) { malformed(c, "a bad tag (field number 0 or too large)"); return -1; }
    *fn = (uint32_t)(tag >> 3);
    *wt = (uint32_t)tag & 7;
    return 0;
}

/* a length-delimited field's bytes */
static int rd_bytes(Rd *r, const unsigned char **s, Py_ssize_t *n, const Ctx *c, const char *field) {
    uint64_t v;
    if (rd_varint(r, &v) < 0 || v > (uint64_t)(r->end - r->p)) {
        char what[64];
        snprintf(what, sizeof what, "field %s runs past the end of the frame", field);
        malformed(c, what);
        return -1;
    }
    *s = r->p;
    *n = (Py_ssize_t)v;
    r->p += v;
    return 0;
}

static PyObject *rd_str(Rd *r, const Ctx *c, const char *field) {
    const unsigned char *s;
    Py_ssize_t n;
    if (rd_bytes(r, &s, &n, c, field) < 0) return NULL;
    PyObject *o = PyUnicode_DecodeUTF8((const char *)s, n, "strict");
    if (o == NULL) {
        PyErr_Clear();
        char what[64];
        snprintf(what, sizeof what, "field %s is not valid UTF-8", field);
        return malformed(c, what);
    }
    return o;
}

/* one RaftEntry -> Entry, or Py_None with *bad set to the reason when its kind is unknown */
static PyObject *decode_entry(Rd *r, const Ctx *c, PyObject **bad_kind) {
    int64_t index = 0, term = 0, kind = 0;
    const unsigned char *data = (const unsigned char *)"";
    Py_ssize_t data_n = 0;
    uint32_t fn, wt;
    int rc;
    uint64_t v;
    while ((rc = next_tag(r, &fn, &wt, c)) == 0) {
        if (fn >= 1 && fn <= 3 && wt == 0) {
            if (rd_varint(r, &v) < 0) return malformed(c, "a truncated varint");
            if (fn == 1) index = (int64_t)v;
            else if (fn == 2) term = (int64_t)v;
            else kind = (int64_t)(int32_t)(uint32_t)v;
        } else if (fn == 4 && wt == 2) {
            if (rd_bytes(r, &data, &data_n, c, "data") < 0) return NULL;
        } else if (skip_field(r, wt, fn, 1, c) < 0) {
            return NULL;
        }
    }
    if (rc < 0) return NULL;
    PyObject *kind_obj = NULL;
    if (kind >= 0 && kind < PyTuple_GET_SIZE(kinds_seq)) kind_obj = PyTuple_GET_ITEM(kinds_seq, kind);
    if (kind_obj == NULL || kind_obj == Py_None) {
        *bad_kind = PyUnicode_FromFormat("field kind has unknown value %lld", (long long)kind);
        return *bad_kind == NULL ? NULL : Py_NewRef(Py_None);
    }
    PyObject *args[4] = {PyLong_FromLongLong(index), PyLong_FromLongLong(term), kind_obj,
                         PyBytes_FromStringAndSize((const char *)data, data_n)};
    PyObject *e = NULL;
    if (args[0] != NULL && args[1] != NULL && args[3] != NULL) e = PyObject_Vectorcall(Entry_cls, args, 4, NULL);
    Py_XDECREF(args[0]); Py_XDECREF(args[1]); Py_XDECREF(args[3]);
    return e;
}

/* one RaftMessage -> Message; Py_None and *bad set when a type or kind is unknown (skipped, not fatal) */
static PyObject *decode_message(Rd *r, Ctx *c, Py_ssize_t mi, PyObject **bad) {
    int64_t ints[11] = {0};  /* by field number: 1 type, 4 term, 5 log_term, 6 index, 8 commit, 9, 10, 11 */
    PyObject *frm = NULL, *to = NULL, *entries = PyList_New(0), *result = NULL, *bad_kind = NULL;
    Py_ssize_t bad_entry = -1;
    if (entries == NULL) return NULL;
    uint32_t fn, wt;
    int rc;
    uint64_t v;
    size_t base = strlen(c->where);
    while ((rc = next_tag(r, &fn, &wt, c)) == 0) {
        if (wt == 0 && (fn == 1 || (fn >= 4 && fn <= 6) || (fn >= 8 && fn <= 11))) {
            if (rd_varint(r, &v) < 0) { malformed(c, "a truncated varint"); goto done; }
            ints[fn - 1] = fn == 1 ? (int64_t)(int32_t)(uint32_t)v : (fn == 9 || fn == 11) ? (v != 0) : (int64_t)v;
        } else if ((fn == 2 || fn == 3) && wt == 2) {
            PyObject *s = rd_str(r, c, fn == 2 ? "frm" : "to");
            if (s == NULL) goto done;
            if (fn == 2) Py_XSETREF(frm, s); else Py_XSETREF(to, s);
        } else if (fn == 7 && wt == 2) {
            const unsigned char *s;
            Py_ssize_t n;
            if (rd_bytes(r, &s, &n, c, "entries") < 0) goto done;
            Py_ssize_t ei = PyList_GET_SIZE(entries);
            snprintf(c->where + base, sizeof c->where - base, ".entries[%zd]", ei);
            Rd sub = {s, s + n};
            PyObject *bk = NULL;
            PyObject *e = decode_entry(&sub, c, &bk);
            c->where[base] = 0;
            if (e == NULL) goto done;
            if (bk != NULL && bad_kind == NULL) { bad_kind = bk; bad_entry = ei; }
            else Py_XDECREF(bk);
            int arc = PyList_Append(entries, e);
            Py_DECREF(e);
            if (arc < 0) goto done;
        } else if (skip_field(r, wt, fn, 1, c) < 0) {
            goto done;
        }
    }
    if (rc < 0) goto done;
    int64_t type = ints[0];
    PyObject *type_obj = NULL;
    if (type >= 0 && type < PyTuple_GET_SIZE(types_seq)) type_obj = PyTuple_GET_ITEM(types_seq, type);
    if (type_obj == NULL || type_obj == Py_None) {
        *bad = PyUnicode_FromFormat("message %zd: field type has unknown value %lld", mi, (long long)type);
        result = *bad == NULL ? NULL : Py_NewRef(Py_None);
        goto done;
    }
    if (bad_kind != NULL) {
        *bad = PyUnicode_FromFormat("message %zd entry %zd: %U", mi, bad_entry, bad_kind);
        result = *bad == NULL ? NULL : Py_NewRef(Py_None);
        goto done;
    }
    PyObject *empty = PyUnicode_New(0, 0);
    PyObject *args[11] = {
        type_obj, frm ? frm : empty, to ? to : empty, PyLong_FromLongLong(ints[3]), PyLong_FromLongLong(ints[4]),
        PyLong_FromLongLong(ints[5]), entries, PyLong_FromLongLong(ints[7]), ints[8] ? Py_True : Py_False,
        PyLong_FromLongLong(ints[9]), ints[10] ? Py_True : Py_False};
    if (args[3] && args[4] && args[5] && args[7] && args[9]) result = PyObject_Vectorcall(Message_cls, args, 11, NULL);
    Py_XDECREF(args[3]); Py_XDECREF(args[4]); Py_XDECREF(args[5]); Py_XDECREF(args[7]); Py_XDECREF(args[9]);
    Py_DECREF(empty);
done:
    Py_XDECREF(frm);
    Py_XDECREF(to);
    Py_XDECREF(entries);
    Py_XDECREF(bad_kind);
    return result;
}

/* decode_batch(payload) -> (group, sender, sender_grpc_addr, sender_admin_addr, messages, bad)
 *
 * ``bad`` names each message left out of ``messages`` because its type or an entry's kind is not one this
 * member knows (a protobuf-valid frame: only that message is skipped, as from_pb's error was per message).
 * A payload that is not a RaftBatch raises ValueError naming the field. */
static PyObject *decode_batch(PyObject *self, PyObject *arg) {
    if (Message_cls == NULL) { PyErr_SetString(PyExc_RuntimeError, "raftpath.bind was not called"); return NULL; }
    Py_buffer buf;
    if (PyObject_GetBuffer(arg, &buf, PyBUF_SIMPLE) < 0) return NULL;
    Rd r = {(const unsigned char *)buf.buf, (const unsigned char *)buf.buf + buf.len};
    Ctx c = {{0}};
    PyObject *strs[4] = {NULL, NULL, NULL, NULL}, *messages = PyList_New(0), *bad = PyList_New(0), *result = NULL;
    static const char *names[4] = {"group", "sender", "sender_grpc_addr", "sender_admin_addr"};
    if (messages == NULL || bad == NULL) goto done;
    uint32_t fn, wt;
    int rc;
    while ((rc = next_tag(&r, &fn, &wt, &c)) == 0) {
        if (fn >= 1 && fn <= 4 && wt == 2) {
            PyObject *s = rd_str(&r, &c, names[fn - 1]);
            if (s == NULL) goto done;
            Py_XSETREF(strs[fn - 1], s);
        } else if (fn == 5 && wt == 2) {
            const unsigned char *s;
            Py_ssize_t n;
            if (rd_bytes(&r, &s, &n, &c, "messages") < 0) goto done;
            Py_ssize_t mi = PyList_GET_SIZE(messages) + PyList_GET_SIZE(bad);
            snprintf(c.where, sizeof c.where, "messages[%zd]", mi);
            Rd sub = {s, s + n};
            PyObject *why = NULL;
            PyObject *m = decode_message(&sub, &c, mi, &why);
            c.where[0] = 0;
            if (m == NULL) goto done;
            int arc = why != NULL ? PyList_Append(bad, why) : PyList_Append(messages, m);
            Py_XDECREF(why);
            Py_DECREF(m);
            if (arc < 0) goto done;
        } else if (skip_field(&r, wt, fn, 1, &c) < 0) {
            goto done;
        }
    }
    if (rc < 0) goto done;
    for (int i = 0; i < 4; i++) {
        if (strs[i] == NULL && (strs[i] = PyUnicode_New(0, 0)) == NULL) goto done;
    }
    result = PyTuple_Pack(6, strs[0], strs[1], strs[2], strs[3], messages, bad);
done:
    for (int i = 0; i < 4; i++) Py_XDECREF(strs[i]);
    Py_XDECREF(messages);
    Py_XDECREF(bad);
    PyBuffer_Release(&buf);
    return result;
}

/* bind(Message, Entry, types, kinds): the classes the decoder builds; ``types``/``kinds`` map a value to its
 * enum member (None where no member has that value) */
static PyObject *bind(PyObject *self, PyObject *args) {
    PyObject *m, *e, *t, *k;
    if (!PyArg_ParseTuple(args, "OOO!O!:bind", &m, &e, &PyTuple_Type, &t, &PyTuple_Type, &k)) return NULL;
    Py_XSETREF(Message_cls, Py_NewRef(m));
    Py_XSETREF(Entry_cls, Py_NewRef(e));
    Py_XSETREF(types_seq, Py_NewRef(t));
    Py_XSETREF(kinds_seq, Py_NewRef(k));
    Py_RETURN_NONE;
}

/* ------------------------------------------------------------------ a follower's records */
/* The follower hands the records of the entries it appends to the store's pending dispatch
 * (broker/dledger/node.py ``_pend_appended``), decoded from the entries' bytes; session 20's profile found
 * that Python decode (broker/store/record.py ``decode`` and ``decode_properties``) the largest item left
 * on a follower.  This is the same decode for the common case: returns None for anything else (a bad magic
 * or size, text that is not UTF-8, a property item without its separator), and the caller then runs
 * record.decode, which raises the RecordError naming the field. */
static PyObject *StoredMessage_cls;

static inline uint32_t be32(const unsigned char *p) {
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | (uint32_t)p[3];
}
static inline uint64_t be64(const unsigned char *p) { return ((uint64_t)be32(p) << 32) | be32(p + 4); }

#define REC_FIXED 68
#define REC_MAGIC 0xDAA320A7u

/* decode_properties for valid UTF-8: items split on \x02 (empty ones skipped), name and value on the first
 * \x01; 1 = not the common case (an item without \x01), -1 = error */
static int props_into(PyObject *d, PyObject *text) {
    Py_ssize_t n = PyUnicode_GET_LENGTH(text), pos = 0;
    while (pos < n) {
        Py_ssize_t end = PyUnicode_FindChar(text, 0x02, pos, n, 1);
        if (end == -2) return -1;
        if (end < 0) end = n;
        if (end > pos) {
            Py_ssize_t sep = PyUnicode_FindChar(text, 0x01, pos, end, 1);
            if (sep == -2) return -1;
            if (sep < 0) return 1;
            PyObject *k = PyUnicode_Substring(text, pos, sep);
            PyObject *v = k ? PyUnicode_Substring(text, sep + 1, end) : NULL;
            if (v == NULL) { Py_XDECREF(k); return -1; }
            PyUnicode_InternInPlace(&k);
            int rc = PyDict_SetItem(d, k, v);
            Py_DECREF(k); Py_DECREF(v);
            if (rc < 0) return -1;
        }
        pos = end + 1;
    }
    return 0;
}

/* The layout of one record at p[0..n) (broker/store/record.py): 0 with its size and its five variable fields in
 * *r (born host, store host, topic, properties, body), 1 = not the common case (shorter than its fixed part,
 * another magic, a size or a field length that does not fit the record).  The one reader of the layout here:
 * decode_record, check_records and dispatch_records all start with it. */
typedef struct {
    uint32_t total;
    const unsigned char *s[5];
    Py_ssize_t len[5];
} RecView;

static int parse_record(const unsigned char *p, Py_ssize_t n, RecView *r) {
    if (n < REC_FIXED) return 1;
    uint32_t total = be32(p);
    if (be32(p + 4) != REC_MAGIC || total < REC_FIXED || (Py_ssize_t)total > n) return 1;
    const unsigned char *cur = p + REC_FIXED, *end = p + total;
    for (int i = 0; i < 5; i++) {  /* born host (1-byte length), store host (1), topic (2), properties (2), body (4) */
        int w = i < 2 ? 1 : i < 4 ? 2 : 4;
        if (end - cur < w) return 1;
        Py_ssize_t l = w == 1 ? cur[0] : w == 2 ? ((Py_ssize_t)cur[0] << 8 | cur[1]) : (Py_ssize_t)be32(cur);
        cur += w;
        if (end - cur < l) return 1;
        r->s[i] = cur; r->len[i] = l;
        cur += l;
    }
    if (cur != end) return 1;
    r->total = total;
    return 0;
}

/* Whether s[0..n) is what Python's strict UTF-8 decoder accepts (no overlong forms, no surrogates, nothing past
 * U+10FFFF). */
static int utf8_ok(const unsigned char *s, Py_ssize_t n) {
    Py_ssize_t i = 0;
    while (i < n) {
        unsigned char c = s[i];
        if (c < 0x80) { i++; continue; }
        if (c >= 0xC2 && c <= 0xDF) {
            if (i + 1 >= n || (s[i + 1] & 0xC0) != 0x80) return 0;
            i += 2;
        } else if (c >= 0xE0 && c <= 0xEF) {
            if (i + 2 >= n) return 0;
            unsigned char c1 = s[i + 1], c2 = s[i + 2];
            if ((c1 & 0xC0) != 0x80 || (c2 & 0xC0) != 0x80) return 0;
            if ((c == 0xE0 && c1 < 0xA0) || (c == 0xED && c1 > 0x9F)) return 0;
            i += 3;
        } else if (c >= 0xF0 && c <= 0xF4) {
            if (i + 3 >= n) return 0;
            unsigned char c1 = s[i + 1], c2 = s[i + 2], c3 = s[i + 3];
            if ((c1 & 0xC0) != 0x80 || (c2 & 0xC0) != 0x80 || (c3 & 0xC0) != 0x80) return 0;
            if ((c == 0xF0 && c1 < 0x90) || (c == 0xF4 && c1 > 0x8F)) return 0;
            i += 4;
        } else return 0;
    }
    return 1;
}

/* The property values a dispatch reads, by name; v[i] NULL: absent.  As record.decode_properties reads them:
 * items split on \x02 (empty ones skipped), name and value on the first \x01, the last item of a name wins. */
enum { P_TAGS, P_KEYS, P_UNIQ_KEY, P_MQO, P_COUNT };
static const char *const P_NAMES[P_COUNT] = {"TAGS", "KEYS", "UNIQ_KEY", "INNER_MULTI_QUEUE_OFFSET"};
typedef struct {
    const unsigned char *v[P_COUNT];
    Py_ssize_t n[P_COUNT];
} Props;

/* 0 with the values in *pr; 1 = an item without its \x01 (record.decode_properties raises) */
static int props_scan(const unsigned char *s, Py_ssize_t n, Props *pr) {
    for (int i = 0; i < P_COUNT; i++) { pr->v[i] = NULL; pr->n[i] = 0; }
    Py_ssize_t pos = 0;
    while (pos < n) {
        const unsigned char *stop = memchr(s + pos, 0x02, (size_t)(n - pos));
        Py_ssize_t end = stop ? stop - s : n;
        if (end > pos) {
            const unsigned char *sep = memchr(s + pos, 0x01, (size_t)(end - pos));
            if (sep == NULL) return 1;
            Py_ssize_t kn = sep - (s + pos);
            for (int i = 0; i < P_COUNT; i++) {
                if ((Py_ssize_t)strlen(P_NAMES[i]) == kn && memcmp(P_NAMES[i], s + pos, (size_t)kn) == 0) {
                    pr->v[i] = sep + 1;
                    pr->n[i] = end - (sep + 1 - s);
                    break;
                }
            }
        }
        pos = end + 1;
    }
    return 0;
}

/* Whether record.decode would take the record at p[0..n) (0: it would raise, RecordError): the layout, UTF-8 text
 * fields, every property item with its separator.  *r is filled in. */
static int record_ok(const unsigned char *p, Py_ssize_t n, RecView *r, Props *pr) {
    if (parse_record(p, n, r)) return 0;
    for (int i = 0; i < 4; i++) {
        if (!utf8_ok(r->s[i], r->len[i])) return 0;
    }
    return props_scan(r->s[3], r->len[3], pr) == 0;
}

/* one record at p[0..n): a StoredMessage, Py_None when not the common case, NULL on error */
static PyObject *decode_record(const unsigned char *p, Py_ssize_t n, Py_ssize_t *size) {
    RecView r;
    if (parse_record(p, n, &r)) return Py_NewRef(Py_None);
    const unsigned char *const *s = r.s;
    const Py_ssize_t *len = r.len;
    uint32_t total = r.total;
    PyObject *born = NULL, *store = NULL, *topic = NULL, *ptext = NULL, *props = NULL, *body = NULL, *out = NULL;
    PyObject *nums[10] = {NULL};
    born = PyUnicode_DecodeUTF8((const char *)s[0], len[0], "strict");
    store = born ? PyUnicode_DecodeUTF8((const char *)s[1], len[1], "strict") : NULL;
    topic = store ? PyUnicode_DecodeUTF8((const char *)s[2], len[2], "strict") : NULL;
    ptext = topic ? PyUnicode_DecodeUTF8((const char *)s[3], len[3], "strict") : NULL;
    if (ptext == NULL) {
        if (!PyErr_ExceptionMatches(PyExc_UnicodeDecodeError)) goto done;
        PyErr_Clear();
        out = Py_NewRef(Py_None);
        goto done;
    }
    props = PyDict_New();
    if (props == NULL) goto done;
    int prc = len[3] ? props_into(props, ptext) : 0;
    if (prc < 0) goto done;
    if (prc > 0) { out = Py_NewRef(Py_None); goto done; }
    body = PyBytes_FromStringAndSize((const char *)s[4], len[4]);
    if (body == NULL) goto done;
    /* queue_id, flag, queue_offset, physical_offset, sys_flag, born_ts, store_ts, reconsume, prepared, size */
    long long v[10] = {(int32_t)be32(p + 12), (int32_t)be32(p + 16), (int64_t)be64(p + 20), (int64_t)be64(p + 28),
                       (int32_t)be32(p + 36), (int64_t)be64(p + 40), (int64_t)be64(p + 48), (int32_t)be32(p + 56),
                       (int64_t)be64(p + 60), (long long)total};
    for (int i = 0; i < 10; i++) {
        if ((nums[i] = PyLong_FromLongLong(v[i])) == NULL) goto done;
    }
    /* StoredMessage's fields in declaration order (broker/store/record.py) */
    PyObject *args[15] = {topic, nums[0], body, props, nums[1], nums[4], nums[5], born, nums[6], store, nums[7],
                          nums[8], nums[2], nums[3], nums[9]};
    out = PyObject_Vectorcall(StoredMessage_cls, args, 15, NULL);
    *size = total;
done:
    Py_XDECREF(born); Py_XDECREF(store); Py_XDECREF(topic); Py_XDECREF(ptext); Py_XDECREF(props);
    Py_XDECREF(body);
    for (int i = 0; i < 10; i++) Py_XDECREF(nums[i]);
    return out;
}

/* decode_records(data) -> [StoredMessage] for the consecutive records filling ``data``, or None when any
 * of them is not the common case (record.decode then says why) */
static PyObject *decode_records(PyObject *self, PyObject *arg) {
    if (StoredMessage_cls == NULL) { PyErr_SetString(PyExc_RuntimeError, "raftpath.bind_records was not called"); return NULL; }
    Py_buffer buf;
    if (PyObject_GetBuffer(arg, &buf, PyBUF_SIMPLE) < 0) return NULL;
    PyObject *out = PyList_New(0);
    const unsigned char *p = buf.buf;
    Py_ssize_t pos = 0;
    while (out != NULL && pos < buf.len) {
        Py_ssize_t size = 0;
        PyObject *m = decode_record(p + pos, buf.len - pos, &size);
        if (m == NULL) { Py_CLEAR(out); break; }
        if (m == Py_None) { Py_DECREF(out); out = m; break; }
        int rc = PyList_Append(out, m);
        Py_DECREF(m);
        if (rc < 0) { Py_CLEAR(out); break; }
        pos += size;
    }
    PyBuffer_Release(&buf);
    return out;
}

/* check_records(data) -> True when ``data`` is consecutive records that decode_records (and so record.decode)
 * takes, without building anything; False otherwise (record.decode then says why).  The follower checks an
 * appended entry with it before handing its bytes to the store's dispatch (broker/dledger/node.py). */
static PyObject *check_records(PyObject *self, PyObject *arg) {
    Py_buffer buf;
    if (PyObject_GetBuffer(arg, &buf, PyBUF_SIMPLE) < 0) return NULL;
    const unsigned char *p = buf.buf;
    Py_ssize_t pos = 0;
    int ok = 1;
    while (pos < buf.len) {
        RecView r;
        Props pr;
        if (!record_ok(p + pos, buf.len - pos, &r, &pr)) { ok = 0; break; }
        pos += r.total;
    }
    PyBuffer_Release(&buf);
    return PyBool_FromLong(ok);
}

/* ------------------------------------------------------------------ a follower's dispatch from record bytes */
/* Session 22-23's profiles (docs/BENCHMARKS.md) found a follower's dispatch of committed records its largest
 * item: each record decoded into a StoredMessage, then six attributes of it read back by fastpath.dispatch_run.
 * dispatch_records does what MessageStore._dispatch_one (broker/store/message_store.py) does for a record decoded
 * by record.decode, straight from the bytes; the dispatch core it shares with fastpath.c's dispatch_run is
 * broker/store_dispatch.h. */

/* dispatch_records(data, pos, runs, new_run, tag_hash, keys, listened) -> pos
 * MessageStore._dispatch_one for each record of ``data`` from ``pos`` on, as record.decode would give it: its
 * entry added to its queue's run (``runs[(topic, queue_id)]``, made by ``new_run(key)`` when missing) when its
 * queue offset is new (gaps filled as ConsumeQueue does), its index keys appended to ``keys`` (*#UNIQ_KEY,
 * topic#key..., topic#UNIQ_KEY), with the same values and in the same order.  Returns where it stopped: the
 * end of ``data``, or the start of a record it does not take, untouched: one record.decode refuses, one with
 * LMQ offsets (INNER_MULTI_QUEUE_OFFSET), one of a topic in ``listened`` (its topic listeners need the record
 * object), a run it does not recognise, one whose queue offset is past the gap bound (sd_gap_refused:
 * _dispatch_one refuses it and logs).  The caller dispatches that one in Python and calls again past it. */
static PyObject *dispatch_records(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 7 || !PyDict_CheckExact(args[2]) || !PyList_CheckExact(args[5]) || !PyDict_CheckExact(args[6])) {
        PyErr_SetString(PyExc_TypeError, "dispatch_records(data, pos, dict, new_run, tag_hash, list, dict)");
        return NULL;
    }
    PyObject *runs = args[2], *new_run = args[3], *tag_hash = args[4], *keys = args[5], *listened = args[6];
    Py_ssize_t pos = PyLong_AsSsize_t(args[1]);
    if (pos == -1 && PyErr_Occurred()) return NULL;
    if (pos < 0) { PyErr_SetString(PyExc_ValueError, "dispatch_records: pos < 0"); return NULL; }
    Py_buffer buf;
    if (PyObject_GetBuffer(args[0], &buf, PyBUF_SIMPLE) < 0) return NULL;
    const unsigned char *data = buf.buf;
    int any_listened = PyDict_GET_SIZE(listened) > 0;
    /* kept from one record to the next: most records of a batch share their topic, queue and tag */
    PyObject *topic = NULL, *run = NULL, *result = NULL;
    const unsigned char *topic_s = NULL, *tag_s = NULL;
    Py_ssize_t topic_n = -1, tag_n = -1;
    int topic_listened = 0;
    long long run_qid = 0, th = 0;
    while (pos < buf.len) {
        const unsigned char *p = data + pos;
        RecView r;
        Props pr;
        if (!record_ok(p, buf.len - pos, &r, &pr) || pr.v[P_MQO] != NULL) break;
        if ((long long)r.total > INT32_MAX) break;  /* ENTRY's size field; struct.error in Python */
        long long qid = (int32_t)be32(p + 12), qoff = (int64_t)be64(p + 20), phyv = (int64_t)be64(p + 28);
        long long tsv = (int64_t)be64(p + 48);
        if (qoff == LLONG_MAX) break;
        if (topic == NULL || topic_n != r.len[2] || memcmp(topic_s, r.s[2], (size_t)topic_n) != 0) {
            PyObject *t = PyUnicode_DecodeUTF8((const char *)r.s[2], r.len[2], "strict");
            if (t == NULL) goto done;
            Py_XSETREF(topic, t);
            Py_CLEAR(run);
            topic_s = r.s[2]; topic_n = r.len[2];
            topic_listened = 0;
            if (any_listened && (topic_listened = PyDict_Contains(listened, topic)) < 0) goto done;
        }
        if (topic_listened) break;
        if (run == NULL || run_qid != qid) {
            Py_CLEAR(run);
            PyObject *qo = PyLong_FromLongLong(qid);
            PyObject *key = qo ? PyTuple_Pack(2, topic, qo) : NULL;
            Py_XDECREF(qo);
            if (key == NULL) goto done;
            run = sd_run_for(runs, new_run, key);
            Py_DECREF(key);
            if (run == NULL) goto done;
            run_qid = qid;
        }
        SdRun rs;
        if (!sd_run_read(run, &rs)) break;
        if (qoff >= rs.end && sd_gap_refused(qoff, rs.end)) { Py_DECREF(rs.packed); break; }  /* Python refuses it */
        if (qoff >= rs.end) {
            const unsigned char *tag = pr.v[P_TAGS];
            Py_ssize_t tn = tag ? pr.n[P_TAGS] : 0;
            if (tag_n != tn || (tn && memcmp(tag_s, tag, (size_t)tn) != 0)) {
                PyObject *ts = PyUnicode_DecodeUTF8(tn ? (const char *)tag : "", tn, "strict");
                PyObject *h = ts ? PyObject_CallOneArg(tag_hash, ts) : NULL;
                Py_XDECREF(ts);
                if (h == NULL) { Py_DECREF(rs.packed); goto done; }
                int overflow = 0;
                th = PyLong_AsLongLongAndOverflow(h, &overflow);
                Py_DECREF(h);
                if (overflow || (th == -1 && PyErr_Occurred())) {
                    if (!PyErr_Occurred()) PyErr_SetString(PyExc_OverflowError, "tag hash out of range");
                    Py_DECREF(rs.packed); goto done;
                }
                tag_s = tag; tag_n = tn;
            }
            int rc = sd_run_append(run, &rs, qoff, NULL, phyv, r.total, th);
            Py_DECREF(rs.packed);
            if (rc < 0) goto done;
            const unsigned char *id = pr.v[P_UNIQ_KEY], *ks = pr.v[P_KEYS];
            if (sd_add_keys(keys, (const char *)r.s[2], r.len[2], (const char *)id, id ? pr.n[P_UNIQ_KEY] : 0,
                            (const char *)ks, ks ? pr.n[P_KEYS] : 0, phyv, tsv) < 0)
                goto done;
        } else {
            Py_DECREF(rs.packed);
        }
        pos += r.total;
    }
    result = PyLong_FromSsize_t(pos);
done:
    Py_XDECREF(topic); Py_XDECREF(run);
    PyBuffer_Release(&buf);
    return result;
}

static PyObject *bind_records(PyObject *self, PyObject *cls) {
    Py_XSETREF(StoredMessage_cls, Py_NewRef(cls));
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"decode_records", decode_records, METH_O, "entry bytes -> [StoredMessage], or None outside the common case"},
    {"check_records", check_records, METH_O, "entry bytes -> whether decode_records takes every record of them"},
    {"dispatch_records", (PyCFunction)(void (*)(void))dispatch_records, METH_FASTCALL,
     "(data, pos, runs, new_run, tag_hash, keys, listened) -> pos: MessageStore._dispatch_one from record bytes"},
    {"bind_records", bind_records, METH_O, "(StoredMessage): the class decode_records builds"},
    {"encode_frame", encode_frame, METH_VARARGS, "(head, messages, max_messages, max_bytes) -> (frame, count, carries)"},
    {"decode_batch", decode_batch, METH_O, "payload -> (group, sender, grpc_addr, admin_addr, messages, bad)"},
    {"bind", bind, METH_VARARGS, "(Message, Entry, types, kinds): the classes decode_batch builds"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "raftpath",
                                    "The Raft peer frames' RaftBatch codec, compiled (broker/raftpath.c).", -1,
                                    methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit_raftpath(void) {
#define INTERN(var, s) if ((var = PyUnicode_InternFromString(s)) == NULL) return NULL
    INTERN(a_type, "type"); INTERN(a_frm, "frm"); INTERN(a_to, "to"); INTERN(a_term, "term");
    INTERN(a_log_term, "log_term"); INTERN(a_index, "index"); INTERN(a_entries, "entries");
    INTERN(a_commit, "commit"); INTERN(a_reject, "reject"); INTERN(a_reject_hint, "reject_hint");
    INTERN(a_force, "force");
#undef INTERN
    if (sd_init() < 0) return NULL;
    return PyModule_Create(&module);
}
