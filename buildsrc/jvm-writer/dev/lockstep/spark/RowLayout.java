package dev.lockstep.spark;

import java.io.Serializable;
import java.nio.charset.StandardCharsets;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.util.ArrayData;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructType;

/**
 * Where each column the writer reads sits in the transform's output rows, and how to turn it
 * into bytes. {@code value} and {@code key} may be binary or string (both reach Kafka as bytes);
 * {@code headers} is Spark's Kafka header type, {@code array<struct<key: string, value: binary>>};
 * a non-null {@code error} sends the record to the dead-letter topic.
 */
final class RowLayout implements Serializable {
  private static final long serialVersionUID = 1L;

  final int value;
  final boolean valueIsString;
  final int key; // -1 when absent
  final boolean keyIsString;
  final int topic;
  final int partition;
  final boolean partitionIsLong;
  final int offset;
  final boolean offsetIsLong;
  final int headers; // -1 when absent
  final int error; // -1 when absent

  private RowLayout(StructType schema) {
    value = required(schema, "value");
    valueIsString = isWide(schema, value, "value", DataTypes.StringType, DataTypes.BinaryType);
    key = optional(schema, "key");
    keyIsString = key >= 0 && isWide(schema, key, "key", DataTypes.StringType, DataTypes.BinaryType);
    topic = required(schema, "topic");
    partition = required(schema, "partition");
    partitionIsLong = isWide(schema, partition, "partition", DataTypes.LongType, DataTypes.IntegerType);
    offset = required(schema, "offset");
    offsetIsLong = isWide(schema, offset, "offset", DataTypes.LongType, DataTypes.IntegerType);
    headers = optional(schema, "headers");
    error = optional(schema, "error");
  }

  static RowLayout of(StructType schema) {
    return new RowLayout(schema);
  }

  byte[] value(InternalRow row) {
    return bytes(row, value, valueIsString);
  }

  byte[] key(InternalRow row) {
    return key < 0 ? null : bytes(row, key, keyIsString);
  }

  String error(InternalRow row) {
    return error < 0 || row.isNullAt(error) ? null : row.getUTF8String(error).toString();
  }

  long partition(InternalRow row) {
    return partitionIsLong ? row.getLong(partition) : row.getInt(partition);
  }

  long offset(InternalRow row) {
    return offsetIsLong ? row.getLong(offset) : row.getInt(offset);
  }

  ArrayData headers(InternalRow row) {
    return headers < 0 || row.isNullAt(headers) ? null : row.getArray(headers);
  }

  private static byte[] bytes(InternalRow row, int index, boolean isString) {
    if (row.isNullAt(index)) {
      return null;
    }
    return isString ? row.getUTF8String(index).getBytes() : row.getBinary(index);
  }

  private static int required(StructType schema, String name) {
    int index = optional(schema, name);
    if (index < 0) {
      throw new IllegalArgumentException(
          "the transform's output has no `" + name + "` column (columns: " + schema.simpleString() + ")");
    }
    return index;
  }

  private static int optional(StructType schema, String name) {
    String[] names = schema.fieldNames();
    for (int i = 0; i < names.length; i++) {
      if (names[i].equals(name)) {
        return i;
      }
    }
    return -1;
  }

  /**
   * Whether the column has the {@code wide} type (string, long) rather than the {@code narrow} one
   * (binary, int); any other type is refused. ({@code lockstep.sparkjob.check_output_schema} already
   * refused it on the driver with the spec's name; this guards direct callers.)
   */
  private static boolean isWide(StructType schema, int index, String name, DataType wide, DataType narrow) {
    DataType type = schema.fields()[index].dataType();
    if (type.equals(wide) || type.equals(narrow)) {
      return type.equals(wide);
    }
    throw new IllegalArgumentException(
        "the transform's `" + name + "` column is " + type.simpleString() + "; it must be "
            + narrow.simpleString() + " or " + wide.simpleString());
  }

  static byte[] ascii(long number) {
    return Long.toString(number).getBytes(StandardCharsets.US_ASCII);
  }
}
