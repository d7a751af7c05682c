package dev.lockstep.formats;

import com.google.protobuf.ByteString;
import com.google.protobuf.CodedInputStream;
import com.google.protobuf.CodedOutputStream;
import com.google.protobuf.DescriptorProtos.FileDescriptorProto;
import com.google.protobuf.DescriptorProtos.FileDescriptorSet;
import com.google.protobuf.Descriptors.Descriptor;
import com.google.protobuf.Descriptors.DescriptorValidationException;
import com.google.protobuf.Descriptors.EnumValueDescriptor;
import com.google.protobuf.Descriptors.FieldDescriptor;
import com.google.protobuf.Descriptors.FileDescriptor;
import com.google.protobuf.DynamicMessage;
import com.google.protobuf.InvalidProtocolBufferException;
import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.math.BigDecimal;
import java.math.BigInteger;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.IdentityHashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.RowFactory;
import org.apache.spark.sql.types.StructType;

/**
 * One Protobuf message type of a spec's format, decoded into and encoded from Spark rows
 * (lockstep.formats.codecs, docs/formats-protobuf.md).
 *
 * <p>The descriptor is built once per JVM and key ({@link #of}): the Python side passes a short key (a
 * hash of the descriptor set and the message name) beside the serialized descriptor set, so a record
 * costs a map lookup, never a parse of the descriptor. The Spark type each message becomes is derived
 * from the same descriptor by {@code lockstep.formats.protobuf.message_ddl}, field by field in declaration
 * order, with the same rules as here: nested message -> struct, repeated -> array, map -> map, enum ->
 * its value's name, int32/sint32/sfixed32 -> int, uint32/fixed32 and the 64-bit ints -> bigint,
 * uint64/fixed64 -> decimal(20,0), float, double, bool, string, bytes -> binary. A field without
 * presence (a proto3 scalar) that is not set reads as its default; a field with presence (a message,
 * proto3 {@code optional}, a oneof member, proto2) that is not set reads as null.
 */
public final class ProtobufCodec {
    private static final ConcurrentHashMap<Long, ProtobufCodec> CODECS = new ConcurrentHashMap<>();

    final Descriptor message;

    private ProtobufCodec(Descriptor message) {
        this.message = message;
    }

    /** The codec of a key, built from {@code descriptorSet} the first time this JVM sees the key. */
    static ProtobufCodec of(long key, byte[] descriptorSet, String messageName) {
        ProtobufCodec codec = CODECS.get(key);
        if (codec == null) {
            codec = CODECS.computeIfAbsent(key, k -> new ProtobufCodec(build(descriptorSet, messageName)));
        }
        return codec;
    }

    /** The message type {@code name} (its full name) of a serialized FileDescriptorSet whose files come
     * dependencies first. */
    static Descriptor build(byte[] descriptorSet, String name) {
        try {
            FileDescriptorSet set = FileDescriptorSet.parseFrom(descriptorSet);
            Map<String, FileDescriptor> built = new HashMap<>();
            Descriptor found = null;
            for (FileDescriptorProto file : set.getFileList()) {
                List<FileDescriptor> deps = new ArrayList<>();
                for (String dep : file.getDependencyList()) {
                    FileDescriptor d = built.get(dep);
                    if (d == null) {
                        throw new IllegalArgumentException("file " + file.getName() + " imports " + dep
                                + ", which the descriptor set does not hold before it");
                    }
                    deps.add(d);
                }
                FileDescriptor fd = FileDescriptor.buildFrom(file, deps.toArray(new FileDescriptor[0]));
                built.put(file.getName(), fd);
                String local = fd.getPackage().isEmpty() ? name : name.startsWith(fd.getPackage() + ".")
                        ? name.substring(fd.getPackage().length() + 1) : null;
                if (local != null && found == null) {
                    found = find(fd, local);
                }
            }
            if (found == null) {
                throw new IllegalArgumentException("the descriptor set has no message " + name);
            }
            return found;
        } catch (InvalidProtocolBufferException | DescriptorValidationException e) {
            throw new IllegalArgumentException("the descriptor set does not load: " + e.getMessage(), e);
        }
    }

    private static Descriptor find(FileDescriptor file, String local) {
        String[] parts = local.split("\\.");
        Descriptor d = file.findMessageTypeByName(parts[0]);
        for (int i = 1; d != null && i < parts.length; i++) {
            d = d.findNestedTypeByName(parts[i]);
        }
        return d;
    }

