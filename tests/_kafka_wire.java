// Kafka's generated message classes behind a line protocol, for tests/test_fetch_request.py:
// "fetchreq V HEX" / "metareq V HEX" decode a request (header v2 + body) and answer "OK <the
// same message encoded again> <its toString>"; "fetchresp V CORR" / "metaresp V CORR" answer
// "OK <a sample response, header v1 included>". Run with the kafka-clients 4.x jar: java -cp
// <libs>/* _kafka_wire.java (a single-file source program, compiled in memory).
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.List;
import org.apache.kafka.common.Uuid;
import org.apache.kafka.common.message.FetchRequestData;
import org.apache.kafka.common.message.FetchResponseData;
import org.apache.kafka.common.message.MetadataRequestData;
import org.apache.kafka.common.message.MetadataResponseData;
import org.apache.kafka.common.message.RequestHeaderData;
import org.apache.kafka.common.message.ResponseHeaderData;
import org.apache.kafka.common.protocol.ByteBufferAccessor;
import org.apache.kafka.common.protocol.Message;
import org.apache.kafka.common.protocol.ObjectSerializationCache;
import org.apache.kafka.common.record.internal.MemoryRecords;

public class KafkaWire {
    static String hex(ByteBuffer b) {
        StringBuilder s = new StringBuilder();
        ByteBuffer d = b.duplicate();
        while (d.hasRemaining()) s.append(String.format("%02x", d.get() & 0xff));
        return s.toString();
    }

    static byte[] unhex(String s) {
        byte[] out = new byte[s.length() / 2];
        for (int i = 0; i < out.length; i++) out[i] = (byte) Integer.parseInt(s.substring(2 * i, 2 * i + 2), 16);
        return out;
    }

    static ByteBuffer write(Message header, short hv, Message body, short v) {
        ObjectSerializationCache c = new ObjectSerializationCache();
        int hs = header.size(c, hv);
        int bs = body.size(c, v);
        ByteBuffer buf = ByteBuffer.allocate(hs + bs);
        ByteBufferAccessor acc = new ByteBufferAccessor(buf);
        header.write(acc, c, hv);
        body.write(acc, c, v);
        buf.flip();
        return buf;
    }

    static Uuid id(int n) {
        return new Uuid(0x1111222233334444L * n, 0x5555666677778888L + n);
    }

    static MemoryRecords bytes(int n, int seed) {
        byte[] b = new byte[n];
        for (int i = 0; i < n; i++) b[i] = (byte) (i * 31 + seed);
        return MemoryRecords.readableRecords(ByteBuffer.wrap(b));
    }

    static FetchResponseData sampleFetchResponse(short v) {
        FetchResponseData r = new FetchResponseData().setThrottleTimeMs(12).setErrorCode((short) 0).setSessionId(123456);
        FetchResponseData.FetchableTopicResponse alpha = new FetchResponseData.FetchableTopicResponse().setTopic("alpha").setTopicId(id(1));
        List<FetchResponseData.AbortedTransaction> aborted = new ArrayList<>();
        aborted.add(new FetchResponseData.AbortedTransaction().setProducerId(7).setFirstOffset(100));
        aborted.add(new FetchResponseData.AbortedTransaction().setProducerId(8).setFirstOffset(200));
        alpha.partitions().add(new FetchResponseData.PartitionData().setPartitionIndex(0).setErrorCode((short) 0)
            .setHighWatermark(1000).setLastStableOffset(900).setLogStartOffset(10).setAbortedTransactions(aborted)
            .setPreferredReadReplica(2).setRecords(bytes(300, 1)));
        alpha.partitions().add(new FetchResponseData.PartitionData().setPartitionIndex(1).setErrorCode((short) 6)
            .setHighWatermark(-1).setLastStableOffset(-1).setLogStartOffset(-1)
            .setCurrentLeader(new FetchResponseData.LeaderIdAndEpoch().setLeaderId(3).setLeaderEpoch(17))
            .setRecords(MemoryRecords.EMPTY));
        alpha.partitions().add(new FetchResponseData.PartitionData().setPartitionIndex(2).setErrorCode((short) 0)
            .setHighWatermark(5000).setLastStableOffset(5000).setLogStartOffset(0)
            .setDivergingEpoch(new FetchResponseData.EpochEndOffset().setEpoch(5).setEndOffset(4242))
            .setSnapshotId(new FetchResponseData.SnapshotId().setEndOffset(77).setEpoch(4))
            .setRecords(null));
        List<FetchResponseData.AbortedTransaction> many = new ArrayList<>();
        for (int i = 0; i < 200; i++) many.add(new FetchResponseData.AbortedTransaction().setProducerId(1000 + i).setFirstOffset(i * 10));
        alpha.partitions().add(new FetchResponseData.PartitionData().setPartitionIndex(3).setErrorCode((short) 0)
            .setHighWatermark(99999).setLastStableOffset(99000).setLogStartOffset(5).setAbortedTransactions(many)
            .setRecords(bytes(70000, 3)));
        r.responses().add(alpha);
        FetchResponseData.FetchableTopicResponse beta = new FetchResponseData.FetchableTopicResponse().setTopic("beta-\u00fc").setTopicId(id(2));
        beta.partitions().add(new FetchResponseData.PartitionData().setPartitionIndex(0).setHighWatermark(5)
            .setLastStableOffset(5).setLogStartOffset(0).setRecords(bytes(5, 9)));
        r.responses().add(beta);
        FetchResponseData.FetchableTopicResponse gamma = new FetchResponseData.FetchableTopicResponse().setTopic("gamma").setTopicId(id(3));
        gamma.partitions().add(new FetchResponseData.PartitionData().setPartitionIndex(4).setHighWatermark(1)
            .setLastStableOffset(1).setLogStartOffset(0).setRecords(bytes(20, 5)));
        r.responses().add(gamma);
        if (v >= 16) {
            r.nodeEndpoints().add(new FetchResponseData.NodeEndpoint().setNodeId(3).setHost("broker3.example").setPort(9093).setRack("rack-a"));
            r.nodeEndpoints().add(new FetchResponseData.NodeEndpoint().setNodeId(4).setHost("h4").setPort(9094).setRack(null));
        }
        return r;
    }

