// Consumes a topic from the start for a number of seconds and prints, per record,
// "<seconds since start> <bytes of the value> <offset>" (tests/integration/test_fetch_quota_shape.py).
// Args: bootstrap client-id topic seconds fetch.max.bytes max.partition.fetch.bytes
import java.time.Duration;
import java.util.List;
import java.util.Properties;
import java.util.UUID;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

public class TimedConsume {
    public static void main(String[] args) {
        Properties props = new Properties();
        props.put("bootstrap.servers", args[0]);
        props.put("client.id", args[1]);
        props.put("group.id", "timed-" + UUID.randomUUID());
        props.put("auto.offset.reset", "earliest");
        props.put("enable.auto.commit", "false");
        props.put("fetch.max.bytes", args[4]);
        props.put("max.partition.fetch.bytes", args[5]);
        props.put("key.deserializer", ByteArrayDeserializer.class.getName());
        props.put("value.deserializer", ByteArrayDeserializer.class.getName());
        long start = System.nanoTime();
        long end = start + (long) (Double.parseDouble(args[3]) * 1e9);
        try (KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(props)) {
            consumer.subscribe(List.of(args[2]));
            while (System.nanoTime() < end) {
                ConsumerRecords<byte[], byte[]> records = consumer.poll(Duration.ofMillis(100));
                double at = (System.nanoTime() - start) / 1e9;
                for (ConsumerRecord<byte[], byte[]> record : records) {
                    System.out.println(at + " " + record.value().length + " " + record.offset());
                }
                System.out.flush();
            }
        }
    }
}
