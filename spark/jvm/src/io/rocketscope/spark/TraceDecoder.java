package io.rocketscope.spark;

import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Iterator;
import java.util.List;
import java.util.NoSuchElementException;

import org.apache.spark.api.java.function.MapPartitionsFunction;
import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Encoders;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.RowFactory;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.StructType;

/**
 * RocketMQ trace bodies decoded into flat records in compiled JVM code (spark/decode.py, decoder "jvm").
 *
 * <p>The rules are the Python codec's (trace/codec.py), which the tests compare this with
 * (tests/test_spark_jvmdecode.py): records end with 0x02, fields are separated by 0x01, split
 * as Java's {@code String.split} does (trailing empty fields removed before the field count
 * selects the layout); the literal {@code null} in keys means empty; a body with any malformed
 * record of a known type (a missing or non-integer number, a number out of range, a bad
 * boolean, a message type outside 0..4), or that is not valid UTF-8, is not trace data and is
 * skipped whole; records of unknown types are skipped, the rest of the body kept.  A Pub's
 * physical offset comes from its offsetMsgId (trace/ids.py {@code parse_offset_msg_id}); an ID
 * no broker could have written gives a null offset.
 *
 * <p>Why the bytes are scanned instead of decoding the body into a String: 0x01 and 0x02 never
 * occur inside a multi-byte UTF-8 sequence, so after one validation pass the separators can be
 * found byte by byte and only the fields a record emits become Strings.  Why a
 * {@code mapPartitions} with a Row encoder (public API) rather than building Catalyst's
 * internal rows from an RDD: the Dataset stays one plan with its Parquet scan, so column
 * pruning, the plan tests (spark/plans.py) and the event log's stage attribution see the same
 * tree as with the SQL decoder; the encoder's String-to-UTF8 copy per field is a small part of
 * the per-record cost (docs/ANALYTICS.md, "Session 19: decoding in the JVM").
 */
public final class TraceDecoder {
    private TraceDecoder() {
    }

    /** The column names of RECORD_SCHEMA (spark/schema.py), in order; checked against the schema passed in. */
    static final String[] COLUMNS = {"rec_type", "ts", "grp", "topic", "msg_id", "keys", "store_host", "cost_time",
        "success", "phys_offset", "request_id", "retry_times", "origin_topic"};

    /**
     * Records of {@code bodies} (columns {@code body} binary and {@code tags} string, the trace rows
     * only), with the schema given as JSON (spark/schema.py RECORD_SCHEMA, passed by the caller so
     * that Python keeps the one definition).
     */
    public static Dataset<Row> decode(Dataset<Row> bodies, String recordSchemaJson) {
        StructType schema = (StructType) DataType.fromJson(recordSchemaJson);
        String[] names = schema.fieldNames();
        if (!java.util.Arrays.equals(names, COLUMNS)) {
            throw new IllegalArgumentException("record schema columns must be " + String.join(",", COLUMNS)
                + ", got " + String.join(",", names));
        }
        Dataset<Row> input = bodies.select("body", "tags");
        return input.mapPartitions(new DecodePartition(), Encoders.row(schema));
    }

    /** The per-partition function: a lazy iterator, so a partition's records are never all in memory. */
    static final class DecodePartition implements MapPartitionsFunction<Row, Row> {
        private static final long serialVersionUID = 1L;

        @Override
        public Iterator<Row> call(Iterator<Row> rows) {
            return new RecordIterator(rows);
        }
    }

    static final class RecordIterator implements Iterator<Row> {
        private final Iterator<Row> rows;
        private final BodyDecoder decoder = new BodyDecoder();
        private List<Row> pending = new ArrayList<>();
        private int next;

        RecordIterator(Iterator<Row> rows) {
            this.rows = rows;
        }

        @Override
        public boolean hasNext() {
            while (next >= pending.size()) {
                if (!rows.hasNext()) {
                    return false;
                }
                Row row = rows.next();
                byte[] body = row.isNullAt(0) ? null : (byte[]) row.get(0);
                String origin = row.isNullAt(1) ? null : row.getString(1);
                pending = decoder.decode(body, origin);
                next = 0;
            }
            return true;
        }

        @Override
        public Row next() {
            if (!hasNext()) {
                throw new NoSuchElementException();
            }
            return pending.get(next++);
        }
    }

    /** Decodes one body at a time; reuses its field-position buffers (one per task). */
    static final class BodyDecoder {
        private static final List<Row> NONE = List.of();
        private int[] start = new int[32];
        private int[] end = new int[32];
        private byte[] b;
        /** The field count of the current record, after split's removal of trailing empty fields. */
        private int count;
        /** Set by a typed accessor that found a malformed field: the body is not trace data. */
        private boolean bad;
        private final ArrayList<Row> out = new ArrayList<>();

        /** The records of one body: empty when it is null, not UTF-8 or holds a malformed record. */
        List<Row> decode(byte[] body, String origin) {
            if (body == null || !Utf8.valid(body)) {
                return NONE;
            }
            b = body;
            out.clear();
            int pos = 0;
            while (pos <= body.length) {
                int stop = pos;
                while (stop < body.length && body[stop] != 2) {
                    stop++;
                }
                if (!record(pos, stop, origin)) {
                    return NONE;
                }
                pos = stop + 1;
            }
            return new ArrayList<>(out);
        }

