// Sets a quota on a client-id prefix (Redpanda's entity type "client-id-prefix") with the Java Admin
// API (alterClientQuotas), authenticated as USER over SASL/PLAIN, then reads it back with
// describeClientQuotas and prints one line per step:
//   altered                                  (or "alter failed: <exception simple name>: <message>")
//   exact prefix: {client-id-prefix=PREFIX}={KEY=VALUE}
//   any prefix: ...
// Run as a single-file program:
//   java -cp '<kafka libs>/*' ClientIdPrefixQuota.java BOOTSTRAP USER PASSWORD PREFIX KEY VALUE
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.TreeMap;
import java.util.concurrent.ExecutionException;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.common.quota.ClientQuotaAlteration;
import org.apache.kafka.common.quota.ClientQuotaEntity;
import org.apache.kafka.common.quota.ClientQuotaFilter;
import org.apache.kafka.common.quota.ClientQuotaFilterComponent;

public class ClientIdPrefixQuota {
    static final String PREFIX_TYPE = "client-id-prefix";  // not among Kafka's constants: Redpanda's name

    public static void main(String[] args) throws Exception {
        Properties props = new Properties();
        props.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, args[0]);
        props.put("security.protocol", "SASL_PLAINTEXT");
        props.put("sasl.mechanism", "PLAIN");
        props.put("sasl.jaas.config", "org.apache.kafka.common.security.plain.PlainLoginModule required username=\""
                + args[1] + "\" password=\"" + args[2] + "\";");
        try (Admin admin = Admin.create(props)) {
            ClientQuotaEntity fleet = new ClientQuotaEntity(Map.of(PREFIX_TYPE, args[3]));
            try {
                admin.alterClientQuotas(List.of(new ClientQuotaAlteration(fleet,
                    List.of(new ClientQuotaAlteration.Op(args[4], Double.parseDouble(args[5])))))).all().get();
                System.out.println("altered");
            } catch (ExecutionException e) {
                System.out.println("alter failed: " + e.getCause().getClass().getSimpleName() + ": " + e.getCause().getMessage());
            }
            print(admin, "exact prefix", ClientQuotaFilter.contains(List.of(ClientQuotaFilterComponent.ofEntity(PREFIX_TYPE, args[3]))));
            print(admin, "any prefix", ClientQuotaFilter.contains(List.of(ClientQuotaFilterComponent.ofEntityType(PREFIX_TYPE))));
        }
    }

    static void print(Admin admin, String label, ClientQuotaFilter filter) throws Exception {
        Map<String, String> lines = new TreeMap<>();
        admin.describeClientQuotas(filter).entities().get().forEach((entity, values) ->
            lines.put(new TreeMap<>(entity.entries()).toString(), new TreeMap<>(values).toString()));
        System.out.println(label + ": " + lines);
    }
}
