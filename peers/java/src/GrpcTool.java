import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.Collections;
import java.util.HashSet;
import java.util.List;
import java.util.Set;

import org.apache.rocketmq.client.apis.ClientConfiguration;
import org.apache.rocketmq.client.apis.ClientServiceProvider;
import org.apache.rocketmq.client.apis.consumer.FilterExpression;
import org.apache.rocketmq.client.apis.consumer.FilterExpressionType;
import org.apache.rocketmq.client.apis.consumer.SimpleConsumer;
import org.apache.rocketmq.client.apis.message.Message;
import org.apache.rocketmq.client.apis.message.MessageView;
import org.apache.rocketmq.client.apis.producer.Producer;
import org.apache.rocketmq.client.apis.producer.SendReceipt;

/**
 * Apache's RocketMQ 5.x gRPC client for Java (org.apache.rocketmq:rocketmq-client-java), so the
 * differential tests can run one scenario with the same Java client against Apache's proxy and
 * against RocketScope.
 *
 * <pre>
 * GrpcTool send    ENDPOINT TOPIC COUNT            one JSON line per message: msgId
 * GrpcTool receive ENDPOINT TOPIC GROUP COUNT TIMEOUT_S   receives and acks; one JSON line per message
 * </pre>
 * Plaintext (enableSsl(false)). A failure prints the exception's class and message on stderr
 * and exits 1, so a test can compare the errors of the two servers too.
 */
public final class GrpcTool {
    private GrpcTool() {
    }

    public static void main(String[] args) throws Exception {
        if (args.length < 4) {
            System.err.println("usage: GrpcTool send ENDPOINT TOPIC COUNT | receive ENDPOINT TOPIC GROUP COUNT TIMEOUT_S");
            System.exit(2);
        }
        ClientServiceProvider provider = ClientServiceProvider.loadService();
        ClientConfiguration cfg = ClientConfiguration.newBuilder().setEndpoints(args[1]).enableSsl(false)
            .setRequestTimeout(Duration.ofSeconds(10)).build();
        String topic = args[2];
        try {
            if ("send".equals(args[0])) {
                int count = Integer.parseInt(args[3]);
                try (Producer producer = provider.newProducerBuilder().setClientConfiguration(cfg).setTopics(topic).build()) {
                    for (int i = 0; i < count; i++) {
                        Message msg = provider.newMessageBuilder().setTopic(topic).setTag("TagA").setKeys("java-" + i)
                            .setBody(("java-" + i).getBytes(StandardCharsets.UTF_8)).build();
                        SendReceipt receipt = producer.send(msg);
                        System.out.println("{\"msgId\":\"" + receipt.getMessageId() + "\"}");
                    }
                }
            } else if ("receive".equals(args[0])) {
                String group = args[3];
                int count = Integer.parseInt(args[4]);
                long deadline = System.nanoTime() + Long.parseLong(args[5]) * 1_000_000_000L;
                Set<String> seen = new HashSet<>();
                try (SimpleConsumer consumer = provider.newSimpleConsumerBuilder().setClientConfiguration(cfg)
                    .setConsumerGroup(group).setAwaitDuration(Duration.ofSeconds(2))
                    .setSubscriptionExpressions(Collections.singletonMap(topic, new FilterExpression("*", FilterExpressionType.TAG)))
                    .build()) {
                    while (seen.size() < count && System.nanoTime() < deadline) {
                        List<MessageView> views = consumer.receive(16, Duration.ofSeconds(30));
                        for (MessageView view : views) {
                            consumer.ack(view);
                            if (seen.add(view.getMessageId().toString())) {
                                String body = StandardCharsets.UTF_8.decode(view.getBody()).toString();
                                System.out.println("{\"msgId\":\"" + view.getMessageId() + "\",\"body\":\"" + body
                                    + "\",\"deliveryAttempt\":" + view.getDeliveryAttempt() + "}");
                            }
                        }
                    }
                }
                if (seen.size() < count) {
                    System.err.println("timed out with " + seen.size() + " of " + count + " messages");
                    System.exit(1);
                }
            } else {
                System.err.println("unknown command " + args[0]);
                System.exit(2);
            }
        } catch (Exception e) {
            System.err.println(e.getClass().getName() + ": " + e.getMessage());
            System.exit(1);
        }
        System.exit(0);
    }
}
