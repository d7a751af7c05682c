package dev.lockstep.formats;

import com.fasterxml.jackson.core.JsonFactory;
import com.fasterxml.jackson.core.JsonParser;
import com.fasterxml.jackson.core.JsonToken;
import java.io.IOException;
import java.util.HashMap;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.RowFactory;
import org.apache.spark.sql.api.java.UDF2;

/**
 * The fast path of the spec's {@code json} format: a JSON object decoded straight from the record's bytes into the
 * reader schema's flat struct, for the records whose answer cannot be in doubt; null for every other record, which
 * Spark's {@code from_json} then decodes (lockstep.formats.codecs: {@code coalesce(fast, from_json(...))}).
 *
 * <p>Spark's {@code from_json} reads a record through an {@code InputStreamReader} made for it: measured with JFR,
 * that and its char-based parser were about 40% of a 100,000-records/s checkpoint's executor CPU
 * (docs/formats.md). This decoder parses the bytes with Jackson's byte-based parser and answers only when the
 * record is plain: ASCII, one JSON object and nothing after it, no key twice, no key that differs from a field
 * only in case, and each field of the schema absent, null, or of exactly its JSON kind (a string for a string, an
 * integer in range for an int or a long, a number for a double, true or false for a boolean). Anything else
 * returns null, and Spark decides as it always did, so the decoded value is always Spark's.
 *
 * <p>{@code (payload, fields) -> struct}: {@code fields} is the schema as {@code name:kind} pairs joined by
 * {@code ,} with kind one of {@code s l i d b} (string, long, int, double, boolean); Python passes only flat
 * schemas of these kinds and registers the UDF under a name per schema, with the struct as its type.
 */
public final class JsonDecode implements UDF2<byte[], String, Row> {
    private static final long serialVersionUID = 1L;
    private static final JsonFactory FACTORY = new JsonFactory();
    private static final Map<String, Fields> SCHEMAS = new ConcurrentHashMap<>();

    /** A schema's fields: by exact name, its index and kind; by lower-case name, whether any field has it. */
    static final class Fields {
        final Map<String, Integer> index = new HashMap<>();
        final char[] kinds;
        final java.util.Set<String> lower = new java.util.HashSet<>();

        Fields(String spec) {
            String[] parts = spec.isEmpty() ? new String[0] : spec.split(",", -1);
            kinds = new char[parts.length];
            for (int i = 0; i < parts.length; i++) {
                int colon = parts[i].lastIndexOf(':');
                String name = parts[i].substring(0, colon);
                index.put(name, i);
                lower.add(name.toLowerCase(java.util.Locale.ROOT));
                kinds[i] = parts[i].charAt(colon + 1);
            }
        }
    }

    @Override
    public Row call(byte[] payload, String fields) {
        if (payload == null || fields == null) {
            return null;
        }
        for (byte b : payload) {
            if (b < 0) { // not ASCII: Spark decodes the bytes as it does (a malformed sequence becomes U+FFFD)
                return null;
            }
        }
        Fields schema = SCHEMAS.computeIfAbsent(fields, Fields::new);
        try (JsonParser parser = FACTORY.createParser(payload, 0, payload.length)) {
            return decode(parser, schema);
        } catch (IOException | RuntimeException e) {
            return null; // not plain: Spark's from_json decides
        }
    }

    static Row decode(JsonParser parser, Fields schema) throws IOException {
        if (parser.nextToken() != JsonToken.START_OBJECT) {
            return null;
        }
        Object[] values = new Object[schema.kinds.length];
        boolean[] seen = new boolean[schema.kinds.length];
        java.util.Set<String> others = null;
        JsonToken token;
        while ((token = parser.nextToken()) == JsonToken.FIELD_NAME) {
            String name = parser.currentName();
            JsonToken value = parser.nextToken();
            Integer i = schema.index.get(name);
            if (i == null) {
                if (schema.lower.contains(name.toLowerCase(java.util.Locale.ROOT))) {
                    return null; // a field's name in another case: Spark's matching decides
                }
                if (others == null) {
                    others = new java.util.HashSet<>();
                }
                if (!others.add(name)) {
                    return null; // a key twice
                }
                parser.skipChildren();
                continue;
            }
            if (seen[i]) {
                return null;
            }
            seen[i] = true;
            if (value == JsonToken.VALUE_NULL) {
                continue;
            }
            switch (schema.kinds[i]) {
                case 's':
                    if (value != JsonToken.VALUE_STRING) {
                        return null;
                    }
                    values[i] = parser.getText();
                    break;
                case 'l':
                    if (value != JsonToken.VALUE_NUMBER_INT) {
                        return null;
                    }
                    JsonParser.NumberType lt = parser.getNumberType();
                    if (lt != JsonParser.NumberType.INT && lt != JsonParser.NumberType.LONG) {
                        return null;
                    }
                    values[i] = parser.getLongValue();
                    break;
                case 'i':
                    if (value != JsonToken.VALUE_NUMBER_INT || parser.getNumberType() != JsonParser.NumberType.INT) {
                        return null;
                    }
                    values[i] = parser.getIntValue();
                    break;
                case 'd':
                    if (value != JsonToken.VALUE_NUMBER_INT && value != JsonToken.VALUE_NUMBER_FLOAT) {
                        return null;
                    }
                    values[i] = parser.getDoubleValue();
                    break;
                case 'b':
                    if (value != JsonToken.VALUE_TRUE && value != JsonToken.VALUE_FALSE) {
                        return null;
                    }
                    values[i] = value == JsonToken.VALUE_TRUE;
                    break;
                default:
                    return null;
            }
        }
        if (token != JsonToken.END_OBJECT || parser.nextToken() != null) {
            return null; // something after the object: Spark decides
        }
        return RowFactory.create(values);
    }
}
