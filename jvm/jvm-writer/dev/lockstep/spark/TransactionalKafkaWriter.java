package dev.lockstep.spark;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;

/**
 * What Lockstep's JVM writer writes with: its settings ({@link WriterSettings}, built by {@code
 * lockstep.spark.jvm_writer.jvm_settings}) and the output contract they carry ({@link OutputContract}). The
 * writer itself is the data source {@code lockstep-kafka} ({@link LockstepKafkaSource}, {@link
 * LockstepBatchWrite}); each task's transaction is a {@link PartitionTransaction}.
 *
 * <p>Same contract as the Python writer ({@code lockstep.spark.python_writer.TransactionalWriter}), but
 * the rows never leave the JVM: no Arrow hand-off to a Python worker, which is where the Python
 * writer spent most of its time. What the output looks like (header names, accepted columns, the
 * record size estimate, the committable's schema id, where {@code job.mid_produce} fires) is not
 * written here: it arrives in the settings ({@link OutputContract}, from {@code
 * lockstep.model.output_contract.jvm_contract}), so both writers follow one definition.
 */
public final class TransactionalKafkaWriter {
  private static final ObjectMapper JSON = new ObjectMapper();

  private TransactionalKafkaWriter() {}

  static ObjectMapper json() {
    return JSON;
  }

  /** Parsed once on the driver, serialized to every task. */
  static final class WriterSettings implements java.io.Serializable {
    private static final long serialVersionUID = 1L;
    static final String TASK_PLACEHOLDER = "{task}";
    final String bootstrap;
    final java.util.Map<String, String> producerConfig;
    final String transactionalIdPattern;
    final long checkpointId;
    final int timeoutMs;
    final String pipelineName;
    final String sinkTopic;
    final String deadLetterTopic;
    final int sinkMaxBytes;
    final String sinkLimit;
    final int deadLetterMaxBytes;
    final String deadLetterLimit;
    /** sink.routes' topics: each one's largest record and where that limit comes from (writer_settings.routes). */
    final java.util.Map<String, Integer> routeMaxBytes = new java.util.HashMap<>();
    final java.util.Map<String, String> routeLimits = new java.util.HashMap<>();
    final java.util.Map<String, String> failpoints;
    final OutputContract contract;

    private WriterSettings(JsonNode doc) {
      bootstrap = doc.get("bootstrap").asText();
      producerConfig = strings(doc.get("producer_config"));
      // lockstep.model.transactional_ids.transactional_id_pattern: the task index replaces TASK_PLACEHOLDER.
      transactionalIdPattern = doc.get("transactional_id_pattern").asText();
      if (!transactionalIdPattern.contains(TASK_PLACEHOLDER)) {
        throw new IllegalArgumentException(
            "the transactional id pattern " + transactionalIdPattern + " has no " + TASK_PLACEHOLDER);
      }
      pipelineName = doc.get("pipeline").asText();
      checkpointId = doc.get("checkpoint_id").asLong();
      timeoutMs = doc.get("timeout_ms").asInt();
      sinkTopic = doc.get("sink_topic").asText();
      deadLetterTopic = doc.get("dead_letter_topic").asText();
      // The record size limits (lockstep.spark.writer_settings.writer_settings); the driver always sends them.
      sinkMaxBytes = doc.get("sink_max_bytes").asInt();
      sinkLimit = doc.get("sink_limit").asText();
      deadLetterMaxBytes = doc.get("dead_letter_max_bytes").asInt();
      deadLetterLimit = doc.get("dead_letter_limit").asText();
      JsonNode routes = doc.get("routes");
      if (routes != null) {
        routes.forEach(r -> {
          routeMaxBytes.put(r.get("topic").asText(), r.get("max_bytes").asInt());
          routeLimits.put(r.get("topic").asText(), r.get("limit").asText());
        });
      }
      failpoints = strings(doc.get("failpoints"));
      failpoints.forEach((name, action) -> {
        if (!PartitionTransaction.FAILPOINT_ACTIONS.contains(action)) {
          throw new IllegalArgumentException("failpoint " + name + " has no action '" + action + "'; the actions are "
              + String.join(", ", PartitionTransaction.FAILPOINT_ACTIONS));
        }
      });
      contract = new OutputContract(doc.get("contract"));
    }

    static WriterSettings parse(JsonNode doc) {
      return new WriterSettings(doc);
    }

