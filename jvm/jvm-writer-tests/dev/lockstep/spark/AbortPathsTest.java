package dev.lockstep.spark;

import static org.junit.jupiter.api.Assertions.assertDoesNotThrow;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.lockstep.spark.Fixtures.FakeProducer;
import dev.lockstep.spark.Fixtures.Producers;
import dev.lockstep.spark.PartitionTransaction.WriterException;
import java.time.Duration;
import java.util.List;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.errors.ProducerFencedException;
import org.apache.kafka.common.errors.TimeoutException;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.connector.write.DataWriter;
import org.apache.spark.sql.connector.write.WriterCommitMessage;
import org.junit.jupiter.api.Test;

/**
 * What the writer does when a task fails, as Spark drives it: a writer whose {@code write} or {@code
 * commit} threw gets {@code abort()} then {@code close()}; a writer whose creation threw gets
 * neither; a write with failed tasks gets {@link LockstepBatchWrite#abort} and never {@code commit},
 * so no result (and no committable) reaches the driver. An open transaction must end aborted
 * (or fenced, once its producer is gone) and every producer closed.
 */
class AbortPathsTest {

  private static DataWriter<InternalRow> writer(TransactionalKafkaWriter.WriterSettings settings, Producers producers,
      int task) {
    return new LockstepBatchWrite.Factory(settings, Fixtures.layout(settings), producers).createWriter(task, 7L);
  }

  /** Spark's part after a failure: abort, then close. */
  private static void failTask(DataWriter<InternalRow> writer) throws Exception {
    writer.abort();
    writer.close();
  }

  private static void assertAbortedAndClosed(FakeProducer producer) {
    assertTrue(producer.transactionAborted(), "transaction aborted");
    assertFalse(producer.transactionCommitted(), "transaction committed");
    assertTrue(producer.closed(), "producer closed");
    assertTrue(producer.uncommittedRecords().isEmpty(), "records left in the transaction");
    assertTrue(producer.history().isEmpty(), "records committed");
  }

  @Test
  void aTaskAbortedBeforeItsCommitAbortsTheTransactionAndClosesTheProducer() throws Exception {
    Producers producers = new Producers();
    DataWriter<InternalRow> writer = writer(Fixtures.settings(), producers, 0);
    writer.write(Fixtures.row("0", 0));
    writer.write(Fixtures.row("1", 1));
    failTask(writer);
    assertAbortedAndClosed(producers.only());
    assertEquals(List.of(Duration.ofSeconds(5)), producers.only().closeTimeouts);
  }

  @Test
  void aFailedDeliveryFailsTheCommitWithNoCommittable() throws Exception {
    Producers producers = new Producers();
    producers.autoComplete = false; // deliveries complete when the test says, or at the flush
    DataWriter<InternalRow> writer = writer(Fixtures.settings(), producers, 4);
    writer.write(Fixtures.row("0", 0));
    writer.write(Fixtures.row("1", 1));
    FakeProducer producer = producers.only();
    producer.errorNext(new TimeoutException("expired before it reached the leader"));

    WriterException e = assertThrows(WriterException.class, writer::commit);
    assertTrue(e.getMessage().contains("transaction ls-7-4: 1 records failed delivery"), e.getMessage());
    assertTrue(e.getMessage().contains("TimeoutException: expired before it reached the leader"), e.getMessage());
    assertFalse(producer.closed(), "not prepared: the producer stays for the abort");
    failTask(writer);
    assertAbortedAndClosed(producer);
    assertEquals(1, producers.created.size(), "nothing to fence: the abort went through the task's producer");
  }

  @Test
  void aFencedSendFailsTheTaskAsFenced() throws Exception {
    Producers producers = new Producers();
    DataWriter<InternalRow> writer = writer(Fixtures.settings(), producers, 2);
    writer.write(Fixtures.row("0", 0));
    producers.only().sendException = new ProducerFencedException("a newer epoch");

    WriterException e = assertThrows(WriterException.class, () -> writer.write(Fixtures.row("0", 1)));
    assertTrue(e.getMessage().startsWith("transaction ls-7-2: fenced"), e.getMessage());
    assertTrue(e.getCause() instanceof ProducerFencedException);
    failTask(writer);
    assertAbortedAndClosed(producers.only());
  }

