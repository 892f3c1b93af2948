// Creates N topics of P partitions with the Java AdminClient and its default options (which retry
// THROTTLING_QUOTA_EXCEEDED and honour throttle_time_ms), then prints how long it took.
// Run as a single-file program: java -cp '<kafka libs>/*' CreateTopicsUnderQuota.java BOOTSTRAP CLIENT_ID PREFIX N P
import java.util.ArrayList;
import java.util.List;
import java.util.Properties;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.NewTopic;

public class CreateTopicsUnderQuota {
    public static void main(String[] args) throws Exception {
        Properties props = new Properties();
        props.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, args[0]);
        props.put(AdminClientConfig.CLIENT_ID_CONFIG, args[1]);
        String prefix = args[2];
        int count = Integer.parseInt(args[3]);
        int partitions = Integer.parseInt(args[4]);
        List<NewTopic> topics = new ArrayList<>();
        for (int i = 0; i < count; i++) {
            topics.add(new NewTopic(prefix + "-" + i, partitions, (short) 1));
        }
        try (Admin admin = Admin.create(props)) {
            long started = System.nanoTime();
            admin.createTopics(topics).all().get();
            long elapsedMs = (System.nanoTime() - started) / 1_000_000;
            System.out.println("created " + count + " topics in " + elapsedMs + " ms");
        }
    }
}