    static MetadataResponseData sampleMetadataResponse(short v) {
        MetadataResponseData r = new MetadataResponseData().setThrottleTimeMs(0).setClusterId("c1").setControllerId(1);
        r.brokers().add(new MetadataResponseData.MetadataResponseBroker().setNodeId(1).setHost("h1").setPort(9092).setRack("r1"));
        MetadataResponseData.MetadataResponseTopic t = new MetadataResponseData.MetadataResponseTopic().setName("alpha").setTopicId(id(1)).setErrorCode((short) 0);
        List<Integer> reps = new ArrayList<>();
        reps.add(1); reps.add(2);
        t.partitions().add(new MetadataResponseData.MetadataResponsePartition().setPartitionIndex(0).setLeaderId(1).setLeaderEpoch(3).setReplicaNodes(reps).setIsrNodes(reps).setOfflineReplicas(new ArrayList<>()));
        r.topics().add(t);
        r.topics().add(new MetadataResponseData.MetadataResponseTopic().setName("missing").setTopicId(Uuid.ZERO_UUID).setErrorCode((short) 3));
        return r;
    }

    public static void main(String[] args) throws Exception {
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in));
        String line;
        while ((line = in.readLine()) != null) {
            String[] a = line.trim().split(" ");
            if (a.length == 0 || a[0].isEmpty()) continue;
            short v = Short.parseShort(a[1]);
            switch (a[0]) {
                case "fetchreq": {
                    ByteBuffer buf = ByteBuffer.wrap(unhex(a[2]));
                    RequestHeaderData h = new RequestHeaderData(new ByteBufferAccessor(buf), (short) 2);
                    FetchRequestData d = new FetchRequestData(new ByteBufferAccessor(buf), v);
                    if (buf.hasRemaining()) throw new IllegalStateException(buf.remaining() + " bytes left");
                    System.out.println("OK " + hex(write(h, (short) 2, d, v)) + " " + h + " " + d);
                    break;
                }
                case "metareq": {
                    ByteBuffer buf = ByteBuffer.wrap(unhex(a[2]));
                    RequestHeaderData h = new RequestHeaderData(new ByteBufferAccessor(buf), (short) 2);
                    MetadataRequestData d = new MetadataRequestData(new ByteBufferAccessor(buf), v);
                    if (buf.hasRemaining()) throw new IllegalStateException(buf.remaining() + " bytes left");
                    System.out.println("OK " + hex(write(h, (short) 2, d, v)) + " " + h + " " + d);
                    break;
                }
                case "fetchresp": {
                    ResponseHeaderData h = new ResponseHeaderData().setCorrelationId(Integer.parseInt(a[2]));
                    System.out.println("OK " + hex(write(h, (short) 1, sampleFetchResponse(v), v)));
                    break;
                }
                case "metaresp": {
                    ResponseHeaderData h = new ResponseHeaderData().setCorrelationId(Integer.parseInt(a[2]));
                    System.out.println("OK " + hex(write(h, (short) 1, sampleMetadataResponse(v), v)));
                    break;
                }
                default:
                    throw new IllegalArgumentException(a[0]);
            }
            System.out.flush();
        }
    }
}
