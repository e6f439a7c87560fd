/* rocketscope.broker.fastpath: the byte layouts of the remoting send path, compiled (issue 20).
 *
 * One job: turn the bytes of a remoting request into the values the broker needs, and the values
 * of an answer or a commit-log record head back into bytes, for the common case only.  Every
 * function returns None when its input is anything but that common case (an unusual JSON form,
 * a missing or malformed field, a non-str value, text that is not valid UTF-8, a number that is
 * not plain decimal digits): the caller then runs the pure-Python implementation it stands in for,
 * which gives the same result, or the error and message naming the field.  So the compiled path
 * never has its own error messages, and tests/test_fastpath_equivalence.py checks that both give
 * the same output on the same inputs, byte for byte, malformed inputs included.
 *
 * The Python counterparts (the reference behaviour) are in broker/remoting/codec.py (decode,
 * encode, decode_batch, string_to_properties), broker/remoting/broker_handlers.py (_send_fields),
 * broker/store/record.py (prepare), broker/store/commitlog.py (_write_records), broker/store/index.py
 * (IndexFile.put_entries) and broker/store/message_store.py (_dispatch_one).  broker/speedups.py selects this
 * module or not.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>
#include <limits.h>

#include "store_dispatch.h"

#define INT32_MIN_ (-2147483647LL - 1)
#define INT32_MAX_ 2147483647LL

/* ------------------------------------------------------------------ big-endian helpers */
static inline int32_t rd_i32(const unsigned char *p) {
    return (int32_t)(((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | (uint32_t)p[3]);
}
static inline int16_t rd_i16(const unsigned char *p) { return (int16_t)(((uint16_t)p[0] << 8) | (uint16_t)p[1]); }
static inline void wr_u32(unsigned char *p, uint32_t v) {
    p[0] = (unsigned char)(v >> 24); p[1] = (unsigned char)(v >> 16); p[2] = (unsigned char)(v >> 8);
    p[3] = (unsigned char)v;
}

/* interned key and value objects, made once */
static PyObject *s_code, *s_extFields, *s_flag, *s_language, *s_opaque, *s_remark, *s_version, *s_serialize,
    *s_JAVA, *s_empty, *s_empty_bytes;
static PyObject *send_long[9], *send_short[9];

/* ------------------------------------------------------------------ a growable byte buffer */
typedef struct { char *p; Py_ssize_t n, cap; char small[1024]; } Buf;
static void buf_init(Buf *b) { b->p = b->small; b->n = 0; b->cap = (Py_ssize_t)sizeof b->small; }
static void buf_free(Buf *b) { if (b->p != b->small) PyMem_Free(b->p); }
static int buf_reserve(Buf *b, Py_ssize_t more) {
    if (b->n + more <= b->cap) return 0;
    Py_ssize_t cap = b->cap * 2;
    while (cap < b->n + more) cap *= 2;
    char *np = PyMem_Malloc((size_t)cap);
    if (np == NULL) { PyErr_NoMemory(); return -1; }
    memcpy(np, b->p, (size_t)b->n);
    if (b->p != b->small) PyMem_Free(b->p);
    b->p = np; b->cap = cap;
    return 0;
}
static int buf_put(Buf *b, const char *s, Py_ssize_t n) {
    if (buf_reserve(b, n) < 0) return -1;
    memcpy(b->p + b->n, s, (size_t)n); b->n += n;
    return 0;
}
static int buf_putc(Buf *b, char c) { return buf_put(b, &c, 1); }

/* ================================================================== JSON header decode
 * The grammar taken here is a subset of JSON: an object whose values are strings, integers
 * (-?(0|[1-9][0-9]*), at most 18 digits), null, or (for "extFields" only) an object of string
 * values.  Whitespace between tokens is allowed, not before the first '{' or after the last '}'
 * (codec._loads hands those to json.loads).  Anything else: FALLBACK. */
enum { OK = 0, FALLBACK = 1, FAIL = -1 };  /* FAIL: a Python exception is set (memory) */

typedef struct { const unsigned char *p, *end; } Cur;

static inline void skip_ws(Cur *c) {
    while (c->p < c->end && (*c->p == ' ' || *c->p == '\t' || *c->p == '\n' || *c->p == '\r')) c->p++;
}

static int hexval(unsigned char ch) {
    if (ch >= '0' && ch <= '9') return ch - '0';
    if (ch >= 'a' && ch <= 'f') return ch - 'a' + 10;
    if (ch >= 'A' && ch <= 'F') return ch - 'A' + 10;
    return -1;
}

/* A JSON string at c->p (on its opening quote) -> a new str in *out. */
static int parse_string(Cur *c, PyObject **out) {
    const unsigned char *start = ++c->p;
    const unsigned char *q = start;
    int escaped = 0;
    while (q < c->end && *q != '"') {
        if (*q < 0x20) return FALLBACK;  /* strict JSON refuses raw control characters */
        if (*q == '\\') { escaped = 1; q++; if (q >= c->end) return FALLBACK; }
        q++;
    }
    if (q >= c->end) return FALLBACK;
    if (!escaped) {
        *out = PyUnicode_DecodeUTF8((const char *)start, q - start, NULL);
        c->p = q + 1;
        if (*out == NULL) { PyErr_Clear(); return FALLBACK; }
        return OK;
    }
    Buf b; buf_init(&b);
    const unsigned char *r = start;
    while (r < q) {
        if (*r != '\\') {
            const unsigned char *run = r;
            while (r < q && *r != '\\') r++;
            if (buf_put(&b, (const char *)run, r - run) < 0) { buf_free(&b); return FAIL; }
            continue;
        }
        r++;
        char e;
        switch (*r) {
            case '"': e = '"'; break;
            case '\\': e = '\\'; break;
            case '/': e = '/'; break;
            case 'b': e = '\b'; break;
            case 'f': e = '\f'; break;
            case 'n': e = '\n'; break;
            case 'r': e = '\r'; break;
            case 't': e = '\t'; break;
            case 'u': {
                if (q - r < 5) { buf_free(&b); return FALLBACK; }
                unsigned int cp = 0;
                for (int i = 1; i <= 4; i++) {
                    int h = hexval(r[i]);
                    if (h < 0) { buf_free(&b); return FALLBACK; }
                    cp = (cp << 4) | (unsigned int)h;
                }
                if (cp >= 0xD800 && cp <= 0xDFFF) { buf_free(&b); return FALLBACK; }  /* surrogates: json's rules */
                char u[3]; Py_ssize_t n;
                if (cp < 0x80) { u[0] = (char)cp; n = 1; }
                else if (cp < 0x800) { u[0] = (char)(0xC0 | (cp >> 6)); u[1] = (char)(0x80 | (cp & 0x3F)); n = 2; }
                else { u[0] = (char)(0xE0 | (cp >> 12)); u[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
                       u[2] = (char)(0x80 | (cp & 0x3F)); n = 3; }
                if (buf_put(&b, u, n) < 0) { buf_free(&b); return FAIL; }
                r += 5;
                continue;
            }
            default: buf_free(&b); return FALLBACK;
        }
        if (buf_putc(&b, e) < 0) { buf_free(&b); return FAIL; }
        r++;
    }
    *out = PyUnicode_DecodeUTF8(b.p, b.n, NULL);
    buf_free(&b);
    c->p = q + 1;
    if (*out == NULL) { PyErr_Clear(); return FALLBACK; }
    return OK;
}

/* A JSON integer at c->p -> *out (at most 18 digits, no fraction or exponent). */
static int parse_int(Cur *c, long long *out) {
    const unsigned char *p = c->p;
    int neg = 0;
    if (p < c->end && *p == '-') { neg = 1; p++; }
    if (p >= c->end || *p < '0' || *p > '9') return FALLBACK;
    const unsigned char *digits = p;
    long long v = 0;
    if (*p == '0') p++;
    else while (p < c->end && *p >= '0' && *p <= '9') { v = v * 10 + (*p - '0'); p++; if (p - digits > 18) return FALLBACK; }
    if (p < c->end && (*p == '.' || *p == 'e' || *p == 'E' || (*p >= '0' && *p <= '9'))) return FALLBACK;
    c->p = p;
    *out = neg ? -v : v;
    return OK;
}

static int lit(Cur *c, const char *word) {
    size_t n = strlen(word);
    if ((size_t)(c->end - c->p) < n || memcmp(c->p, word, n) != 0) return 0;
    c->p += n;
    return 1;
}

/* extFields: an object of string values -> a new dict in *out (a repeated key: the last one, as json.loads) */
static int parse_ext(Cur *c, PyObject **out) {
    PyObject *d = _PyDict_NewPresized(16);  /* a send header's 14-15 fields without the two resizes of PyDict_New */
    if (d == NULL) return FAIL;
    c->p++;  /* '{' */
    skip_ws(c);
    if (c->p < c->end && *c->p == '}') { c->p++; *out = d; return OK; }
    for (;;) {
        skip_ws(c);
        if (c->p >= c->end || *c->p != '"') { Py_DECREF(d); return FALLBACK; }
        PyObject *k = NULL, *v = NULL;
        int rc = parse_string(c, &k);
        if (rc != OK) { Py_DECREF(d); return rc; }
        skip_ws(c);
        if (c->p >= c->end || *c->p != ':') { Py_DECREF(k); Py_DECREF(d); return FALLBACK; }
        c->p++;
        skip_ws(c);
        if (c->p >= c->end || *c->p != '"') { Py_DECREF(k); Py_DECREF(d); return FALLBACK; }
        rc = parse_string(c, &v);
        if (rc != OK) { Py_DECREF(k); Py_DECREF(d); return rc; }
        rc = PyDict_SetItem(d, k, v);  /* not interned: a lookup in the interpreter's table per key cost more than
                                          it saved (json.loads does not intern either; one-letter keys are shared) */
        Py_DECREF(k); Py_DECREF(v);
        if (rc < 0) { Py_DECREF(d); return FAIL; }
        skip_ws(c);
        if (c->p < c->end && *c->p == ',') { c->p++; continue; }
        if (c->p < c->end && *c->p == '}') { c->p++; *out = d; return OK; }
        Py_DECREF(d);
        return FALLBACK;
    }
}

typedef struct {
    int has_code; long long code, opaque, flag, version;
    PyObject *ext;       /* NULL: absent or null */
    PyObject *remark;    /* NULL: absent or null */
    PyObject *language;  /* NULL: absent */
} Header;

static void header_clear(Header *h) { Py_CLEAR(h->ext); Py_CLEAR(h->remark); Py_CLEAR(h->language); }

static int key_is(const unsigned char *k, Py_ssize_t n, const char *name) {
    return (size_t)n == strlen(name) && memcmp(k, name, (size_t)n) == 0;
}

/* The top-level object; known keys into h, an unknown key (json's ``extra``): FALLBACK. */
static int parse_header(const unsigned char *p, Py_ssize_t n, Header *h) {
    Cur c = {p, p + n};
    if (n < 2 || p[0] != '{' || p[n - 1] != '}') return FALLBACK;
    c.p++;
    skip_ws(&c);
    if (c.p < c.end && *c.p == '}') return c.p + 1 == c.end ? OK : FALLBACK;
    for (;;) {
        skip_ws(&c);
        if (c.p >= c.end || *c.p != '"') return FALLBACK;
        const unsigned char *k = ++c.p;  /* known keys are plain ASCII without escapes */
        while (c.p < c.end && *c.p != '"' && *c.p != '\\' && *c.p >= 0x20 && *c.p < 0x80) c.p++;
        if (c.p >= c.end || *c.p != '"') return FALLBACK;
        Py_ssize_t kn = c.p - k;
        c.p++;
        skip_ws(&c);
        if (c.p >= c.end || *c.p != ':') return FALLBACK;
        c.p++;
        skip_ws(&c);
        if (c.p >= c.end) return FALLBACK;
        int rc;
        unsigned char first = *c.p;
        long long *num = NULL;
        if (key_is(k, kn, "code")) { num = &h->code; h->has_code = 1; }
        else if (key_is(k, kn, "opaque")) num = &h->opaque;
        else if (key_is(k, kn, "flag")) num = &h->flag;
        else if (key_is(k, kn, "version")) num = &h->version;
        if (num != NULL) {
            rc = parse_int(&c, num);
            if (rc != OK) return rc;
            if (*num < INT32_MIN_ || *num > INT32_MAX_) return FALLBACK;
        } else if (key_is(k, kn, "extFields")) {
            Py_CLEAR(h->ext);
            if (first == '{') { rc = parse_ext(&c, &h->ext); if (rc != OK) return rc; }
            else if (!lit(&c, "null")) return FALLBACK;
        } else if (key_is(k, kn, "remark")) {
            Py_CLEAR(h->remark);
            if (first == '"') { rc = parse_string(&c, &h->remark); if (rc != OK) return rc; }
            else if (!lit(&c, "null")) return FALLBACK;
        } else if (key_is(k, kn, "language")) {
            Py_CLEAR(h->language);
            if (first != '"') return FALLBACK;  /* a numeric language: codec's mapping */
            rc = parse_string(&c, &h->language);
            if (rc != OK) return rc;
        } else if (key_is(k, kn, "serializeTypeCurrentRPC")) {  /* read and ignored, as codec does */
            if (first == '"') {
                PyObject *s = NULL;
                rc = parse_string(&c, &s);
                if (rc != OK) return rc;
                Py_DECREF(s);
            } else if (!lit(&c, "null")) {
                long long ignored;
                rc = parse_int(&c, &ignored);
                if (rc != OK) return rc;
            }
        } else {
            return FALLBACK;
        }
        skip_ws(&c);
        if (c.p < c.end && *c.p == ',') { c.p++; continue; }
        if (c.p < c.end && *c.p == '}') { c.p++; return c.p == c.end ? OK : FALLBACK; }
        return FALLBACK;
    }
}

/* decode_json_frame(frame) -> (code, ext_fields, body, remark, opaque, flag, language, version, 0, {}) or None.
 * ``frame`` is a frame without its length prefix (any buffer); the tuple is RemotingCommand's fields in order. */
static PyObject *decode_json_frame(PyObject *self, PyObject *arg) {
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0) return NULL;
    const unsigned char *p = view.buf;
    Py_ssize_t n = view.len;
    PyObject *result = NULL;
    Header h = {0};
    if (n < 4) goto fallback;
    int32_t mark = rd_i32(p);
    if (((mark >> 24) & 0xFF) != 0) goto fallback;
    Py_ssize_t hlen = mark & 0xFFFFFF;
    if (hlen > n - 4) goto fallback;
    int rc = parse_header(p + 4, hlen, &h);
    if (rc == FAIL) goto done;
    if (rc == FALLBACK || !h.has_code) goto fallback;
    PyObject *body = (n - 4 - hlen) ? PyBytes_FromStringAndSize((const char *)p + 4 + hlen, n - 4 - hlen)
                                    : Py_NewRef(s_empty_bytes);
    if (body == NULL) goto done;
    PyObject *extra = PyDict_New();
    if (extra == NULL) { Py_DECREF(body); goto done; }
    result = PyTuple_New(10);  /* built directly: Py_BuildValue parses its format on every frame */
    PyObject *code = PyLong_FromLongLong(h.code), *opaque = PyLong_FromLongLong(h.opaque),
             *flag = PyLong_FromLongLong(h.flag), *version = PyLong_FromLongLong(h.version),
             *stype = PyLong_FromLong(0);
    if (result == NULL || !code || !opaque || !flag || !version || !stype) {
        Py_XDECREF(result); result = NULL;
        Py_XDECREF(code); Py_XDECREF(opaque); Py_XDECREF(flag); Py_XDECREF(version); Py_XDECREF(stype);
        Py_DECREF(body); Py_DECREF(extra);
        goto done;
    }
    PyTuple_SET_ITEM(result, 0, code);
    PyTuple_SET_ITEM(result, 1, Py_NewRef(h.ext ? h.ext : Py_None));
    PyTuple_SET_ITEM(result, 2, body);
    PyTuple_SET_ITEM(result, 3, Py_NewRef(h.remark ? h.remark : Py_None));
    PyTuple_SET_ITEM(result, 4, opaque);
    PyTuple_SET_ITEM(result, 5, flag);
    PyTuple_SET_ITEM(result, 6, Py_NewRef(h.language ? h.language : s_JAVA));
    PyTuple_SET_ITEM(result, 7, version);
    PyTuple_SET_ITEM(result, 8, stype);
    PyTuple_SET_ITEM(result, 9, extra);
    goto done;
fallback:
    result = Py_NewRef(Py_None);
done:
    header_clear(&h);
    PyBuffer_Release(&view);
    return result;
}

/* ================================================================== JSON header encode */
static const char HEX[] = "0123456789abcdef";

/* A str as json.dumps(ensure_ascii=False) writes it; -1 with no exception set: not the common case. */
static int put_json_str(Buf *b, PyObject *s) {
    if (!PyUnicode_CheckExact(s)) return -1;
    Py_ssize_t n;
    const char *u = PyUnicode_AsUTF8AndSize(s, &n);
    if (u == NULL) { PyErr_Clear(); return -1; }  /* lone surrogates: codec's own path */
    if (buf_reserve(b, n + 2) < 0) return -2;
    b->p[b->n++] = '"';
    const char *run = u;
    for (Py_ssize_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)u[i];
        if (ch >= 0x20 && ch != '"' && ch != '\\') continue;
        if (buf_put(b, run, (u + i) - run) < 0) return -2;
        run = u + i + 1;
        char esc[6] = {'\\', 0, 0, 0, 0, 0};
        Py_ssize_t en = 2;
        switch (ch) {
            case '"': esc[1] = '"'; break;
            case '\\': esc[1] = '\\'; break;
            case '\b': esc[1] = 'b'; break;
            case '\f': esc[1] = 'f'; break;
            case '\n': esc[1] = 'n'; break;
            case '\r': esc[1] = 'r'; break;
            case '\t': esc[1] = 't'; break;
            default: esc[1] = 'u'; esc[2] = '0'; esc[3] = '0'; esc[4] = HEX[ch >> 4]; esc[5] = HEX[ch & 15]; en = 6;
        }
        if (buf_put(b, esc, en) < 0) return -2;
    }
    if (buf_put(b, run, (u + n) - run) < 0) return -2;
    return buf_putc(b, '"') < 0 ? -2 : 0;
}

static int put_int(Buf *b, PyObject *v) {
    if (!PyLong_CheckExact(v)) return -1;
    int overflow = 0;
    long long x = PyLong_AsLongLongAndOverflow(v, &overflow);
    if (overflow || (x == -1 && PyErr_Occurred())) { PyErr_Clear(); return -1; }
    char tmp[32];
    int k = snprintf(tmp, sizeof tmp, "%lld", x);
    return buf_put(b, tmp, k) < 0 ? -2 : 0;
}

#define PUT(expr) do { int r_ = (expr); if (r_ == -1) goto fallback; if (r_ < -1) goto fail; } while (0)
#define PUTS(lit_) do { if (buf_put(&b, lit_, (Py_ssize_t)(sizeof(lit_) - 1)) < 0) goto fail; } while (0)

/* encode_json_frame(code, ext_fields, remark, opaque, flag, language, version, body) -> the whole frame, or None. */
static PyObject *encode_json_frame(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 8) { PyErr_SetString(PyExc_TypeError, "encode_json_frame takes 8 arguments"); return NULL; }
    PyObject *code = args[0], *ext = args[1], *remark = args[2], *opaque = args[3], *flag = args[4],
             *language = args[5], *version = args[6], *body = args[7];
    if (!PyBytes_CheckExact(body)) Py_RETURN_NONE;
    Buf b; buf_init(&b);
    if (buf_reserve(&b, 8) < 0) goto fail;
    b.n = 8;  /* the two length fields, filled in below */
    PUTS("{\"code\":");
    PUT(put_int(&b, code));
    if (ext != Py_None) {
        if (!PyDict_CheckExact(ext)) goto fallback;
        PUTS(",\"extFields\":{");
        Py_ssize_t pos = 0, i = 0;
        PyObject *k, *v;
        while (PyDict_Next(ext, &pos, &k, &v)) {
            if (i++ && buf_putc(&b, ',') < 0) goto fail;
            PUT(put_json_str(&b, k));
            if (buf_putc(&b, ':') < 0) goto fail;
            PUT(put_json_str(&b, v));
        }
        if (buf_putc(&b, '}') < 0) goto fail;
    }
    PUTS(",\"flag\":");
    PUT(put_int(&b, flag));
    PUTS(",\"language\":");
    PUT(put_json_str(&b, language));
    PUTS(",\"opaque\":");
    PUT(put_int(&b, opaque));
    if (remark != Py_None) {
        PUTS(",\"remark\":");
        PUT(put_json_str(&b, remark));
    }
    PUTS(",\"serializeTypeCurrentRPC\":\"JSON\",\"version\":");
    PUT(put_int(&b, version));
    if (buf_putc(&b, '}') < 0) goto fail;
    Py_ssize_t hlen = b.n - 8, blen = PyBytes_GET_SIZE(body);
    if (hlen > 0xFFFFFF || 4 + hlen + blen > INT32_MAX_) goto fallback;
    PyObject *out = PyBytes_FromStringAndSize(NULL, b.n + blen);
    if (out == NULL) goto fail;
    unsigned char *o = (unsigned char *)PyBytes_AS_STRING(out);
    wr_u32((unsigned char *)b.p, (uint32_t)(4 + hlen + blen));
    wr_u32((unsigned char *)b.p + 4, (uint32_t)hlen);
    memcpy(o, b.p, (size_t)b.n);
    memcpy(o + b.n, PyBytes_AS_STRING(body), (size_t)blen);
    buf_free(&b);
    return out;
fallback:
    buf_free(&b);
    Py_RETURN_NONE;
fail:
    buf_free(&b);
    return NULL;
}

