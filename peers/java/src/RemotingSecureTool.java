import java.nio.charset.StandardCharsets;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;

import org.apache.rocketmq.acl.common.AclClientRPCHook;
import org.apache.rocketmq.acl.common.SessionCredentials;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.exception.MQBrokerException;
import org.apache.rocketmq.client.exception.MQClientException;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.remoting.RPCHook;

/**
 * Apache's remoting client (rocketmq-client 5.3.3) with the security options RocketMQ users set:
 * ACL through {@code AclClientRPCHook} and TLS through {@code -Dtls.enable=true} (TlsSystemConfig;
 * with its default {@code tls.test.mode.enable=true} the client does not verify the server).
 *
 * <pre>
 * RemotingSecureTool send    NAMESRV TOPIC GROUP COUNT [ACCESS_KEY SECRET_KEY]
 * RemotingSecureTool consume NAMESRV TOPIC GROUP COUNT TIMEOUT_S [ACCESS_KEY SECRET_KEY]
 * </pre>
 * One JSON line per outcome: {"event":"sent",...}, {"event":"refused","code":N,"message":...},
 * {"event":"received",...}. Exit code 0 when every send succeeded / COUNT messages arrived, else 1.
 * No message trace (RemotingTool covers it). Built by the test that uses it (tests/test_remoting_java_secure.py).
 */
public final class RemotingSecureTool {
    private RemotingSecureTool() {
    }

    private static String quote(String s) {
        return "\"" + s.replace("\\", "\\\\").replace("\"", "\\\"").replace("\n", " ") + "\"";
    }

    public static void main(String[] args) throws Exception {
        if (args.length < 5) {
            System.err.println("usage: RemotingSecureTool send|consume NAMESRV TOPIC GROUP COUNT [TIMEOUT_S] [AK SK]");
            System.exit(2);
        }
        String namesrv = args[1];
        String topic = args[2];
        String group = args[3];
        int count = Integer.parseInt(args[4]);
        boolean send = "send".equals(args[0]);
        int keyAt = send ? 5 : 6;
        RPCHook hook = args.length > keyAt + 1
            ? new AclClientRPCHook(new SessionCredentials(args[keyAt], args[keyAt + 1])) : null;
        if (send) {
            DefaultMQProducer producer = new DefaultMQProducer(group, hook);
            producer.setNamesrvAddr(namesrv);
            // generous timeouts: the default 3 s route query times out on a loaded 2-core machine
            producer.setMqClientApiTimeout(30_000);
            producer.setSendMsgTimeout(30_000);
            producer.setRetryTimesWhenSendFailed(0);
            producer.start();
            int failed = 0;
            try {
                for (int i = 0; i < count; i++) {
                    Message msg = new Message(topic, "TagS", group + "-key-" + i,
                        ("secure-" + i).getBytes(StandardCharsets.UTF_8));
                    try {
                        SendResult res = producer.send(msg);
                        System.out.println("{\"event\":\"sent\",\"msgId\":" + quote(res.getMsgId()) + ",\"status\":"
                            + quote(res.getSendStatus().name()) + "}");
                    } catch (MQBrokerException | MQClientException e) {
                        // a code the producer retries on (NO_PERMISSION among them) comes wrapped in MQClientException
                        Throwable cause = e instanceof MQClientException && e.getCause() != null ? e.getCause() : e;
                        if (!(cause instanceof MQBrokerException)) {
                            throw e;
                        }
                        MQBrokerException refused = (MQBrokerException) cause;
                        failed++;
                        System.out.println("{\"event\":\"refused\",\"code\":" + refused.getResponseCode()
                            + ",\"message\":" + quote(String.valueOf(refused.getErrorMessage())) + "}");
                    }
                }
            } finally {
                producer.shutdown();
            }
            System.exit(failed == 0 ? 0 : 1);
        }
        if (!"consume".equals(args[0])) {
            System.err.println("unknown command " + args[0]);
            System.exit(2);
        }
        long timeoutS = Long.parseLong(args[5]);
        Set<String> seen = ConcurrentHashMap.newKeySet();
        CountDownLatch done = new CountDownLatch(count);
        DefaultMQPushConsumer consumer = new DefaultMQPushConsumer(group, hook);
        consumer.setNamesrvAddr(namesrv);
        consumer.setMqClientApiTimeout(30_000);
        consumer.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        consumer.subscribe(topic, "*");
        consumer.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
            for (MessageExt m : msgs) {
                if (seen.add(m.getMsgId())) {
                    System.out.println("{\"event\":\"received\",\"msgId\":" + quote(m.getMsgId()) + ",\"body\":"
                        + quote(new String(m.getBody(), StandardCharsets.UTF_8)) + "}");
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
        }
        System.exit(ok ? 0 : 1);
    }
}
