import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
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
import org.apache.rocketmq.remoting.protocol.header.ExtraInfoUtil;
import org.apache.rocketmq.remoting.protocol.header.PopMessageRequestHeader;

/**
 * Apache's remoting client API for POP (rocketmq-client 5.3.3, MQClientAPIImpl.popMessageAsync and
 * ackMessageAsync): the requests its POP consumers send and its own parsing of the answers
 * (processPopResponse: the messages, the POP_CK extraInfo). The ack header is built from extraInfo
 * as DefaultMQPushConsumerImpl.ackAsync builds it (ExtraInfoUtil: real topic, queue id, offset).
 *
 * <pre>
 * RemotingPopTool BROKER_ADDR BROKER_NAME TOPIC GROUP COUNT TIMEOUT_S [batch]
 * </pre>
 * Pops (TAG *, every queue, 60 s invisible, 1 s long polls) until COUNT distinct messages arrived,
 * acks each, then pops once more. With "batch", the messages of each pop are acknowledged together
 * by one BATCH_ACK_MESSAGE (MQClientAPIImpl.batchAckMessageAsync with their extraInfo strings).
 * One JSON line per event: received, acked, final (the last pop's
 * status). Exit code 0 when COUNT arrived and were acked, else 1.
 */
public final class RemotingPopTool {
    private RemotingPopTool() {
    }

    private static PopResult pop(MQClientAPIImpl api, String addr, String brokerName, String topic, String group)
        throws Exception {
        PopMessageRequestHeader h = new PopMessageRequestHeader();
        h.setConsumerGroup(group);
        h.setTopic(topic);
        h.setQueueId(-1);
        h.setMaxMsgNums(8);
        h.setInvisibleTime(60_000);
        h.setPollTime(1_000);
        h.setBornTime(System.currentTimeMillis());
        h.setInitMode(0);
        h.setExpType("TAG");
        h.setExp("*");
        CountDownLatch done = new CountDownLatch(1);
        AtomicReference<PopResult> result = new AtomicReference<>();
        AtomicReference<Throwable> error = new AtomicReference<>();
        api.popMessageAsync(brokerName, addr, h, 10_000, new PopCallback() {
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
        done.await(20, TimeUnit.SECONDS);
        if (error.get() != null) {
            throw new IllegalStateException(error.get());
        }
        return result.get();
    }

    public static void main(String[] args) throws Exception {
        String addr = args[0];
        String brokerName = args[1];
        String topic = args[2];
        String group = args[3];
        int count = Integer.parseInt(args[4]);
        long deadline = System.currentTimeMillis() + Long.parseLong(args[5]) * 1000;
        boolean batch = args.length > 6 && "batch".equals(args[6]);
        ClientConfig config = new ClientConfig();
        config.setNamesrvAddr("127.0.0.1:1");  // not used: requests go straight to BROKER_ADDR
        MQClientInstance instance = MQClientManager.getInstance().getOrCreateMQClientInstance(config);
        MQClientAPIImpl api = instance.getMQClientAPIImpl();
        api.start();
        Set<String> acked = ConcurrentHashMap.newKeySet();
        int exit = 1;
        try {
            while (acked.size() < count && System.currentTimeMillis() < deadline) {
                PopResult res = pop(api, addr, brokerName, topic, group);
                if (res == null || res.getMsgFoundList() == null) {
                    continue;
                }
                List<String> extraInfos = new ArrayList<>();
                List<String> bodies = new ArrayList<>();
                for (MessageExt m : res.getMsgFoundList()) {
                    String extraInfo = m.getProperty("POP_CK");
                    System.out.println("{\"event\":\"received\",\"body\":\"" + new String(m.getBody(),
                        StandardCharsets.UTF_8) + "\",\"queueId\":" + m.getQueueId() + ",\"queueOffset\":"
                        + m.getQueueOffset() + ",\"extraInfo\":\"" + extraInfo + "\"}");
                    if (batch) {
                        extraInfos.add(extraInfo);
                        bodies.add(new String(m.getBody(), StandardCharsets.UTF_8));
                        continue;
                    }
                    String[] parts = ExtraInfoUtil.split(extraInfo);
                    AckMessageRequestHeader ack = new AckMessageRequestHeader();
                    ack.setConsumerGroup(group);
                    ack.setTopic(ExtraInfoUtil.getRealTopic(parts, topic, group));
                    ack.setQueueId(ExtraInfoUtil.getQueueId(parts));
                    ack.setOffset(ExtraInfoUtil.getQueueOffset(parts));
                    ack.setExtraInfo(extraInfo);
                    CountDownLatch done = new CountDownLatch(1);
                    AtomicReference<String> status = new AtomicReference<>("no answer");
                    api.ackMessageAsync(addr, 10_000, new AckCallback() {
                        @Override
                        public void onSuccess(AckResult ackResult) {
                            status.set(String.valueOf(ackResult.getStatus()));
                            done.countDown();
                        }

                        @Override
                        public void onException(Throwable e) {
                            status.set("error: " + e);
                            done.countDown();
                        }
                    }, ack);
                    done.await(20, TimeUnit.SECONDS);
                    System.out.println("{\"event\":\"acked\",\"body\":\"" + new String(m.getBody(), StandardCharsets.UTF_8)
                        + "\",\"status\":\"" + status.get().replace("\"", "'") + "\"}");
                    if ("OK".equals(status.get())) {
                        acked.add(new String(m.getBody(), StandardCharsets.UTF_8));
                    }
                }
                if (batch && !extraInfos.isEmpty()) {
                    CountDownLatch done = new CountDownLatch(1);
                    AtomicReference<String> status = new AtomicReference<>("no answer");
                    api.batchAckMessageAsync(addr, 10_000, new AckCallback() {
                        @Override
                        public void onSuccess(AckResult ackResult) {
                            status.set(String.valueOf(ackResult.getStatus()));
                            done.countDown();
                        }

                        @Override
                        public void onException(Throwable e) {
                            status.set("error: " + e);
                            done.countDown();
                        }
                    }, topic, group, extraInfos);
                    done.await(20, TimeUnit.SECONDS);
                    for (String body : bodies) {
                        System.out.println("{\"event\":\"acked\",\"body\":\"" + body + "\",\"status\":\""
                            + status.get().replace("\"", "'") + "\",\"batch\":" + bodies.size() + "}");
                        if ("OK".equals(status.get())) {
                            acked.add(body);
                        }
                    }
                }
            }
            PopResult last = pop(api, addr, brokerName, topic, group);
            System.out.println("{\"event\":\"final\",\"status\":\"" + (last == null ? "none" : last.getPopStatus())
                + "\",\"found\":" + (last == null || last.getMsgFoundList() == null ? 0 : last.getMsgFoundList().size())
                + "}");
            exit = acked.size() >= count ? 0 : 1;
        } finally {
            api.shutdown();
        }
        System.exit(exit);
    }
}
