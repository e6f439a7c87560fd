import java.nio.charset.StandardCharsets;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;

import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.client.producer.SendStatus;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;

/**
 * Apache's remoting producer and push consumer (rocketmq-client 5.3.3), unchanged but for the route
 * poll, sending at a steady pace while the test kills brokers: the ground truth of the failover tests
 * (tests/test_remoting_failover.py).
 *
 * <pre>
 * RemotingFailoverTool NAMESRV TOPIC PRODUCER_GROUP CONSUMER_GROUP COUNT INTERVAL_MS TIMEOUT_S [GO_FILE]
 * </pre>
 * CONSUMER_GROUP "-" starts no consumer ("missing" is then -1). With GO_FILE the clients start at once and the sends wait until that file exists: a test starts the
 * JVM (seconds on a loaded machine) while its brokers start, and creates the file once the topic exists;
 * the route is then read once before the first send.
 * One JSON line per send ({"event":"sent"|"failed", "i", "t" (ms since start), "broker" or "error"}),
 * one per first delivery of a key ({"event":"consumed", "key"}), then a summary once every acknowledged
 * key was consumed or TIMEOUT_S passed after the last send. retryTimesWhenSendFailed stays at its default
 * (2: three attempts per send); the route poll is 1 s (pollNameServerInterval, default 30 s) so that the
 * clients read the new master's route within a second, as the test's bound assumes.
 */
public final class RemotingFailoverTool {
    private RemotingFailoverTool() {
    }

    private static String quote(String s) {
        return "\"" + s.replace("\\", "\\\\").replace("\"", "'").replace("\n", " ") + "\"";
    }

    private static synchronized void emit(String line) {
        System.out.println(line);
        System.out.flush();
    }

    public static void main(String[] args) throws Exception {
        if (args.length < 7) {
            System.err.println("usage: RemotingFailoverTool NAMESRV TOPIC PGROUP CGROUP COUNT INTERVAL_MS TIMEOUT_S");
            System.exit(2);
        }
        String namesrv = args[0];
        String topic = args[1];
        String pgroup = args[2];
        String cgroup = args[3];
        int count = Integer.parseInt(args[4]);
        long intervalMs = Long.parseLong(args[5]);
        long timeoutS = Long.parseLong(args[6]);
        java.nio.file.Path goFile = args.length > 7 ? java.nio.file.Paths.get(args[7]) : null;
        long start = System.currentTimeMillis();

        Set<String> acked = ConcurrentHashMap.newKeySet();
        Map<String, AtomicInteger> deliveries = new ConcurrentHashMap<>();
        // CONSUMER_GROUP "-": no consumer (a test that reads the stored messages itself)
        DefaultMQPushConsumer consumer = "-".equals(cgroup) ? null : new DefaultMQPushConsumer(cgroup);
        if (consumer != null) {
            consumer.setNamesrvAddr(namesrv);
            consumer.setPollNameServerInterval(1000);
            consumer.setMqClientApiTimeout(30_000);
            consumer.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
            consumer.subscribe(topic, "*");
            consumer.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
                for (MessageExt m : msgs) {
                    String key = m.getKeys();
                    if (deliveries.computeIfAbsent(key, k -> new AtomicInteger()).incrementAndGet() == 1) {
                        emit("{\"event\":\"consumed\",\"key\":" + quote(key) + ",\"t\":" + (System.currentTimeMillis() - start) + "}");
                    }
                }
                return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
            });
            consumer.start();
        }

        DefaultMQProducer producer = new DefaultMQProducer(pgroup);
        producer.setNamesrvAddr(namesrv);
        producer.setPollNameServerInterval(1000);
        producer.start();
        emit("{\"event\":\"started\",\"retryTimesWhenSendFailed\":" + producer.getRetryTimesWhenSendFailed()
            + ",\"sendMsgTimeout\":" + producer.getSendMsgTimeout() + "}");
        while (goFile != null && !java.nio.file.Files.exists(goFile)) {
            Thread.sleep(20);
        }
        for (int tries = 0; goFile != null && tries < 20; tries++) {
            try {  // the route once before the first timed send: a cold JVM's first name server call took 2 s
                producer.fetchPublishMessageQueues(topic);
                break;
            } catch (Exception e) {
                Thread.sleep(100);
            }
        }
        int failed = 0;
        for (int i = 0; i < count; i++) {
            String key = "fo-" + i;
            Message msg = new Message(topic, "TagA", key, ("failover-" + i).getBytes(StandardCharsets.UTF_8));
            long t0 = System.currentTimeMillis();
            try {
                SendResult res = producer.send(msg);
                if (res.getSendStatus() == SendStatus.SEND_OK) {
                    acked.add(key);
                    emit("{\"event\":\"sent\",\"i\":" + i + ",\"t\":" + (t0 - start) + ",\"broker\":"
                        + quote(res.getMessageQueue().getBrokerName()) + "}");
                } else {
                    failed++;
                    emit("{\"event\":\"failed\",\"i\":" + i + ",\"t\":" + (t0 - start) + ",\"error\":"
                        + quote(res.getSendStatus().toString()) + "}");
                }
            } catch (Exception e) {
                failed++;
                emit("{\"event\":\"failed\",\"i\":" + i + ",\"t\":" + (t0 - start) + ",\"error\":" + quote(e.toString()) + "}");
            }
            long wait = t0 + intervalMs - System.currentTimeMillis();
            if (wait > 0) {
                Thread.sleep(wait);
            }
        }
        producer.shutdown();
        long deadline = System.currentTimeMillis() + TimeUnit.SECONDS.toMillis(timeoutS);
        while (consumer != null && System.currentTimeMillis() < deadline && !deliveries.keySet().containsAll(acked)) {
            Thread.sleep(100);
        }
        if (consumer != null) {
            consumer.shutdown();
        }
        int missing = consumer == null ? -1 : 0;
        int duplicates = 0;
        for (String key : acked) {
            if (consumer != null && !deliveries.containsKey(key)) {
                missing++;
            }
        }
        for (AtomicInteger n : deliveries.values()) {
            duplicates += n.get() - 1;
        }
        emit("{\"event\":\"summary\",\"sent\":" + count + ",\"acked\":" + acked.size() + ",\"failed\":" + failed
            + ",\"consumed\":" + deliveries.size() + ",\"missing\":" + missing + ",\"duplicates\":" + duplicates + "}");
        System.exit(0);
    }
}
