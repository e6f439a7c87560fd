import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicReference;

import org.apache.rocketmq.client.ClientConfig;
import org.apache.rocketmq.client.consumer.AckCallback;
import org.apache.rocketmq.client.consumer.AckResult;
import org.apache.rocketmq.client.consumer.PopCallback;
import org.apache.rocketmq.client.consumer.PopResult;
import org.apache.rocketmq.client.impl.MQClientAPIImpl;
import org.apache.rocketmq.client.impl.MQClientManager;
import org.apache.rocketmq.client.impl.factory.MQClientInstance;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.remoting.protocol.header.AckMessageRequestHeader;
import org.apache.rocketmq.remoting.protocol.header.ChangeInvisibleTimeRequestHeader;
import org.apache.rocketmq.remoting.protocol.header.ExtraInfoUtil;
import org.apache.rocketmq.remoting.protocol.header.PopMessageRequestHeader;

/**
 * Ordered POP with Apache's remoting client API (rocketmq-client 5.3.3): MQClientAPIImpl.popMessageAsync
 * with {@code order=true}, whose processPopResponse builds each message's POP_CK from the answer's
 * startOffsetInfo/msgOffsetInfo and its reconsumeTimes from orderCountInfo; ackMessageAsync and
 * changeInvisibleTimeAsync with the headers built from that POP_CK, as DefaultMQPushConsumerImpl does.
 *
 * <pre>
 * RemotingOrderPopTool BROKER_ADDR BROKER_NAME TOPIC GROUP
 * </pre>
 * The topic's queue 0 holds 6 messages. Steps, one JSON line each ("pop" with status, restNum, bodies,
 * reconsumeTimes, extraInfo; "ack"/"change" with status): 1 pop 2 (invisible 3 s); 2 pop again at once
 * (the queue is held); 3 pop until they come back after their invisible time; ack both; 4 pop 8; change
 * the first one's invisible time to 1 s and ack the others; 5 pop until it comes back; ack it; 6 a last
 * pop. Exit code 0 when every step got an answer.
 */
public final class RemotingOrderPopTool {
    private static MQClientAPIImpl api;
    private static String addr;
    private static String brokerName;
    private static String topic;
    private static String group;

    private RemotingOrderPopTool() {
    }

    private static PopResult pop(int max, long invisibleMs, long pollMs) throws Exception {
        PopMessageRequestHeader h = new PopMessageRequestHeader();
        h.setConsumerGroup(group);
        h.setTopic(topic);
        h.setQueueId(-1);
        h.setMaxMsgNums(max);
        h.setInvisibleTime(invisibleMs);
        h.setPollTime(pollMs);
        h.setBornTime(System.currentTimeMillis());
        h.setInitMode(0);
        h.setExpType("TAG");
        h.setExp("*");
        h.setOrder(Boolean.TRUE);
        CountDownLatch done = new CountDownLatch(1);
        AtomicReference<PopResult> result = new AtomicReference<>();
        AtomicReference<Throwable> error = new AtomicReference<>();
        api.popMessageAsync(brokerName, addr, h, pollMs + 10_000, new PopCallback() {
            @Override
            public void onSuccess(PopResult popResult) {
                result.set(popResult);
                done.countDown();
            }

            @Override
            public void onException(Throwable e) {
                error.set(e);
                done.countDown();
            }
        });
        done.await(pollMs + 20_000, TimeUnit.MILLISECONDS);
        if (error.get() != null) {
            throw new IllegalStateException(error.get());
        }
        return result.get();
    }

    private static List<MessageExt> report(int step, PopResult res) {
        List<MessageExt> found = res == null || res.getMsgFoundList() == null ? new ArrayList<>() : res.getMsgFoundList();
        StringBuilder b = new StringBuilder("{\"event\":\"pop\",\"step\":" + step + ",\"status\":\""
            + (res == null ? "none" : res.getPopStatus()) + "\",\"restNum\":" + (res == null ? -1 : res.getRestNum()));
        StringBuilder bodies = new StringBuilder();
        StringBuilder counts = new StringBuilder();
        StringBuilder infos = new StringBuilder();
        for (MessageExt m : found) {
            String sep = bodies.length() == 0 ? "" : ",";
            bodies.append(sep).append('"').append(new String(m.getBody(), StandardCharsets.UTF_8)).append('"');
            counts.append(sep).append(m.getReconsumeTimes());
            infos.append(sep).append('"').append(m.getProperty("POP_CK")).append('"');
        }
        b.append(",\"bodies\":[").append(bodies).append("],\"reconsumeTimes\":[").append(counts)
            .append("],\"extraInfo\":[").append(infos).append("]}");
        System.out.println(b);
        return found;
    }