  @Test
  void anAbortTheBrokerRefusesStillClosesTheProducer() throws Exception {
    Producers producers = new Producers();
    DataWriter<InternalRow> writer = writer(Fixtures.settings(), producers, 0);
    writer.write(Fixtures.row("0", 0));
    producers.only().abortTransactionException = new KafkaException("coordinator unreachable");
    assertDoesNotThrow(writer::abort, "the task already failed; the broker times the transaction out");
    writer.close();
    FakeProducer producer = producers.only();
    assertTrue(producer.closed());
    assertFalse(producer.transactionCommitted());
  }

  @Test
  void aTransactionalIdThatCannotBeInitialisedClosesItsProducer() {
    Producers producers = new Producers(p -> p.initTransactionException = new KafkaException("not authorized"));
    WriterException e = assertThrows(WriterException.class, () -> writer(Fixtures.settings(), producers, 1));
    assertTrue(e.getMessage().contains("transaction ls-7-1: could not initialise the transactional id"), e.getMessage());
    assertTrue(producers.only().closed());
  }

  @Test
  void failpointBeforeProduceAbortsAndClosesAsSparkCallsNeither() {
    Producers producers = new Producers();
    WriterException e = assertThrows(WriterException.class,
        () -> writer(Fixtures.withFailpoint("job.before_produce", "raise"), producers, 0));
    assertEquals("failpoint job.before_produce raised", e.getMessage());
    assertAbortedAndClosed(producers.only());
  }

  @Test
  void failpointMidProduceRaisesAfterTheContractsRecordCount() throws Exception {
    Producers producers = new Producers();
    DataWriter<InternalRow> writer = writer(Fixtures.withFailpoint("job.mid_produce", "raise"), producers, 3);
    writer.write(Fixtures.row("0", 0)); // output_contract.MID_PRODUCE_AFTER_RECORDS is 1
    WriterException e = assertThrows(WriterException.class, () -> writer.write(Fixtures.row("0", 1)));
    assertEquals("failpoint job.mid_produce raised" + Fixtures.python().get("mid_produce_message_task_3").asText(),
        e.getMessage(), "the words of output_contract.mid_produce_message");
    assertEquals(1, producers.only().uncommittedRecords().size(), "the second record was never sent");
    failTask(writer);
    assertAbortedAndClosed(producers.only());
  }

  @Test
  void failpointRaiseFirstAttemptFailsTheFirstAttemptOnlyAndTheRetryWritesEveryRecord() throws Exception {
    TransactionalKafkaWriter.WriterSettings settings = Fixtures.withFailpoint("job.mid_produce", "raise-first-attempt");
    Producers producers = new Producers();
    LockstepBatchWrite.Factory factory = new LockstepBatchWrite.Factory(settings, Fixtures.layout(settings), producers);

    DataWriter<InternalRow> first = factory.writerForAttempt(3, 0);
    first.write(Fixtures.row("0", 0)); // output_contract.MID_PRODUCE_AFTER_RECORDS is 1
    WriterException e = assertThrows(WriterException.class, () -> first.write(Fixtures.row("0", 1)));
    assertEquals(Fixtures.python().get("mid_produce_first_attempt_raised_task_3").asText(), e.getMessage(),
        "the words of failpoints.raised_message");
    failTask(first);
    assertAbortedAndClosed(producers.get(0));

    DataWriter<InternalRow> retry = factory.writerForAttempt(3, 1);
    for (long offset = 0; offset < 3; offset++) {
      retry.write(Fixtures.row("0", offset));
    }
    LockstepBatchWrite.TaskResult result = (LockstepBatchWrite.TaskResult) retry.commit();
    retry.close();
    assertTrue(result.prepared, "the retry passed the failpoint and prepared");
    assertEquals(3, Fixtures.json(result.json).get("rows").asLong(), "the retry wrote all of the task's records");
    assertEquals(2, producers.created.size());
    assertEquals(producers.get(0).transactionalId(), producers.get(1).transactionalId(),
        "the retry reuses the task's transactional id, so its init fences the first attempt");
    assertTrue(producers.get(1).transactionInitialized());

    // Spark's createWriter outside a Spark task (no TaskContext) counts as a first attempt.
    assertThrows(WriterException.class,
        () -> writer(Fixtures.withFailpoint("job.before_produce", "raise-first-attempt"), new Producers(), 0));
  }