    // ---- the registry's message indexes --------------------------------------------------------------
    /**
     * How many bytes of {@code framed} (what follows the registry's 5-byte header) are its message
     * indexes, when they name {@code expected} (the message's path in its writer schema, dot-separated:
     * "0" for the first message); otherwise an exception naming what they are. Confluent's framing: a
     * zigzag varint count then each index as a zigzag varint, and the single byte 0 for [0].
     */
    static int indexesLength(byte[] framed, String expected) throws IOException {
        CodedInputStream in = CodedInputStream.newInstance(framed);
        int count = in.readSInt32();
        StringBuilder path = new StringBuilder();
        if (count == 0) {
            path.append('0');
        } else if (count < 0 || count > framed.length) {
            throw new IOException("its message indexes are not readable (a count of " + count + ")");
        }
        for (int i = 0; i < count; i++) {
            if (i > 0) {
                path.append('.');
            }
            path.append(in.readSInt32());
        }
        if (!path.toString().equals(expected)) {
            throw new IOException("its message indexes [" + path.toString().replace('.', ',')
                    + "] do not name the message read ([" + expected.replace('.', ',') + "] in its writer schema)");
        }
        return in.getTotalBytesRead();
    }

    // ---- decoding ------------------------------------------------------------------------------------
    Row decode(byte[] payload, int offset) throws IOException {
        DynamicMessage parsed = DynamicMessage.parseFrom(message,
                CodedInputStream.newInstance(payload, offset, payload.length - offset));
        return row(parsed);
    }

    private static Row row(DynamicMessage m) {
        List<FieldDescriptor> fields = m.getDescriptorForType().getFields();
        Object[] values = new Object[fields.size()];
        for (int i = 0; i < values.length; i++) {
            FieldDescriptor f = fields.get(i);
            if (f.isMapField()) {
                Map<Object, Object> map = new LinkedHashMap<>();
                FieldDescriptor k = f.getMessageType().findFieldByNumber(1);
                FieldDescriptor v = f.getMessageType().findFieldByNumber(2);
                int n = m.getRepeatedFieldCount(f);
                for (int j = 0; j < n; j++) {
                    DynamicMessage entry = (DynamicMessage) m.getRepeatedField(f, j);
                    map.put(value(k, entry.getField(k)), value(v, entry.getField(v)));
                }
                values[i] = map;
            } else if (f.isRepeated()) {
                int n = m.getRepeatedFieldCount(f);
                List<Object> list = new ArrayList<>(n);
                for (int j = 0; j < n; j++) {
                    list.add(value(f, m.getRepeatedField(f, j)));
                }
                values[i] = list;
            } else if (f.hasPresence() && !m.hasField(f)) {
                values[i] = null;
            } else {
                values[i] = value(f, m.getField(f));
            }
        }
        return RowFactory.create(values);
    }

    private static Object value(FieldDescriptor f, Object v) {
        switch (f.getType()) {
            case UINT32:
            case FIXED32:
                return Integer.toUnsignedLong((Integer) v);
            case UINT64:
            case FIXED64:
                return new BigDecimal(new BigInteger(Long.toUnsignedString((Long) v)));
            case BYTES:
                return ((ByteString) v).toByteArray();
            case ENUM:
                return ((EnumValueDescriptor) v).getName();
            case MESSAGE:
            case GROUP:
                return row((DynamicMessage) v);
            default: // int, long, float, double, boolean, String: as protobuf-java gives them
                return v;
        }
    }

    // ---- encoding ------------------------------------------------------------------------------------
    /** A value of the row that the message cannot hold, with the field's path. */
    static final class Misfit extends Exception {
        Misfit(String message) {
            super(message, null, false, false);
        }
    }

    /** Which of the message's fields each of a row type's fields is: built once per row type. */
    private static final class Plan {
        final FieldDescriptor[] fields;
        /** The row's field indexes by field number: protobuf-java writes a message's fields in that order. */
        final int[] order;
        final String error;

        Plan(FieldDescriptor[] fields, String error) {
            this.fields = fields;
            this.error = error;
            this.order = java.util.stream.IntStream.range(0, fields.length).boxed()
                    .sorted(java.util.Comparator.comparingInt(i -> fields[i] == null ? 0 : fields[i].getNumber()))
                    .mapToInt(Integer::intValue).toArray();
        }
    }