/* ================================================================== properties */
/* string_to_properties for a str: fragments split on \x02, name and value on the first \x01; a fragment
 * without a separator, a name or a value is dropped (RocketMQ's string2messageProperties). */
static int parse_props_into(PyObject *d, PyObject *text) {
    Py_ssize_t n = PyUnicode_GET_LENGTH(text), pos = 0;
    while (pos <= n) {
        Py_ssize_t end = n ? PyUnicode_FindChar(text, 0x02, pos, n, 1) : -1;
        if (end == -2) return -1;
        if (end < 0) end = n;
        if (end > pos) {
            Py_ssize_t sep = PyUnicode_FindChar(text, 0x01, pos, end, 1);
            if (sep == -2) return -1;
            if (sep > pos && sep + 1 < end) {
                PyObject *k = PyUnicode_Substring(text, pos, sep);
                PyObject *v = k ? PyUnicode_Substring(text, sep + 1, end) : NULL;
                if (v == NULL) { Py_XDECREF(k); return -1; }
                PyUnicode_InternInPlace(&k);
                int rc = PyDict_SetItem(d, k, v);
                Py_DECREF(k); Py_DECREF(v);
                if (rc < 0) return -1;
            }
        }
        pos = end + 1;
    }
    return 0;
}

static PyObject *parse_properties(PyObject *self, PyObject *text) {
    if (!PyUnicode_CheckExact(text)) Py_RETURN_NONE;
    PyObject *d = PyDict_New();
    if (d == NULL) return NULL;
    if (PyUnicode_GET_LENGTH(text) && parse_props_into(d, text) < 0) { Py_DECREF(d); return NULL; }
    return d;
}