    static java.util.Map<String, String> strings(JsonNode node) {
      java.util.Map<String, String> out = new java.util.HashMap<>();
      if (node != null) {
        node.fields().forEachRemaining(e -> out.put(e.getKey(), e.getValue().asText()));
      }
      return out;
    }

    byte[] checkpointHeader() {
      return RowLayout.ascii(checkpointId);
    }

    byte[] pipelineHeader() {
      return pipelineName.getBytes(java.nio.charset.StandardCharsets.UTF_8);
    }

    /** The task's id: a retried task gets the same one, so its init fences the earlier attempt. */
    String transactionalId(int task) {
      return transactionalIdPattern.replace(TASK_PLACEHOLDER, Integer.toString(task));
    }
  }

  /**
   * The output contract of {@code lockstep.model.output_contract} ({@code jvm_contract()}): the same values
   * the Python writer uses, so the two writers cannot disagree on them.
   */
  static final class OutputContract implements java.io.Serializable {
    private static final long serialVersionUID = 1L;
    final String sourceTopic;
    final String sourcePartition;
    final String sourceOffset;
    final String checkpoint;
    final String pipeline;
    /** How many of Lockstep's own headers lead every record (output_contract.LEADING_HEADERS). */
    final int leadingHeaders;
    final String error;
    final String originalSize;
    final List<String> requiredColumns = new ArrayList<>();
    final List<String> optionalColumns = new ArrayList<>();
    /** The column that names a record's sink.routes topic (null: the sink topic). */
    final String routeColumn;
    final Map<String, List<String>> acceptedTypes = new java.util.HashMap<>();
    final int batchOverhead;
    final int recordOverhead;
    final int headerOverhead;
    final int compressionSlack;
    final String tooLargeReason;
    final String committableSchema;
    final long midProduceAfterRecords;

    OutputContract(JsonNode doc) {
      if (doc == null) {
        throw new IllegalArgumentException(
            "the writer settings carry no \"contract\" (lockstep.model.output_contract.jvm_contract): "
                + "this jar is newer than the Python driver that calls it");
      }
      Map<String, String> headers = WriterSettings.strings(doc.get("headers"));
      sourceTopic = require(headers, "source_topic");
      sourcePartition = require(headers, "source_partition");
      sourceOffset = require(headers, "source_offset");
      checkpoint = require(headers, "checkpoint");
      pipeline = require(headers, "pipeline");
      leadingHeaders = doc.get("leading_headers").size();
      error = require(headers, "error");
      originalSize = require(headers, "original_size");
      doc.get("required_columns").forEach(c -> requiredColumns.add(c.asText()));
      doc.get("optional_columns").forEach(c -> optionalColumns.add(c.asText()));
      routeColumn = doc.get("route_column").asText();
      doc.get("accepted_types").fields().forEachRemaining(e -> {
        List<String> types = new ArrayList<>();
        e.getValue().forEach(t -> types.add(t.asText()));
        acceptedTypes.put(e.getKey(), types);
      });
      JsonNode size = doc.get("record_size");
      batchOverhead = size.get("batch_overhead").asInt();
      recordOverhead = size.get("record_overhead").asInt();
      headerOverhead = size.get("header_overhead").asInt();
      compressionSlack = size.get("compression_slack").asInt();
      tooLargeReason = doc.get("too_large_reason").asText();
      committableSchema = doc.get("committable_schema").asText();
      midProduceAfterRecords = doc.get("mid_produce_after_records").asLong();
    }

    private static String require(Map<String, String> values, String name) {
      String value = values.get(name);
      if (value == null) {
        throw new IllegalArgumentException("the output contract names no header for " + name);
      }
      return value;
    }

    /** Estimated bytes of one record on the wire; see lockstep.model.output_contract.record_size. */
    long recordSize(long keyAndValueBytes, long headerBytes, int headers) {
      long body = keyAndValueBytes + headerBytes;
      return batchOverhead + recordOverhead + (long) headerOverhead * headers + body + body / 255 + compressionSlack;
    }

    /** The error header's reason for a record dropped for its size; see lockstep.model.output_contract.too_large. */
    String tooLarge(long size, int limit, String where, String source) {
      return tooLargeReason.replace("{size}", Long.toString(size)).replace("{where}", where)
          .replace("{limit}", Integer.toString(limit)).replace("{source}", source);
    }
  }
}