    /** Per caller (a task's UDF instance: one thread): the plans of the row types it has seen. */
    static final class Plans {
        private final IdentityHashMap<StructType, IdentityHashMap<Descriptor, Plan>> plans = new IdentityHashMap<>();

        Plan of(StructType type, Descriptor message, String where) {
            if (plans.size() > 256) { // row types of runs long gone (a Connect server lives on)
                plans.clear();
            }
            IdentityHashMap<Descriptor, Plan> byMessage = plans.computeIfAbsent(type, t -> new IdentityHashMap<>());
            Plan plan = byMessage.get(message);
            if (plan == null) {
                FieldDescriptor[] fields = new FieldDescriptor[type.fields().length];
                String error = null;
                for (int i = 0; i < fields.length; i++) {
                    String name = type.fields()[i].name();
                    fields[i] = message.findFieldByName(name);
                    if (fields[i] == null && error == null) {
                        error = "field " + where + name + " is not a field of message " + message.getFullName();
                    }
                }
                for (FieldDescriptor f : message.getFields()) {
                    if (f.isRequired() && !type.getFieldIndex(f.getName()).isDefined() && error == null) {
                        error = "required field " + where + f.getName() + " of message " + message.getFullName()
                                + " is not in it";
                    }
                }
                plan = new Plan(fields, error);
                byMessage.put(message, plan);
            }
            return plan;
        }
    }

    byte[] encode(Row row, Plans plans) throws Misfit {
        return bytes(message, row, plans, "");
    }

    /**
     * The message's wire bytes of a row, written field by field with a CodedOutputStream (no DynamicMessage in
     * between: measured twice as fast). As protobuf-java writes them: fields in number order, packed repeated
     * scalars where the field is packed, and a field without presence left out when it holds its default.
     */
    private static byte[] bytes(Descriptor type, Row row, Plans plans, String where) throws Misfit {
        StructType schema = row.schema();
        if (schema == null) {
            throw new Misfit("a struct without field names cannot be encoded (" + where + ")");
        }
        Plan plan = plans.of(schema, type, where);
        if (plan.error != null) {
            throw new Misfit(plan.error);
        }
        ByteArrayOutputStream buffer = new ByteArrayOutputStream(64);
        CodedOutputStream out = CodedOutputStream.newInstance(buffer, 256);
        try {
            for (int i : plan.order) {
                Object v = row.get(i);
                FieldDescriptor f = plan.fields[i];
                String path = where + f.getName();
                if (v == null) {
                    if (f.isRequired()) {
                        throw new Misfit("required field " + path + " is null");
                    }
                    continue;
                }
                if (f.isMapField()) {
                    FieldDescriptor k = f.getMessageType().findFieldByNumber(1);
                    FieldDescriptor val = f.getMessageType().findFieldByNumber(2);
                    for (Map.Entry<?, ?> e : asMap(v, path).entrySet()) {
                        ByteArrayOutputStream entry = new ByteArrayOutputStream(32);
                        CodedOutputStream eo = CodedOutputStream.newInstance(entry, 64);
                        write(eo, k, scalar(k, e.getKey(), path + ".key", plans));
                        if (e.getValue() != null) {
                            write(eo, val, scalar(val, e.getValue(), path + "[" + e.getKey() + "]", plans));
                        }
                        eo.flush();
                        out.writeByteArray(f.getNumber(), entry.toByteArray());
                    }
                } else if (f.isRepeated()) {
                    ByteArrayOutputStream packed = f.isPacked() ? new ByteArrayOutputStream(32) : null;
                    CodedOutputStream po = packed != null ? CodedOutputStream.newInstance(packed, 64) : null;
                    int j = 0;
                    for (Object item : asIterable(v, path)) {
                        if (item == null) {
                            throw new Misfit("field " + path + "[" + j + "] is null, which a repeated field cannot hold");
                        }
                        Object x = scalar(f, item, path + "[" + j + "]", plans);
                        if (po != null) {
                            writeNoTag(po, f, x);
                        } else {
                            write(out, f, x);
                        }
                        j++;
                    }
                    if (po != null && j > 0) {
                        po.flush();
                        out.writeByteArray(f.getNumber(), packed.toByteArray());
                    }
                } else {
                    Object x = scalar(f, v, path, plans);
                    if (f.hasPresence() || !isDefault(x)) {
                        write(out, f, x);
                    }
                }
            }
            out.flush();
        } catch (IOException e) {
            throw new Misfit("it cannot be written: " + reason(e)); // a ByteArrayOutputStream does not fail
        }
        return buffer.toByteArray();
    }

