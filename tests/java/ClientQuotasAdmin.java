// Sets and reads client quotas with the Java Admin API (alterClientQuotas, describeClientQuotas),
// authenticated as USER over SASL/PLAIN, and prints one line per step:
//   altered                                  (or "alter failed: <exception simple name>: <message>")
//   exact user=alice: {user=alice}={producer_byte_rate=300000.0}
//   default clients: ...   any user: ...   strict user=alice: ...
// Run as a single-file program:
//   java -cp '<kafka libs>/*' ClientQuotasAdmin.java BOOTSTRAP USER PASSWORD
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

public class ClientQuotasAdmin {
    public static void main(String[] args) throws Exception {
        Properties props = new Properties();
        props.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, args[0]);
        props.put("security.protocol", "SASL_PLAINTEXT");
        props.put("sasl.mechanism", "PLAIN");
        props.put("sasl.jaas.config", "org.apache.kafka.common.security.plain.PlainLoginModule required username=\""
                + args[1] + "\" password=\"" + args[2] + "\";");
        try (Admin admin = Admin.create(props)) {
            ClientQuotaEntity alice = new ClientQuotaEntity(Map.of(ClientQuotaEntity.USER, "alice"));
            Map<String, String> defaultClient = new java.util.HashMap<>();
            defaultClient.put(ClientQuotaEntity.CLIENT_ID, null);
            ClientQuotaEntity anyClient = new ClientQuotaEntity(defaultClient);
            try {
                admin.alterClientQuotas(List.of(
                    new ClientQuotaAlteration(alice, List.of(new ClientQuotaAlteration.Op("producer_byte_rate", 300000.0))),
                    new ClientQuotaAlteration(anyClient, List.of(new ClientQuotaAlteration.Op("request_percentage", 25.0)))
                )).all().get();
                System.out.println("altered");
            } catch (ExecutionException e) {
                System.out.println("alter failed: " + e.getCause().getClass().getSimpleName() + ": " + e.getCause().getMessage());
            }
            print(admin, "exact user=alice", ClientQuotaFilter.contains(List.of(ClientQuotaFilterComponent.ofEntity(ClientQuotaEntity.USER, "alice"))));
            print(admin, "strict user=alice", ClientQuotaFilter.containsOnly(List.of(ClientQuotaFilterComponent.ofEntity(ClientQuotaEntity.USER, "alice"))));
            print(admin, "default clients", ClientQuotaFilter.contains(List.of(ClientQuotaFilterComponent.ofDefaultEntity(ClientQuotaEntity.CLIENT_ID))));
            print(admin, "any user", ClientQuotaFilter.contains(List.of(ClientQuotaFilterComponent.ofEntityType(ClientQuotaEntity.USER))));
        }
    }

    static void print(Admin admin, String label, ClientQuotaFilter filter) throws Exception {
        Map<String, String> lines = new TreeMap<>();
        admin.describeClientQuotas(filter).entities().get().forEach((entity, values) ->
            lines.put(new TreeMap<>(entity.entries()).toString(), new TreeMap<>(values).toString()));
        System.out.println(label + ": " + lines);
    }
}