/* ================================================================== send header fields */
/* Plain decimal (-?[0-9]{1,18}) -> *out; anything else is int()'s business: 0 here. */
static int plain_int(PyObject *s, long long *out) {
    if (!PyUnicode_CheckExact(s) || !PyUnicode_IS_ASCII(s)) return 0;
    Py_ssize_t n = PyUnicode_GET_LENGTH(s);
    const char *p = (const char *)PyUnicode_DATA(s);
    Py_ssize_t i = 0;
    int neg = 0;
    if (n && p[0] == '-') { neg = 1; i = 1; }
    if (i >= n || n - i > 18) return 0;
    long long v = 0;
    for (; i < n; i++) {
        if (p[i] < '0' || p[i] > '9') return 0;
        v = v * 10 + (p[i] - '0');
    }
    *out = neg ? -v : v;
    return 1;
}

/* send_fields(ext, code) -> (group, topic, queueId, sysFlag, bornTimestamp, flag, reconsumeTimes, batch, properties)
 * as broker_handlers._send_fields reads them, or None (a missing or non-plain field: its HeaderError). */
static PyObject *send_fields_of(PyObject *ext, long code);

static PyObject *send_fields(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2 || !PyDict_CheckExact(args[0]) || !PyLong_CheckExact(args[1])) Py_RETURN_NONE;
    long code = PyLong_AsLong(args[1]);
    if (code == -1 && PyErr_Occurred()) { PyErr_Clear(); Py_RETURN_NONE; }
    return send_fields_of(args[0], code);
}

/* send_fields' work on an extFields dict (also decode_frames' for each send it reads). */
static PyObject *send_fields_of(PyObject *ext, long code) {
    int v2 = code != 10 && PyDict_GetItemWithError(ext, send_short[1]) != NULL;
    if (PyErr_Occurred()) return NULL;
    PyObject *raw[9];
    for (int i = 0; i < 9; i++) {
        raw[i] = PyDict_GetItemWithError(ext, v2 ? send_short[i] : send_long[i]);  /* borrowed */
        if (raw[i] == NULL && PyErr_Occurred()) return NULL;
        if (raw[i] == NULL && v2) {
            raw[i] = PyDict_GetItemWithError(ext, send_long[i]);
            if (raw[i] == NULL && PyErr_Occurred()) return NULL;
        }
    }
    if (raw[0] == NULL || raw[1] == NULL || !PyUnicode_CheckExact(raw[0]) || !PyUnicode_CheckExact(raw[1]))
        Py_RETURN_NONE;
    long long num[5];
    for (int i = 0; i < 5; i++) {
        PyObject *v = raw[2 + i];
        if (i == 4 && (v == NULL || (PyUnicode_CheckExact(v) && PyUnicode_GET_LENGTH(v) == 0))) { num[i] = 0; continue; }
        if (v == NULL || !plain_int(v, &num[i])) Py_RETURN_NONE;
    }
    int batch = code == 320;
    PyObject *bv = raw[7];
    if (bv != NULL) {
        if (!PyUnicode_CheckExact(bv) || !PyUnicode_IS_ASCII(bv)) Py_RETURN_NONE;
        if (PyUnicode_GET_LENGTH(bv) == 4) {
            const char *p = (const char *)PyUnicode_DATA(bv);
            if ((p[0] | 32) == 't' && (p[1] | 32) == 'r' && (p[2] | 32) == 'u' && (p[3] | 32) == 'e') batch = 1;
        }
    }
    PyObject *props = raw[8];
    if (props != NULL && !PyUnicode_CheckExact(props)) Py_RETURN_NONE;
    if (props == NULL || PyUnicode_GET_LENGTH(props) == 0) props = s_empty;
    PyObject *t = PyTuple_New(9);  /* built directly: Py_BuildValue parses its format on every send */
    if (t == NULL) return NULL;
    PyTuple_SET_ITEM(t, 0, Py_NewRef(raw[0]));
    PyTuple_SET_ITEM(t, 1, Py_NewRef(raw[1]));
    for (int i = 0; i < 5; i++) {
        PyObject *v = PyLong_FromLongLong(num[i]);
        if (v == NULL) { Py_DECREF(t); return NULL; }
        PyTuple_SET_ITEM(t, 2 + i, v);
    }
    PyTuple_SET_ITEM(t, 7, Py_NewRef(batch ? Py_True : Py_False));
    PyTuple_SET_ITEM(t, 8, Py_NewRef(props));
    return t;
}

/* ================================================================== a read's frames */
/* One frame (without its length prefix) -> a ``cls`` instance, as codec.decode gives it, with its ``send`` slot set
 * for a request of SEND_MESSAGE (10), SEND_MESSAGE_V2 (310) or SEND_BATCH_MESSAGE (320) whose header fields are
 * in their plain form: (send_fields' tuple, the properties dict or None for a batch).  FALLBACK: the frame is not
 * in the common JSON form (decode_python reads it, or names what is wrong). */
static int decode_one(const unsigned char *p, Py_ssize_t n, PyObject *cls, PyObject **out, long long *code_out,
                      long long *flag_out) {
    Header h = {0};
    int rc = FALLBACK;
    if (n < 4) return FALLBACK;
    int32_t mark = rd_i32(p);
    if (((mark >> 24) & 0xFF) != 0) return FALLBACK;
    Py_ssize_t hlen = mark & 0xFFFFFF;
    if (hlen > n - 4) return FALLBACK;
    rc = parse_header(p + 4, hlen, &h);
    if (rc != OK || !h.has_code) { header_clear(&h); return rc == FAIL ? FAIL : FALLBACK; }
    PyObject *argv[11] = {NULL};
    PyObject *send = NULL;
    rc = FAIL;
    if (h.ext != NULL && !(h.flag & 1) && (h.code == 10 || h.code == 310 || h.code == 320)) {
        PyObject *fields = send_fields_of(h.ext, (long)h.code);
        if (fields == NULL) goto done;
        if (fields == Py_None) {
            send = fields;  /* not plain: _send_fields reads the dict and names the field */
        } else {
            PyObject *props = Py_None, *text = PyTuple_GET_ITEM(fields, 8);
            if (PyTuple_GET_ITEM(fields, 7) == Py_False) {
                props = PyDict_New();
                if (props == NULL || (PyUnicode_GET_LENGTH(text) && parse_props_into(props, text) < 0)) {
                    Py_XDECREF(props); Py_DECREF(fields); goto done;
                }
            } else {
                Py_INCREF(props);
            }
            send = PyTuple_Pack(2, fields, props);
            Py_DECREF(fields); Py_DECREF(props);
            if (send == NULL) goto done;
        }
    } else {
        send = Py_NewRef(Py_None);
    }
    argv[0] = PyLong_FromLongLong(h.code);
    argv[1] = Py_NewRef(h.ext ? h.ext : Py_None);
    argv[2] = (n - 4 - hlen) ? PyBytes_FromStringAndSize((const char *)p + 4 + hlen, n - 4 - hlen)
                             : Py_NewRef(s_empty_bytes);
    argv[3] = Py_NewRef(h.remark ? h.remark : Py_None);
    argv[4] = PyLong_FromLongLong(h.opaque);
    argv[5] = PyLong_FromLongLong(h.flag);
    argv[6] = Py_NewRef(h.language ? h.language : s_JAVA);
    argv[7] = PyLong_FromLongLong(h.version);
    argv[8] = PyLong_FromLong(0);
    argv[9] = PyDict_New();
    argv[10] = send;
    send = NULL;
    for (int i = 0; i < 11; i++) if (argv[i] == NULL) goto done;
    *out = PyObject_Vectorcall(cls, argv, 11, NULL);
    if (*out == NULL) goto done;
    *code_out = h.code;
    *flag_out = h.flag;
    rc = OK;
done:
    for (int i = 0; i < 11; i++) Py_XDECREF(argv[i]);
    Py_XDECREF(send);
    header_clear(&h);
    return rc;
}

/* decode_frames(data, pos, max_frame, cls, group_codes) -> (pos, [cmd, ...]): RemotingServer.frames' loop over the
 * whole frames of a read from ``pos``, in C.  It stops before a frame it cannot take (a length to refuse, an
 * incomplete frame, a header that is not in the common JSON form: the Python loop raises, waits or decodes it) and
 * after a frame that is not a request of a code in ``group_codes`` (the caller routes it and checks its in-flight
 * limit before calling again), so the caller's order of work is unchanged. */
