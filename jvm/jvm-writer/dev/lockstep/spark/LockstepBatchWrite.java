package dev.lockstep.spark;

import java.util.ArrayList;
import java.util.List;
import org.apache.spark.TaskContext;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.connector.write.BatchWrite;
import org.apache.spark.sql.connector.write.DataWriter;
import org.apache.spark.sql.connector.write.DataWriterFactory;
import org.apache.spark.sql.connector.write.PhysicalWriteInfo;
import org.apache.spark.sql.connector.write.Write;
import org.apache.spark.sql.connector.write.WriterCommitMessage;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * One checkpoint's write: every Spark task produces its partition inside one Kafka transaction,
 * flushes it and leaves it open (pre-commit) and hands its result document (the committable) to the
 * driver in its commit message; {@link #commit} keeps them for the caller ({@link TaskResults}).
 * Committing the transactions happens later, in another process.
 *
 * <p>Spark's rules this rests on: speculation is off (lockstep.sparkconf), the commit coordinator
 * lets one attempt per partition commit, and a retried task reuses its partition's transactional id,
 * so its init fences the earlier attempt. The output contract (header names, accepted columns, the
 * record size estimate, the committable's schema id, where {@code job.mid_produce} fires) is not
 * written here: it arrives in the settings (from {@code lockstep.model.output_contract.jvm_contract}).
 */
final class LockstepBatchWrite implements Write, BatchWrite {
  private static final Logger LOG = LoggerFactory.getLogger(LockstepBatchWrite.class);
  private final TransactionalKafkaWriter.WriterSettings settings;
  private final RowLayout layout;
  private final String writeId;
  private final ProducerFactory producers;

  LockstepBatchWrite(StructType schema, CaseInsensitiveStringMap options) {
    writeId = LockstepKafkaSource.required(options, LockstepKafkaSource.WRITE_ID_OPTION);
    String json = LockstepKafkaSource.settingsJson(writeId);
    try {
      settings = TransactionalKafkaWriter.WriterSettings.parse(TransactionalKafkaWriter.json().readTree(json));
    } catch (java.io.IOException e) {
      throw new IllegalArgumentException("the writer settings are not JSON: " + e.getMessage(), e);
    }
    layout = RowLayout.of(schema, settings.contract);
    producers = ProducerFactory.Kafka.INSTANCE;
  }

  /** For the unit tests: settings given, no Spark session, in-memory producers. */
  LockstepBatchWrite(String writeId, TransactionalKafkaWriter.WriterSettings settings, RowLayout layout,
      ProducerFactory producers) {
    this.writeId = writeId;
    this.settings = settings;
    this.layout = layout;
    this.producers = producers;
  }

  @Override
  public String description() {
    return LockstepKafkaSource.SHORT_NAME + " write " + writeId; // never the settings: they hold credentials
  }

  @Override
  public BatchWrite toBatch() {
    return this;
  }

  @Override
  public DataWriterFactory createBatchWriterFactory(PhysicalWriteInfo info) {
    return new Factory(settings, layout, producers);
  }

  @Override
  public boolean useCommitCoordinator() {
    return true; // one committed attempt per partition
  }

  @Override
  public void commit(WriterCommitMessage[] messages) {
    List<String> results = new ArrayList<>(messages.length);
    for (WriterCommitMessage m : messages) {
      results.add(((TaskResult) m).json);
    }
    TaskResults.put(writeId, results);
    LOG.info("write {}: {} tasks prepared their transactions; results kept for the caller", writeId, results.size());
  }

  @Override
  public void abort(WriterCommitMessage[] messages) {
    // The tasks that did commit left their transactions open: fence them, the run fails. (The next
    // plan's recovery fences every open id under the prefix again anyway.)
    int fenced = 0;
    for (int task = 0; task < messages.length; task++) {
      if (messages[task] instanceof TaskResult r && r.prepared) {
        PartitionTransaction.fence(settings, producers, settings.transactionalId(task), "write " + writeId + " aborted");
        fenced++;
      }
    }
    LOG.warn("write {}: aborted; fenced the {} transactions its committed tasks left open", writeId, fenced);
  }

  /** A task's result document (output_contract.task_result), sent to the driver on its commit. */
  static final class TaskResult implements WriterCommitMessage {
    private static final long serialVersionUID = 1L;
    final String json;
    final boolean prepared;

    TaskResult(String json, boolean prepared) {
      this.json = json;
      this.prepared = prepared;
    }
  }

  static final class Factory implements DataWriterFactory {
    private static final long serialVersionUID = 1L;
    private final TransactionalKafkaWriter.WriterSettings settings;
    private final RowLayout layout;
    private final ProducerFactory producers;

    Factory(TransactionalKafkaWriter.WriterSettings settings, RowLayout layout, ProducerFactory producers) {
      this.settings = settings;
      this.layout = layout;
      this.producers = producers;
    }

    @Override
    public DataWriter<InternalRow> createWriter(int partitionId, long taskId) {
      TaskContext context = TaskContext.get(); // null outside a Spark task (the unit tests): a first attempt
      return writerForAttempt(partitionId, context == null ? 0 : context.attemptNumber());
    }

    /** The writer of attempt {@code attempt} (0 for the first) of the task of partition {@code partitionId}. */
    DataWriter<InternalRow> writerForAttempt(int partitionId, int attempt) {
      PartitionTransaction txn = new PartitionTransaction(settings, layout, partitionId, attempt, producers);
      txn.begin();
      return new TaskWriter(txn);
    }
  }

  /** One task's writer: rows go straight into its transaction; commit pre-commits it. */
  static final class TaskWriter implements DataWriter<InternalRow> {
    private final PartitionTransaction txn;

    TaskWriter(PartitionTransaction txn) {
      this.txn = txn;
    }

    @Override
    public void write(InternalRow row) {
      txn.add(row);
    }

    @Override
    public WriterCommitMessage commit() throws java.io.IOException {
      try {
        String result = txn.prepare();
        return new TaskResult(result, txn.isPrepared());
      } catch (RuntimeException | java.io.IOException e) {
        throw e;
      } catch (Exception e) {
        throw new java.io.IOException(e);
      }
    }

    @Override
    public void abort() {
      txn.abort(null);
    }

    @Override
    public void close() {
      txn.close();
    }
  }
}
