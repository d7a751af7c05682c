package dev.lockstep.spark;

import static org.junit.jupiter.api.Assertions.assertEquals;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.function.Consumer;
import org.apache.kafka.clients.producer.MockProducer;
import org.apache.kafka.clients.producer.Partitioner;
import org.apache.kafka.clients.producer.Producer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.common.Cluster;
import org.apache.kafka.common.Node;
import org.apache.kafka.common.PartitionInfo;
import org.apache.kafka.common.serialization.ByteArraySerializer;
import org.apache.kafka.common.utils.ProducerIdAndEpoch;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.GenericInternalRow;
import org.apache.spark.sql.catalyst.util.GenericArrayData;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.unsafe.types.UTF8String;

/**
 * What the writer's tests share: the settings the Python driver really sends (from {@code
 * python_side.py}, run with the project's Python: {@code -Dlockstep.python}, {@code
 * -Dlockstep.python_side}), a transform output schema and its rows, and in-memory producers
 * (kafka-clients' own {@link MockProducer}) handed out by a {@link ProducerFactory} that keeps them.
 */
final class Fixtures {
  static final String SINK = "out";
  static final String DEAD_LETTERS = "out.dlq";
  /** The fake producer's id and epoch: above 2^53, so a JSON reader that goes through doubles would lose it. */
  static final long PRODUCER_ID = 9_007_199_254_740_993L;
  static final short EPOCH = 4;

  private static JsonNode python;

  private Fixtures() {}

  /** {@code python_side.py settings}, once per run. */
  static synchronized JsonNode python() {
    if (python == null) {
      python = json(runPython("settings", "").trim());
    }
    return python;
  }

  /** The contract's committable fields after {@code schema}, in order (output_contract.COMMITTABLE_FIELDS). */
  static List<String> committableFields() {
    List<String> fields = new ArrayList<>();
    python().get("committable_fields").forEach(f -> fields.add(f.asText()));
    return fields;
  }

  static String committableSchema() {
    return python().get("committable_schema").asText();
  }

  /** The driver's settings document, as a copy to change; {@code settings(doc)} parses it. */
  static ObjectNode settingsDoc() {
    return python().get("settings").deepCopy();
  }

  static TransactionalKafkaWriter.WriterSettings settings(ObjectNode doc) {
    return TransactionalKafkaWriter.WriterSettings.parse(doc);
  }

  static TransactionalKafkaWriter.WriterSettings settings() {
    return settings(settingsDoc());
  }

  /** The driver's settings with writer failpoints armed ({@code {"job.after_flush": "raise"}}). */
  static TransactionalKafkaWriter.WriterSettings withFailpoint(String name, String action) {
    ObjectNode doc = settingsDoc();
    ((ObjectNode) doc.get("failpoints")).put(name, action);
    return settings(doc);
  }

  /** What {@code output_contract.parse_task_result} (and PreparedTransaction.from_json) make of each document. */
  static List<JsonNode> parsedByPython(String... documents) {
    String out = runPython("parse", String.join("\n", documents) + "\n");
    List<JsonNode> parsed = new ArrayList<>();
    for (String line : out.split("\n")) {
      if (!line.isBlank()) {
        parsed.add(json(line));
      }
    }
    assertEquals(documents.length, parsed.size(), "one parsed result per document");
    return parsed;
  }