static PyObject *decode_frames(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 5) {
        PyErr_SetString(PyExc_TypeError, "decode_frames(data, pos, max_frame, cls, group_codes)");
        return NULL;
    }
    Py_ssize_t pos = PyLong_AsSsize_t(args[1]);
    if (pos == -1 && PyErr_Occurred()) return NULL;
    long long max_frame = PyLong_AsLongLong(args[2]);
    if (max_frame == -1 && PyErr_Occurred()) return NULL;
    PyObject *cls = args[3], *groups = args[4];
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0) return NULL;
    const unsigned char *base = view.buf;
    Py_ssize_t end = view.len;
    PyObject *out = PyList_New(0);
    if (out == NULL) goto error;
    while (pos >= 0 && end - pos >= 4) {
        long long length = rd_i32(base + pos);
        if (length < 4 || length + 4 > max_frame) break;
        if (end - pos - 4 < length) break;
        PyObject *cmd = NULL;
        long long code = 0, flag = 0;
        int rc = decode_one(base + pos + 4, (Py_ssize_t)length, cls, &cmd, &code, &flag);
        if (rc == FAIL) goto error;
        if (rc == FALLBACK) break;
        int appended = PyList_Append(out, cmd);
        Py_DECREF(cmd);
        if (appended < 0) goto error;
        pos += 4 + (Py_ssize_t)length;
        if (flag & 1) break;
        PyObject *key = PyLong_FromLongLong(code);
        if (key == NULL) goto error;
        int grouped = PySequence_Contains(groups, key);
        Py_DECREF(key);
        if (grouped < 0) goto error;
        if (!grouped) break;
    }
    PyBuffer_Release(&view);
    return Py_BuildValue("(nN)", pos, out);
error:
    Py_XDECREF(out);
    PyBuffer_Release(&view);
    return NULL;
}

/* ================================================================== SEND_BATCH_MESSAGE body */
/* decode_batch(body) -> [(body, flag, properties), ...] or None (a malformed record: codec's FrameError). */
static PyObject *decode_batch(PyObject *self, PyObject *arg) {
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0) return NULL;
    const unsigned char *p = view.buf;
    Py_ssize_t n = view.len, pos = 0;
    PyObject *out = PyList_New(0);
    if (out == NULL) goto fail;
    while (pos < n) {
        if (n - pos < 20) goto fallback;
        int32_t total = rd_i32(p + pos), flag = rd_i32(p + pos + 12), blen = rd_i32(p + pos + 16);
        if (total < 22 || total > n - pos) goto fallback;
        if (blen < 0 || 20 + (int64_t)blen + 2 > total) goto fallback;
        int16_t plen = rd_i16(p + pos + 20 + blen);
        if (plen < 0 || 20 + (int64_t)blen + 2 + plen > total) goto fallback;
        PyObject *text = PyUnicode_DecodeUTF8((const char *)p + pos + 22 + blen, plen, NULL);
        if (text == NULL) { PyErr_Clear(); goto fallback; }
        PyObject *props = PyDict_New();
        if (props == NULL || (plen && parse_props_into(props, text) < 0)) { Py_DECREF(text); Py_XDECREF(props); goto fail; }
        Py_DECREF(text);
        PyObject *item = Py_BuildValue("(y#iN)", (const char *)p + pos + 20, (Py_ssize_t)blen, (int)flag, props);
        if (item == NULL) goto fail;
        int rc = PyList_Append(out, item);
        Py_DECREF(item);
        if (rc < 0) goto fail;
        pos += total;
    }
    PyBuffer_Release(&view);
    return out;
fallback:
    Py_XDECREF(out);
    PyBuffer_Release(&view);
    Py_RETURN_NONE;
fail:
    Py_XDECREF(out);
    PyBuffer_Release(&view);
    return NULL;
}

/* ================================================================== SEND_MESSAGE answers of a run */
static PyObject *r_serialize_type, *r_opaque, *r_flag, *r_status, *r_message, *r_queue_id, *r_cfg, *r_name,
                *r_topic, *r_physical_offset, *r_queue_offset, *r_properties, *k_TRANSACTION_ID, *k_UNIQ_KEY_A;

static int send_answers_init(void) {
    r_serialize_type = PyUnicode_InternFromString("serialize_type");
    r_opaque = PyUnicode_InternFromString("opaque");
    r_flag = PyUnicode_InternFromString("flag");
    r_status = PyUnicode_InternFromString("status");
    r_message = PyUnicode_InternFromString("message");
    r_queue_id = PyUnicode_InternFromString("queue_id");
    r_cfg = PyUnicode_InternFromString("cfg");
    r_name = PyUnicode_InternFromString("name");
    r_topic = PyUnicode_InternFromString("topic");
    r_physical_offset = PyUnicode_InternFromString("physical_offset");
    r_queue_offset = PyUnicode_InternFromString("queue_offset");
    r_properties = PyUnicode_InternFromString("properties");
    k_TRANSACTION_ID = PyUnicode_InternFromString("TRANSACTION_ID");
    k_UNIQ_KEY_A = PyUnicode_InternFromString("UNIQ_KEY");
    return (r_serialize_type && r_opaque && r_flag && r_status && r_message && r_queue_id && r_cfg && r_name
            && r_topic && r_physical_offset && r_queue_offset && r_properties && k_TRANSACTION_ID && k_UNIQ_KEY_A)
           ? 0 : -1;
}

/* An exact int attribute of o -> *out (0: absent, not an exact int, or beyond a long long). */
static int ll_attr(PyObject *o, PyObject *name, long long *out) {
    PyObject *v = PyObject_GetAttr(o, name);
    if (v == NULL) { PyErr_Clear(); return 0; }
    int ok = 0;
    if (PyLong_CheckExact(v)) {
        int overflow = 0;
        *out = PyLong_AsLongLongAndOverflow(v, &overflow);
        ok = !overflow && !(*out == -1 && PyErr_Occurred());
        PyErr_Clear();
    }
    Py_DECREF(v);
    return ok;
}

/* v in decimal at out (at least 21 bytes); its length.  snprintf parses its format on every call. */
static int fmt_lld(char *out, long long v) {
    char tmp[24];
    int n = 0;
    unsigned long long u = v < 0 ? 0ULL - (unsigned long long)v : (unsigned long long)v;
    do { tmp[n++] = (char)('0' + u % 10); u /= 10; } while (u);
    int k = 0;
    if (v < 0) out[k++] = '-';
    while (n) out[k++] = tmp[--n];
    return k;
}

/* One answer: what encode(cmd.response(SUCCESS, None, ext)) writes for _answer_send's ext of a plain stored single
 * send (msgId, queueId, queueOffset, MSG_REGION, TRACE_ON, transactionId, in that order); 1 done, 0 not the common
 * case (nothing written), -1 error. */
static int put_answer(Buf *b, PyObject *cmd, PyObject *res, PyObject *prep, PyObject *prefix, PyObject *region,
                      PyObject *trace_on, PyObject *ok) {
    long long stype, opaque, flag, queue_id, phy, qoff;
    if (!ll_attr(cmd, r_serialize_type, &stype) || stype != 0 || !ll_attr(cmd, r_opaque, &opaque)
        || !ll_attr(cmd, r_flag, &flag) || opaque < INT32_MIN_ || opaque > INT32_MAX_)
        return 0;
    if (flag & 2) return 1;  /* oneway: no answer */
    PyObject *msg;
    if (ok == Py_None) {  /* res is the stored message itself (a run put by Broker.put_plain_run: all stored) */
        msg = Py_NewRef(res);
    } else {
        PyObject *status = PyObject_GetAttr(res, r_status);
        if (status == NULL) { PyErr_Clear(); return 0; }
        Py_DECREF(status);  /* an identity test only: ``ok`` keeps the member alive */
        if (status != ok) return 0;
        msg = PyObject_GetAttr(res, r_message);
        if (msg == NULL) { PyErr_Clear(); return 0; }
    }
    int r = 0;
    PyObject *cfg = NULL, *name = NULL, *topic = NULL, *props = NULL, *tx;
    if (msg == Py_None || !ll_attr(prep, r_queue_id, &queue_id) || !ll_attr(msg, r_physical_offset, &phy)
        || !ll_attr(msg, r_queue_offset, &qoff) || phy < 0)
        goto done;
    if ((cfg = PyObject_GetAttr(prep, r_cfg)) == NULL || (name = PyObject_GetAttr(cfg, r_name)) == NULL
        || (topic = PyObject_GetAttr(msg, r_topic)) == NULL || (props = PyObject_GetAttr(msg, r_properties)) == NULL) {
        PyErr_Clear();
        goto done;
    }
    if (!PyUnicode_CheckExact(name) || !PyUnicode_CheckExact(topic) || !PyDict_CheckExact(props)) goto done;
    if (name != topic) {  /* wrapped by the timer or as a half: its answer's queueOffset is _answer_send's */
        int eq = PyUnicode_Compare(name, topic);
        if (eq == -1 && PyErr_Occurred()) { PyErr_Clear(); goto done; }
        if (eq != 0) goto done;
    }
    /* transactionId: props.get("TRANSACTION_ID") or props.get("UNIQ_KEY", "") */
    tx = PyDict_GetItemWithError(props, k_TRANSACTION_ID);
    if (tx == NULL && PyErr_Occurred()) { PyErr_Clear(); goto done; }
    if (tx != NULL && (!PyUnicode_CheckExact(tx) || PyUnicode_GET_LENGTH(tx) == 0)) {
        if (!PyUnicode_CheckExact(tx)) goto done;  /* a non-str value's truth is Python's business */
        tx = NULL;
    }
    if (tx == NULL) {
        tx = PyDict_GetItemWithError(props, k_UNIQ_KEY_A);
        if (tx == NULL && PyErr_Occurred()) { PyErr_Clear(); goto done; }
        if (tx == NULL) tx = s_empty;
    }
    Py_ssize_t start = b->n;
    char num[64];
    int k, w;
#define PA(expr) do { w = (expr); if (w == -1) { b->n = start; goto done; } if (w < -1) { r = -1; goto done; } } while (0)
#define PL(lit_) PA(buf_put(b, lit_, (Py_ssize_t)(sizeof(lit_) - 1)) < 0 ? -2 : 0)
    PA(buf_reserve(b, 8) < 0 ? -2 : 0);
    b->n += 8;  /* the two length fields, filled in below */
    PL("{\"code\":0,\"extFields\":{\"msgId\":");
    {   /* prefix + the physical offset as 16 upper-case hex digits, one JSON string */
        if (!PyUnicode_CheckExact(prefix) || !PyUnicode_IS_ASCII(prefix)) { b->n = start; goto done; }
        Py_ssize_t pn = PyUnicode_GET_LENGTH(prefix);
        const char *pu = (const char *)PyUnicode_DATA(prefix);
        for (int i = 15; i >= 0; i--) num[15 - i] = "0123456789ABCDEF"[((unsigned long long)phy >> (4 * i)) & 15];
        k = 16;
        PA(buf_putc(b, '"') < 0 ? -2 : 0);
        for (Py_ssize_t i = 0; i < pn; i++) {
            unsigned char ch = (unsigned char)pu[i];
            if (ch < 0x20 || ch == '"' || ch == '\\') { b->n = start; goto done; }  /* hex digits only, always */
        }
        PA(buf_put(b, pu, pn) < 0 ? -2 : 0);
        PA(buf_put(b, num, k) < 0 ? -2 : 0);
        PA(buf_putc(b, '"') < 0 ? -2 : 0);
    }
    PL(",\"queueId\":\"");
    k = fmt_lld(num, queue_id);
    PA(buf_put(b, num, k) < 0 ? -2 : 0);
    PL("\",\"queueOffset\":\"");
    k = fmt_lld(num, qoff);
    PA(buf_put(b, num, k) < 0 ? -2 : 0);
    PL("\",\"MSG_REGION\":");
    PA(put_json_str(b, region));
    PL(",\"TRACE_ON\":");
    PA(put_json_str(b, trace_on));
    PL(",\"transactionId\":");
    PA(put_json_str(b, tx));
    PL("},\"flag\":1,\"language\":\"JAVA\",\"opaque\":");
    k = fmt_lld(num, opaque);
    PA(buf_put(b, num, k) < 0 ? -2 : 0);
    PL(",\"serializeTypeCurrentRPC\":\"JSON\",\"version\":479}");
#undef PL
#undef PA
    {
        Py_ssize_t hlen = b->n - start - 8;
        wr_u32((unsigned char *)b->p + start, (uint32_t)(4 + hlen));
        wr_u32((unsigned char *)b->p + start + 4, (uint32_t)hlen);
    }
    r = 1;
done:
    Py_DECREF(msg);
    Py_XDECREF(cfg);
    Py_XDECREF(name);
    Py_XDECREF(topic);
    Py_XDECREF(props);
    return r;
}

