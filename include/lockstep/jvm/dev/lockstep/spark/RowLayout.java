package dev.lockstep.spark;

import java.io.Serializable;
import java.nio.charset.StandardCharsets;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.util.ArrayData;
import org.apache.spark.sql.types.BinaryType;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.IntegerType;
import org.apache.spark.sql.types.LongType;
import org.apache.spark.sql.types.StringType;
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
    valueIsString = bytesLike(schema, value, "value");
    key = optional(schema, "key");
    keyIsString = key >= 0 && bytesLike(schema, key, "key");
    topic = required(schema, "topic");
    partition = required(schema, "partition");
    partitionIsLong = integral(schema, partition, "partition");
    offset = required(schema, "offset");
    offsetIsLong = integral(schema, offset, "offset");
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

  private static boolean bytesLike(StructType schema, int index, String name) {
    DataType type = schema.fields()[index].dataType();
    if (type instanceof StringType) {
      return true;
    }
    if (type instanceof BinaryType) {
      return false;
    }
    throw new IllegalArgumentException(
        "the transform's `" + name + "` column is " + type.simpleString() + "; it must be binary or string");
  }

  private static boolean integral(StructType schema, int index, String name) {
    DataType type = schema.fields()[index].dataType();
    if (type instanceof LongType) {
      return true;
    }
    if (type instanceof IntegerType) {
      return false;
    }
    throw new IllegalArgumentException(
        "the transform's `" + name + "` column is " + type.simpleString()
            + "; keep the input's integer column (it becomes a provenance header)");
  }

  static byte[] ascii(long number) {
    return Long.toString(number).getBytes(StandardCharsets.US_ASCII);
  }
}
