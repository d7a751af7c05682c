package dev.lockstep.spark;

import java.util.Collections;
import java.util.EnumSet;
import java.util.Map;
import java.util.Set;
import org.apache.spark.sql.connector.catalog.SupportsRead;
import org.apache.spark.sql.connector.catalog.SupportsWrite;
import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.connector.catalog.TableCapability;
import org.apache.spark.sql.connector.catalog.TableProvider;
import org.apache.spark.sql.connector.expressions.Transform;
import org.apache.spark.sql.connector.read.ScanBuilder;
import org.apache.spark.sql.connector.write.LogicalWriteInfo;
import org.apache.spark.sql.connector.write.WriteBuilder;
import org.apache.spark.sql.sources.DataSourceRegister;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/**
 * The data source {@code lockstep-kafka}: Lockstep's JVM writer reached through the DataFrame API
 * alone, so a classic session and a Spark Connect session (which has no py4j) write the same way.
 *
 * <ul>
 *   <li>Write: {@code spark.conf.set(SETTINGS_CONF_PREFIX + id, json)}, then {@code
 *       df.write.format("lockstep-kafka").option(WRITE_ID_OPTION, id).mode("append").save()}. Each
 *       Spark task runs one Kafka transaction ({@link LockstepBatchWrite}); on the driver, the
 *       tasks' result documents are kept under the write id ({@link TaskResults}).
 *   <li>Read: {@code spark.read.format("lockstep-kafka").option(WRITE_ID_OPTION, id).load()} is those
 *       documents, one row per task in a string column {@code result}, served from the driver once.
 * </ul>
 *
 * <p>The settings (built by {@code lockstep.spark.jvm_writer.jvm_settings}) may hold SASL credentials in
 * their producer config, so they are not an option of the write: under Spark Connect the client's
 * whole request, options included, becomes the operation's statement text and the jobs' description
 * (the event log, the UI), where {@code spark.redaction.regex} is not applied. They travel in the
 * session's conf instead, under a key that regex redacts ({@code secret}) and that is not {@code
 * spark.*} (Spark copies those into every job's properties, which the event log does not redact),
 * and are read here on the driver, from the session running the write.
 */
public final class LockstepKafkaSource implements TableProvider, DataSourceRegister {
  public static final String SHORT_NAME = "lockstep-kafka";
  /** The session conf key (+ the write id) of the writer settings; see the class comment. */
  public static final String SETTINGS_CONF_PREFIX = "dev.lockstep.spark.secret_settings.";
  public static final String WRITE_ID_OPTION = "write_id";
  static final StructType RESULT_SCHEMA = new StructType().add("result", DataTypes.StringType, false);

  @Override
  public String shortName() {
    return SHORT_NAME;
  }

  @Override
  public StructType inferSchema(CaseInsensitiveStringMap options) {
    return RESULT_SCHEMA; // what a read returns; a write accepts any schema (ACCEPT_ANY_SCHEMA)
  }

  @Override
  public Table getTable(StructType schema, Transform[] partitioning, Map<String, String> properties) {
    return new LockstepTable();
  }

  static final class LockstepTable implements SupportsWrite, SupportsRead {
    @Override
    public String name() {
      return SHORT_NAME;
    }

    @Override
    public StructType schema() {
      return RESULT_SCHEMA;
    }

    @Override
    public Set<TableCapability> capabilities() {
      return Collections.unmodifiableSet(EnumSet.of(
          TableCapability.BATCH_WRITE, TableCapability.ACCEPT_ANY_SCHEMA, TableCapability.BATCH_READ));
    }

    @Override
    public WriteBuilder newWriteBuilder(LogicalWriteInfo info) {
      return new WriteBuilder() {
        @Override
        public org.apache.spark.sql.connector.write.Write build() {
          return new LockstepBatchWrite(info.schema(), info.options());
        }
      };
    }

    @Override
    public ScanBuilder newScanBuilder(CaseInsensitiveStringMap options) {
      return new TaskResults.Scan(required(options, WRITE_ID_OPTION));
    }
  }

  /** The settings the caller put in its session's conf for this write. */
  static String settingsJson(String writeId) {
    String key = SETTINGS_CONF_PREFIX + writeId;
    scala.Option<org.apache.spark.sql.SparkSession> session = org.apache.spark.sql.SparkSession.getActiveSession();
    scala.Option<String> json = session.isDefined() ? session.get().conf().getOption(key) : scala.Option.empty();
    if (json.isEmpty()) {
      throw new IllegalArgumentException(
          "write " + writeId + ": the session running it has no " + key + " (lockstep.spark.jvm_writer.write_with_jvm "
              + "sets it before the write)");
    }
    return json.get();
  }

  static String required(CaseInsensitiveStringMap options, String name) {
    String value = options.get(name);
    if (value == null || value.isEmpty()) {
      throw new IllegalArgumentException("the " + SHORT_NAME + " data source needs the option " + name);
    }
    return value;
  }
}
