package io.rocketscope.spark;

import java.io.Serializable;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Iterator;
import java.util.List;
import java.util.NoSuchElementException;

import org.apache.spark.rdd.RDD;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.Attribute;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.expressions.UnsafeProjection;
import org.apache.spark.sql.catalyst.expressions.UnsafeRow;
import org.apache.spark.sql.columnar.CachedBatch;
import org.apache.spark.sql.columnar.CachedBatchSerializer;
import org.apache.spark.sql.internal.SQLConf;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.vectorized.ColumnarBatch;
import org.apache.spark.storage.StorageLevel;
import org.apache.spark.unsafe.Platform;

import scala.Function2;
import scala.collection.immutable.Seq;
import scala.jdk.javaapi.CollectionConverters;
import scala.runtime.AbstractFunction2;

/**
 * Cached tables kept as Spark's own row bytes (spark.sql.cache.serializer; spark/session.py sets it
 * when this jar is on the class path).
 *
 * <p>Why: the jobs cache their shared tables (spark/model.py) on disk and read each back whole a few
 * times.  Spark's default cache serializer turns every row into columns on the way in (a column
 * builder and min/max statistics per column and batch) and back into rows on the way out; neither
 * pays here: the tables are read whole (the statistics prune nothing the jobs ask), and a table
 * kept on disk is read as a stream either way.  This one keeps each batch as the rows' own
 * {@link UnsafeRow} bytes, each prefixed by its length: writing a row is one copy, reading one is
 * pointing an {@code UnsafeRow} at it, and a read of some columns is one generated projection.
 * docs/ANALYTICS.md ("Session 25") has the measurement that chose it.
 *
 * <p>Batches end at {@link #BATCH_BYTES} of rows, so a partition is a few blocks' worth of large
 * arrays rather than one per row.  Filters are not pushed into the cache ({@link #buildFilter}
 * passes every batch): the plans filter the rows they read, as they do over any scan.
 */
public final class RowCacheSerializer implements CachedBatchSerializer {
    private static final long serialVersionUID = 1L;
    /** Rows per batch are bounded by bytes: ~4 MiB arrays, few enough to be cheap and small enough to stream. */
    static final int BATCH_BYTES = 4 << 20;

    /** One batch: {@code numRows} rows, each an int length (native order) and that many UnsafeRow bytes. */
    public static final class RowBatch implements CachedBatch, Serializable {
        private static final long serialVersionUID = 1L;
        final int rows;
        final byte[] data;

        RowBatch(int rows, byte[] data) {
            this.rows = rows;
            this.data = data;
        }

        @Override
        public int numRows() {
            return rows;
        }

        @Override
        public long sizeInBytes() {
            return data.length;
        }
    }

    @Override
    public boolean supportsColumnarInput(Seq<Attribute> schema) {
        return false;
    }

    @Override
    public boolean supportsColumnarOutput(StructType schema) {
        return false;
    }

    @Override
    public RDD<CachedBatch> convertColumnarBatchToCachedBatch(RDD<ColumnarBatch> input, Seq<Attribute> schema,
            StorageLevel storageLevel, SQLConf conf) {
        throw new UnsupportedOperationException("columnar input is not supported (supportsColumnarInput is false)");
    }

    @Override
    public RDD<ColumnarBatch> convertCachedBatchToColumnarBatch(RDD<CachedBatch> input,
            Seq<Attribute> cacheAttributes, Seq<Attribute> selectedAttributes, SQLConf conf) {
        throw new UnsupportedOperationException("columnar output is not supported (supportsColumnarOutput is false)");
    }

    @Override
    public Function2<Object, scala.collection.Iterator<CachedBatch>, scala.collection.Iterator<CachedBatch>> buildFilter(
            Seq<Expression> predicates, Seq<Attribute> cachedAttributes) {
        return new KeepAll();
    }

    /** Every batch is read: no statistics are kept to prune by. */
    static final class KeepAll
            extends AbstractFunction2<Object, scala.collection.Iterator<CachedBatch>, scala.collection.Iterator<CachedBatch>>
            implements Serializable {
        private static final long serialVersionUID = 1L;

        @Override
        public scala.collection.Iterator<CachedBatch> apply(Object partition, scala.collection.Iterator<CachedBatch> batches) {
            return batches;
        }
    }

