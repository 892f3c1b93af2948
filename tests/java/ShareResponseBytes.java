// Prints the ShareFetch and ShareAcknowledge response bodies (v1, v2) that Kafka's own generated
// message classes encode, one line each: "<fetch|acknowledge> v<version> <hex>". They are the golden
// bodies of tests/unit/test_share.py (a java-marked test there checks they still match).
// Run as a single-file program:
//   java -cp '<kafka libs>/*' ShareResponseBytes.java
import java.nio.ByteBuffer;
import java.util.HexFormat;
import org.apache.kafka.common.Uuid;
import org.apache.kafka.common.compress.Compression;
import org.apache.kafka.common.message.ShareAcknowledgeResponseData;
import org.apache.kafka.common.message.ShareFetchResponseData;
import org.apache.kafka.common.protocol.MessageUtil;
import org.apache.kafka.common.record.MemoryRecords;
import org.apache.kafka.common.record.SimpleRecord;

public class ShareResponseBytes {
    public static void main(String[] args) {
        Uuid topic = new Uuid(0x0102030405060708L, 0x090a0b0c0d0e0f10L);
        for (short version = 1; version <= 2; version++) {
            ShareFetchResponseData fetch = new ShareFetchResponseData().setThrottleTimeMs(7).setAcquisitionLockTimeoutMs(30000);
            ShareFetchResponseData.ShareFetchableTopicResponse t = new ShareFetchResponseData.ShareFetchableTopicResponse().setTopicId(topic);
            t.partitions().add(new ShareFetchResponseData.PartitionData().setPartitionIndex(0)
                .setRecords(MemoryRecords.withRecords(Compression.NONE, new SimpleRecord("key".getBytes(), "value".getBytes())))
                .setAcquiredRecords(java.util.List.of(new ShareFetchResponseData.AcquiredRecords().setFirstOffset(0).setLastOffset(0).setDeliveryCount((short) 1)))
                .setCurrentLeader(new ShareFetchResponseData.LeaderIdAndEpoch().setLeaderId(1).setLeaderEpoch(3)));
            t.partitions().add(new ShareFetchResponseData.PartitionData().setPartitionIndex(1).setErrorCode((short) 6)
                .setErrorMessage("not the leader").setRecords(MemoryRecords.EMPTY)
                .setCurrentLeader(new ShareFetchResponseData.LeaderIdAndEpoch().setLeaderId(2).setLeaderEpoch(4)));
            fetch.responses().add(t);
            fetch.nodeEndpoints().add(new ShareFetchResponseData.NodeEndpoint().setNodeId(2).setHost("kafka-2.internal").setPort(9092).setRack("rack-b"));
            System.out.println("fetch v" + version + " " + hex(MessageUtil.toByteBufferAccessor(fetch, version).buffer()));

            ShareAcknowledgeResponseData ack = new ShareAcknowledgeResponseData().setThrottleTimeMs(7).setAcquisitionLockTimeoutMs(30000);
            ShareAcknowledgeResponseData.ShareAcknowledgeTopicResponse at = new ShareAcknowledgeResponseData.ShareAcknowledgeTopicResponse().setTopicId(topic);
            at.partitions().add(new ShareAcknowledgeResponseData.PartitionData().setPartitionIndex(1).setErrorCode((short) 6)
                .setCurrentLeader(new ShareAcknowledgeResponseData.LeaderIdAndEpoch().setLeaderId(2).setLeaderEpoch(4)));
            ack.responses().add(at);
            ack.nodeEndpoints().add(new ShareAcknowledgeResponseData.NodeEndpoint().setNodeId(2).setHost("kafka-2.internal").setPort(9092).setRack(null));
            System.out.println("acknowledge v" + version + " " + hex(MessageUtil.toByteBufferAccessor(ack, version).buffer()));
        }
    }

    static String hex(ByteBuffer buffer) {
        byte[] bytes = new byte[buffer.remaining()];
        buffer.duplicate().get(bytes);
        return HexFormat.of().formatHex(bytes);
    }
}