    private static boolean isDefault(Object x) {
        if (x instanceof Integer || x instanceof Long) {
            return ((Number) x).longValue() == 0;
        }
        if (x instanceof Float) {
            return Float.floatToRawIntBits((Float) x) == 0;
        }
        if (x instanceof Double) {
            return Double.doubleToRawLongBits((Double) x) == 0;
        }
        if (x instanceof Boolean) {
            return !(Boolean) x;
        }
        if (x instanceof String) {
            return ((String) x).isEmpty();
        }
        if (x instanceof ByteString) {
            return ((ByteString) x).isEmpty();
        }
        if (x instanceof EnumValueDescriptor) {
            return ((EnumValueDescriptor) x).getNumber() == 0;
        }
        return false;
    }

    private static void write(CodedOutputStream out, FieldDescriptor f, Object x) throws IOException, Misfit {
        int n = f.getNumber();
        switch (f.getType()) {
            case INT32: out.writeInt32(n, (Integer) x); break;
            case SINT32: out.writeSInt32(n, (Integer) x); break;
            case SFIXED32: out.writeSFixed32(n, (Integer) x); break;
            case UINT32: out.writeUInt32(n, (Integer) x); break;
            case FIXED32: out.writeFixed32(n, (Integer) x); break;
            case INT64: out.writeInt64(n, (Long) x); break;
            case SINT64: out.writeSInt64(n, (Long) x); break;
            case SFIXED64: out.writeSFixed64(n, (Long) x); break;
            case UINT64: out.writeUInt64(n, (Long) x); break;
            case FIXED64: out.writeFixed64(n, (Long) x); break;
            case FLOAT: out.writeFloat(n, (Float) x); break;
            case DOUBLE: out.writeDouble(n, (Double) x); break;
            case BOOL: out.writeBool(n, (Boolean) x); break;
            case STRING: out.writeString(n, (String) x); break;
            case BYTES: out.writeBytes(n, (ByteString) x); break;
            case ENUM: out.writeEnum(n, ((EnumValueDescriptor) x).getNumber()); break;
            case MESSAGE: out.writeByteArray(n, (byte[]) x); break;
            default: throw new Misfit("field " + f.getFullName() + ": a " + f.getType() + " cannot be written");
        }
    }

    private static void writeNoTag(CodedOutputStream out, FieldDescriptor f, Object x) throws IOException, Misfit {
        switch (f.getType()) {
            case INT32: out.writeInt32NoTag((Integer) x); break;
            case SINT32: out.writeSInt32NoTag((Integer) x); break;
            case SFIXED32: out.writeSFixed32NoTag((Integer) x); break;
            case UINT32: out.writeUInt32NoTag((Integer) x); break;
            case FIXED32: out.writeFixed32NoTag((Integer) x); break;
            case INT64: out.writeInt64NoTag((Long) x); break;
            case SINT64: out.writeSInt64NoTag((Long) x); break;
            case SFIXED64: out.writeSFixed64NoTag((Long) x); break;
            case UINT64: out.writeUInt64NoTag((Long) x); break;
            case FIXED64: out.writeFixed64NoTag((Long) x); break;
            case FLOAT: out.writeFloatNoTag((Float) x); break;
            case DOUBLE: out.writeDoubleNoTag((Double) x); break;
            case BOOL: out.writeBoolNoTag((Boolean) x); break;
            case ENUM: out.writeEnumNoTag(((EnumValueDescriptor) x).getNumber()); break;
            default: throw new Misfit("field " + f.getFullName() + ": a packed " + f.getType() + " cannot be written");
        }
    }