  @Test
  void theSettingsRefuseAFailpointActionTheWriterDoesNotKnow() {
    List<String> python = new java.util.ArrayList<>();
    Fixtures.python().get("failpoint_actions").forEach(a -> python.add(a.asText()));
    assertEquals(python, PartitionTransaction.FAILPOINT_ACTIONS, "the actions of lockstep.model.failpoints.ACTIONS a task's failpoint takes");
    IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
        () -> Fixtures.withFailpoint("job.mid_produce", "bogus"));
    assertEquals("failpoint job.mid_produce has no action 'bogus'; the actions are crash, raise, raise-first-attempt",
        e.getMessage());
  }

  @Test
  void failpointAfterFlushFencesThePreparedTransaction() throws Exception {
    Producers producers = new Producers();
    DataWriter<InternalRow> writer = writer(Fixtures.withFailpoint("job.after_flush", "raise"), producers, 6);
    writer.write(Fixtures.row("0", 0));
    WriterException e = assertThrows(WriterException.class, writer::commit, "no committable reaches the driver");
    assertEquals("failpoint job.after_flush raised", e.getMessage());
    FakeProducer task = producers.get(0);
    assertEquals(List.of(Duration.ZERO), task.closeTimeouts, "prepared: forced close, transaction left open");

    failTask(writer);
    // Its producer is gone, so the abort fences the id: a new producer of the same id inits and closes.
    assertEquals(2, producers.created.size());
    FakeProducer fencer = producers.get(1);
    assertEquals("ls-7-6", fencer.transactionalId());
    assertTrue(fencer.transactionInitialized(), "the fencer initialised the id: the broker aborts what it had open");
    assertTrue(fencer.closed(), "fencer closed");
    assertTrue(fencer.uncommittedRecords().isEmpty() && fencer.history().isEmpty());
    assertFalse(task.transactionCommitted());
    assertEquals(List.of(Duration.ZERO), task.closeTimeouts, "close after a prepare does nothing more");
  }

  @Test
  void anAbortedWriteFencesTheTasksThatPreparedAndReportsNoResults() throws Exception {
    Producers producers = new Producers();
    TransactionalKafkaWriter.WriterSettings settings = Fixtures.settings();
    LockstepBatchWrite write = new LockstepBatchWrite("write-aborted", settings, Fixtures.layout(settings), producers);
    var factory = write.createBatchWriterFactory(null);

    DataWriter<InternalRow> task0 = factory.createWriter(0, 0L); // prepares
    task0.write(Fixtures.row("0", 0));
    WriterCommitMessage prepared = task0.commit();
    task0.close();
    DataWriter<InternalRow> task1 = factory.createWriter(1, 1L); // writes nothing
    WriterCommitMessage empty = task1.commit();
    task1.close();
    DataWriter<InternalRow> task2 = factory.createWriter(2, 2L); // fails
    task2.write(Fixtures.row("0", 0));
    failTask(task2);
    assertEquals(3, producers.created.size());

    write.abort(new WriterCommitMessage[] {prepared, empty, null}); // Spark: null for a task that did not commit
    assertEquals(4, producers.created.size(), "one fencer, for the one prepared transaction");
    FakeProducer fencer = producers.get(3);
    assertEquals("ls-7-0", fencer.transactionalId());
    assertTrue(fencer.transactionInitialized(), "the fencer initialised the id: the broker aborts what it had open");
    assertTrue(fencer.closed(), "fencer closed");
    assertAbortedAndClosed(producers.get(2));
    assertThrows(IllegalStateException.class, () -> TaskResults.take("write-aborted"), "no results for the driver");
  }

  @Test
  void aFencerThatCannotReachTheBrokerDoesNotFailTheAbort() {
    TransactionalKafkaWriter.WriterSettings settings = Fixtures.settings();
    Producers producers = new Producers(p -> p.initTransactionException = new TimeoutException("no broker"));
    LockstepBatchWrite write = new LockstepBatchWrite("write-unfenced", settings, Fixtures.layout(settings), producers);
    WriterCommitMessage prepared = new LockstepBatchWrite.TaskResult("{}", true);
    assertDoesNotThrow(() -> write.abort(new WriterCommitMessage[] {prepared}), "recovery fences it later");
    assertTrue(producers.only().closed(), "the fencer is closed anyway");
    ProducerFactory unreachable = props -> {
      throw new KafkaException("Failed to construct kafka producer");
    };
    LockstepBatchWrite write2 = new LockstepBatchWrite("write-unfenced-2", settings, Fixtures.layout(settings), unreachable);
    assertDoesNotThrow(() -> write2.abort(new WriterCommitMessage[] {prepared}));
  }
}
