import java.nio.charset.StandardCharsets;
import java.util.Collections;

import org.apache.rocketmq.client.consumer.DefaultMQPullConsumer;
import org.apache.rocketmq.client.consumer.PullResult;
import org.apache.rocketmq.client.consumer.PullStatus;
import org.apache.rocketmq.client.impl.consumer.DefaultMQPullConsumerImpl;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.message.MessageQueue;

/**
 * Reads one LMQ queue with Apache's remoting client (rocketmq-client 5.3.3, unchanged) as Apache's example
 * LMQPullConsumer does (example/.../lmq/LMQPullConsumer.java in Apache's repository): the parent topic's route
 * gives the broker's address, then minOffset (GET_MIN_OFFSET), maxOffset (GET_MAX_OFFSET), pullBlockIfNotFound
 * (PULL_MESSAGE with suspend) of queue 0 of the LMQ name until COUNT records came, searchOffset
 * (SEARCH_OFFSET_BY_TIMESTAMP) at the first record's store time, earliestMsgStoreTime
 * (GET_EARLIEST_MSG_STORETIME), and the group's offset committed (UPDATE_CONSUMER_OFFSET) and read back from
 * the broker (QUERY_CONSUMER_OFFSET), for tests/test_remoting_lmq.py.
 *
 * <pre>
 * RemotingLmqTool NAMESRV PARENT_TOPIC BROKER_NAME LMQ GROUP COUNT TIMEOUT_S
 * </pre>
 * One JSON line per event: offsets, received (body, topic, queueId, queueOffset, INNER_MULTI_DISPATCH,
 * INNER_MULTI_QUEUE_OFFSET), searched, committed.  Exit code 1 when fewer than COUNT records came in time.
 */
public final class RemotingLmqTool {
    private RemotingLmqTool() {
    }

    private static String str(String s) {
        return s == null ? "null" : "\"" + s.replace("\\", "\\\\").replace("\"", "\\\"") + "\"";
    }

    public static void main(String[] args) throws Exception {
        if (args.length < 7) {
            System.err.println("usage: RemotingLmqTool NAMESRV PARENT_TOPIC BROKER_NAME LMQ GROUP COUNT TIMEOUT_S");
            System.exit(2);
        }
        String namesrv = args[0];
        String parent = args[1];
        String broker = args[2];
        String lmq = args[3];
        String group = args[4];
        int count = Integer.parseInt(args[5]);
        long deadline = System.currentTimeMillis() + Long.parseLong(args[6]) * 1000;

        DefaultMQPullConsumer consumer = new DefaultMQPullConsumer(group);
        consumer.setNamesrvAddr(namesrv);
        consumer.setRegisterTopics(Collections.singleton(parent));
        consumer.start();
        DefaultMQPullConsumerImpl impl = consumer.getDefaultMQPullConsumerImpl();
        // the LMQ has no route: the parent topic's fills the client's broker address table
        impl.getRebalanceImpl().getmQClientFactory().updateTopicRouteInfoFromNameServer(parent);
        MessageQueue mq = new MessageQueue(lmq, broker, 0);

        long min = consumer.minOffset(mq);
        long max = consumer.maxOffset(mq);
        System.out.println("{\"event\":\"offsets\",\"min\":" + min + ",\"max\":" + max + "}");
        long offset = min;
        int got = 0;
        long firstStoreTime = -1;
        while (got < count && System.currentTimeMillis() < deadline) {
            PullResult r = consumer.pullBlockIfNotFound(mq, "*", offset, 32);
            if (r.getPullStatus() == PullStatus.FOUND) {
                for (MessageExt m : r.getMsgFoundList()) {
                    if (firstStoreTime < 0) {
                        firstStoreTime = m.getStoreTimestamp();
                    }
                    System.out.println("{\"event\":\"received\",\"body\":" + str(new String(m.getBody(),
                        StandardCharsets.UTF_8)) + ",\"topic\":" + str(m.getTopic()) + ",\"queueId\":" + m.getQueueId()
                        + ",\"queueOffset\":" + m.getQueueOffset()
                        + ",\"multiDispatch\":" + str(m.getProperty("INNER_MULTI_DISPATCH"))
                        + ",\"multiQueueOffset\":" + str(m.getProperty("INNER_MULTI_QUEUE_OFFSET")) + "}");
                    got++;
                }
            }
            offset = r.getNextBeginOffset();
        }
        if (firstStoreTime >= 0) {
            System.out.println("{\"event\":\"searched\",\"offset\":" + consumer.searchOffset(mq, firstStoreTime)
                + ",\"earliest\":" + (consumer.earliestMsgStoreTime(mq) == firstStoreTime) + "}");
        }
        consumer.updateConsumeOffset(mq, offset);
        impl.getOffsetStore().persist(mq);  // UPDATE_CONSUMER_OFFSET
        System.out.println("{\"event\":\"committed\",\"offset\":" + offset + ",\"fromBroker\":"
            + consumer.fetchConsumeOffset(mq, true) + "}");
        consumer.shutdown();
        System.exit(got >= count ? 0 : 1);
    }
}
