// Consumes a topic as a share group (KIP-932) with the Java KafkaShareConsumer until it has N records
// or the time is up, and prints one line per poll that returned records ("poll <ms since start>
// <records> <value bytes>"), then "received <records> records <value bytes> bytes in <ms> ms".
// The group first gets share.auto.offset.reset=earliest (a share group starts at the end by default),
// set with the Admin client on the same bootstrap.
// Run as a single-file program:
//   java -cp '<kafka libs>/*' ShareConsume.java BOOTSTRAP CLIENT_ID GROUP TOPIC N SECONDS
import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.AlterConfigOp;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaShareConsumer;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

public class ShareConsume {
    public static void main(String[] args) throws Exception {
        String bootstrap = args[0];
        String clientId = args[1];
        String group = args[2];
        String topic = args[3];
        long wanted = Long.parseLong(args[4]);
        long deadline = System.nanoTime() + Long.parseLong(args[5]) * 1_000_000_000L;

        Properties adminProps = new Properties();
        adminProps.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        adminProps.put(AdminClientConfig.CLIENT_ID_CONFIG, clientId + "-admin");
        try (Admin admin = Admin.create(adminProps)) {
            ConfigResource resource = new ConfigResource(ConfigResource.Type.GROUP, group);
            AlterConfigOp earliest = new AlterConfigOp(
                new ConfigEntry("share.auto.offset.reset", "earliest"), AlterConfigOp.OpType.SET);
            admin.incrementalAlterConfigs(Map.of(resource, List.of(earliest))).all().get();
        }

        Properties props = new Properties();
        props.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        props.put(ConsumerConfig.CLIENT_ID_CONFIG, clientId);
        props.put(ConsumerConfig.GROUP_ID_CONFIG, group);
        props.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        props.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        // Small fetches, so that a byte-rate quota is met in many steps rather than a few bursts.
        props.put(ConsumerConfig.FETCH_MAX_BYTES_CONFIG, "65536");
        props.put(ConsumerConfig.MAX_PARTITION_FETCH_BYTES_CONFIG, "32768");
        long records = 0;
        long bytes = 0;
        long started = System.nanoTime();
        try (KafkaShareConsumer<byte[], byte[]> consumer = new KafkaShareConsumer<>(props)) {
            consumer.subscribe(List.of(topic));
            while (records < wanted && System.nanoTime() < deadline) {
                ConsumerRecords<byte[], byte[]> polled = consumer.poll(Duration.ofMillis(200));
                if (polled.isEmpty()) {
                    continue;
                }
                long polledBytes = 0;
                for (ConsumerRecord<byte[], byte[]> record : polled) {
                    polledBytes += record.value() == null ? 0 : record.value().length;
                }
                records += polled.count();
                bytes += polledBytes;
                System.out.println("poll " + (System.nanoTime() - started) / 1_000_000 + " " + polled.count() + " " + polledBytes);
            }
            consumer.commitSync();
        }
        System.out.println("received " + records + " records " + bytes + " bytes in "
            + (System.nanoTime() - started) / 1_000_000 + " ms");
    }
}
