import java.nio.charset.StandardCharsets;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;

import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.MessageExt;

/**
 * Apache's push consumer (rocketmq-client 5.3.3) in POP mode: {@code setClientRebalance(false)} makes it
 * ask the broker for its queues (QUERY_ASSIGNMENT), and the broker's answer (mode POP, once set by
 * SET_MESSAGE_REQUEST_MODE, mqadmin setConsumeMode; PULL by default, then it pulls) makes it pop
 * (POP_MESSAGE), acknowledge (ACK_MESSAGE) and, for a message its listener returns RECONSUME_LATER,
 * extend the invisible time (CHANGE_MESSAGE_INVISIBLETIME) so it comes back.
 *
 * <pre>
 * RemotingPopConsumerTool NAMESRV TOPIC GROUP COUNT TIMEOUT_S [RETRY_BODY]
 * </pre>
 * One JSON line per delivery: {"event":"received","body":...,"reconsumeTimes":N}. The delivery of
 * RETRY_BODY with reconsumeTimes 0 answers RECONSUME_LATER. Exit code 0 once COUNT distinct bodies were
 * consumed successfully (and RETRY_BODY redelivered, when given) within TIMEOUT_S, else 1.
 */
public final class RemotingPopConsumerTool {
    private RemotingPopConsumerTool() {
    }

    public static void main(String[] args) throws Exception {
        String namesrv = args[0];
        String topic = args[1];
        String group = args[2];
        int count = Integer.parseInt(args[3]);
        long timeoutS = Long.parseLong(args[4]);
        String retryBody = args.length > 5 ? args[5] : null;
        Set<String> done = ConcurrentHashMap.newKeySet();
        CountDownLatch latch = new CountDownLatch(count);
        DefaultMQPushConsumer consumer = new DefaultMQPushConsumer(group);
        consumer.setNamesrvAddr(namesrv);
        consumer.setMqClientApiTimeout(30_000);
        consumer.setClientRebalance(false);
        consumer.setPopInvisibleTime(60_000);
        // a message put back by RECONSUME_LATER is made invisible for a delay-level time; keep it short
        consumer.setSuspendCurrentQueueTimeMillis(1_000);
        consumer.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        consumer.subscribe(topic, "*");
        consumer.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
            ConsumeConcurrentlyStatus status = ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
            for (MessageExt m : msgs) {
                String body = new String(m.getBody(), StandardCharsets.UTF_8);
                System.out.println("{\"event\":\"received\",\"body\":\"" + body + "\",\"reconsumeTimes\":"
                    + m.getReconsumeTimes() + ",\"topic\":\"" + m.getTopic() + "\"}");
                if (body.equals(retryBody) && m.getReconsumeTimes() == 0) {
                    status = ConsumeConcurrentlyStatus.RECONSUME_LATER;
                }
            }
            if (status == ConsumeConcurrentlyStatus.CONSUME_SUCCESS) {
                for (MessageExt m : msgs) {
                    if (done.add(new String(m.getBody(), StandardCharsets.UTF_8))) {
                        latch.countDown();
                    }
                }
            }
            return status;
        });
        consumer.start();
        boolean ok = latch.await(timeoutS, TimeUnit.SECONDS);
        // let the last acks (sent asynchronously after the listener returned) leave before shutting down
        Thread.sleep(1_000);
        consumer.shutdown();
        if (!ok) {
            System.err.println("timed out with " + done.size() + " of " + count + " messages");
        }
        System.exit(ok ? 0 : 1);
    }
}