/* send_answers(cmds, results, prepared, prefix, region, trace_on, ok) -> the answer frames of a run of single sends,
 * concatenated (a oneway send has none), or None when any of them is not a plain stored send of a JSON request (then
 * RemotingBroker.send_group answers each in Python, the reference).  cmds[i] is the request, results[i] its one
 * PutResult, prepared[i] its _PreparedSend; ok is PutStatus.PUT_OK, or None when results[i] are the stored messages
 * themselves (Broker.put_plain_run stored every one: no PutResult per message).  The header is codec.encode_response's for
 * _answer_send's extFields: code 0, flag 1 (RESPONSE), language JAVA, version 479 (codec.SERVER_VERSION). */
static PyObject *send_answers(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 7 || !PyList_CheckExact(args[0]) || !PyList_CheckExact(args[1]) || !PyList_CheckExact(args[2]))
        Py_RETURN_NONE;
    PyObject *cmds = args[0], *results = args[1], *prepared = args[2];
    Py_ssize_t n = PyList_GET_SIZE(cmds);
    if (PyList_GET_SIZE(results) != n || PyList_GET_SIZE(prepared) != n) Py_RETURN_NONE;
    Buf b; buf_init(&b);
    if (buf_reserve(&b, n * 320) < 0) return NULL;  /* an answer is ~250 bytes: one allocation for the run */
    for (Py_ssize_t i = 0; i < n; i++) {
        int r = put_answer(&b, PyList_GET_ITEM(cmds, i), PyList_GET_ITEM(results, i), PyList_GET_ITEM(prepared, i),
                           args[3], args[4], args[5], args[6]);
        if (r < 0) { buf_free(&b); return NULL; }
        if (r == 0) { buf_free(&b); Py_RETURN_NONE; }
    }
    PyObject *out = PyBytes_FromStringAndSize(b.p, b.n);
    buf_free(&b);
    return out;
}

/* ================================================================== commit-log record head */
/* record_head(prefix, properties, body_len) -> prefix + u16 len + properties + u32 body_len, as record.prepare
 * builds it, or None (a non-str name or value, text that is not UTF-8, properties over 32767 bytes). */
static PyObject *record_head(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 3 || !PyBytes_CheckExact(args[0]) || !PyDict_CheckExact(args[1])) Py_RETURN_NONE;
    PyObject *prefix = args[0], *props = args[1];
    long long body_len = PyLong_AsLongLong(args[2]);
    if (body_len == -1 && PyErr_Occurred()) { PyErr_Clear(); Py_RETURN_NONE; }
    if (body_len < 0 || body_len > 0xFFFFFFFFLL) Py_RETURN_NONE;
    Buf b; buf_init(&b);
    Py_ssize_t plen = PyBytes_GET_SIZE(prefix);
    if (buf_put(&b, PyBytes_AS_STRING(prefix), plen) < 0 || buf_put(&b, "\0\0", 2) < 0) goto fail;
    Py_ssize_t pos = 0;
    PyObject *k, *v;
    while (PyDict_Next(props, &pos, &k, &v)) {
        if (!PyUnicode_CheckExact(k) || !PyUnicode_CheckExact(v)) goto fallback;
        Py_ssize_t kn, vn;
        const char *ku = PyUnicode_AsUTF8AndSize(k, &kn);
        if (ku == NULL) { PyErr_Clear(); goto fallback; }
        const char *vu = PyUnicode_AsUTF8AndSize(v, &vn);
        if (vu == NULL) { PyErr_Clear(); goto fallback; }
        if (buf_put(&b, ku, kn) < 0 || buf_putc(&b, 1) < 0 || buf_put(&b, vu, vn) < 0 || buf_putc(&b, 2) < 0) goto fail;
    }
    Py_ssize_t props_len = b.n - plen - 2;
    if (props_len > 32767) goto fallback;
    b.p[plen] = (char)(props_len >> 8);
    b.p[plen + 1] = (char)props_len;
    if (buf_reserve(&b, 4) < 0) goto fail;
    wr_u32((unsigned char *)b.p + b.n, (uint32_t)body_len);
    b.n += 4;
    PyObject *out = PyBytes_FromStringAndSize(b.p, b.n);
    buf_free(&b);
    return out;
fallback:
    buf_free(&b);
    Py_RETURN_NONE;
fail:
    buf_free(&b);
    return NULL;
}


/* ================================================================== commit-log records */
static PyObject *a_size, *a_queue_id, *a_flag, *a_queue_offset, *a_physical_offset, *a_sys_flag, *a_born_timestamp,
    *a_store_timestamp, *a_reconsume_times, *a_prepared_tx_offset, *a_body;

/* An int attribute within [lo, hi] -> *out; 0 when it is not an int or out of range (struct's error, in Python). */
static int int_attr(PyObject *o, PyObject *name, long long lo, long long hi, long long *out) {
    PyObject *v = PyObject_GetAttr(o, name);
    if (v == NULL) { PyErr_Clear(); return 0; }
    int ok = 0;
    if (PyLong_Check(v)) {
        int overflow = 0;
        long long x = PyLong_AsLongLongAndOverflow(v, &overflow);
        if (!overflow && !(x == -1 && PyErr_Occurred()) && x >= lo && x <= hi) { *out = x; ok = 1; }
        PyErr_Clear();
    }
    Py_DECREF(v);
    return ok;
}


/* encode_run(buf, pos, msgs, heads, i, room, cursor, crc32) -> (i, pos, cursor, room)
 * CommitLog._write_records' inner loop: from message i on, while the next record fits in ``room``, set its
 * physical_offset to ``cursor`` and lay it out at buf[pos:] as record.encode_into does (CRC by ``crc32``, the
 * function record.py uses).  Stops at a record that does not fit (the caller rolls the segment) or that it
 * cannot lay out (a field out of its range or not an int, a body that is not bytes: record.encode_into then
 * runs, and raises as it always did). */
static PyObject *encode_run(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 8 || !PyByteArray_CheckExact(args[0]) || !PyList_CheckExact(args[2]) || !PyList_CheckExact(args[3])) {
        PyErr_SetString(PyExc_TypeError, "encode_run(bytearray, pos, list, list, i, room, cursor, crc32)");
        return NULL;
    }
    PyObject *buf = args[0], *msgs = args[2], *heads = args[3], *crc = args[7];
    Py_ssize_t pos = PyLong_AsSsize_t(args[1]), i = PyLong_AsSsize_t(args[4]);
    long long room = PyLong_AsLongLong(args[5]), cursor = PyLong_AsLongLong(args[6]);
    if (PyErr_Occurred()) return NULL;
    Py_ssize_t n = PyList_GET_SIZE(msgs);
    if (PyList_GET_SIZE(heads) < n) n = PyList_GET_SIZE(heads);
    const long long I32L = INT32_MIN_, I32H = INT32_MAX_, I64L = LLONG_MIN, I64H = LLONG_MAX;
    for (; i < n; i++) {
        PyObject *msg = PyList_GET_ITEM(msgs, i), *head = PyList_GET_ITEM(heads, i);
        long long size, qid, flag, qoff, sysf, born, store, recon, prep;
        if (!int_attr(msg, a_size, 0, 0xFFFFFFFFLL, &size)) break;
        if (size > room) break;
        if (!PyBytes_CheckExact(head)) break;
        if (!int_attr(msg, a_queue_id, I32L, I32H, &qid) || !int_attr(msg, a_flag, I32L, I32H, &flag)
            || !int_attr(msg, a_queue_offset, I64L, I64H, &qoff) || !int_attr(msg, a_sys_flag, I32L, I32H, &sysf)
            || !int_attr(msg, a_born_timestamp, I64L, I64H, &born)
            || !int_attr(msg, a_store_timestamp, I64L, I64H, &store)
            || !int_attr(msg, a_reconsume_times, I32L, I32H, &recon)
            || !int_attr(msg, a_prepared_tx_offset, I64L, I64H, &prep))
            break;
        PyObject *body = PyObject_GetAttr(msg, a_body);
        if (body == NULL) { PyErr_Clear(); break; }
        Py_ssize_t hlen = PyBytes_GET_SIZE(head);
        if (!PyBytes_CheckExact(body) || 68 + hlen + PyBytes_GET_SIZE(body) != size
            || pos + size > PyByteArray_GET_SIZE(buf)) { Py_DECREF(body); break; }
        PyObject *phy = PyLong_FromLongLong(cursor);
        if (phy == NULL || PyObject_SetAttr(msg, a_physical_offset, phy) < 0) { Py_XDECREF(phy); Py_DECREF(body); return NULL; }
        Py_DECREF(phy);
        unsigned char *o = (unsigned char *)PyByteArray_AS_STRING(buf) + pos;
        wr_u32(o, (uint32_t)size); wr_u32(o + 4, 0xDAA320A7u); wr_u32(o + 8, 0);
        wr_u32(o + 12, (uint32_t)qid); wr_u32(o + 16, (uint32_t)flag); sd_put_be64(o + 20, (uint64_t)qoff);
        sd_put_be64(o + 28, (uint64_t)cursor); wr_u32(o + 36, (uint32_t)sysf); sd_put_be64(o + 40, (uint64_t)born);
        sd_put_be64(o + 48, (uint64_t)store); wr_u32(o + 56, (uint32_t)recon); sd_put_be64(o + 60, (uint64_t)prep);
        memcpy(o + 68, PyBytes_AS_STRING(head), (size_t)hlen);
        memcpy(o + 68 + hlen, PyBytes_AS_STRING(body), (size_t)PyBytes_GET_SIZE(body));
        Py_DECREF(body);
        PyObject *view = PyMemoryView_FromMemory((char *)o + 12, size - 12, PyBUF_READ);
        if (view == NULL) return NULL;
        PyObject *c = PyObject_CallOneArg(crc, view);
        Py_DECREF(view);
        if (c == NULL) return NULL;
        unsigned long cv = PyLong_AsUnsignedLongMask(c);
        Py_DECREF(c);
        if (cv == (unsigned long)-1 && PyErr_Occurred()) return NULL;
        if (pos + size > PyByteArray_GET_SIZE(buf)) {  /* the call ran Python code: never write past the buffer */
            PyErr_SetString(PyExc_RuntimeError, "encode_run: the buffer changed size during the CRC call");
            return NULL;
        }
        o = (unsigned char *)PyByteArray_AS_STRING(buf) + pos;
        wr_u32(o + 8, (uint32_t)cv);
        pos += size; cursor += size; room -= size;
    }
    return Py_BuildValue("(nnLL)", i, pos, cursor, room);
}

