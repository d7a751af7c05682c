package dev.lockstep.formats;

import org.apache.spark.sql.Row;
import org.apache.spark.sql.RowFactory;
import org.apache.spark.sql.api.java.UDF5;

/**
 * The Protobuf decoder of the spec's {@code protobuf} and {@code protobuf-confluent} formats, a Java UDF
 * that Python registers with {@code spark.udf.registerJavaFunction} (in a classic session and over Spark
 * Connect alike) under a name per message type and Spark type (lockstep.formats.codecs).
 *
 * <p>{@code (payload, key, descriptorSet, message, indexes) -> struct<data, error>}: with {@code indexes}
 * null the payload is the message; otherwise it is what follows the registry's 5-byte header, and starts
 * with the message indexes, which must name {@code indexes} (the message's path in the writer schema of
 * the record's id; "!" and the reason when that schema cannot name it). A payload that does not decode never fails
 * the task: {@code data} is null and {@code error} says why, and the record is dead-lettered.
 */
public final class ProtobufDecode implements UDF5<byte[], Long, byte[], String, String, Row> {
    private static final long serialVersionUID = 1L;
    /**
     * Per thread, the last call's (key, indexes, a copy of the payload, result). The plan the codec builds asks
     * for each record twice (the filter of the records that decode is pushed below the projection of their
     * data, and both call the UDF): the second call is answered by comparing a few bytes instead of parsing.
     */
    private static final ThreadLocal<Object[]> LAST = ThreadLocal.withInitial(() -> new Object[4]);

    @Override
    public Row call(byte[] payload, Long key, byte[] descriptorSet, String message, String indexes) {
        if (payload == null) {
            return null;
        }
        Object[] last = LAST.get();
        if (last[3] != null && key.equals(last[0]) && java.util.Objects.equals(indexes, last[1])
                && java.util.Arrays.equals(payload, (byte[]) last[2])) {
            return (Row) last[3];
        }
        Row result = decode(payload, key, descriptorSet, message, indexes);
        last[0] = key;
        last[1] = indexes;
        last[2] = payload.clone(); // the caller's array may be a buffer it reuses
        last[3] = result;
        return result;
    }

    private static Row decode(byte[] payload, Long key, byte[] descriptorSet, String message, String indexes) {
        ProtobufCodec codec = ProtobufCodec.of(key, descriptorSet, message);
        int offset = 0;
        if (indexes != null) {
            if (indexes.startsWith("!")) { // the writer schema cannot name the message: the reason follows
                return RowFactory.create(null, indexes.length() > 1 ? indexes.substring(1) : "no writer schema");
            }
            try {
                offset = ProtobufCodec.indexesLength(payload, indexes);
            } catch (java.io.IOException | RuntimeException e) {
                return RowFactory.create(null, ProtobufCodec.reason(e));
            }
        }
        try {
            return RowFactory.create(codec.decode(payload, offset), null);
        } catch (java.io.IOException | RuntimeException e) {
            return RowFactory.create(null, "it is not a Protobuf " + message + ": " + ProtobufCodec.reason(e));
        }
    }
}
