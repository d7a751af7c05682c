package dev.lockstep.spark;

import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.TimeUnit;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.GenericInternalRow;
import org.apache.spark.sql.connector.read.LocalScan;
import org.apache.spark.sql.connector.read.ScanBuilder;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.unsafe.types.UTF8String;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * The driver-side hand-off of a write's task results to the Python caller. {@link
 * LockstepBatchWrite#commit} puts them under the caller's write id; the caller reads them back with
 * {@code spark.read.format("lockstep-kafka").option("write_id", id).load()}, which takes them out.
 *
 * <p>Process-wide, because under Spark Connect the driver is a long-lived server shared by many
 * writes and sessions: ids are the callers' uuids, and results nobody read (a caller that died
 * between the write and the read) are dropped after {@link #UNREAD_TTL_MS}.
 */
final class TaskResults {
  static final long UNREAD_TTL_MS = TimeUnit.HOURS.toMillis(1);
  private static final Logger LOG = LoggerFactory.getLogger(TaskResults.class);
  private static final Map<String, Entry> BY_WRITE_ID = new ConcurrentHashMap<>();

  private TaskResults() {}

  private record Entry(List<String> results, long storedAtMs) {}

  static void put(String writeId, List<String> results) {
    long now = System.currentTimeMillis();
    BY_WRITE_ID.entrySet().removeIf(e -> {
      boolean stale = now - e.getValue().storedAtMs() > UNREAD_TTL_MS;
      if (stale) {
        LOG.warn("write {}: its {} task results were never read; dropped", e.getKey(), e.getValue().results().size());
      }
      return stale;
    });
    if (BY_WRITE_ID.putIfAbsent(writeId, new Entry(List.copyOf(results), now)) != null) {
      throw new IllegalStateException("write id " + writeId + " was used twice; each write needs its own");
    }
  }

  static List<String> take(String writeId) {
    Entry entry = BY_WRITE_ID.remove(writeId);
    if (entry == null) {
      throw new IllegalStateException(
          "no task results for write id " + writeId + ": the write did not commit, its results were "
              + "already read, or they waited longer than " + UNREAD_TTL_MS / 1000 + " s");
    }
    return entry.results();
  }

  /** The read side: the results as a local relation, taken from the registry once per scan. */
  static final class Scan implements ScanBuilder, LocalScan {
    private final String writeId;
    private InternalRow[] rows;

    Scan(String writeId) {
      this.writeId = writeId;
    }

    @Override
    public org.apache.spark.sql.connector.read.Scan build() {
      return this;
    }

    @Override
    public StructType readSchema() {
      return LockstepKafkaSource.RESULT_SCHEMA;
    }

    @Override
    public synchronized InternalRow[] rows() {
      if (rows == null) {
        List<String> results = take(writeId);
        rows = new InternalRow[results.size()];
        for (int i = 0; i < rows.length; i++) {
          rows[i] = new GenericInternalRow(new Object[] {UTF8String.fromString(results.get(i))});
        }
      }
      return rows;
    }
  }
}