/* ================================================================== a run of plain messages planned */
static PyObject *a_store_host, *a_born_host, *a_topic, *a_properties;  /* the last two set with the dispatch ones */

/* plan_run(msgs, queue_next, nexts, now, store_host, max_body, max_record, prefixes) -> [head] or None
 * MessageStore.append_plain_run's loop over a run, as its Python loop does it: each message's queue offset from
 * ``nexts`` then ``queue_next`` (its (topic, queue_id) key; nexts[key] moved past it), its store time ``now`` when
 * it has none, its store host ``store_host`` when empty, its record head (record.prepare: the prefix looked up in
 * ``prefixes``, record._PREFIX_CACHE, then record_head) and its size.  None when any message is not the common
 * case (a body over max_body or not bytes, a prefix not cached yet, properties record_head does not take, a record
 * over max_record, a field of another type): then the Python loop runs the whole run again from a fresh ``nexts``
 * and assigns the same values (every assignment here is one it makes too). */
static PyObject *plan_run(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 8 || !PyList_CheckExact(args[0]) || !PyDict_CheckExact(args[1]) || !PyDict_CheckExact(args[2])
        || !PyLong_CheckExact(args[3]) || !PyUnicode_CheckExact(args[4]) || !PyDict_CheckExact(args[7]))
        Py_RETURN_NONE;
    PyObject *msgs = args[0], *queue_next = args[1], *nexts = args[2], *now = args[3], *store_host = args[4];
    PyObject *prefixes = args[7];
    long long max_body = PyLong_AsLongLong(args[5]), max_record = PyLong_AsLongLong(args[6]);
    if (PyErr_Occurred()) return NULL;
    Py_ssize_t n = PyList_GET_SIZE(msgs);
    PyObject *heads = PyList_New(n);
    if (heads == NULL) return NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *msg = PyList_GET_ITEM(msgs, i);
        PyObject *body = NULL, *topic = NULL, *qid = NULL, *key = NULL, *qoff = NULL, *next = NULL, *host = NULL,
                 *born = NULL, *pkey = NULL, *props = NULL, *head = NULL, *size = NULL;
        int ok = 0;
        long long st;
        if ((body = PyObject_GetAttr(msg, a_body)) == NULL || (topic = PyObject_GetAttr(msg, a_topic)) == NULL
            || (qid = PyObject_GetAttr(msg, a_queue_id)) == NULL) { PyErr_Clear(); goto next_msg; }
        if (!PyBytes_CheckExact(body) || PyBytes_GET_SIZE(body) > max_body || !PyUnicode_CheckExact(topic)
            || !PyLong_CheckExact(qid)) goto next_msg;
        if ((key = PyTuple_Pack(2, topic, qid)) == NULL) goto error;
        qoff = PyDict_GetItemWithError(nexts, key);
        if (qoff == NULL) {
            if (PyErr_Occurred()) { PyErr_Clear(); goto next_msg; }
            qoff = PyDict_GetItemWithError(queue_next, key);
            if (qoff == NULL && PyErr_Occurred()) { PyErr_Clear(); goto next_msg; }
        }
        if (qoff == NULL) qoff = PyLong_FromLong(0); else Py_INCREF(qoff);
        if (qoff == NULL) goto error;
        if (!PyLong_CheckExact(qoff)) goto next_msg;
        if (PyObject_SetAttr(msg, a_queue_offset, qoff) < 0) goto error;
        if (!int_attr(msg, a_store_timestamp, LLONG_MIN, LLONG_MAX, &st)) goto next_msg;
        if (st == 0 && PyObject_SetAttr(msg, a_store_timestamp, now) < 0) goto error;
        if ((host = PyObject_GetAttr(msg, a_store_host)) == NULL) { PyErr_Clear(); goto next_msg; }
        if (!PyUnicode_CheckExact(host)) goto next_msg;
        if (PyUnicode_GET_LENGTH(host) == 0) {
            if (PyObject_SetAttr(msg, a_store_host, store_host) < 0) goto error;
            Py_SETREF(host, Py_NewRef(store_host));
        }
        if ((born = PyObject_GetAttr(msg, a_born_host)) == NULL) { PyErr_Clear(); goto next_msg; }
        if (!PyUnicode_CheckExact(born)) goto next_msg;
        if ((pkey = PyTuple_Pack(3, born, host, topic)) == NULL) goto error;
        PyObject *prefix = PyDict_GetItemWithError(prefixes, pkey);
        if (prefix == NULL) { PyErr_Clear(); goto next_msg; }
        if (!PyBytes_CheckExact(prefix)) goto next_msg;
        if ((props = PyObject_GetAttr(msg, a_properties)) == NULL) { PyErr_Clear(); goto next_msg; }
        {
            PyObject *blen = PyLong_FromSsize_t(PyBytes_GET_SIZE(body));
            if (blen == NULL) goto error;
            PyObject *hargs[3] = {prefix, props, blen};
            Py_INCREF(prefix);  /* the call may run Python code (a dict's str subclass): keep the prefix alive */
            head = record_head(NULL, hargs, 3);
            Py_DECREF(prefix);
            Py_DECREF(blen);
        }
        if (head == NULL) goto error;
        if (head == Py_None) goto next_msg;
        long long sz = 68 + (long long)PyBytes_GET_SIZE(head) + (long long)PyBytes_GET_SIZE(body);
        if (sz > max_record) goto next_msg;
        if ((size = PyLong_FromLongLong(sz)) == NULL || PyObject_SetAttr(msg, a_size, size) < 0) goto error;
        {
            long long q = PyLong_AsLongLong(qoff);
            if (q == -1 && PyErr_Occurred()) { PyErr_Clear(); goto next_msg; }
            if (q == LLONG_MAX) goto next_msg;
            if ((next = PyLong_FromLongLong(q + 1)) == NULL || PyDict_SetItem(nexts, key, next) < 0) goto error;
        }
        PyList_SET_ITEM(heads, i, head);
        head = NULL;
        ok = 1;
        goto next_msg;
    error:
        ok = -1;
    next_msg:
        Py_XDECREF(body); Py_XDECREF(topic); Py_XDECREF(qid); Py_XDECREF(key); Py_XDECREF(qoff); Py_XDECREF(next);
        Py_XDECREF(host); Py_XDECREF(born); Py_XDECREF(pkey); Py_XDECREF(props); Py_XDECREF(head); Py_XDECREF(size);
        if (ok < 0) { Py_DECREF(heads); return NULL; }
        if (ok == 0) { Py_DECREF(heads); Py_RETURN_NONE; }
    }
    return heads;
}


/* ================================================================== index entries */
/* index_put(mm, entries, count, slot_num, entries_at, begin_ts, end_ts, end_phy, crc32)
 *   -> (done, count, used, end_ts, end_phy)
 * IndexFile.put_entries' loop over (key, phy, store_ts_ms) entries, writing the same entries and slot heads
 * into ``mm``; stops at an entry it cannot write (a key that is not UTF-8, a number out of its field's range:
 * the Python loop then takes that entry and raises as it always did).  The caller has cut ``entries`` to the
 * file's room. */
static PyObject *index_put(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 9 || !PyList_CheckExact(args[1])) {
        PyErr_SetString(PyExc_TypeError, "index_put(mm, list, count, slot_num, entries_at, begin_ts, end_ts, end_phy, crc)");
        return NULL;
    }
    Py_buffer mm;
    if (PyObject_GetBuffer(args[0], &mm, PyBUF_WRITABLE) < 0) return NULL;
    PyObject *entries = args[1], *crc = args[8];
    long long count = PyLong_AsLongLong(args[2]), slot_num = PyLong_AsLongLong(args[3]);
    long long entries_at = PyLong_AsLongLong(args[4]), begin_ts = PyLong_AsLongLong(args[5]);
    long long end_ts = PyLong_AsLongLong(args[6]), end_phy = PyLong_AsLongLong(args[7]);
    if (PyErr_Occurred()) { PyBuffer_Release(&mm); return NULL; }
    unsigned char *base = mm.buf;
    Py_ssize_t n = PyList_GET_SIZE(entries), i = 0;
    long long used = 0;
    if (slot_num <= 0) n = 0;
    for (; i < n; i++) {
        PyObject *e = PyList_GET_ITEM(entries, i);
        if (!PyTuple_CheckExact(e) || PyTuple_GET_SIZE(e) != 3) break;
        PyObject *key = PyTuple_GET_ITEM(e, 0), *po = PyTuple_GET_ITEM(e, 1), *to = PyTuple_GET_ITEM(e, 2);
        if (!PyUnicode_CheckExact(key) || !PyLong_CheckExact(po) || !PyLong_CheckExact(to)) break;
        int of1 = 0, of2 = 0;
        long long phy = PyLong_AsLongLongAndOverflow(po, &of1), ts = PyLong_AsLongLongAndOverflow(to, &of2);
        if (of1 || of2 || PyErr_Occurred()) { PyErr_Clear(); break; }
        Py_ssize_t kn;
        const char *ku = PyUnicode_AsUTF8AndSize(key, &kn);
        if (ku == NULL) { PyErr_Clear(); break; }
        long long d;  /* Python's floor division by 1000, then clamped at 0 */
        if (__builtin_sub_overflow(ts, begin_ts, &d)) break;
        long long diff = d >= 0 ? d / 1000 : -((-d + 999) / 1000);
        if (diff < 0) diff = 0;
        if (diff > INT32_MAX_ || count > INT32_MAX_) break;
        Py_ssize_t slot_pos = 40 + 0;  /* HEADER_SIZE */
        Py_ssize_t entry_pos = (Py_ssize_t)(entries_at + count * 20);
        if (entry_pos < 0 || entry_pos + 20 > mm.len) break;
        PyObject *kb = PyBytes_FromStringAndSize(ku, kn);
        if (kb == NULL) { PyBuffer_Release(&mm); return NULL; }
        PyObject *c = PyObject_CallOneArg(crc, kb);
        Py_DECREF(kb);
        if (c == NULL) { PyBuffer_Release(&mm); return NULL; }
        unsigned long h = PyLong_AsUnsignedLongMask(c) & 0x7FFFFFFFUL;
        Py_DECREF(c);
        if (PyErr_Occurred()) { PyBuffer_Release(&mm); return NULL; }
        slot_pos += (Py_ssize_t)((long long)h % slot_num) * 4;
        if (slot_pos + 4 > mm.len) break;
        int32_t prev = rd_i32(base + slot_pos);
        if (prev <= 0 || prev >= count) { prev = 0; used++; }
        unsigned char *o = base + entry_pos;
        wr_u32(o, (uint32_t)h); sd_put_be64(o + 4, (uint64_t)phy); wr_u32(o + 12, (uint32_t)diff); wr_u32(o + 16, (uint32_t)prev);
        wr_u32(base + slot_pos, (uint32_t)count);
        count++;
        if (ts > end_ts) end_ts = ts;
        if (phy > end_phy) end_phy = phy;
    }
    PyBuffer_Release(&mm);
    return Py_BuildValue("(nLLLL)", i, count, used, end_ts, end_phy);
}

