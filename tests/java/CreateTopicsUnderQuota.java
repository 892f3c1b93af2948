// Creates N topics of P partitions with the Java AdminClient and its default options (which retry
// THROTTLING_QUOTA_EXCEEDED and honour throttle_time_ms), then prints how long it took.
// With a sixth argument, "then-one-more", once the N topics are made it creates one more topic on the
// same client, with 5 s for the call (CreateTopicsOptions.timeoutMs), and prints how that ended:
// "created", or the simple name of the exception it failed with. (Not a 5-s request.timeout.ms for the
// client: a ZooKeeper-mode broker takes longer than that to create the N topics themselves.)
// Run as a single-file program:
//   java -cp '<kafka libs>/*' CreateTopicsUnderQuota.java BOOTSTRAP CLIENT_ID PREFIX N P [then-one-more]
import java.util.ArrayList;
import java.util.List;
import java.util.Properties;
import java.util.concurrent.ExecutionException;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.CreateTopicsOptions;
import org.apache.kafka.clients.admin.NewTopic;

public class CreateTopicsUnderQuota {
    public static void main(String[] args) throws Exception {
        Properties props = new Properties();
        props.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, args[0]);
        props.put(AdminClientConfig.CLIENT_ID_CONFIG, args[1]);
        boolean oneMore = args.length > 5 && args[5].equals("then-one-more");
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
            if (oneMore) {
                started = System.nanoTime();
                String outcome;
                try {
                    admin.createTopics(List.of(new NewTopic(prefix + "-late", 1, (short) 1)), new CreateTopicsOptions().timeoutMs(5000)).all().get();
                    outcome = "created";
                } catch (ExecutionException e) {
                    outcome = e.getCause().getClass().getSimpleName();
                }
                elapsedMs = (System.nanoTime() - started) / 1_000_000;
                System.out.println("one more: " + outcome + " after " + elapsedMs + " ms");
            }
        }
    }
}
