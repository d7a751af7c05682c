package dev.lockstep.spark;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import dev.lockstep.spark.Fixtures.FakeProducer;
import dev.lockstep.spark.Fixtures.Producers;
import java.lang.reflect.Field;
import java.lang.reflect.Modifier;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.serialization.ByteArraySerializer;
import org.apache.kafka.common.utils.ProducerIdAndEpoch;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.connector.write.DataWriter;
import org.apache.spark.sql.connector.write.WriterCommitMessage;
import org.junit.jupiter.api.Test;

/**
 * A task's result document, {@code {"task", "rows", "committable"}}: what {@code
 * output_contract.parse_task_result} reads on the driver. The fields, their order and the schema id
 * come from the Python side (python_side.py), so a change there that the writer does not follow
 * fails here, and every document is also parsed by the Python code itself.
 */
class TaskResultDocumentTest {

  private static LockstepBatchWrite.TaskResult run(TransactionalKafkaWriter.WriterSettings settings,
      Producers producers, int task, InternalRow... rows) throws Exception {
    DataWriter<InternalRow> writer = new LockstepBatchWrite.Factory(settings, Fixtures.layout(settings), producers)
        .createWriter(task, 100L + task);
    try {
      for (InternalRow row : rows) {
        writer.write(row);
      }
      return (LockstepBatchWrite.TaskResult) writer.commit();
    } finally {
      writer.close();
    }
  }

  private static List<String> names(JsonNode object) {
    List<String> names = new ArrayList<>();
    object.fieldNames().forEachRemaining(names::add);
    return names;
  }

  @Test
  void aPreparedTaskReportsTheContractsCommittable() throws Exception {
    ObjectNode doc = Fixtures.settingsDoc();
    doc.put("sink_max_bytes", 400); // the last row below is too large for the sink
    TransactionalKafkaWriter.WriterSettings settings = Fixtures.settings(doc);
    Producers producers = new Producers();
    long before = System.currentTimeMillis();
    LockstepBatchWrite.TaskResult result = run(settings, producers, 3,
        Fixtures.row("2", 10), Fixtures.row("0", 11), Fixtures.row("2", 12),
        Fixtures.row("1", "bad", 13, "ValueError: no"), Fixtures.row("1", "x".repeat(500), 2, 14, null));
    long after = System.currentTimeMillis();

    assertTrue(result.prepared, "a task that wrote rows leaves a prepared transaction");
    JsonNode r = Fixtures.json(result.json);
    assertEquals(List.of("task", "rows", "committable"), names(r));
    assertEquals(3, r.get("task").asInt());
    assertEquals(5, r.get("rows").asLong());
    JsonNode c = r.get("committable");
    List<String> expected = new ArrayList<>(List.of("schema"));
    expected.addAll(Fixtures.committableFields());
    assertEquals(expected, names(c), "the committable's fields, in output_contract.COMMITTABLE_FIELDS order");
    assertEquals(Fixtures.committableSchema(), c.get("schema").asText());
    assertEquals("ls-7-3", c.get("transactional_id").asText());
    assertTrue(c.get("producer_id").isIntegralNumber() && c.get("epoch").isIntegralNumber());
    assertEquals(Fixtures.PRODUCER_ID, c.get("producer_id").asLong());
    assertEquals(Fixtures.EPOCH, c.get("epoch").asInt());
    assertEquals(3, c.get("records").asLong(), "records: acknowledged sink records");
    assertEquals(2, c.get("dead_letters").asLong(), "the error row and the header-only dead letter of the large row");
    assertEquals(3, c.get("task_index").asInt());
    long opened = c.get("opened_at_ms").asLong();
    assertTrue(before <= opened && opened <= after, "opened_at_ms " + opened + " in [" + before + ", " + after + "]");
    List<String> partitions = new ArrayList<>();
    c.get("partitions").forEach(p -> partitions.add(p.asText()));
    // Every topic:partition written to, once each, sorted as strings. (The Python writer sorts by
    // (topic, partition) instead: "out:0" before "out.dlq:0"; nothing downstream reads the order.)
    assertEquals(List.of(Fixtures.DEAD_LETTERS + ":0", Fixtures.SINK + ":0", Fixtures.SINK + ":2"), partitions);
    List<String> sources = new ArrayList<>();
    c.get("sources").forEach(p -> sources.add(p.asText()));
    // The source partitions of every row produced, a dead letter's too: what a repair re-reads.
    assertEquals(List.of("in:0", "in:2"), sources);

    // The transaction is flushed and left open: forced close, neither committed nor aborted.
    FakeProducer producer = producers.only();
    assertEquals(5, producer.uncommittedRecords().size());
    assertFalse(producer.transactionCommitted());
    assertFalse(producer.transactionAborted());
    assertTrue(producer.closed());
    assertEquals(List.of(Duration.ZERO), producer.closeTimeouts, "a forced close, which sends no abort");

    JsonNode parsed = Fixtures.parsedByPython(result.json).get(0);
    assertEquals(3, parsed.get(0).asInt());
    assertEquals(5, parsed.get(1).asInt());
    assertEquals(c, parsed.get(2), "Python reads the same committable, producer id included");
  }