/* ================================================================== store dispatch */
/* The loop over StoredMessage objects; the dispatch core it shares with raftpath.c's loop over record bytes is
 * broker/store_dispatch.h. */
static PyObject *a_topic, *a_properties, *k_TAGS, *k_KEYS, *k_UNIQ_KEY, *k_MQO;

/* An optional str value of a dict as UTF-8: 1 with (*s, *n) (NULL, 0 when absent); 0 when present and not a
 * str, or a str without a UTF-8 form (lone surrogates: the Python code then builds its keys). */
static int opt_utf8(PyObject *d, PyObject *key, const char **s, Py_ssize_t *n) {
    *s = NULL; *n = 0;
    PyObject *v = PyDict_GetItemWithError(d, key);
    if (v == NULL) { if (PyErr_Occurred()) PyErr_Clear(); return 1; }
    if (!PyUnicode_CheckExact(v)) return 0;
    *s = PyUnicode_AsUTF8AndSize(v, n);
    if (*s == NULL) { PyErr_Clear(); return 0; }
    return 1;
}

/* dispatch_run(msgs, i, runs, new_run, tag_hash, keys) -> i
 * MessageStore._dispatch_one (broker/store/message_store.py) for msgs[i], msgs[i + 1], ...: the record's entry
 * added to its queue's run (``runs[(topic, queue_id)]``, made by ``new_run(key)`` when missing) when its queue
 * offset is new, and its index keys appended to ``keys``, in the same order and with the same values.  Stops,
 * before touching it, at a record it does not take (LMQ offsets in its properties, a field of another type or out
 * of its range, a run it does not recognise, a queue offset past the gap bound, which _dispatch_one refuses):
 * the Python code then dispatches that one. */
static PyObject *dispatch_run(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 6 || !PyList_CheckExact(args[0]) || !PyDict_CheckExact(args[2]) || !PyList_CheckExact(args[5])) {
        PyErr_SetString(PyExc_TypeError, "dispatch_run(list, i, dict, new_run, tag_hash, list)");
        return NULL;
    }
    PyObject *msgs = args[0], *runs = args[2], *new_run = args[3], *tag_hash = args[4], *keys = args[5];
    Py_ssize_t i = PyLong_AsSsize_t(args[1]);
    if (i == -1 && PyErr_Occurred()) return NULL;
    const long long I32L = INT32_MIN_, I32H = INT32_MAX_, I64L = LLONG_MIN, I64H = LLONG_MAX;
    for (; i < PyList_GET_SIZE(msgs); i++) {
        PyObject *msg = PyList_GET_ITEM(msgs, i);
        PyObject *topic = NULL, *props = NULL, *qid = NULL, *qoffo = NULL, *key = NULL, *run = NULL;
        SdRun rs = {NULL, 0, 0};
        long long qidv, qoff, phyv, size, tsv;
        const char *tag, *kstr, *msg_id, *topic_s;
        Py_ssize_t tag_n, kstr_n, id_n, topic_n;
        int stop = 1, fail = 0;
        topic = PyObject_GetAttr(msg, a_topic);
        if (topic == NULL) { PyErr_Clear(); goto next; }
        props = PyObject_GetAttr(msg, a_properties);
        if (props == NULL) { PyErr_Clear(); goto next; }
        if (!PyUnicode_CheckExact(topic) || !PyDict_CheckExact(props)) goto next;
        if (!sd_exact_int_attr(msg, a_queue_id, I32L, I32H, &qid, &qidv)
            || !sd_exact_int_attr(msg, a_queue_offset, I64L, I64H - 1, &qoffo, &qoff)
            || !sd_exact_int_attr(msg, a_physical_offset, I64L, I64H, NULL, &phyv)
            || !sd_exact_int_attr(msg, a_size, I32L, I32H, NULL, &size)
            || !sd_exact_int_attr(msg, a_store_timestamp, I64L, I64H, NULL, &tsv))
            goto next;
        int has = PyDict_Contains(props, k_MQO);
        if (has != 0) { if (has < 0) PyErr_Clear(); goto next; }  /* LMQ entries: the Python code */
        if (!opt_utf8(props, k_TAGS, &tag, &tag_n) || !opt_utf8(props, k_KEYS, &kstr, &kstr_n)
            || !opt_utf8(props, k_UNIQ_KEY, &msg_id, &id_n))
            goto next;
        if ((topic_s = PyUnicode_AsUTF8AndSize(topic, &topic_n)) == NULL) { PyErr_Clear(); goto next; }
        key = PyTuple_Pack(2, topic, qid);
        if (key == NULL) { fail = 1; goto next; }
        if ((run = sd_run_for(runs, new_run, key)) == NULL) { fail = 1; goto next; }
        if (!sd_run_read(run, &rs)) goto next;
        if (qoff >= rs.end && sd_gap_refused(qoff, rs.end)) goto next;  /* _dispatch_one refuses it and logs */
        stop = 0;  /* from here on this record is dispatched here */
        if (qoff >= rs.end) {
            PyObject *tago = tag != NULL ? PyDict_GetItemWithError(props, k_TAGS) : s_empty;
            if (tago == NULL) { fail = 1; goto next; }
            PyObject *h = PyObject_CallOneArg(tag_hash, tago);
            if (h == NULL) { fail = 1; goto next; }
            int overflow = 0;
            long long th = PyLong_AsLongLongAndOverflow(h, &overflow);
            Py_DECREF(h);
            if (overflow || (th == -1 && PyErr_Occurred())) {
                if (!PyErr_Occurred()) PyErr_SetString(PyExc_OverflowError, "tag hash out of range");
                fail = 1; goto next;
            }
            if (sd_run_append(run, &rs, qoff, qoffo, phyv, (uint32_t)size, th) < 0
                || sd_add_keys(keys, topic_s, topic_n, msg_id, id_n, kstr, kstr_n, phyv, tsv) < 0) {
                fail = 1; goto next;
            }
        }
    next:
        Py_XDECREF(topic); Py_XDECREF(props); Py_XDECREF(qid); Py_XDECREF(qoffo); Py_XDECREF(key);
        Py_XDECREF(run); Py_XDECREF(rs.packed);
        if (fail) return NULL;
        if (stop) break;
    }
    return PyLong_FromSsize_t(i);
}

/* ================================================================== commit-log fsync thread
 * The SYNC_FLUSH group commit's fdatasync, in a thread that never takes the GIL (issue 20, session 20).  Run
 * through a Python worker thread (loop.run_in_executor) a round cost the event loop ~8 GIL hand-offs (futex
 * calls), a work item, two chained futures and a self-pipe write and read: the worker thread needs the GIL to
 * return from fdatasync, to resolve its future and to wake the loop, and takes it from a busy event loop.  Here
 * the loop hands the round's file descriptors over under a mutex (syncer_submit), the thread runs fdatasync on
 * each and adds 1 to an eventfd the loop watches (loop.add_reader): the loop learns of the end of a round from
 * its own epoll, and the thread never waits for the loop.  broker/store/flush.py (_CompiledRunner) drives it; its
 * _ExecutorRunner, the same rounds through a Python worker thread, is the reference (ROCKETSCOPE_PURE_PYTHON=1 and
 * platforms without eventfd).  One round runs at a time: FlushService submits the next one after the last ended.
 */
#ifdef __linux__
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <unistd.h>

typedef struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pthread_t thread;
    int efd;       /* eventfd: +1 at the end of each round */
    int *fds;      /* the round submitted and not yet taken by the thread */
    Py_ssize_t nfds, cap;
    int pending;   /* a round is waiting for the thread */
    int stop;      /* the thread ends once no round is pending */
    int err;       /* errno of the last round's first failed fdatasync, 0 when all succeeded */
    int running;   /* the thread exists (syncer_close joins it once) */
} syncer_t;

static void *syncer_main(void *arg) {
    syncer_t *s = (syncer_t *)arg;
    int *fds = NULL;
    Py_ssize_t cap = 0;
    pthread_mutex_lock(&s->mu);
    for (;;) {
        while (!s->pending && !s->stop) pthread_cond_wait(&s->cv, &s->mu);
        if (!s->pending) break;
        Py_ssize_t n = s->nfds;
        int err = 0;
        if (n > cap) {
            int *grown = realloc(fds, (size_t)n * sizeof(int));
            if (grown == NULL) err = ENOMEM;
            else { fds = grown; cap = n; }
        }
        if (!err) memcpy(fds, s->fds, (size_t)n * sizeof(int));
        s->pending = 0;
        pthread_mutex_unlock(&s->mu);
        for (Py_ssize_t i = 0; !err && i < n; i++) {
            if (fdatasync(fds[i]) != 0) err = errno ? errno : EIO;
        }
        pthread_mutex_lock(&s->mu);
        s->err = err;
        uint64_t one = 1;
        while (write(s->efd, &one, sizeof one) < 0 && errno == EINTR) {
        }
    }
    pthread_mutex_unlock(&s->mu);
    free(fds);
    return NULL;
}

static void syncer_stop(syncer_t *s) {
    if (!s->running) return;
    pthread_mutex_lock(&s->mu);
    s->stop = 1;
    pthread_cond_signal(&s->cv);
    pthread_mutex_unlock(&s->mu);
    Py_BEGIN_ALLOW_THREADS
    pthread_join(s->thread, NULL);
    Py_END_ALLOW_THREADS
    s->running = 0;
}