    private static Object scalar(FieldDescriptor f, Object v, String path, Plans plans) throws Misfit {
        switch (f.getType()) {
            case INT32:
            case SINT32:
            case SFIXED32:
                return (int) integer(v, path, Integer.MIN_VALUE, Integer.MAX_VALUE);
            case UINT32:
            case FIXED32:
                return (int) integer(v, path, 0, 0xFFFFFFFFL); // the unsigned value's bits
            case INT64:
            case SINT64:
            case SFIXED64:
                return integer(v, path, Long.MIN_VALUE, Long.MAX_VALUE);
            case UINT64:
            case FIXED64: {
                BigInteger big = v instanceof BigDecimal ? ((BigDecimal) v).toBigInteger()
                        : v instanceof Number ? BigInteger.valueOf(((Number) v).longValue()) : null;
                if (big == null || big.signum() < 0 || big.bitLength() > 64) {
                    throw new Misfit("field " + path + " is " + describe(v) + ", which uint64 cannot hold");
                }
                return big.longValue();
            }
            case FLOAT:
                return number(v, path).floatValue();
            case DOUBLE:
                return number(v, path).doubleValue();
            case BOOL:
                if (v instanceof Boolean) {
                    return v;
                }
                break;
            case STRING:
                if (v instanceof String) {
                    return v;
                }
                break;
            case BYTES:
                if (v instanceof byte[]) {
                    return ByteString.copyFrom((byte[]) v);
                }
                break;
            case ENUM: {
                EnumValueDescriptor e = v instanceof String ? f.getEnumType().findValueByName((String) v)
                        : v instanceof Integer ? f.getEnumType().findValueByNumber((Integer) v) : null;
                if (e == null) {
                    throw new Misfit("field " + path + " is " + describe(v) + ", which is no value of enum "
                            + f.getEnumType().getFullName());
                }
                return e;
            }
            case MESSAGE:
                if (v instanceof Row) {
                    return bytes(f.getMessageType(), (Row) v, plans, path + ".");
                }
                break;
            default:
                break;
        }
        throw new Misfit("field " + path + " is " + describe(v) + ", which a " + f.getType().name().toLowerCase()
                + " field cannot hold");
    }

    private static long integer(Object v, String path, long min, long max) throws Misfit {
        if (v instanceof Integer || v instanceof Long || v instanceof Short || v instanceof Byte) {
            long x = ((Number) v).longValue();
            if (x >= min && x <= max) {
                return x;
            }
        } else if (v instanceof BigDecimal) {
            BigDecimal d = (BigDecimal) v;
            if (d.signum() == 0 || d.stripTrailingZeros().scale() <= 0) {
                BigInteger big = d.toBigInteger();
                if (big.compareTo(BigInteger.valueOf(min)) >= 0 && big.compareTo(BigInteger.valueOf(max)) <= 0) {
                    return big.longValue();
                }
            }
        }
        throw new Misfit("field " + path + " is " + describe(v) + ", not an integer in [" + min + ", " + max + "]");
    }

    private static Number number(Object v, String path) throws Misfit {
        if (v instanceof Number) {
            return (Number) v;
        }
        throw new Misfit("field " + path + " is " + describe(v) + ", not a number");
    }

    private static String describe(Object v) {
        if (v instanceof byte[]) {
            return "bytes";
        }
        String text = String.valueOf(v);
        return (v instanceof String ? "\"" + (text.length() > 40 ? text.substring(0, 40) + "..." : text) + "\"" : text)
                + " (" + v.getClass().getSimpleName() + ")";
    }

    private static Iterable<?> asIterable(Object v, String path) throws Misfit {
        if (v instanceof Iterable) {
            return (Iterable<?>) v;
        }
        if (v instanceof scala.collection.Iterable) {
            return scala.jdk.javaapi.CollectionConverters.asJava((scala.collection.Iterable<?>) v);
        }
        if (v instanceof Object[]) {
            return java.util.Arrays.asList((Object[]) v);
        }
        throw new Misfit("field " + path + " is " + describe(v) + ", not an array");
    }

    private static Map<?, ?> asMap(Object v, String path) throws Misfit {
        if (v instanceof Map) {
            return (Map<?, ?>) v;
        }
        if (v instanceof scala.collection.Map) {
            return scala.jdk.javaapi.CollectionConverters.asJava((scala.collection.Map<?, ?>) v);
        }
        throw new Misfit("field " + path + " is " + describe(v) + ", not a map");
    }

    /** A short reason for a payload that does not parse. */
    static String reason(Throwable e) {
        String message = e.getMessage();
        return message == null || message.isEmpty() ? e.getClass().getSimpleName() : message;
    }
}
