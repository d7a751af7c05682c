package dev.lockstep.spark;

import java.lang.reflect.Field;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicReference;
import org.apache.kafka.clients.producer.Callback;
import org.apache.kafka.clients.producer.Producer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.errors.ProducerFencedException;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.header.internals.RecordHeader;
import org.apache.kafka.common.serialization.ByteArraySerializer;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.unsafe.types.UTF8String;
import org.apache.spark.sql.catalyst.util.ArrayData;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * One Spark task's Kafka transaction: init (fencing earlier attempts of this task), produce the
 * partition's rows, flush, and leave the transaction open for the committer. {@link
 * LockstepBatchWrite.TaskWriter} drives it: {@link #begin} when Spark creates the task's writer, {@link #add}
 * per row, {@link #prepare} on the task's commit, {@link #abort} when the task fails.
 *
 * <p>Two facts the pre-commit rests on (both checked by the engine's integration tests):
 * <ul>
 *   <li>A graceful {@code close()} aborts an open transaction (the sender aborts incomplete
 *       transactions on shutdown); {@code close(Duration.ZERO)} is a forced close that sends
 *       nothing, so a prepared transaction stays {@code Ongoing} on the broker.
 *   <li>The producer id and epoch the committer needs are not exposed by the client API; they are
 *       read from the producer's transaction manager by reflection, after the flush.
 * </ul>
 */
final class PartitionTransaction {
  private static final byte[] EMPTY = new byte[0];
  static final int CRASH_EXIT_CODE = 86;
  /** The failpoint actions of {@code lockstep.model.failpoints.ACTIONS}, in its order. */
  static final String CRASH = "crash";
  static final String RAISE = "raise";
  static final String RAISE_FIRST_ATTEMPT = "raise-first-attempt";
  static final List<String> FAILPOINT_ACTIONS = List.of(CRASH, RAISE, RAISE_FIRST_ATTEMPT);
  private static final Logger LOG = LoggerFactory.getLogger(PartitionTransaction.class);

  private final TransactionalKafkaWriter.WriterSettings settings;
  private final ProducerFactory producers;
  private final TransactionalKafkaWriter.OutputContract contract;
  private final RowLayout layout;
  private final int task;
  private final int attempt;
  private final String transactionalId;
  private final AtomicLong delivered = new AtomicLong();
  private final AtomicLong deliveredDeadLetters = new AtomicLong();
  private final Set<String> partitions = ConcurrentHashMap.newKeySet();
  /** The source partitions ("topic:partition") of the rows produced: what a repair re-reads if the transaction is lost. */
  private final Set<String> sources = new HashSet<>();
  private final AtomicReference<String> firstFailure = new AtomicReference<>();
  private final AtomicLong failures = new AtomicLong();
  private final Callback toSink = callback(delivered);
  private final Callback toDeadLetters = callback(deliveredDeadLetters);
  private final Map<String, byte[]> topicBytes = new LinkedHashMap<>();
  private final byte[] checkpoint;
  private final byte[] pipeline;
  private final long baseHeaderBytes;
  private final long errorHeaderBytes;
  private Producer<byte[], byte[]> producer;
  private long lastPartition = Long.MIN_VALUE;
  private String lastTopic;
  /** The last row's source topic as Spark holds it (a copy): a row of the same topic is told by its bytes. */
  private UTF8String lastTopicUtf8;
  private byte[] topicHeader;
  private byte[] partitionBytes;
  private long produced;
  private boolean prepared;
  private long started;
  private long opened;
  private long openedAtMs;
  /** Nanoseconds inside the producer's send to the sink (a full buffer blocks there): the write's own share. */
  private long sendNanos;

  /**
   * {@code attempt}: the Spark task's attempt number, 0 for its first. {@code producers}: {@link
   * ProducerFactory.Kafka#INSTANCE}, or the unit tests' in-memory producers.
   */
  PartitionTransaction(TransactionalKafkaWriter.WriterSettings settings, RowLayout layout, int task, int attempt,
      ProducerFactory producers) {
    this.settings = settings;
    this.producers = producers;
    this.contract = settings.contract;
    this.layout = layout;
    this.task = task;
    this.attempt = attempt;
    this.transactionalId = settings.transactionalId(task);
    this.checkpoint = settings.checkpointHeader();
    this.pipeline = settings.pipelineHeader();
    this.baseHeaderBytes = utf8Length(contract.sourceTopic) + utf8Length(contract.sourcePartition)
        + utf8Length(contract.sourceOffset) + utf8Length(contract.checkpoint) + checkpoint.length
        + utf8Length(contract.pipeline) + pipeline.length;
    this.errorHeaderBytes = utf8Length(contract.error);
  }

  /**
   * Opens the producer: {@code initTransactions} fences any earlier attempt of this task (a retried
   * task reuses its transactional id), then begins the transaction. Fires {@code job.before_produce}.
   */
  void begin() throws WriterException {
    started = System.nanoTime();
    producer = open();
    openedAtMs = System.currentTimeMillis();
    opened = System.nanoTime();
    try {
      failpoint("job.before_produce", "");
    } catch (RuntimeException e) {
      // Spark calls neither abort nor close on a writer its factory failed to create: do both here.
      abort(e);
      close();
      throw e;
    }
  }

  /**
   * Flushes and leaves the transaction open for the committer (a forced close); returns the task's
   * result document: {@code {"task", "rows", "committable"}}, committable null when the task wrote
   * nothing (its transaction is then aborted: the broker never heard of it). Fires {@code
   * job.after_flush} after the flush.
   */
  String prepare() throws Exception {
    try {
      if (produced == 0) {
        producer.abortTransaction();
        closeProducer(Duration.ofSeconds(5));
        LOG.info("transaction {}: nothing produced; no committable", transactionalId);
        return result(produced, null);
      }
      long sent = System.nanoTime();
      producer.flush();
      long flushed = System.nanoTime();
      if (failures.get() > 0) {
        throw new WriterException(
            "transaction " + transactionalId + ": " + failures.get() + " records failed delivery, first "
                + firstFailure.get() + "; the transaction was aborted");
      }
      long[] identity = producerIdAndEpoch(producer);
      prepared = true;
      closeProducer(Duration.ZERO); // forced: leaves the transaction open (see the class comment)
      Map<String, Object> committable = committable(identity, openedAtMs);
      LOG.info(String.format(
          "transaction %s: prepared (producer id %d, epoch %d, %d records, %d dead letters, %d partitions) "
              + "in %.2f s: init %.2f s, produce %.2f s (%.2f s of it in send), flush %.2f s; left open for the "
              + "committer",
          transactionalId, identity[0], identity[1], delivered.get(), deliveredDeadLetters.get(),
          partitions.size(), seconds(started, System.nanoTime()), seconds(started, opened),
          seconds(opened, sent), sendNanos / 1e9, seconds(sent, flushed)));
      failpoint("job.after_flush", "");
      return result(produced, committable);
    } catch (ProducerFencedException e) {
      throw fenced(e);
    }
  }

  /**
   * The task failed or Spark denied its commit: abort a transaction that was not prepared yet. A
   * prepared one (its producer is gone) is fenced by a new producer of the same id, which aborts it.
   */
  void abort(Throwable cause) {
    if (!prepared) {
      if (producer != null) {
        LOG.warn("transaction {}: aborting ({})", transactionalId, String.valueOf(cause));
        try {
          producer.abortTransaction();
        } catch (RuntimeException e) {
          // The broker aborts it at transaction.timeout.ms anyway; the task fails either way.
          LOG.warn("transaction {}: abort failed ({}); the broker times it out", transactionalId, e.toString());
        }
      }
      return;
    }
    fence(settings, producers, transactionalId, "task " + task + " failed after its flush"
        + (cause == null ? "" : " (" + cause + ")"));
  }

  boolean isPrepared() {
    return prepared;
  }

  /** Releases the producer if the transaction was not prepared (Spark calls it after commit or abort). */
  void close() {
    closeProducer(Duration.ofSeconds(5));
  }

  /**
   * Aborts whatever transaction {@code transactionalId} has open, by initialising a producer with
   * that id (InitProducerId bumps the epoch and aborts the ongoing transaction), then closing it.
   */
  static void fence(TransactionalKafkaWriter.WriterSettings settings, ProducerFactory producers, String transactionalId,
      String why) {
    LOG.warn("transaction {}: fencing it: {}", transactionalId, why);
    Properties props = producerProperties(settings, transactionalId);
    try (Producer<byte[], byte[]> fencer = producers.create(props)) {
      fencer.initTransactions();
    } catch (RuntimeException e) {
      // The next plan's recovery fences every open id under the prefix anyway.
      LOG.warn("transaction {}: could not fence it ({}); recovery will", transactionalId, e.toString());
    }
  }

  private void closeProducer(Duration timeout) {
    if (producer != null) {
      Producer<byte[], byte[]> p = producer;
      producer = null;
      p.close(timeout);
    }
  }

  private WriterException fenced(ProducerFencedException e) {
    return new WriterException(
        "transaction " + transactionalId + ": fenced (" + e.getMessage() + "); a newer attempt "
            + "re-initialised this transactional id and owns the output now", e);
  }

  private static Properties producerProperties(TransactionalKafkaWriter.WriterSettings settings, String transactionalId) {
    Properties props = new Properties();
    // Throughput defaults + connection + the spec's `producer:` (lockstep.spark.jvm_writer.write_with_jvm).
    props.putAll(settings.producerConfig);
    // The two-phase commit depends on these; the spec validator refuses them in `producer`.
    props.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, settings.bootstrap);
    props.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, transactionalId);
    props.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, "true");
    props.put(ProducerConfig.TRANSACTION_TIMEOUT_CONFIG, Integer.toString(settings.timeoutMs));
    props.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
    props.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
    return props;
  }

  private Producer<byte[], byte[]> open() throws WriterException {
    Producer<byte[], byte[]> producer = producers.create(producerProperties(settings, transactionalId));
    try {
      producer.initTransactions(); // fences any earlier attempt of this task, even an empty one
      producer.beginTransaction();
    } catch (RuntimeException e) {
      producer.close(Duration.ofSeconds(5));
      throw new WriterException(
          "transaction " + transactionalId + ": could not initialise the transactional id: " + e
              + ". Is the broker up, and is the id allowed by its ACLs?", e);
    }
    return producer;
  }

  /** Produces one row: to the sink, or to the dead-letter topic (an error, or too large). */
  void add(InternalRow row) {
    if (produced == contract.midProduceAfterRecords) {
      // After exactly that many records, before the next (lockstep.model.output_contract.MID_PRODUCE_AFTER_RECORDS).
      failpoint("job.mid_produce", " (task " + task + ", after " + produced + " records)");
    }
    try {
      send(row);
    } catch (ProducerFencedException e) {
      throw fenced(e);
    }
    produced++;
  }

  private void send(InternalRow row) {
    UTF8String topicUtf8 = row.getUTF8String(layout.topic);
    String topic = lastTopic;
    if (!topicUtf8.equals(lastTopicUtf8)) { // a String and its bytes only when the topic changes
      lastTopicUtf8 = topicUtf8.clone();
      topic = topicUtf8.toString();
      topicHeader = topicBytes.computeIfAbsent(topic, t -> t.getBytes(StandardCharsets.UTF_8));
    }
    long partition = layout.partition(row);
    if (partition != lastPartition) {
      lastPartition = partition;
      partitionBytes = RowLayout.ascii(partition);
      sources.add(topic + ":" + partition);
    } else if (!topic.equals(lastTopic)) {
      sources.add(topic + ":" + partition);
    }
    lastTopic = topic;
    List<Header> headers = new ArrayList<>(contract.leadingHeaders + 2);
    byte[] offsetBytes = RowLayout.ascii(layout.offset(row));
    headers.add(new RecordHeader(contract.sourceTopic, topicHeader));
    headers.add(new RecordHeader(contract.sourcePartition, partitionBytes));
    headers.add(new RecordHeader(contract.sourceOffset, offsetBytes));
    headers.add(new RecordHeader(contract.checkpoint, checkpoint));
    headers.add(new RecordHeader(contract.pipeline, pipeline));
    long headerBytes = baseHeaderBytes + topicHeader.length + partitionBytes.length + offsetBytes.length;
    ArrayData userHeaders = layout.headers(row);
    if (userHeaders != null) {
      for (int i = 0; i < userHeaders.numElements(); i++) {
        InternalRow h = userHeaders.getStruct(i, 2);
        byte[] name = h.getUTF8String(0).getBytes();
        byte[] headerValue = h.isNullAt(1) ? null : h.getBinary(1);
        headers.add(new RecordHeader(new String(name, StandardCharsets.UTF_8), headerValue));
        headerBytes += name.length + (headerValue == null ? 0 : headerValue.length);
      }
    }
    byte[] key = layout.key(row);
    byte[] value = layout.value(row);
    long keyAndValue = (key == null ? 0 : key.length) + (value == null ? 0 : value.length);
    String error = layout.error(row);
    String reason = null;
    long size;
    if (error == null) {
      size = contract.recordSize(keyAndValue, headerBytes, headers.size());
      String target = layout.route(row);
      int most = settings.sinkMaxBytes;
      String why = settings.sinkLimit;
      if (target == null) {
        target = settings.sinkTopic;
      } else {
        Integer routed = settings.routeMaxBytes.get(target);
        if (routed == null) {
          throw new IllegalStateException("a record is routed to " + target + ", which is not one of the "
              + "writer's routes " + settings.routeMaxBytes.keySet());
        }
        most = routed;
        why = settings.routeLimits.get(target);
      }
      if (size <= most) {
        long before = System.nanoTime();
        producer.send(new ProducerRecord<>(target, null, key, value, headers), toSink);
        sendNanos += System.nanoTime() - before;
      } else {
        reason = contract.tooLarge(size, most, "sink", why);
      }
    } else {
      byte[] errorBytes = error.getBytes(StandardCharsets.UTF_8);
      size = contract.recordSize(keyAndValue, headerBytes + errorHeaderBytes + errorBytes.length, headers.size() + 1);
      if (size <= settings.deadLetterMaxBytes) {
        headers.add(new RecordHeader(contract.error, errorBytes));
        producer.send(new ProducerRecord<>(settings.deadLetterTopic, null, key, value, headers), toDeadLetters);
      } else {
        reason = error + "; " + contract.tooLarge(size, settings.deadLetterMaxBytes, "dead-letter topic",
            settings.deadLetterLimit);
      }
    }
    if (reason != null) {
      // Too large for its topic: a dead letter of Lockstep's headers only, with the reason and the size.
      List<Header> kept = new ArrayList<>(headers.subList(0, contract.leadingHeaders));
      kept.add(new RecordHeader(contract.error, reason.getBytes(StandardCharsets.UTF_8)));
      kept.add(new RecordHeader(contract.originalSize, RowLayout.ascii(size)));
      producer.send(new ProducerRecord<>(settings.deadLetterTopic, null, (byte[]) null, EMPTY, kept), toDeadLetters);
    }
  }

  private static long utf8Length(String s) {
    return s.getBytes(StandardCharsets.UTF_8).length;
  }

  private Callback callback(AtomicLong counter) {
    // The producer's I/O thread calls a callback for each record of a batch in turn, a batch's records all of
    // one partition: the partition is noted when it changes, not once per record.
    String[] last = {null};
    int[] lastPartition = {-1};
    return (metadata, exception) -> {
      if (exception == null) {
        counter.incrementAndGet();
        if (metadata.partition() != lastPartition[0] || !metadata.topic().equals(last[0])) {
          last[0] = metadata.topic();
          lastPartition[0] = metadata.partition();
          partitions.add(metadata.topic() + ":" + metadata.partition());
        }
      } else {
        failures.incrementAndGet();
        firstFailure.compareAndSet(null, "to " + (metadata == null ? "?" : metadata.topic() + "[" + metadata.partition() + "]")
            + ": " + exception.getClass().getSimpleName() + ": " + exception.getMessage());
      }
    };
  }

  /** {producer id, epoch} of the open transaction, from the producer's transaction manager. */
  private long[] producerIdAndEpoch(Producer<byte[], byte[]> producer) throws WriterException {
    try {
      Object manager = field(producer, "transactionManager");
      Object idAndEpoch = field(manager, "producerIdAndEpoch");
      long id = idAndEpoch.getClass().getField("producerId").getLong(idAndEpoch);
      short epoch = idAndEpoch.getClass().getField("epoch").getShort(idAndEpoch);
      if (id < 0) {
        throw new WriterException("transaction " + transactionalId + ": the producer has no producer id after the flush");
      }
      return new long[] {id, epoch};
    } catch (ReflectiveOperationException e) {
      throw new WriterException(
          "transaction " + transactionalId + ": cannot read the producer id and epoch from this kafka-clients "
              + "version (" + e + "); Lockstep's JVM writer was built against kafka-clients 3.9", e);
    }
  }

  private static Object field(Object target, String name) throws ReflectiveOperationException {
    Field f = target.getClass().getDeclaredField(name);
    f.setAccessible(true);
    return f.get(target);
  }

  private Map<String, Object> committable(long[] identity, long openedAtMs) {
    List<String> sorted = new ArrayList<>(partitions);
    sorted.sort(null);
    // The fields of lockstep.model.output_contract.COMMITTABLE_FIELDS, in its order, after its schema id.
    Map<String, Object> c = new LinkedHashMap<>();
    c.put("schema", contract.committableSchema);
    c.put("transactional_id", transactionalId);
    c.put("producer_id", identity[0]);
    c.put("epoch", identity[1]);
    c.put("partitions", sorted);
    c.put("records", delivered.get());
    c.put("dead_letters", deliveredDeadLetters.get());
    c.put("task_index", task);
    c.put("opened_at_ms", openedAtMs);
    List<String> carried = new ArrayList<>(sources);
    carried.sort(null);
    c.put("sources", carried);
    return c;
  }

  private String result(long rows, Map<String, Object> committable) throws Exception {
    Map<String, Object> r = new LinkedHashMap<>();
    r.put("task", task);
    r.put("rows", rows);
    r.put("committable", committable);
    return TransactionalKafkaWriter.json().writeValueAsString(r);
  }

  private static double seconds(long from, long to) {
    return (to - from) / 1e9;
  }

  /**
   * The job.* failpoints of {@code lockstep.model.failpoints}, armed by the driver's LOCKSTEP_FAILPOINTS
   * (their actions checked when the settings were parsed); {@code where} is appended to the message, as
   * {@code lockstep.model.failpoints.hit} does.
   */
  private void failpoint(String name, String where) {
    String action = settings.failpoints.get(name);
    if (action == null || (RAISE_FIRST_ATTEMPT.equals(action) && attempt != 0)) {
      return;
    }
    if (CRASH.equals(action)) {
      System.err.println("lockstep failpoint " + name + where + ": crashing the process");
      System.err.flush();
      Runtime.getRuntime().halt(CRASH_EXIT_CODE);
    }
    // raise, or raise-first-attempt in the first attempt: the words of lockstep.model.failpoints.raised_message
    throw new WriterException("failpoint " + name + " raised" + where
        + (RAISE_FIRST_ATTEMPT.equals(action) ? " in the task's first attempt" : ""));
  }

  /** A task failure with a message meant for the task log. */
  static final class WriterException extends RuntimeException {
    private static final long serialVersionUID = 1L;

    WriterException(String message) {
      super(message);
    }

    WriterException(String message, Throwable cause) {
      super(message, cause);
    }
  }
}