static void syncer_free(PyObject *capsule) {
    syncer_t *s = (syncer_t *)PyCapsule_GetPointer(capsule, "rocketscope.syncer");
    if (s == NULL) return;
    syncer_stop(s);
    if (s->efd >= 0) close(s->efd);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
    free(s->fds);
    PyMem_RawFree(s);
}

static syncer_t *syncer_get(PyObject *capsule) {
    return (syncer_t *)PyCapsule_GetPointer(capsule, "rocketscope.syncer");
}

static PyObject *syncer_new(PyObject *self, PyObject *unused) {
    syncer_t *s = PyMem_RawCalloc(1, sizeof(syncer_t));
    if (s == NULL) return PyErr_NoMemory();
    s->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (s->efd < 0) {
        PyErr_SetFromErrno(PyExc_OSError);
        PyMem_RawFree(s);
        return NULL;
    }
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    sigset_t all, old;  /* signals stay with Python's threads: the fsync thread blocks every one */
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int rc = pthread_create(&s->thread, NULL, syncer_main, s);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0) {
        close(s->efd);
        pthread_mutex_destroy(&s->mu);
        pthread_cond_destroy(&s->cv);
        PyMem_RawFree(s);
        errno = rc;
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    s->running = 1;
    PyObject *capsule = PyCapsule_New(s, "rocketscope.syncer", syncer_free);
    if (capsule == NULL) {  /* what the capsule's destructor would have done */
        syncer_stop(s);
        close(s->efd);
        pthread_mutex_destroy(&s->mu);
        pthread_cond_destroy(&s->cv);
        PyMem_RawFree(s);
    }
    return capsule;
}

/* syncer_fd(syncer) -> the eventfd that becomes readable when a round ends */
static PyObject *syncer_fd(PyObject *self, PyObject *capsule) {
    syncer_t *s = syncer_get(capsule);
    return s ? PyLong_FromLong(s->efd) : NULL;
}

/* syncer_submit(syncer, fds): fdatasync each of ``fds`` (a list of ints) in the thread, in order */
static PyObject *syncer_submit(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2 || !PyList_CheckExact(args[1])) {
        PyErr_SetString(PyExc_TypeError, "syncer_submit(syncer, fds: list[int])");
        return NULL;
    }
    syncer_t *s = syncer_get(args[0]);
    if (s == NULL) return NULL;
    if (!s->running) {
        PyErr_SetString(PyExc_RuntimeError, "the fsync thread is closed");
        return NULL;
    }
    PyObject *list = args[1];
    Py_ssize_t n = PyList_GET_SIZE(list);
    int *fds = PyMem_RawMalloc((size_t)(n ? n : 1) * sizeof(int));
    if (fds == NULL) return PyErr_NoMemory();
    for (Py_ssize_t i = 0; i < n; i++) {
        long fd = PyLong_AsLong(PyList_GET_ITEM(list, i));
        if (fd == -1 && PyErr_Occurred()) {
            PyMem_RawFree(fds);
            return NULL;
        }
        fds[i] = (int)fd;
    }
    pthread_mutex_lock(&s->mu);
    if (n > s->cap) {
        int *grown = realloc(s->fds, (size_t)n * sizeof(int));
        if (grown == NULL) {
            pthread_mutex_unlock(&s->mu);
            PyMem_RawFree(fds);
            return PyErr_NoMemory();
        }
        s->fds = grown;
        s->cap = n;
    }
    if (n) memcpy(s->fds, fds, (size_t)n * sizeof(int));
    s->nfds = n;
    s->pending = 1;
    pthread_cond_signal(&s->cv);
    pthread_mutex_unlock(&s->mu);
    PyMem_RawFree(fds);
    Py_RETURN_NONE;
}

/* syncer_result(syncer) -> errno of the last round ended (0: every fdatasync succeeded) */
static PyObject *syncer_result(PyObject *self, PyObject *capsule) {
    syncer_t *s = syncer_get(capsule);
    if (s == NULL) return NULL;
    pthread_mutex_lock(&s->mu);
    int err = s->err;
    pthread_mutex_unlock(&s->mu);
    return PyLong_FromLong(err);
}

/* syncer_close(syncer): end the thread once a round under way has ended (idempotent; the eventfd stays open
 * until the syncer is freed, so a loop still watching it never sees a reused descriptor) */
static PyObject *syncer_close(PyObject *self, PyObject *capsule) {
    syncer_t *s = syncer_get(capsule);
    if (s == NULL) return NULL;
    syncer_stop(s);
    Py_RETURN_NONE;
}
#define SYNCER_METHODS                                                                                          \
    {"syncer_new", syncer_new, METH_NOARGS, "Start a commit-log fsync thread; its handle."},                     \
    {"syncer_fd", syncer_fd, METH_O, "The eventfd that becomes readable when a round of the fsync thread ends."}, \
    {"syncer_submit", (PyCFunction)(void (*)(void))syncer_submit, METH_FASTCALL,                                \
     "Hand the fsync thread a round: fdatasync each of a list of file descriptors."},                           \
    {"syncer_result", syncer_result, METH_O, "errno of the fsync thread's last round (0: success)."},             \
    {"syncer_close", syncer_close, METH_O, "End the fsync thread (after the round under way)."},
#else
#define SYNCER_METHODS
#endif

/* ================================================================== module */
static PyMethodDef methods[] = {
    {"decode_json_frame", decode_json_frame, METH_O, "A JSON-header frame -> RemotingCommand's fields, or None."},
    {"encode_json_frame", (PyCFunction)(void (*)(void))encode_json_frame, METH_FASTCALL,
     "RemotingCommand's fields -> the JSON-header frame with its length prefix, or None."},
    {"parse_properties", parse_properties, METH_O, "string_to_properties for a str, or None."},
    {"send_fields", (PyCFunction)(void (*)(void))send_fields, METH_FASTCALL, "_send_fields' tuple, or None."},
    {"decode_frames", (PyCFunction)(void (*)(void))decode_frames, METH_FASTCALL,
     "A read's whole frames from pos -> (pos, commands), sends with their fields read (RemotingServer.frames)."},
    {"decode_batch", decode_batch, METH_O, "A SEND_BATCH_MESSAGE body -> [(body, flag, properties)], or None."},
    {"send_answers", (PyCFunction)(void (*)(void))send_answers, METH_FASTCALL,
     "The answer frames of a run of plain stored single sends, concatenated, or None."},
    {"record_head", (PyCFunction)(void (*)(void))record_head, METH_FASTCALL,
     "A commit-log record's bytes between its fixed part and its body, or None."},
    {"encode_run", (PyCFunction)(void (*)(void))encode_run, METH_FASTCALL,
     "Commit-log records of prepared messages laid out in a buffer while they fit, as record.encode_into does."},
    {"plan_run", (PyCFunction)(void (*)(void))plan_run, METH_FASTCALL,
     "MessageStore.append_plain_run's loop: queue offsets, store time and host, record heads and sizes, or None."},
    {"index_put", (PyCFunction)(void (*)(void))index_put, METH_FASTCALL,
     "IndexFile.put_entries' loop: entries and slot heads written into the index file's map."},
    {"dispatch_run", (PyCFunction)(void (*)(void))dispatch_run, METH_FASTCALL,
     "MessageStore._dispatch_one for records from i on: consume-queue runs and index keys, until one it does not take."},
    SYNCER_METHODS
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "fastpath",
                                    "The remoting send path's byte layouts, compiled (broker/fastpath.c).", -1,
                                    methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit_fastpath(void) {
    static const char *longs[9] = {"producerGroup", "topic", "queueId", "sysFlag", "bornTimestamp", "flag",
                                   "reconsumeTimes", "batch", "properties"};
    static const char *shorts[9] = {"a", "b", "e", "f", "g", "h", "j", "m", "i"};
    for (int i = 0; i < 9; i++) {
        send_long[i] = PyUnicode_InternFromString(longs[i]);
        send_short[i] = PyUnicode_InternFromString(shorts[i]);
        if (!send_long[i] || !send_short[i]) return NULL;
    }
    if (send_answers_init() < 0) return NULL;
    s_code = PyUnicode_InternFromString("code");
    s_extFields = PyUnicode_InternFromString("extFields");
    s_flag = PyUnicode_InternFromString("flag");
    s_language = PyUnicode_InternFromString("language");
    s_opaque = PyUnicode_InternFromString("opaque");
    s_remark = PyUnicode_InternFromString("remark");
    s_version = PyUnicode_InternFromString("version");
    s_serialize = PyUnicode_InternFromString("serializeTypeCurrentRPC");
    s_JAVA = PyUnicode_InternFromString("JAVA");
    s_empty = PyUnicode_InternFromString("");
    s_empty_bytes = PyBytes_FromStringAndSize(NULL, 0);
    a_size = PyUnicode_InternFromString("size");
    a_queue_id = PyUnicode_InternFromString("queue_id");
    a_flag = PyUnicode_InternFromString("flag");
    a_queue_offset = PyUnicode_InternFromString("queue_offset");
    a_physical_offset = PyUnicode_InternFromString("physical_offset");
    a_sys_flag = PyUnicode_InternFromString("sys_flag");
    a_born_timestamp = PyUnicode_InternFromString("born_timestamp");
    a_store_timestamp = PyUnicode_InternFromString("store_timestamp");
    a_reconsume_times = PyUnicode_InternFromString("reconsume_times");
    a_prepared_tx_offset = PyUnicode_InternFromString("prepared_tx_offset");
    a_body = PyUnicode_InternFromString("body");
    a_store_host = PyUnicode_InternFromString("store_host");
    a_born_host = PyUnicode_InternFromString("born_host");
    if (!a_store_host || !a_born_host) return NULL;
    a_topic = PyUnicode_InternFromString("topic");
    a_properties = PyUnicode_InternFromString("properties");
    k_TAGS = PyUnicode_InternFromString("TAGS");
    k_KEYS = PyUnicode_InternFromString("KEYS");
    k_UNIQ_KEY = PyUnicode_InternFromString("UNIQ_KEY");
    k_MQO = PyUnicode_InternFromString("INNER_MULTI_QUEUE_OFFSET");
    if (!a_topic || !a_properties || !k_TAGS || !k_KEYS || !k_UNIQ_KEY || !k_MQO || sd_init() < 0)
        return NULL;
    if (!a_size || !a_queue_id || !a_flag || !a_queue_offset || !a_physical_offset || !a_sys_flag
        || !a_born_timestamp || !a_store_timestamp || !a_reconsume_times || !a_prepared_tx_offset || !a_body)
        return NULL;
    if (!s_code || !s_extFields || !s_flag || !s_language || !s_opaque || !s_remark || !s_version || !s_serialize
        || !s_JAVA || !s_empty || !s_empty_bytes)
        return NULL;
    return PyModule_Create(&module);
}