  @Test
  void theRecordsCarryTheContractsHeadersInOrder() throws Exception {
    TransactionalKafkaWriter.WriterSettings settings = Fixtures.settings();
    Producers producers = new Producers();
    run(settings, producers, 0, Fixtures.row("0", 41), Fixtures.row("0", "bad", 42, "boom"));
    List<ProducerRecord<byte[], byte[]>> sent = producers.only().uncommittedRecords();
    JsonNode contract = Fixtures.settingsDoc().get("contract");
    JsonNode names = contract.get("headers");
    List<String> leading = List.of(names.get("source_topic").asText(), names.get("source_partition").asText(),
        names.get("source_offset").asText(), names.get("checkpoint").asText(), names.get("pipeline").asText());
    List<String> contractOrder = new ArrayList<>();
    contract.get("leading_headers").forEach(n -> contractOrder.add(n.asText()));
    assertEquals(contractOrder, leading, "output_contract.LEADING_HEADERS, in its order");

    ProducerRecord<byte[], byte[]> record = sent.get(0);
    assertEquals(Fixtures.SINK, record.topic());
    List<String> keys = new ArrayList<>();
    List<String> values = new ArrayList<>();
    for (Header h : record.headers()) {
      keys.add(h.key());
      values.add(new String(h.value(), StandardCharsets.UTF_8));
    }
    List<String> expectedKeys = new ArrayList<>(leading);
    expectedKeys.add("trace");
    assertEquals(expectedKeys, keys);
    assertEquals(List.of("in", "0", "41", "7", "orders", "t-1"), values);

    ProducerRecord<byte[], byte[]> deadLetter = sent.get(1);
    assertEquals(Fixtures.DEAD_LETTERS, deadLetter.topic());
    Header last = null;
    for (Header h : deadLetter.headers()) {
      last = h;
    }
    assertEquals(names.get("error").asText(), last.key());
    assertEquals("boom", new String(last.value(), StandardCharsets.UTF_8));
  }

  @Test
  void anEmptyTaskReportsNoCommittableAndAbortsItsTransaction() throws Exception {
    Producers producers = new Producers();
    LockstepBatchWrite.TaskResult result = run(Fixtures.settings(), producers, 5);

    assertFalse(result.prepared);
    JsonNode r = Fixtures.json(result.json);
    assertEquals(List.of("task", "rows", "committable"), names(r));
    assertEquals(5, r.get("task").asInt());
    assertEquals(0, r.get("rows").asLong());
    assertTrue(r.get("committable").isNull(), "committable null, not absent");
    FakeProducer producer = producers.only();
    assertTrue(producer.transactionAborted());
    assertTrue(producer.closed());
    assertEquals(List.of(Duration.ofSeconds(5)), producer.closeTimeouts, "a graceful close after the abort");

    JsonNode parsed = Fixtures.parsedByPython(result.json).get(0);
    assertEquals(5, parsed.get(0).asInt());
    assertEquals(0, parsed.get(1).asInt());
    assertTrue(parsed.get(2).isNull());
  }

