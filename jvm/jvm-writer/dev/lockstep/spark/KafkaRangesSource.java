package dev.lockstep.spark;

import com.fasterxml.jackson.databind.JsonNode;
import java.io.Serializable;
import java.util.ArrayList;
import java.util.Collections;
import java.util.Comparator;
import java.util.EnumSet;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.PriorityQueue;
import java.util.Set;
import org.apache.spark.sql.connector.catalog.SupportsRead;
import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.connector.catalog.TableCapability;
import org.apache.spark.sql.connector.catalog.TableProvider;
import org.apache.spark.sql.connector.expressions.Transform;
import org.apache.spark.sql.connector.read.Batch;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReader;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.connector.read.Scan;
import org.apache.spark.sql.connector.read.ScanBuilder;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.sources.DataSourceRegister;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/**
 * The data source {@code lockstep-kafka-ranges}: exactly the planned {@code [start, end)} of each
 * source partition, committed records only, read by at most {@code tasks} Spark tasks.
 *
 * <p>Spark's own Kafka source makes one task, and one consumer, per source partition: at 1,024
 * partitions a checkpoint spent most of its time creating consumers and making one small fetch per
 * partition. Here each task owns whole source partitions (so each partition's records stay in one
 * task, in offset order, and end up in one transaction) and reads them all with one consumer, whose
 * fetches cover many partitions at once, as Flink's Kafka source reader does with its splits.
 *
 * <p>Read: {@code spark.conf.set(SETTINGS_CONF_PREFIX + id, json)}, then {@code
 * spark.read.format("lockstep-kafka-ranges").option("read_id", id).option("headers", "true|false").load()}.
 * The settings hold the consumer config, SASL credentials included, so like the writer's they travel
 * in the session's conf under a redacted key ({@link LockstepKafkaSource#settingsJson}), not as options.
 * The rows have the columns of Spark's Kafka source (key, value, topic, partition, offset, timestamp,
 * timestampType, and headers when asked), so a transform cannot tell the two apart.
 */
public final class KafkaRangesSource implements TableProvider, DataSourceRegister {
  public static final String SHORT_NAME = "lockstep-kafka-ranges";
  public static final String READ_ID_OPTION = "read_id";
  public static final String HEADERS_OPTION = "headers";

  static StructType schema(boolean headers) {
    StructType base = new StructType()
        .add("key", DataTypes.BinaryType, true)
        .add("value", DataTypes.BinaryType, true)
        .add("topic", DataTypes.StringType, true)
        .add("partition", DataTypes.IntegerType, true)
        .add("offset", DataTypes.LongType, true)
        .add("timestamp", DataTypes.TimestampType, true)
        .add("timestampType", DataTypes.IntegerType, true);
    if (!headers) {
      return base;
    }
    StructType header = new StructType().add("key", DataTypes.StringType, true).add("value", DataTypes.BinaryType, true);
    return base.add("headers", DataTypes.createArrayType(header, true), true);
  }

  @Override
  public String shortName() {
    return SHORT_NAME;
  }

  @Override
  public StructType inferSchema(CaseInsensitiveStringMap options) {
    return schema(options.getBoolean(HEADERS_OPTION, false));
  }

  @Override
  public Table getTable(StructType schema, Transform[] partitioning, Map<String, String> properties) {
    return new RangesTable(schema);
  }

  /** One source partition's planned range. */
  record Range(String topic, int partition, long start, long end) implements Serializable {
    long count() {
      return end - start;
    }

    @Override
    public String toString() {
      return topic + "-" + partition + " [" + start + ", " + end + ")";
    }
  }

  /** The ranges one task reads: whole source partitions, never a part of one. */
  record RangeGroup(List<Range> ranges) implements InputPartition {}

  /**
   * The ranges in at most {@code tasks} groups of about equal record counts (largest range first,
   * each to the group with the fewest records so far), empty ranges left out. Every range goes
   * whole into one group; groups are returned in the order of their first range, which keeps the
   * task numbering stable for a given plan.
   */
  static List<RangeGroup> group(List<Range> ranges, int tasks) {
    List<Range> nonEmpty = new ArrayList<>();
    for (Range r : ranges) {
      if (r.count() > 0) {
        nonEmpty.add(r);
      }
    }
    int n = Math.max(1, Math.min(tasks, nonEmpty.size()));
    List<List<Range>> groups = new ArrayList<>();
    long[] load = new long[n];
    PriorityQueue<Integer> lightest = new PriorityQueue<>(
        Comparator.<Integer>comparingLong(i -> load[i]).thenComparingInt(i -> i));
    for (int i = 0; i < n; i++) {
      groups.add(new ArrayList<>());
      lightest.add(i);
    }
    List<Range> bySize = new ArrayList<>(nonEmpty);
    bySize.sort(Comparator.comparingLong(Range::count).reversed()
        .thenComparing(Range::topic).thenComparingInt(Range::partition));
    for (Range r : bySize) {
      int i = lightest.poll();
      groups.get(i).add(r);
      load[i] += r.count();
      lightest.add(i);
    }
    List<RangeGroup> out = new ArrayList<>();
    for (List<Range> g : groups) {
      if (!g.isEmpty()) {
        g.sort(Comparator.comparing(Range::topic).thenComparingInt(Range::partition));
        out.add(new RangeGroup(List.copyOf(g)));
      }
    }
    out.sort(Comparator.comparing((RangeGroup g) -> g.ranges().get(0).topic())
        .thenComparingInt(g -> g.ranges().get(0).partition()));
    return out;
  }

