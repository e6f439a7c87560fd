import java.nio.charset.StandardCharsets;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;

import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.hook.ConsumeMessageContext;
import org.apache.rocketmq.client.hook.ConsumeMessageHook;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.client.producer.SendStatus;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;

/**
 * Apache's remoting client (org.apache.rocketmq:rocketmq-client) with its message-trace hook on,
 * for peers/reference_cluster.py: the records it writes to RMQ_SYS_TRACE_TOPIC are what
 * RocketScope's trace lookup must find on an Apache cluster.
 *
 * <pre>
 * RemotingTool send    NAMESRV TOPIC GROUP COUNT   one JSON line per message: msgId, offsetMsgId, key
 * RemotingTool consume NAMESRV TOPIC GROUP COUNT TIMEOUT_S
 * </pre>
 * Trace is always on (enableMsgTrace=true, default trace topic). The exit code is 1 when a send
 * is not SEND_OK or fewer than COUNT messages arrive in time.
 */
public final class RemotingTool {
    private RemotingTool() {
    }

    public static void main(String[] args) throws Exception {
        if (args.length < 5) {
            System.err.println("usage: RemotingTool send|consume NAMESRV TOPIC GROUP COUNT [TIMEOUT_S]");
            System.exit(2);
        }
        String namesrv = args[1];
        String topic = args[2];
        String group = args[3];
        int count = Integer.parseInt(args[4]);
        if ("send".equals(args[0])) {
            DefaultMQProducer producer = new DefaultMQProducer(group, true, null);
            producer.setNamesrvAddr(namesrv);
            // generous timeouts: the default 3 s route query times out on a loaded 2-core machine
            producer.setMqClientApiTimeout(30_000);
            producer.setSendMsgTimeout(30_000);
            producer.start();
            try {
                for (int i = 0; i < count; i++) {
                    String key = group + "-key-" + i;
                    Message msg = new Message(topic, "TagA", key, ("remoting-" + i).getBytes(StandardCharsets.UTF_8));
                    SendResult res = producer.send(msg);
                    if (res.getSendStatus() != SendStatus.SEND_OK) {
                        System.err.println("send " + i + ": " + res.getSendStatus());
                        System.exit(1);
                    }
                    System.out.println("{\"msgId\":\"" + res.getMsgId() + "\",\"offsetMsgId\":\"" + res.getOffsetMsgId()
                        + "\",\"key\":\"" + key + "\"}");
                }
            } finally {
                // shutdown flushes the trace dispatcher (AsyncTraceDispatcher) before the producer stops
                producer.shutdown();
            }
        } else if ("consume".equals(args[0])) {
            long timeoutS = args.length > 5 ? Long.parseLong(args[5]) : 60;
            Set<String> seen = ConcurrentHashMap.newKeySet();
            Set<String> counted = ConcurrentHashMap.newKeySet();
            CountDownLatch done = new CountDownLatch(count);
            CountDownLatch hooksReady = new CountDownLatch(1);
            DefaultMQPushConsumer consumer = new DefaultMQPushConsumer(group, true, null);
            consumer.setNamesrvAddr(namesrv);
            consumer.setMqClientApiTimeout(30_000);
            consumer.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
            consumer.subscribe(topic, "*");
            consumer.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
                try {
                    // start() registers the client's trace hook after consumption may begin: a message
                    // is consumed only once both hooks are in place, so each one gets its SubAfter record
                    hooksReady.await();
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                    return ConsumeConcurrentlyStatus.RECONSUME_LATER;
                }
                for (org.apache.rocketmq.common.message.MessageExt m : msgs) {
                    if (seen.add(m.getMsgId())) {
                        System.out.println("{\"msgId\":\"" + m.getMsgId() + "\",\"reconsumeTimes\":" + m.getReconsumeTimes() + "}");
                    }
                }
                return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
            });
            consumer.start();
            // Registered after start(), so after the trace hook: its consumeMessageAfter runs once the trace
            // hook has queued the SubAfter record, and shutdown() then flushes that record (no sleep needed).
            consumer.getDefaultMQPushConsumerImpl().registerConsumeMessageHook(new ConsumeMessageHook() {
                @Override
                public String hookName() {
                    return "RemotingToolCount";
                }

                @Override
                public void consumeMessageBefore(ConsumeMessageContext context) {
                }

                @Override
                public void consumeMessageAfter(ConsumeMessageContext context) {
                    if (context == null || context.getMsgList() == null) {
                        return;
                    }
                    for (org.apache.rocketmq.common.message.MessageExt m : context.getMsgList()) {
                        if (counted.add(m.getMsgId())) {
                            done.countDown();
                        }
                    }
                }
            });
            hooksReady.countDown();
            boolean ok = done.await(timeoutS, TimeUnit.SECONDS);
            consumer.shutdown();
            if (!ok) {
                System.err.println("timed out with " + counted.size() + " of " + count + " messages");
                System.exit(1);
            }
        } else {
            System.err.println("unknown command " + args[0]);
            System.exit(2);
        }
        System.exit(0);
    }
}
