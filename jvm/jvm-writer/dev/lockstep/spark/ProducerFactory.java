package dev.lockstep.spark;

import java.util.Properties;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.Producer;

/**
 * Where the writer's Kafka producers come from: kafka-clients' {@link KafkaProducer} ({@link
 * Kafka#INSTANCE}) in every run. The writer's unit tests (jvm/jvm-writer-tests) pass one that
 * hands out in-memory producers instead, so its result document and abort paths are tested without a
 * broker. Serializable: it travels to the tasks inside {@link LockstepBatchWrite.Factory}.
 */
interface ProducerFactory extends java.io.Serializable {
  Producer<byte[], byte[]> create(Properties props);

  /** A real producer; an enum, so it serializes to the tasks as its name. */
  enum Kafka implements ProducerFactory {
    INSTANCE;

    @Override
    public Producer<byte[], byte[]> create(Properties props) {
      return new KafkaProducer<>(props);
    }
  }
}
