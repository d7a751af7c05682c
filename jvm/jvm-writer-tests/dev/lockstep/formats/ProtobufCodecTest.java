package dev.lockstep.formats;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.google.protobuf.DescriptorProtos.DescriptorProto;
import com.google.protobuf.DescriptorProtos.FieldDescriptorProto;
import com.google.protobuf.DescriptorProtos.FieldDescriptorProto.Label;
import com.google.protobuf.DescriptorProtos.FieldDescriptorProto.Type;
import com.google.protobuf.DescriptorProtos.FileDescriptorProto;
import com.google.protobuf.DescriptorProtos.FileDescriptorSet;
import com.google.protobuf.Descriptors.Descriptor;
import com.google.protobuf.DynamicMessage;
import java.io.IOException;
import java.util.Arrays;
import java.util.List;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.catalyst.expressions.GenericRowWithSchema;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructType;
import org.junit.jupiter.api.Test;

/** The Protobuf codec's own rules: the registry's message indexes, presence on decoding, the bytes it writes,
 * and the reasons a payload or a row is refused with (the Python side checks the rest end to end). */
class ProtobufCodecTest {
    /** {@code t.Order}: order_id (string), amount (double), optional created_at (int64), tags (repeated int32). */
    static final byte[] SET = FileDescriptorSet.newBuilder().addFile(FileDescriptorProto.newBuilder()
            .setName("t/order.proto").setPackage("t").setSyntax("proto3")
            .addMessageType(DescriptorProto.newBuilder().setName("Order")
                    .addField(field("order_id", 1, Type.TYPE_STRING, Label.LABEL_OPTIONAL, false))
                    .addField(field("amount", 2, Type.TYPE_DOUBLE, Label.LABEL_OPTIONAL, false))
                    .addField(field("created_at", 3, Type.TYPE_INT64, Label.LABEL_OPTIONAL, true))
                    .addField(field("tags", 4, Type.TYPE_INT32, Label.LABEL_REPEATED, false))
                    .addOneofDecl(com.google.protobuf.DescriptorProtos.OneofDescriptorProto.newBuilder()
                            .setName("_created_at"))))
            .build().toByteArray();
    static final StructType ROW = new StructType().add("order_id", DataTypes.StringType)
            .add("amount", DataTypes.DoubleType).add("created_at", DataTypes.LongType)
            .add("tags", DataTypes.createArrayType(DataTypes.IntegerType));

    static FieldDescriptorProto field(String name, int number, Type type, Label label, boolean optional) {
        FieldDescriptorProto.Builder f = FieldDescriptorProto.newBuilder().setName(name).setNumber(number)
                .setType(type).setLabel(label);
        if (optional) {
            f.setProto3Optional(true).setOneofIndex(0);
        }
        return f.build();
    }

    static ProtobufCodec codec() {
        return ProtobufCodec.of(42L, SET, "t.Order");
    }

    static byte[] order(String id, double amount, Long createdAt, int... tags) {
        Descriptor d = codec().message;
        DynamicMessage.Builder b = DynamicMessage.newBuilder(d).setField(d.findFieldByName("order_id"), id)
                .setField(d.findFieldByName("amount"), amount);
        if (createdAt != null) {
            b.setField(d.findFieldByName("created_at"), createdAt);
        }
        for (int t : tags) {
            b.addRepeatedField(d.findFieldByName("tags"), t);
        }
        return b.build().toByteArray();
    }

    @Test
    void messageIndexesMustNameTheMessageRead() throws IOException {
        assertEquals(1, ProtobufCodec.indexesLength(new byte[] {0, 10}, "0"));
        assertEquals(2, ProtobufCodec.indexesLength(new byte[] {2, 0, 10}, "0"));
        assertEquals(3, ProtobufCodec.indexesLength(new byte[] {4, 2, 0, 10}, "1.0"));
        IOException other = assertThrows(IOException.class, () -> ProtobufCodec.indexesLength(new byte[] {2, 10}, "0"));
        assertEquals("its message indexes [5] do not name the message read ([0] in its writer schema)", other.getMessage());
    }

    @Test
    void unsetFieldsReadAsDefaultsWithoutPresenceAndNullWithIt() throws IOException {
        Row row = codec().decode(order("", 0.0, null), 0);
        assertEquals("", row.get(0));
        assertEquals(0.0, row.get(1));
        assertNull(row.get(2));
        assertEquals(List.of(), row.get(3));
        Row set = codec().decode(order("o1", 2.5, 0L, 1, 2), 0);
        assertEquals(Arrays.asList("o1", 2.5, 0L, List.of(1, 2)), Arrays.asList(set.get(0), set.get(1), set.get(2), set.get(3)));
    }

    @Test
    void rowsAreWrittenAsProtobufJavaWritesTheMessage() throws ProtobufCodec.Misfit {
        ProtobufCodec.Plans plans = new ProtobufCodec.Plans();
        Row row = new GenericRowWithSchema(new Object[] {"o1", 2.5, 0L, scala.jdk.javaapi.CollectionConverters.asScala(
                List.of(1, 2)).toSeq()}, ROW);
        assertArrayEquals(order("o1", 2.5, 0L, 1, 2), codec().encode(row, plans));
        Row defaults = new GenericRowWithSchema(new Object[] {"", 0.0, null, null}, ROW);
        assertArrayEquals(new byte[0], codec().encode(defaults, plans));
        StructType reversed = new StructType().add("created_at", DataTypes.LongType).add("amount", DataTypes.DoubleType)
                .add("order_id", DataTypes.StringType);
        assertArrayEquals(order("o2", 1.5, 7L), codec().encode(new GenericRowWithSchema(new Object[] {7L, 1.5, "o2"},
                reversed), plans));
    }

    @Test
    void aRowTheMessageCannotHoldIsRefusedNamingTheField() {
        ProtobufCodec.Plans plans = new ProtobufCodec.Plans();
        StructType extra = new StructType().add("order_id", DataTypes.StringType).add("nope", DataTypes.IntegerType);
        ProtobufCodec.Misfit unknown = assertThrows(ProtobufCodec.Misfit.class,
                () -> codec().encode(new GenericRowWithSchema(new Object[] {"o1", 1}, extra), plans));
        assertEquals("field nope is not a field of message t.Order", unknown.getMessage());
        StructType wide = new StructType().add("tags", DataTypes.createArrayType(DataTypes.LongType));
        ProtobufCodec.Misfit range = assertThrows(ProtobufCodec.Misfit.class, () -> codec().encode(new GenericRowWithSchema(
                new Object[] {scala.jdk.javaapi.CollectionConverters.asScala(List.of(1L << 40)).toSeq()}, wide), plans));
        assertTrue(range.getMessage().startsWith("field tags[0] is 1099511627776 (Long), not an integer in ["),
                range.getMessage());
    }

    @Test
    void bytesThatDoNotParseAreAReasonNotAFailure() {
        Row result = new ProtobufDecode().call(new byte[] {(byte) 0xff, (byte) 0xff}, 42L, SET, "t.Order", null);
        assertNull(result.get(0));
        assertTrue(result.getString(1).startsWith("it is not a Protobuf t.Order: "), result.getString(1));
        Row framed = new ProtobufDecode().call(order("o1", 1.0, null), 42L, SET, "t.Order", "!its writer schema has no message t.Order");
        assertEquals("its writer schema has no message t.Order", framed.getString(1));
    }
}