        /** Decodes the record in [from, to) into {@code out}; false when it is malformed (the body is skipped). */
        private boolean record(int from, int to, String origin) {
            int n = split(from, to);
            count = n;
            if (n == 0) {
                return true;
            }
            int kind = kind();
            bad = false;
            switch (kind) {
                case 'P': {  // Pub: 12 fields; 13: + success; 14+: offsetMsgId, success, clientHost, ...
                    if (n < 12) {
                        return false;
                    }
                    long ts = int64(1);
                    int32(9);
                    int cost = int32(10);
                    msgType(11);
                    boolean success = n == 13 ? bool(12) : n >= 14 ? bool(13) : true;
                    if (bad) {
                        return false;
                    }
                    Long phys = n >= 14 ? physOffset(12) : null;
                    out.add(RowFactory.create("Pub", ts, text(3), text(4), text(5), nullableText(7), text(8),
                        cost, success, phys, null, null, origin));
                    return true;
                }
                case 'B': {  // SubBefore: 7 fields (empty keys dropped by split), 8, 9 with a clientHost
                    if (n < 7) {
                        return false;
                    }
                    long ts = int64(1);
                    int retry = int32(6);
                    if (bad) {
                        return false;
                    }
                    out.add(RowFactory.create("SubBefore", ts, text(3), null, text(5), nullableText(7), null,
                        null, null, null, text(4), retry, origin));
                    return true;
                }
                case 'A': {  // SubAfter: 5 fields; then keys, contextCode, timestamp, group
                    if (n < 5) {
                        return false;
                    }
                    int cost = int32(3);
                    boolean success = bool(4);
                    if (n >= 7) {
                        int32(6);
                    }
                    long ts = n >= 8 ? int64(7) : 0L;
                    if (bad) {
                        return false;
                    }
                    String group = text(8);
                    out.add(RowFactory.create("SubAfter", ts == 0L ? null : ts, group.isEmpty() ? null : group,
                        null, text(2), nullableText(5), null, cost, success, null, text(1), null, origin));
                    return true;
                }
                case 'E': {  // EndTransaction: 13 fields; the 14-field build carried a clientHost at 10
                    if (n < 13) {
                        return false;
                    }
                    int64(1);
                    msgType(9);
                    bool(n >= 14 ? 13 : 12);
                    return !bad;  // validated, not used by the jobs
                }
                case 'R': {  // Recall: 7 fields
                    if (n < 7) {
                        return false;
                    }
                    int64(1);
                    bool(6);
                    return !bad;
                }
                default:
                    return true;  // an unknown type: skipped, the rest of the body kept
            }
        }

        /** Field bounds of [from, to) into start/end; the count after Java's removal of trailing empty fields. */
        private int split(int from, int to) {
            int n = 0;
            int s = from;
            for (int i = from; i <= to; i++) {
                if (i == to || b[i] == 1) {
                    if (n == start.length) {
                        start = java.util.Arrays.copyOf(start, n * 2);
                        end = java.util.Arrays.copyOf(end, n * 2);
                    }
                    start[n] = s;
                    end[n] = i;
                    n++;
                    s = i + 1;
                }
            }
            while (n > 0 && start[n - 1] == end[n - 1]) {
                n--;
            }
            return n;
        }

        private static final byte[][] TYPES = {
            "Pub".getBytes(StandardCharsets.US_ASCII), "SubBefore".getBytes(StandardCharsets.US_ASCII),
            "SubAfter".getBytes(StandardCharsets.US_ASCII), "EndTransaction".getBytes(StandardCharsets.US_ASCII),
            "Recall".getBytes(StandardCharsets.US_ASCII)};
        private static final char[] KINDS = {'P', 'B', 'A', 'E', 'R'};

        /** The record type of field 0 as one letter, 0 for an unknown type. */
        private int kind() {
            int len = end[0] - start[0];
            for (int t = 0; t < TYPES.length; t++) {
                byte[] name = TYPES[t];
                if (name.length == len && java.util.Arrays.equals(b, start[0], end[0], name, 0, len)) {
                    return KINDS[t];
                }
            }
            return 0;
        }

        /** A string field; absent trailing fields are empty (the codec's {@code _Fields.text}). */
        private String text(int i) {
            if (i >= count || start[i] == end[i]) {
                return "";
            }
            return new String(b, start[i], end[i] - start[i], StandardCharsets.UTF_8);
        }

        /** Keys: Java writes a null value as the literal text {@code null}. */
        private String nullableText(int i) {
            String value = text(i);
            return value.equals("null") ? "" : value;
        }

