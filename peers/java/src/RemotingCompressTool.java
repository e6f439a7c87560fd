import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;

import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.client.producer.SendStatus;
import org.apache.rocketmq.common.compression.CompressionType;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;

/**
 * Apache's remoting producer (rocketmq-client 5.3.3) with a compressType, and a push consumer that
 * reads the bodies back (tests/test_remoting_compression.py).
 *
 * <pre>
 * RemotingCompressTool NAMESRV TOPIC GROUP LZ4|ZSTD|ZLIB COUNT SIZE TIMEOUT_S
 * </pre>
 * Body i is "TYPE-i|" repeated to SIZE bytes (the test rebuilds it); SIZE above the producer's
 * compressMsgBodyOverHowmuch (4096) makes the producer compress it. One JSON line per send
 * ({"event":"sent","key"}) and per first delivery ({"event":"consumed","key","sha256","len"}).
 * Exit 1 when a send is not SEND_OK or not every message arrives in time.
 */
public final class RemotingCompressTool {
    private RemotingCompressTool() {
    }

    static byte[] body(String type, int i, int size) {
        String unit = type + "-" + i + "|";
        StringBuilder sb = new StringBuilder(size + unit.length());
        while (sb.length() < size) {
            sb.append(unit);
        }
        return sb.substring(0, size).getBytes(StandardCharsets.UTF_8);
    }

    static String sha256(byte[] data) throws Exception {
        StringBuilder hex = new StringBuilder();
        for (byte b : MessageDigest.getInstance("SHA-256").digest(data)) {
            hex.append(String.format("%02x", b));
        }
        return hex.toString();
    }

    private static synchronized void emit(String line) {
        System.out.println(line);
        System.out.flush();
    }

    public static void main(String[] args) throws Exception {
        if (args.length < 7) {
            System.err.println("usage: RemotingCompressTool NAMESRV TOPIC GROUP LZ4|ZSTD|ZLIB COUNT SIZE TIMEOUT_S");
            System.exit(2);
        }
        String namesrv = args[0];
        String topic = args[1];
        String group = args[2];
        String type = args[3];
        int count = Integer.parseInt(args[4]);
        int size = Integer.parseInt(args[5]);
        long timeoutS = Long.parseLong(args[6]);

        DefaultMQProducer producer = new DefaultMQProducer(group + "P");
        producer.setNamesrvAddr(namesrv);
        producer.setMqClientApiTimeout(30_000);
        producer.setSendMsgTimeout(30_000);
        producer.setCompressType(CompressionType.of(type));
        producer.start();
        emit("{\"event\":\"started\",\"compressType\":\"" + producer.getCompressType() + "\",\"compressor\":\""
            + producer.getCompressor().getClass().getSimpleName() + "\",\"compressOver\":"
            + producer.getCompressMsgBodyOverHowmuch() + "}");
        for (int i = 0; i < count; i++) {
            String key = type + "-key-" + i;
            SendResult res = producer.send(new Message(topic, "TagC", key, body(type, i, size)));
            if (res.getSendStatus() != SendStatus.SEND_OK) {
                System.err.println("send " + i + ": " + res.getSendStatus());
                System.exit(1);
            }
            emit("{\"event\":\"sent\",\"key\":\"" + key + "\"}");
        }
        producer.shutdown();

        Map<String, Boolean> seen = new ConcurrentHashMap<>();
        CountDownLatch done = new CountDownLatch(count);
        DefaultMQPushConsumer consumer = new DefaultMQPushConsumer(group);
        consumer.setNamesrvAddr(namesrv);
        consumer.setMqClientApiTimeout(30_000);
        consumer.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        consumer.subscribe(topic, "*");
        consumer.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
            for (MessageExt m : msgs) {
                if (seen.putIfAbsent(m.getKeys(), Boolean.TRUE) == null) {
                    try {
                        emit("{\"event\":\"consumed\",\"key\":\"" + m.getKeys() + "\",\"sha256\":\"" + sha256(m.getBody())
                            + "\",\"len\":" + m.getBody().length + ",\"sysFlag\":" + m.getSysFlag() + "}");
                    } catch (Exception e) {
                        return ConsumeConcurrentlyStatus.RECONSUME_LATER;
                    }
                    done.countDown();
                }
            }
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        consumer.start();
        boolean ok = done.await(timeoutS, TimeUnit.SECONDS);
        consumer.shutdown();
        if (!ok) {
            System.err.println("timed out with " + seen.size() + " of " + count + " messages");
            System.exit(1);
        }
        System.exit(0);
    }
}
