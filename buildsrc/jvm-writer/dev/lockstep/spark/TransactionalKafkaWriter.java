package dev.lockstep.spark;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.util.ArrayList;
import java.util.Iterator;
import java.util.List;
import org.apache.spark.TaskContext;
import org.apache.spark.api.java.JavaRDD;
import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.catalyst.InternalRow;

/**
 * Lockstep's JVM writer: each Spark task produces its partition inside one Kafka transaction,
 * flushes it and leaves it open (pre-commit), and returns a committable as JSON. The Python
 * driver ({@code lockstep.sparkjob}) calls {@link #write} through py4j and turns the JSON into
 * {@code PreparedTransaction}s; committing happens later, in another process.
 *
 * <p>Same contract as the Python writer ({@code lockstep.transactions.TransactionalWriter}), but
 * the rows never leave the JVM: no Arrow hand-off to a Python worker, which is where the Python
 * writer spent most of its time.
 */
public final class TransactionalKafkaWriter {
  private static final ObjectMapper JSON = new ObjectMapper();

  private TransactionalKafkaWriter() {}

  /** How many Spark tasks (hence transactions) writing {@code df} will take. */
  public static int taskCount(Dataset<Row> df) {
    return df.queryExecution().toRdd().getNumPartitions();
  }

  /**
   * Writes every partition of {@code df} in its own transaction and returns one JSON document per
   * task: {@code {"task", "rows", "committable"}} where committable is null when the task wrote
   * nothing. {@code settingsJson} is built by {@code lockstep.sparkjob.jvm_settings}.
   */
  public static String[] write(Dataset<Row> df, String settingsJson) throws Exception {
    WriterSettings settings = WriterSettings.parse(JSON.readTree(settingsJson));
    RowLayout layout = RowLayout.of(df.schema());
    JavaRDD<InternalRow> rows = df.queryExecution().toRdd().toJavaRDD();
    List<String> results =
        rows.mapPartitions(
                (Iterator<InternalRow> it) -> {
                  int task = TaskContext.getPartitionId();
                  String result = new PartitionTransaction(settings, layout, task).write(it);
                  List<String> one = new ArrayList<>(1);
                  one.add(result);
                  return one.iterator();
                })
            .collect();
    return results.toArray(new String[0]);
  }

  static ObjectMapper json() {
    return JSON;
  }

  /** Parsed once on the driver, serialized to every task. */
  static final class WriterSettings implements java.io.Serializable {
    private static final long serialVersionUID = 1L;
    final String bootstrap;
    final java.util.Map<String, String> producerConfig;
    final List<String> transactionalIds;
    final long checkpointId;
    final int timeoutMs;
    final String sinkTopic;
    final String deadLetterTopic;
    final int sinkMaxBytes;
    final String sinkLimit;
    final int deadLetterMaxBytes;
    final String deadLetterLimit;
    final java.util.Map<String, String> failpoints;

    private WriterSettings(JsonNode doc) {
      bootstrap = doc.get("bootstrap").asText();
      producerConfig = strings(doc.get("producer_config"));
      transactionalIds = new ArrayList<>();
      doc.get("transactional_ids").forEach(id -> transactionalIds.add(id.asText()));
      checkpointId = doc.get("checkpoint_id").asLong();
      timeoutMs = doc.get("timeout_ms").asInt();
      sinkTopic = doc.get("sink_topic").asText();
      deadLetterTopic = doc.get("dead_letter_topic").asText();
      // The record size limits (lockstep.sparkjob.writer_settings); the driver always sends them.
      sinkMaxBytes = doc.path("sink_max_bytes").asInt(1_000_000);
      sinkLimit = doc.path("sink_limit").asText("the producer's default");
      deadLetterMaxBytes = doc.path("dead_letter_max_bytes").asInt(1_000_000);
      deadLetterLimit = doc.path("dead_letter_limit").asText("the producer's default");
      failpoints = strings(doc.get("failpoints"));
    }

    static WriterSettings parse(JsonNode doc) {
      return new WriterSettings(doc);
    }

    private static java.util.Map<String, String> strings(JsonNode node) {
      java.util.Map<String, String> out = new java.util.HashMap<>();
      if (node != null) {
        node.fields().forEachRemaining(e -> out.put(e.getKey(), e.getValue().asText()));
      }
      return out;
    }

    byte[] checkpointHeader() {
      return RowLayout.ascii(checkpointId);
    }

    String transactionalId(int task) {
      if (task >= transactionalIds.size()) {
        throw new IllegalStateException(
            "task " + task + " has no transactional id: the driver planned "
                + transactionalIds.size() + " tasks");
      }
      return transactionalIds.get(task);
    }
  }
}