        /**
         * A signed decimal (the codec's {@code [+-]?[0-9]+}, any number of leading zeros) within
         * [min, max]; sets {@code bad} otherwise.  Accumulates negatively, as Long.parseLong does,
         * so that the most negative value fits.
         */
        private long integer(int i, long min, long max) {
            if (i >= count) {
                bad = true;
                return 0;
            }
            int p = start[i];
            int e = end[i];
            boolean negative = false;
            if (p < e && (b[p] == '+' || b[p] == '-')) {
                negative = b[p] == '-';
                p++;
            }
            if (p == e) {
                bad = true;
                return 0;
            }
            long limit = negative ? min : -max;
            long multmin = limit / 10;
            long acc = 0;
            for (; p < e; p++) {
                int d = b[p] - '0';
                if (d < 0 || d > 9) {
                    bad = true;
                    return 0;
                }
                if (acc < multmin) {
                    bad = true;  // out of range; checked before acc * 10 can overflow
                    return 0;
                }
                acc *= 10;
                if (acc < limit + d) {
                    bad = true;
                    return 0;
                }
                acc -= d;
            }
            return negative ? acc : -acc;
        }

        private long int64(int i) {
            return integer(i, Long.MIN_VALUE, Long.MAX_VALUE);
        }

        private int int32(int i) {
            return (int) integer(i, Integer.MIN_VALUE, Integer.MAX_VALUE);
        }

        private void msgType(int i) {
            integer(i, 0, 4);
        }

        /**
         * Boolean.parseBoolean for true/false, with empty and {@code null} read as false; anything else
         * is garbage.  Case is folded for ASCII letters only: Python's {@code lower()} (the codec) maps
         * no other character onto these letters, while Java's equalsIgnoreCase would take "falſe".
         */
        private boolean bool(int i) {
            if (i >= count) {
                bad = true;
                return false;
            }
            int len = end[i] - start[i];
            if (len == 0) {
                return false;
            }
            if (asciiEqualsIgnoreCase(i, "true")) {
                return true;
            }
            if (!asciiEqualsIgnoreCase(i, "false") && !asciiEqualsIgnoreCase(i, "null")) {
                bad = true;
            }
            return false;
        }

        private boolean asciiEqualsIgnoreCase(int i, String lower) {
            int p = start[i];
            if (end[i] - p != lower.length()) {
                return false;
            }
            for (int k = 0; k < lower.length(); k++) {
                int c = b[p + k];
                if (c >= 'A' && c <= 'Z') {
                    c += 'a' - 'A';
                }
                if (c != lower.charAt(k)) {
                    return false;
                }
            }
            return true;
        }

        /**
         * The commit-log offset of the offsetMsgId in field i (trace/ids.py): 32 or 56 hex digits, the
         * 4-byte port after the 4- or 16-byte address within 0..65535 and the 8-byte offset (the last
         * 16 digits) non-negative, both signed big-endian; null for an empty or impossible ID.
         */
        private Long physOffset(int i) {
            int p = start[i];
            int len = end[i] - p;
            if (len != 32 && len != 56) {
                return null;
            }
            long offset = 0;
            for (int k = 0; k < len; k++) {
                int d = Character.digit(b[p + k], 16);
                if (d < 0 || b[p + k] < 0) {
                    return null;
                }
                if (k >= len - 16) {
                    offset = (offset << 4) | d;
                }
            }
            int port = len == 32 ? 8 : 32;
            for (int k = port; k < port + 4; k++) {
                if (b[p + k] != '0') {
                    return null;  // a port field of 0x0001xxxx or more, or negative
                }
            }
            return offset < 0 ? null : offset;
        }

    }

    /** Strict UTF-8 validation, as Python's {@code bytes.decode("utf-8")} (no overlongs, surrogates or > U+10FFFF). */
    static final class Utf8 {
        private Utf8() {
        }

        static boolean valid(byte[] b) {
            int i = 0;
            int n = b.length;
            while (i < n) {
                int c = b[i];
                if (c >= 0) {
                    i++;
                    continue;
                }
                c &= 0xff;
                if (c < 0xc2) {
                    return false;  // a continuation byte first, or an overlong 2-byte form
                }
                if (c < 0xe0) {
                    if (i + 1 >= n || !cont(b[i + 1])) {
                        return false;
                    }
                    i += 2;
                } else if (c < 0xf0) {
                    if (i + 2 >= n || !cont(b[i + 1]) || !cont(b[i + 2])) {
                        return false;
                    }
                    int c1 = b[i + 1] & 0xff;
                    if ((c == 0xe0 && c1 < 0xa0) || (c == 0xed && c1 >= 0xa0)) {
                        return false;  // overlong, or a surrogate
                    }
                    i += 3;
                } else if (c < 0xf5) {
                    if (i + 3 >= n || !cont(b[i + 1]) || !cont(b[i + 2]) || !cont(b[i + 3])) {
                        return false;
                    }
                    int c1 = b[i + 1] & 0xff;
                    if ((c == 0xf0 && c1 < 0x90) || (c == 0xf4 && c1 >= 0x90)) {
                        return false;  // overlong, or above U+10FFFF
                    }
                    i += 4;
                } else {
                    return false;
                }
            }
            return true;
        }

        private static boolean cont(byte x) {
            return (x & 0xc0) == 0x80;
        }
    }
}