  private static String runPython(String mode, String stdin) {
    String interpreter = property("lockstep.python");
    String script = property("lockstep.python_side");
    try {
      Process p = new ProcessBuilder(interpreter, script, mode).redirectErrorStream(true).start();
      p.getOutputStream().write(stdin.getBytes(StandardCharsets.UTF_8));
      p.getOutputStream().close();
      String out = new String(p.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
      int code = p.waitFor();
      if (code != 0) {
        throw new AssertionError(script + " " + mode + " exited " + code + ":\n" + out);
      }
      return out;
    } catch (IOException e) {
      throw new AssertionError("could not run " + interpreter + " " + script + ": " + e, e);
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      throw new AssertionError(e);
    }
  }

  private static String property(String name) {
    String value = System.getProperty(name);
    if (value == null || value.isEmpty()) {
      throw new AssertionError("-D" + name + " is not set (jvm/build-jvm-writer.sh sets it)");
    }
    return value;
  }

  static JsonNode json(String text) {
    try {
      return TransactionalKafkaWriter.json().readTree(text);
    } catch (IOException e) {
      throw new AssertionError("not JSON: " + text, e);
    }
  }

  // ---- the transform's output ------------------------------------------------------------------

  static final StructType SCHEMA = new StructType()
      .add("key", DataTypes.StringType)
      .add("value", DataTypes.BinaryType)
      .add("topic", DataTypes.StringType)
      .add("partition", DataTypes.IntegerType)
      .add("offset", DataTypes.LongType)
      .add("headers", DataTypes.createArrayType(new StructType()
          .add("key", DataTypes.StringType).add("value", DataTypes.BinaryType)))
      .add("error", DataTypes.StringType);

  static RowLayout layout(TransactionalKafkaWriter.WriterSettings settings) {
    return RowLayout.of(SCHEMA, settings.contract);
  }

  /**
   * One output row read from input {@code in}:{@code offset}. The key names the sink partition the
   * fake producers put it in ({@link #PARTITION_BY_KEY}); a non-null {@code error} makes it a dead letter.
   */
  static InternalRow row(String key, String value, long offset, String error) {
    return row(key, value, 0, offset, error);
  }

  /** The same, read from input partition {@code in}:{@code sourcePartition}. */
  static InternalRow row(String key, String value, int sourcePartition, long offset, String error) {
    GenericInternalRow header = new GenericInternalRow(new Object[] {
        UTF8String.fromString("trace"), "t-1".getBytes(StandardCharsets.UTF_8)});
    return new GenericInternalRow(new Object[] {
        key == null ? null : UTF8String.fromString(key),
        value.getBytes(StandardCharsets.UTF_8),
        UTF8String.fromString("in"),
        sourcePartition,
        offset,
        new GenericArrayData(new Object[] {header}),
        error == null ? null : UTF8String.fromString(error)});
  }

  static InternalRow row(String key, long offset) {
    return row(key, "v" + offset, offset, null);
  }

  // ---- producers -------------------------------------------------------------------------------

  private static final Node BROKER = new Node(0, "127.0.0.1", 9);
  /** Three sink partitions, one dead-letter partition: enough for a committable with several. */
  static final Cluster CLUSTER = new Cluster("lockstep-test", List.of(BROKER), List.of(
      partition(SINK, 0), partition(SINK, 1), partition(SINK, 2), partition(DEAD_LETTERS, 0)),
      Set.of(), Set.of());

  private static PartitionInfo partition(String topic, int p) {
    return new PartitionInfo(topic, p, BROKER, new Node[] {BROKER}, new Node[] {BROKER});
  }

  /** A record whose key is a number n goes to partition n (modulo the topic's count), any other to partition 0. */
  static final class PartitionByKey implements Partitioner {
    @Override
    public int partition(String topic, Object key, byte[] keyBytes, Object value, byte[] valueBytes, Cluster cluster) {
      if (keyBytes == null) {
        return 0;
      }
      try {
        return Integer.parseInt(new String(keyBytes, StandardCharsets.UTF_8)) % cluster.partitionCountForTopic(topic);
      } catch (NumberFormatException e) {
        return 0;
      }
    }

    @Override
    public void close() {}

    @Override
    public void configure(Map<String, ?> configs) {}
  }

  /**
   * kafka-clients' in-memory producer, plus what the writer reads from a {@link
   * org.apache.kafka.clients.producer.KafkaProducer} by reflection after its flush: a {@code
   * transactionManager} field whose {@code producerIdAndEpoch} is the client's own {@link
   * ProducerIdAndEpoch} (TaskResultDocumentTest checks that the real producer has both fields).
   * Records each close's timeout: a forced close (zero) leaves the transaction open.
   */
  static final class FakeProducer extends MockProducer<byte[], byte[]> {
    final Properties props;
    final List<Duration> closeTimeouts = Collections.synchronizedList(new ArrayList<>());
    @SuppressWarnings("unused") // read by PartitionTransaction's reflection
    private final FakeTransactionManager transactionManager;

    FakeProducer(Properties props, boolean autoComplete, ProducerIdAndEpoch identity) {
      super(CLUSTER, autoComplete, new PartitionByKey(), new ByteArraySerializer(), new ByteArraySerializer());
      this.props = props;
      this.transactionManager = new FakeTransactionManager(identity);
    }

    String transactionalId() {
      return props.getProperty(ProducerConfig.TRANSACTIONAL_ID_CONFIG);
    }

    @Override
    public void close(Duration timeout) {
      closeTimeouts.add(timeout);
      super.close(timeout);
    }
  }

  /** Named and shaped as the field the writer reads from the real client's TransactionManager. */
  static final class FakeTransactionManager {
    @SuppressWarnings("unused")
    private final ProducerIdAndEpoch producerIdAndEpoch;

    FakeTransactionManager(ProducerIdAndEpoch producerIdAndEpoch) {
      this.producerIdAndEpoch = producerIdAndEpoch;
    }
  }

  /**
   * Hands out {@link FakeProducer}s and keeps them in order of creation: the task's own producer
   * first, then any fencer. {@code prepare} runs on each before the writer gets it (arm an exception).
   */
  static final class Producers implements ProducerFactory {
    private static final long serialVersionUID = 1L;
    final List<FakeProducer> created = Collections.synchronizedList(new ArrayList<>());
    private final transient Consumer<FakeProducer> prepare;
    boolean autoComplete = true;
    ProducerIdAndEpoch identity = new ProducerIdAndEpoch(PRODUCER_ID, EPOCH);

    Producers() {
      this(p -> {});
    }

    Producers(Consumer<FakeProducer> prepare) {
      this.prepare = prepare;
    }

    @Override
    public Producer<byte[], byte[]> create(Properties props) {
      FakeProducer producer = new FakeProducer(props, autoComplete, identity);
      prepare.accept(producer);
      created.add(producer);
      return producer;
    }

    FakeProducer only() {
      assertEquals(1, created.size(), "producers created");
      return created.get(0);
    }

    FakeProducer get(int i) {
      return created.get(i);
    }
  }
}
