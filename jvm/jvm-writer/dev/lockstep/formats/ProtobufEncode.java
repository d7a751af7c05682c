package dev.lockstep.formats;

import org.apache.spark.sql.Row;
import org.apache.spark.sql.RowFactory;
import org.apache.spark.sql.api.java.UDF4;

/**
 * The Protobuf encoder of the spec's sink formats, a Java UDF registered from Python like
 * {@link ProtobufDecode}: {@code (data, key, descriptorSet, message) -> struct<payload, error>}, the
 * message's bytes (without the registry's framing, which the Python side adds), or null and why
 * {@code data} does not fit the message (a field it does not have, a value its type cannot hold), which
 * makes the record a dead letter. Fields of the message that {@code data} lacks, or holds null, are not set.
 */
public final class ProtobufEncode implements UDF4<Row, Long, byte[], String, Row> {
    private static final long serialVersionUID = 1L;
    /** Per thread: a UDF instance is its task's, but nothing promises that a task keeps one thread. */
    private static final ThreadLocal<ProtobufCodec.Plans> PLANS = ThreadLocal.withInitial(ProtobufCodec.Plans::new);

    /** Per thread, the last call's (key, data, result): the codec's plan asks for a record's bytes and for
     * whether it fits in two places, and the second is answered by comparing the row instead of encoding it. */
    private static final ThreadLocal<Object[]> LAST = ThreadLocal.withInitial(() -> new Object[3]);

    @Override
    public Row call(Row data, Long key, byte[] descriptorSet, String message) {
        if (data == null) {
            return RowFactory.create(null, "it is null");
        }
        Object[] last = LAST.get();
        if (last[2] != null && key.equals(last[0]) && data.equals(last[1])) {
            return (Row) last[2];
        }
        Row result = encode(data, key, descriptorSet, message);
        last[0] = key;
        last[1] = data; // a row made for this call (Spark converts each input anew), never changed after
        last[2] = result;
        return result;
    }

    private static Row encode(Row data, Long key, byte[] descriptorSet, String message) {
        try {
            return RowFactory.create(ProtobufCodec.of(key, descriptorSet, message).encode(data, PLANS.get()), null);
        } catch (ProtobufCodec.Misfit e) {
            return RowFactory.create(null, e.getMessage());
        }
    }
}