    /** Pops (1 s long polls) until something comes, for at most 30 s: a held batch comes back after its time. */
    private static List<MessageExt> popUntilFound(int step, int max, long invisibleMs) throws Exception {
        long deadline = System.currentTimeMillis() + 30_000;
        while (true) {
            PopResult res = pop(max, invisibleMs, 1_000);
            List<MessageExt> found = res == null || res.getMsgFoundList() == null ? new ArrayList<>() : res.getMsgFoundList();
            if (!found.isEmpty() || System.currentTimeMillis() > deadline) {
                return report(step, res);
            }
        }
    }

    private static String await(CountDownLatch done, AtomicReference<String> status) throws InterruptedException {
        done.await(20, TimeUnit.SECONDS);
        return status.get().replace("\"", "'");
    }

    private static String ack(MessageExt m) throws Exception {
        String extraInfo = m.getProperty("POP_CK");
        String[] parts = ExtraInfoUtil.split(extraInfo);
        AckMessageRequestHeader h = new AckMessageRequestHeader();
        h.setConsumerGroup(group);
        h.setTopic(ExtraInfoUtil.getRealTopic(parts, topic, group));
        h.setQueueId(ExtraInfoUtil.getQueueId(parts));
        h.setOffset(ExtraInfoUtil.getQueueOffset(parts));
        h.setExtraInfo(extraInfo);
        CountDownLatch done = new CountDownLatch(1);
        AtomicReference<String> status = new AtomicReference<>("no answer");
        api.ackMessageAsync(addr, 10_000, callback(status, done, null), h);
        String got = await(done, status);
        System.out.println("{\"event\":\"ack\",\"body\":\"" + new String(m.getBody(), StandardCharsets.UTF_8)
            + "\",\"status\":\"" + got + "\"}");
        return got;
    }

    private static String change(MessageExt m, long invisibleMs) throws Exception {
        String extraInfo = m.getProperty("POP_CK");
        String[] parts = ExtraInfoUtil.split(extraInfo);
        ChangeInvisibleTimeRequestHeader h = new ChangeInvisibleTimeRequestHeader();
        h.setConsumerGroup(group);
        h.setTopic(ExtraInfoUtil.getRealTopic(parts, topic, group));
        h.setQueueId(ExtraInfoUtil.getQueueId(parts));
        h.setOffset(ExtraInfoUtil.getQueueOffset(parts));
        h.setExtraInfo(extraInfo);
        h.setInvisibleTime(invisibleMs);
        CountDownLatch done = new CountDownLatch(1);
        AtomicReference<String> status = new AtomicReference<>("no answer");
        AtomicReference<String> newInfo = new AtomicReference<>("");
        api.changeInvisibleTimeAsync(brokerName, addr, h, 10_000, callback(status, done, newInfo));
        String got = await(done, status);
        System.out.println("{\"event\":\"change\",\"body\":\"" + new String(m.getBody(), StandardCharsets.UTF_8)
            + "\",\"status\":\"" + got + "\",\"extraInfo\":\"" + newInfo.get() + "\"}");
        return got;
    }

    private static AckCallback callback(AtomicReference<String> status, CountDownLatch done,
        AtomicReference<String> extraInfo) {
        return new AckCallback() {
            @Override
            public void onSuccess(AckResult ackResult) {
                status.set(String.valueOf(ackResult.getStatus()));
                if (extraInfo != null) {
                    extraInfo.set(String.valueOf(ackResult.getExtraInfo()));
                }
                done.countDown();
            }

            @Override
            public void onException(Throwable e) {
                status.set("error: " + e);
                done.countDown();
            }
        };
    }

    public static void main(String[] args) throws Exception {
        addr = args[0];
        brokerName = args[1];
        topic = args[2];
        group = args[3];
        ClientConfig config = new ClientConfig();
        config.setNamesrvAddr("127.0.0.1:1");  // not used: requests go straight to BROKER_ADDR
        MQClientInstance instance = MQClientManager.getInstance().getOrCreateMQClientInstance(config);
        api = instance.getMQClientAPIImpl();
        api.start();
        try {
            List<MessageExt> first = report(1, pop(2, 3_000, 0));
            report(2, pop(2, 3_000, 0));
            List<MessageExt> again = popUntilFound(3, 2, 3_000);
            for (MessageExt m : again) {
                ack(m);
            }
            List<MessageExt> rest = report(4, pop(8, 60_000, 0));
            if (!rest.isEmpty()) {
                change(rest.get(0), 1_000);
                for (MessageExt m : rest.subList(1, rest.size())) {
                    ack(m);
                }
            }
            for (MessageExt m : popUntilFound(5, 8, 60_000)) {
                ack(m);
            }
            report(6, pop(8, 60_000, 1_000));
            System.out.println("{\"event\":\"done\",\"first\":" + first.size() + "}");
        } finally {
            api.shutdown();
        }
        System.exit(0);
    }
}