    @Override
    public RDD<CachedBatch> convertInternalRowToCachedBatch(RDD<InternalRow> input, Seq<Attribute> schema,
            StorageLevel storageLevel, SQLConf conf) {
        List<Attribute> attributes = new ArrayList<>(CollectionConverters.asJava(schema));
        return input.toJavaRDD().mapPartitions(rows -> new Packer(rows, attributes)).rdd();
    }

    @Override
    public RDD<InternalRow> convertCachedBatchToInternalRow(RDD<CachedBatch> input, Seq<Attribute> cacheAttributes,
            Seq<Attribute> selectedAttributes, SQLConf conf) {
        List<Attribute> cached = new ArrayList<>(CollectionConverters.asJava(cacheAttributes));
        List<Attribute> selected = new ArrayList<>(CollectionConverters.asJava(selectedAttributes));
        return input.toJavaRDD().mapPartitions(batches -> new Unpacker(batches, cached, selected)).rdd();
    }

    /** Rows in, batches out: each row's UnsafeRow bytes appended to the current batch's array. */
    static final class Packer implements Iterator<CachedBatch> {
        private final Iterator<InternalRow> rows;
        private final UnsafeProjection toUnsafe;
        private byte[] buffer = new byte[1 << 16];

        Packer(Iterator<InternalRow> rows, List<Attribute> attributes) {
            this.rows = rows;
            // rows that arrive as other InternalRows (rare: most operators emit UnsafeRows) are made UnsafeRows
            List<Expression> columns = new ArrayList<>(attributes);
            this.toUnsafe = UnsafeProjection.create(CollectionConverters.asScala(columns).toSeq(),
                CollectionConverters.asScala(attributes).toSeq());
        }

        @Override
        public boolean hasNext() {
            return rows.hasNext();
        }

        @Override
        public CachedBatch next() {
            if (!rows.hasNext()) {
                throw new NoSuchElementException();
            }
            int used = 0;
            int count = 0;
            while (rows.hasNext() && used < BATCH_BYTES) {
                InternalRow row = rows.next();
                UnsafeRow unsafe = row instanceof UnsafeRow ? (UnsafeRow) row : toUnsafe.apply(row);
                int size = unsafe.getSizeInBytes();
                if (used + 4 + size > buffer.length) {
                    buffer = Arrays.copyOf(buffer, Math.max(buffer.length * 2, used + 4 + size));
                }
                Platform.putInt(buffer, Platform.BYTE_ARRAY_OFFSET + used, size);
                unsafe.writeToMemory(buffer, Platform.BYTE_ARRAY_OFFSET + used + 4);
                used += 4 + size;
                count++;
            }
            return new RowBatch(count, Arrays.copyOf(buffer, used));
        }
    }

    /** Batches in, rows out: one UnsafeRow pointed at each row's bytes in turn, projected to the columns asked for. */
    static final class Unpacker implements Iterator<InternalRow> {
        private final Iterator<CachedBatch> batches;
        private final UnsafeRow row;
        private final UnsafeProjection project;
        private byte[] data;
        private int position;
        private int left;

        Unpacker(Iterator<CachedBatch> batches, List<Attribute> cached, List<Attribute> selected) {
            this.batches = batches;
            this.row = new UnsafeRow(cached.size());
            if (sameColumns(cached, selected)) {
                this.project = null;
            } else {
                List<Expression> columns = new ArrayList<>(selected);
                this.project = UnsafeProjection.create(CollectionConverters.asScala(columns).toSeq(),
                    CollectionConverters.asScala(cached).toSeq());
            }
        }

        private static boolean sameColumns(List<Attribute> cached, List<Attribute> selected) {
            if (cached.size() != selected.size()) {
                return false;
            }
            for (int i = 0; i < cached.size(); i++) {
                if (!cached.get(i).exprId().equals(selected.get(i).exprId())) {
                    return false;
                }
            }
            return true;
        }

        @Override
        public boolean hasNext() {
            while (left == 0) {
                if (!batches.hasNext()) {
                    return false;
                }
                RowBatch batch = (RowBatch) batches.next();
                data = batch.data;
                position = 0;
                left = batch.rows;
            }
            return true;
        }

        @Override
        public InternalRow next() {
            if (!hasNext()) {
                throw new NoSuchElementException();
            }
            int size = Platform.getInt(data, Platform.BYTE_ARRAY_OFFSET + position);
            row.pointTo(data, Platform.BYTE_ARRAY_OFFSET + position + 4, size);
            position += 4 + size;
            left--;
            return project == null ? row : project.apply(row);
        }
    }
}
