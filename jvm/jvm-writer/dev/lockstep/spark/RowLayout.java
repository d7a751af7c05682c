package dev.lockstep.spark;

import java.io.Serializable;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.util.ArrayData;
import org.apache.spark.sql.types.StructType;

/**
 * Where each column the writer reads sits in the transform's output rows, and how to turn it
 * into bytes. Which columns are required and which types each may have come from the output
 * contract ({@code lockstep.model.output_contract.ACCEPTED_TYPES}): {@code value} and {@code key} binary
 * or string (both reach Kafka as bytes), {@code partition} and {@code offset} int or bigint,
 * {@code headers} Spark's Kafka header type; a non-null {@code error} sends the record to the
 * dead-letter topic.
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
  final int route; // -1 when absent (no sink.routes)

  private RowLayout(StructType schema, TransactionalKafkaWriter.OutputContract contract) {
    check(schema, contract);
    value = optional(schema, "value");
    valueIsString = isType(schema, value, "string");
    key = optional(schema, "key");
    keyIsString = isType(schema, key, "string");
    topic = optional(schema, "topic");
    partition = optional(schema, "partition");
    partitionIsLong = isType(schema, partition, "bigint");
    offset = optional(schema, "offset");
    offsetIsLong = isType(schema, offset, "bigint");
    headers = optional(schema, "headers");
    error = optional(schema, "error");
    route = optional(schema, contract.routeColumn);
    if (value < 0 || topic < 0 || partition < 0 || offset < 0) {
      throw new IllegalArgumentException(
          "the output contract does not require the columns this writer reads (value, topic, partition, offset): "
              + contract.requiredColumns);
    }
  }

  static RowLayout of(StructType schema, TransactionalKafkaWriter.OutputContract contract) {
    return new RowLayout(schema, contract);
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

  /** The sink.routes topic the record goes to; null: the sink topic. */
  String route(InternalRow row) {
    return route < 0 || row.isNullAt(route) ? null : row.getUTF8String(route).toString();
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

  /**
   * Every required column present, every column the contract names of an accepted type; any other
   * type is refused. ({@code lockstep.spark.job.check_output_schema} already refused it on the driver
   * with the spec's name; this guards direct callers.)
   */
  private static void check(StructType schema, TransactionalKafkaWriter.OutputContract contract) {
    for (String name : contract.requiredColumns) {
      if (optional(schema, name) < 0) {
        throw new IllegalArgumentException(
            "the transform's output has no `" + name + "` column (columns: " + schema.simpleString() + ")");
      }
    }
    List<String> columns = new ArrayList<>(contract.requiredColumns);
    columns.addAll(contract.optionalColumns);
    for (String name : columns) {
      int index = optional(schema, name);
      if (index < 0) {
        continue;
      }
      String type = schema.fields()[index].dataType().simpleString();
      List<String> accepted = contract.acceptedTypes.get(name);
      if (accepted == null || !accepted.contains(type)) {
        throw new IllegalArgumentException(
            "the transform's `" + name + "` column is " + type + "; it must be "
                + String.join(" or ", accepted == null ? List.of() : accepted));
      }
    }
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

  /** Whether the column (index -1: absent) has the type {@code simpleString}. */
  private static boolean isType(StructType schema, int index, String simpleString) {
    return index >= 0 && schema.fields()[index].dataType().simpleString().equals(simpleString);
  }

  static byte[] ascii(long number) {
    return Long.toString(number).getBytes(StandardCharsets.US_ASCII);
  }
}