  @Test
  void stringsAreEscapedSoPythonReadsThemBack() throws Exception {
    String prefix = "q\"uo\\te/\n\t\u0001é€😀";
    ObjectNode doc = Fixtures.settingsDoc();
    doc.put("transactional_id_pattern", prefix + "-7-{task}");
    Producers producers = new Producers();
    LockstepBatchWrite.TaskResult result = run(Fixtures.settings(doc), producers, 12, Fixtures.row("1", 0));

    assertFalse(result.json.contains("\n"), "one line per document");
    JsonNode c = Fixtures.json(result.json).get("committable");
    assertEquals(prefix + "-7-12", c.get("transactional_id").asText());
    assertEquals(prefix + "-7-12", producers.only().transactionalId());
    JsonNode parsed = Fixtures.parsedByPython(result.json).get(0);
    assertEquals(c, parsed.get(2));
    assertEquals(prefix + "-7-12", parsed.get(2).get("transactional_id").asText());
  }

  @Test
  void aProducerWithoutAnIdAfterItsFlushReportsNoCommittable() {
    Producers producers = new Producers();
    producers.identity = new ProducerIdAndEpoch(-1L, (short) -1);
    TransactionalKafkaWriter.WriterSettings settings = Fixtures.settings();
    PartitionTransaction.WriterException e = assertThrows(PartitionTransaction.WriterException.class,
        () -> run(settings, producers, 1, Fixtures.row("0", 0)));
    assertTrue(e.getMessage().contains("has no producer id after the flush"), e.getMessage());
  }

  @Test
  void theTaskProducerIsTransactionalAndIdempotentWhateverTheSpecSays() throws Exception {
    ObjectNode doc = Fixtures.settingsDoc();
    ((ObjectNode) doc.get("producer_config")).put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, "false");
    Producers producers = new Producers();
    run(Fixtures.settings(doc), producers, 2, Fixtures.row("0", 0));
    var props = producers.only().props;
    assertEquals("ls-7-2", props.getProperty(ProducerConfig.TRANSACTIONAL_ID_CONFIG));
    assertEquals("true", props.getProperty(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG));
    assertEquals("60000", props.getProperty(ProducerConfig.TRANSACTION_TIMEOUT_CONFIG));
    assertEquals("127.0.0.1:9", props.getProperty(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG));
    assertEquals(ByteArraySerializer.class.getName(), props.getProperty(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG));
    assertEquals("all", props.getProperty(ProducerConfig.ACKS_CONFIG), "the spec's producer settings pass through");
  }

  /** The fake's shape is the real client's: the reflection behind producer_id and epoch still works. */
  @Test
  void kafkaClientsStillHasTheFieldsTheProducerIdIsReadFrom() throws Exception {
    Field manager = KafkaProducer.class.getDeclaredField("transactionManager");
    Field idAndEpoch = manager.getType().getDeclaredField("producerIdAndEpoch");
    assertEquals(ProducerIdAndEpoch.class, idAndEpoch.getType());
    Field id = ProducerIdAndEpoch.class.getField("producerId");
    Field epoch = ProducerIdAndEpoch.class.getField("epoch");
    assertEquals(long.class, id.getType());
    assertEquals(short.class, epoch.getType());
    assertTrue(Modifier.isPublic(id.getModifiers()) && Modifier.isPublic(epoch.getModifiers()));
  }

  @Test
  void theDriverKeepsEachWritesResultsForOneRead() throws Exception {
    Producers producers = new Producers();
    TransactionalKafkaWriter.WriterSettings settings = Fixtures.settings();
    LockstepBatchWrite write = new LockstepBatchWrite("write-results", settings, Fixtures.layout(settings), producers);
    LockstepBatchWrite.TaskResult task0 = run(settings, producers, 0, Fixtures.row("0", 0));
    LockstepBatchWrite.TaskResult task1 = run(settings, producers, 1);
    write.commit(new WriterCommitMessage[] {task0, task1});

    InternalRow[] rows = new TaskResults.Scan("write-results").rows();
    assertEquals(2, rows.length);
    assertEquals(task0.json, rows[0].getUTF8String(0).toString());
    assertEquals(task1.json, rows[1].getUTF8String(0).toString());
    assertThrows(IllegalStateException.class, () -> new TaskResults.Scan("write-results").rows(),
        "results are handed out once");
    TaskResults.put("write-twice", List.of());
    assertThrows(IllegalStateException.class, () -> TaskResults.put("write-twice", List.of()));
    TaskResults.take("write-twice");
  }
}