  /**
   * The ranges in the groups the caller chose, task {@code t} reading group {@code t}'s source partitions
   * (empty ranges left out; a group may end up empty, and its task then reads nothing): a stateful
   * checkpoint's tasks (`lockstep.rules.output_tasks.task_of_partition`), so that its output stays in
   * the partitions it was read in.
   */
  static List<RangeGroup> assigned(List<Range> ranges, List<List<String>> groups) {
    Map<String, Range> byName = new HashMap<>();
    for (Range r : ranges) {
      if (r.count() > 0) {
        byName.put(r.topic() + ":" + r.partition(), r);
      }
    }
    List<RangeGroup> out = new ArrayList<>();
    for (List<String> names : groups) {
      List<Range> g = new ArrayList<>();
      for (String name : names) {
        Range r = byName.remove(name);
        if (r != null) {
          g.add(r);
        }
      }
      g.sort(Comparator.comparing(Range::topic).thenComparingInt(Range::partition));
      out.add(new RangeGroup(List.copyOf(g)));
    }
    if (!byName.isEmpty()) {
      throw new IllegalArgumentException("the read settings of " + SHORT_NAME + " give no task to the ranges of "
          + new java.util.TreeSet<>(byName.keySet()));
    }
    return out;
  }

  /**
   * What a read's settings document says (built by {@code lockstep.spark.kafka_reader.reader_settings}).
   * {@code groups}: each task's source partitions ("topic:partition"), or null: {@link #group} decides.
   */
  record ReadSettings(Map<String, String> consumerConfig, List<Range> ranges, int tasks, long stallTimeoutMs,
                      List<List<String>> groups) implements Serializable {
    static ReadSettings parse(String json) {
      try {
        JsonNode doc = TransactionalKafkaWriter.json().readTree(json);
        Map<String, String> config = new HashMap<>(TransactionalKafkaWriter.WriterSettings.strings(doc.get("consumer_config")));
        List<Range> ranges = new ArrayList<>();
        for (JsonNode r : doc.get("ranges")) {
          ranges.add(new Range(r.get(0).asText(), r.get(1).asInt(), r.get(2).asLong(), r.get(3).asLong()));
        }
        List<List<String>> groups = null;
        JsonNode g = doc.get("groups");
        if (g != null && !g.isNull()) {
          groups = new ArrayList<>();
          for (JsonNode names : g) {
            List<String> group = new ArrayList<>();
            for (JsonNode name : names) {
              group.add(name.asText());
            }
            groups.add(List.copyOf(group));
          }
          groups = List.copyOf(groups);
        }
        return new ReadSettings(config, List.copyOf(ranges), doc.get("tasks").asInt(), doc.get("stall_timeout_ms").asLong(),
            groups);
      } catch (java.io.IOException | RuntimeException e) {
        throw new IllegalArgumentException("the read settings of " + SHORT_NAME + " are not valid: " + e, e);
      }
    }

    List<RangeGroup> plan() {
      return groups == null ? group(ranges, tasks) : assigned(ranges, groups);
    }
  }

  static final class RangesTable implements SupportsRead {
    private final StructType schema;

    RangesTable(StructType schema) {
      this.schema = schema;
    }

    @Override
    public String name() {
      return SHORT_NAME;
    }

    @Override
    public StructType schema() {
      return schema;
    }

    @Override
    public Set<TableCapability> capabilities() {
      return Collections.unmodifiableSet(EnumSet.of(TableCapability.BATCH_READ));
    }

    @Override
    public ScanBuilder newScanBuilder(CaseInsensitiveStringMap options) {
      String readId = LockstepKafkaSource.required(options, READ_ID_OPTION);
      ReadSettings settings = ReadSettings.parse(LockstepKafkaSource.settingsJson(readId));
      return new RangesScan(settings, options.getBoolean(HEADERS_OPTION, false));
    }
  }

  static final class RangesScan implements ScanBuilder, Scan, Batch {
    private final ReadSettings settings;
    private final boolean headers;

    RangesScan(ReadSettings settings, boolean headers) {
      this.settings = settings;
      this.headers = headers;
    }

    @Override
    public Scan build() {
      return this;
    }

    @Override
    public StructType readSchema() {
      return schema(headers);
    }

    @Override
    public String description() {
      return SHORT_NAME + " (" + settings.ranges().size() + " ranges in at most " + settings.tasks() + " tasks)";
    }

    @Override
    public Batch toBatch() {
      return this;
    }

    @Override
    public InputPartition[] planInputPartitions() {
      return settings.plan().toArray(new InputPartition[0]);
    }

    @Override
    public PartitionReaderFactory createReaderFactory() {
      return new ReaderFactory(settings.consumerConfig(), headers, settings.stallTimeoutMs());
    }
  }

  record ReaderFactory(Map<String, String> consumerConfig, boolean headers, long stallTimeoutMs)
      implements PartitionReaderFactory {
    @Override
    public PartitionReader<InternalRow> createReader(InputPartition partition) {
      return new RangeGroupReader(consumerConfig, ((RangeGroup) partition).ranges(), headers, stallTimeoutMs);
    }
  }
}
