package dev.lockstep.spark;

import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.HashMap;
import java.util.Iterator;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetOutOfRangeException;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.GenericInternalRow;
import org.apache.spark.sql.catalyst.util.GenericArrayData;
import org.apache.spark.sql.connector.read.PartitionReader;
import org.apache.spark.unsafe.types.UTF8String;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * One Spark task's read of its source partitions' ranges, with one consumer assigned to all of them.
 *
 * <p>Records come out in offset order within each source partition (a consumer returns a partition's
 * records in order); partitions interleave. A partition is done once the consumer's position reaches
 * its end offset: under read_committed the position moves past aborted records and transaction markers
 * too, which is how a range ending in them finishes. Records at or past a range's end are dropped (a
 * fetch may return them) and a finished partition is paused, so the consumer stops fetching it.
 */
final class RangeGroupReader implements PartitionReader<InternalRow> {
  private static final Logger LOG = LoggerFactory.getLogger(RangeGroupReader.class);
  private static final Duration POLL = Duration.ofMillis(200);

  private final KafkaConsumer<byte[], byte[]> consumer;
  private final Map<TopicPartition, Long> ends = new HashMap<>();
  private final Set<TopicPartition> open = new LinkedHashSet<>();
  private final boolean headers;
  private final long stallTimeoutMs;
  private final List<KafkaRangesSource.Range> ranges;
  /** The last poll's records, taken a source partition at a time: its end and topic looked up once. */
  private ConsumerRecords<byte[], byte[]> polled = ConsumerRecords.empty();
  private Iterator<TopicPartition> polledPartitions = Collections.emptyIterator();
  private Iterator<ConsumerRecord<byte[], byte[]>> batch = Collections.emptyIterator();
  private long batchEnd;
  private UTF8String batchTopic;
  private final Map<String, UTF8String> topicNames = new HashMap<>();
  private InternalRow current;
  private long lastProgressMs = System.currentTimeMillis();
  private long rows;
  /** Nanoseconds spent in the consumer's polls and in checking which partitions are done: the read's own time. */
  private long pollNanos;
  private long finishNanos;
  private int polls;

  RangeGroupReader(Map<String, String> consumerConfig, List<KafkaRangesSource.Range> ranges, boolean headers,
                   long stallTimeoutMs) {
    this.headers = headers;
    this.stallTimeoutMs = stallTimeoutMs;
    this.ranges = ranges;
    Map<String, Object> config = new HashMap<>(consumerConfig);
    // What the read depends on: only committed records, no group, no offsets of its own, no reset.
    config.put("isolation.level", "read_committed");
    config.put("enable.auto.commit", "false");
    config.put("auto.offset.reset", "none");
    config.remove("group.id");
    this.consumer = new KafkaConsumer<>(config, new ByteArrayDeserializer(), new ByteArrayDeserializer());
    List<TopicPartition> assigned = new ArrayList<>();
    for (KafkaRangesSource.Range r : ranges) {
      TopicPartition tp = new TopicPartition(r.topic(), r.partition());
      assigned.add(tp);
      ends.put(tp, r.end());
      open.add(tp);
    }
    consumer.assign(assigned);
    for (KafkaRangesSource.Range r : ranges) {
      consumer.seek(new TopicPartition(r.topic(), r.partition()), r.start());
    }
  }

  @Override
  public boolean next() {
    while (true) {
      while (batch.hasNext()) {
        ConsumerRecord<byte[], byte[]> r = batch.next();
        if (r.offset() < batchEnd) {
          current = row(r, batchTopic);
          rows++;
          return true;
        }
        batch = Collections.emptyIterator(); // in offset order: the rest of the partition's records are past its end
      }
      if (polledPartitions.hasNext()) {
        TopicPartition tp = polledPartitions.next();
        Long end = ends.get(tp);
        batch = end == null ? Collections.emptyIterator() : polled.records(tp).iterator();
        batchEnd = end == null ? Long.MIN_VALUE : end;
        batchTopic = topicNames.computeIfAbsent(tp.topic(), UTF8String::fromString);
        continue;
      }
      finishReached();
      if (open.isEmpty()) {
        return false;
      }
      poll();
    }
  }

  /** Partitions whose position reached their end are done: paused, never fetched again. */
  private void finishReached() {
    long started = System.nanoTime();
    List<TopicPartition> done = new ArrayList<>();
    for (TopicPartition tp : open) {
      if (consumer.position(tp) >= ends.get(tp)) {
        done.add(tp);
      }
    }
    if (!done.isEmpty()) {
      done.forEach(open::remove);
      consumer.pause(done);
      lastProgressMs = System.currentTimeMillis();
    }
    finishNanos += System.nanoTime() - started;
  }

  private void poll() {
    long started = System.nanoTime();
    try {
      polls++;
      polled = consumer.poll(POLL);
      if (!polled.isEmpty()) {
        lastProgressMs = System.currentTimeMillis();
      }
      polledPartitions = polled.partitions().iterator();
    } catch (OffsetOutOfRangeException e) {
      List<String> gone = new ArrayList<>();
      e.offsetOutOfRangePartitions().forEach((tp, offset) ->
          gone.add(tp + " at offset " + offset + " (planned up to " + ends.get(tp) + ")"));
      pollNanos += System.nanoTime() - started;
      throw new IllegalStateException(
          "the planned ranges of " + String.join(", ", gone) + " are no longer on the broker (retention deleted "
              + "them, or the topic was recreated) [lockstep-kafka-ranges]", e);
    }
    pollNanos += System.nanoTime() - started;
    long stalled = System.currentTimeMillis() - lastProgressMs;
    if (stalled > stallTimeoutMs) {
      List<String> waiting = new ArrayList<>();
      for (TopicPartition tp : open) {
        waiting.add(tp + " at " + consumer.position(tp) + " of " + ends.get(tp));
      }
      throw new IllegalStateException("no records for " + stalled / 1000 + " s from " + String.join(", ", waiting)
          + ": the broker does not serve the planned ranges (is a partition's leader down, or an earlier "
          + "transaction still open below the end offset?) [lockstep-kafka-ranges]");
    }
  }

  private InternalRow row(ConsumerRecord<byte[], byte[]> r, UTF8String topic) {
    Object[] values = new Object[headers ? 8 : 7];
    values[0] = r.key();
    values[1] = r.value();
    values[2] = topic;
    values[3] = r.partition();
    values[4] = r.offset();
    values[5] = r.timestamp() * 1000L; // Spark timestamps are microseconds
    values[6] = r.timestampType().id;
    if (headers) {
      List<Object> hs = new ArrayList<>();
      for (Header h : r.headers()) {
        hs.add(new GenericInternalRow(new Object[] {UTF8String.fromString(h.key()), h.value()}));
      }
      values[7] = new GenericArrayData(hs.toArray());
    }
    return new GenericInternalRow(values);
  }

  @Override
  public InternalRow get() {
    return current;
  }

  @Override
  public void close() {
    LOG.info("read {} records from {} source partitions with one consumer: {} polls in {} s, partition ends checked "
        + "in {} s", rows, ranges.size(), polls, String.format("%.2f", pollNanos / 1e9),
        String.format("%.2f", finishNanos / 1e9));
    consumer.close(Duration.ofSeconds(1));
  }
}
