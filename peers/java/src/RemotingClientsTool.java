import java.io.ByteArrayOutputStream;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;

import org.apache.rocketmq.client.consumer.DefaultLitePullConsumer;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.ConsumeOrderlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.consumer.listener.MessageListenerOrderly;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.LocalTransactionState;
import org.apache.rocketmq.client.producer.SendCallback;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.client.producer.TransactionListener;
import org.apache.rocketmq.client.producer.TransactionMQProducer;
import org.apache.rocketmq.client.producer.TransactionSendResult;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.tools.command.MQAdminStartup;

/**
 * Every client kind of Apache's remoting client (rocketmq-client 5.3.3) in one JVM, so that a test
 * pays one JVM start for all of them (tests/test_remoting_java_clients.py): the ground truth of
 * issue 19's point 2.
 *
 * <pre>
 * RemotingClientsTool NAMESRV PREFIX DELAY_LEVEL TIMEOUT_S [mqadmin]
 * </pre>
 * Topics and groups are PREFIX + a suffix; the topics are created by the first send (TBW102), as an
 * application's are. Scenarios, each on its own topic, all running side by side:
 * <ul>
 * <li>P: a producer with message trace on sends 3 sync, 3 async, 3 oneway and one batch of 3; a push
 *     consumer (concurrently, trace on) and a lite pull consumer (another group) each read the topic;</li>
 * <li>O: 4 messages for each of 3 keys to the key's queue (MessageQueueSelector); an orderly push consumer;</li>
 * <li>T: a TransactionMQProducer sends 3 half messages: "commit" (committed at once), "check" (UNKNOW,
 *     committed by the check-back the broker sends), "rollback" (rolled back); a push consumer;</li>
 * <li>D: one message with delayTimeLevel DELAY_LEVEL; a push consumer notes when it arrives;</li>
 * <li>R: "retry-ok" fails once then succeeds, "to-dlq" always fails; maxReconsumeTimes 1, so it goes to
 *     %DLQ%PREFIXRG, which another push consumer reads.</li>
 * </ul>
 * One JSON line per outcome ({"s": scenario, ...}); the consumers wait for what they should get or
 * TIMEOUT_S. With "mqadmin", Apache's mqadmin (MQAdminStartup, in this JVM) then runs clusterList,
 * topicList, topicRoute, updateTopic, consumerProgress, queryMsgById and queryMsgTraceById, one line
 * each with its output. Route polls are 1 s (pollNameServerInterval, default 30 s): the DLQ topic
 * appears only when the first message is moved there. Exit code 1 when a wait timed out.
 */
public final class RemotingClientsTool {
    private static final long T0 = System.currentTimeMillis();

    private RemotingClientsTool() {
    }

    private static String q(Object o) {
        String s = String.valueOf(o);
        StringBuilder b = new StringBuilder("\"");
        for (char c : s.toCharArray()) {
            if (c == '"' || c == '\\') {
                b.append('\\').append(c);
            } else if (c < 0x20) {
                b.append(String.format("\\u%04x", (int) c));
            } else {
                b.append(c);
            }
        }
        return b.append('"').toString();
    }

    /** One JSON line of key/value pairs; numbers and booleans as they are, the rest quoted. */
    private static synchronized void emit(Object... kv) {
        StringBuilder b = new StringBuilder("{");
        for (int i = 0; i < kv.length; i += 2) {
            if (i > 0) {
                b.append(',');
            }
            Object v = kv[i + 1];
            b.append(q(kv[i])).append(':').append(v instanceof Number || v instanceof Boolean ? v : q(v));
        }
        b.append(",\"t\":").append(System.currentTimeMillis() - T0).append('}');
        System.out.println(b);
        System.out.flush();
    }

    private static String body(MessageExt m) {
        return new String(m.getBody(), StandardCharsets.UTF_8);
    }

    private static DefaultMQPushConsumer push(String namesrv, String group, String topic, boolean trace) throws Exception {
        DefaultMQPushConsumer c = new DefaultMQPushConsumer(group, trace, null);
        c.setNamesrvAddr(namesrv);
        c.setMqClientApiTimeout(30_000);
        c.setPollNameServerInterval(1000);
        c.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        c.subscribe(topic, "*");
        return c;
    }

    private static DefaultMQProducer producer(DefaultMQProducer p, String namesrv) {
        p.setNamesrvAddr(namesrv);
        // generous: the default 3 s route query times out on a loaded 2-core machine
        p.setMqClientApiTimeout(30_000);
        p.setSendMsgTimeout(30_000);
        return p;
    }

    public static void main(String[] args) throws Exception {
        if (args.length < 4) {
            System.err.println("usage: RemotingClientsTool NAMESRV PREFIX DELAY_LEVEL TIMEOUT_S [mqadmin]");
            System.exit(2);
        }
        String ns = args[0];
        String px = args[1];
        int delayLevel = Integer.parseInt(args[2]);
        long timeoutS = Long.parseLong(args[3]);
        boolean admin = args.length > 4 && "mqadmin".equals(args[4]);
        String topicP = px + "P";
        String topicO = px + "O";
        String topicT = px + "T";
        String topicD = px + "D";
        String topicR = px + "R";
        List<Object> closers = new ArrayList<>();

        // --- producers: every kind of send; each topic is created by its first send ---
        DefaultMQProducer prod = producer(new DefaultMQProducer(px + "PG", true, null), ns);
        prod.start();
        closers.add(prod);
        List<String> pubIds = new ArrayList<>();
        for (int i = 0; i < 3; i++) {
            SendResult r = prod.send(new Message(topicP, "TagA", px + "key-sync-" + i, ("sync-" + i).getBytes(StandardCharsets.UTF_8)));
            pubIds.add(r.getMsgId());
            emit("s", "send", "kind", "sync", "body", "sync-" + i, "status", r.getSendStatus(), "msgId", r.getMsgId(),
                "offsetMsgId", r.getOffsetMsgId(), "key", px + "key-sync-" + i);
        }
        CountDownLatch asyncDone = new CountDownLatch(3);
        for (int i = 0; i < 3; i++) {
            final String b = "async-" + i;
            prod.send(new Message(topicP, "TagA", b.getBytes(StandardCharsets.UTF_8)), new SendCallback() {
                @Override
                public void onSuccess(SendResult r) {
                    emit("s", "send", "kind", "async", "body", b, "status", r.getSendStatus(), "msgId", r.getMsgId());
                    asyncDone.countDown();
                }

                @Override
                public void onException(Throwable e) {
                    emit("s", "send", "kind", "async", "body", b, "status", "EXCEPTION", "error", e.toString());
                    asyncDone.countDown();
                }
            });
        }
        for (int i = 0; i < 3; i++) {
            prod.sendOneway(new Message(topicP, "TagA", ("oneway-" + i).getBytes(StandardCharsets.UTF_8)));
            emit("s", "send", "kind", "oneway", "body", "oneway-" + i);
        }
        List<Message> batch = new ArrayList<>();
        for (int i = 0; i < 3; i++) {
            batch.add(new Message(topicP, "TagA", ("batch-" + i).getBytes(StandardCharsets.UTF_8)));
        }
        SendResult br = prod.send(batch);
        emit("s", "send", "kind", "batch", "body", "batch-0,batch-1,batch-2", "status", br.getSendStatus(),
            "msgId", br.getMsgId());
        asyncDone.await(60, TimeUnit.SECONDS);

        for (int k = 0; k < 3; k++) {
            for (int seq = 0; seq < 4; seq++) {
                Message m = new Message(topicO, "TagO", "order-" + k, ("order-" + k + "-" + seq).getBytes(StandardCharsets.UTF_8));
                SendResult r = prod.send(m, (mqs, msg, key) -> mqs.get((Integer) key % mqs.size()), k);
                emit("s", "send", "kind", "ordered", "body", "order-" + k + "-" + seq, "status", r.getSendStatus(),
                    "queueId", r.getMessageQueue().getQueueId());
            }
        }
        Message delayed = new Message(topicD, "TagD", "delayed".getBytes(StandardCharsets.UTF_8));
        delayed.setDelayTimeLevel(delayLevel);
        SendResult dr = prod.send(delayed);
        long delaySentAt = System.currentTimeMillis();
        emit("s", "send", "kind", "delay", "body", "delayed", "status", dr.getSendStatus(), "level", delayLevel,
            "sentAt", delaySentAt);
        for (String b : new String[] {"retry-ok", "to-dlq"}) {
            SendResult r = prod.send(new Message(topicR, "TagR", b.getBytes(StandardCharsets.UTF_8)));
            emit("s", "send", "kind", "retry", "body", b, "status", r.getSendStatus());
        }

        Map<String, AtomicInteger> checks = new ConcurrentHashMap<>();
        TransactionMQProducer tx = (TransactionMQProducer) producer(new TransactionMQProducer(px + "TG"), ns);
        tx.setTransactionListener(new TransactionListener() {
            @Override
            public LocalTransactionState executeLocalTransaction(Message msg, Object arg) {
                String b = new String(msg.getBody(), StandardCharsets.UTF_8);
                return "commit".equals(b) ? LocalTransactionState.COMMIT_MESSAGE
                    : "rollback".equals(b) ? LocalTransactionState.ROLLBACK_MESSAGE : LocalTransactionState.UNKNOW;
            }

            @Override
            public LocalTransactionState checkLocalTransaction(MessageExt msg) {
                String b = body(msg);
                int n = checks.computeIfAbsent(b, x -> new AtomicInteger()).incrementAndGet();
                emit("s", "txcheck", "body", b, "n", n, "topic", msg.getTopic());
                // the local decision: "check" is committed now, the others as executeLocalTransaction decided
                return "rollback".equals(b) ? LocalTransactionState.ROLLBACK_MESSAGE : LocalTransactionState.COMMIT_MESSAGE;
            }
        });
        tx.start();
        closers.add(tx);
        for (String b : new String[] {"commit", "check", "rollback"}) {
            TransactionSendResult r = tx.sendMessageInTransaction(new Message(topicT, "TagT", b.getBytes(StandardCharsets.UTF_8)), null);
            emit("s", "send", "kind", "transaction", "body", b, "status", r.getSendStatus(), "local", r.getLocalTransactionState());
        }

        // --- consumers ---
        Set<String> pushGot = ConcurrentHashMap.newKeySet();
        AtomicInteger pushDup = new AtomicInteger();
        CountDownLatch pushDone = new CountDownLatch(12);
        DefaultMQPushConsumer pc = push(ns, px + "CG", topicP, true);
        pc.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
            for (MessageExt m : msgs) {
                if (pushGot.add(body(m))) {
                    emit("s", "push", "body", body(m), "msgId", m.getMsgId(), "reconsumeTimes", m.getReconsumeTimes());
                    pushDone.countDown();
                } else {
                    pushDup.incrementAndGet();
                }
            }
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });

        CountDownLatch orderDone = new CountDownLatch(12);
        DefaultMQPushConsumer oc = push(ns, px + "OG", topicO, false);
        oc.registerMessageListener((MessageListenerOrderly) (msgs, ctx) -> {
            for (MessageExt m : msgs) {
                emit("s", "orderly", "body", body(m), "queueId", m.getQueueId(), "queueOffset", m.getQueueOffset());
                orderDone.countDown();
            }
            return ConsumeOrderlyStatus.SUCCESS;
        });

        CountDownLatch txDone = new CountDownLatch(2);
        DefaultMQPushConsumer tc = push(ns, px + "TCG", topicT, false);
        tc.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
            for (MessageExt m : msgs) {
                emit("s", "txconsume", "body", body(m));
                txDone.countDown();
            }
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });

        CountDownLatch delayDone = new CountDownLatch(1);
        DefaultMQPushConsumer dc = push(ns, px + "DG", topicD, false);
        dc.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
            for (MessageExt m : msgs) {
                emit("s", "delayconsume", "body", body(m), "afterSendMs", System.currentTimeMillis() - delaySentAt,
                    "storeToNowMs", System.currentTimeMillis() - m.getStoreTimestamp());
                delayDone.countDown();
            }
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });

        CountDownLatch retryDone = new CountDownLatch(1);
        DefaultMQPushConsumer rc = push(ns, px + "RG", topicR, false);
        rc.setMaxReconsumeTimes(1);
        rc.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
            ConsumeConcurrentlyStatus st = ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
            for (MessageExt m : msgs) {
                String b = body(m);
                boolean fail = "to-dlq".equals(b) || m.getReconsumeTimes() == 0;
                emit("s", "retry", "body", b, "reconsumeTimes", m.getReconsumeTimes(), "topic", m.getTopic(),
                    "result", fail ? "RECONSUME_LATER" : "CONSUME_SUCCESS");
                if (fail) {
                    st = ConsumeConcurrentlyStatus.RECONSUME_LATER;
                } else {
                    retryDone.countDown();
                }
            }
            return st;
        });
        CountDownLatch dlqDone = new CountDownLatch(1);
        DefaultMQPushConsumer qc = push(ns, px + "QG", "%DLQ%" + px + "RG", false);
        qc.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
            for (MessageExt m : msgs) {
                emit("s", "dlq", "body", body(m), "topic", m.getTopic(), "reconsumeTimes", m.getReconsumeTimes());
                dlqDone.countDown();
            }
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });

        for (DefaultMQPushConsumer c : new DefaultMQPushConsumer[] {pc, oc, tc, dc, rc, qc}) {
            c.start();
            closers.add(c);
        }

        DefaultLitePullConsumer lp = new DefaultLitePullConsumer(px + "LG");
        lp.setNamesrvAddr(ns);
        lp.setMqClientApiTimeout(30_000);
        lp.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        lp.setPollTimeoutMillis(1000);
        lp.subscribe(topicP, "*");
        lp.start();
        Set<String> pulled = ConcurrentHashMap.newKeySet();
        long deadline = System.currentTimeMillis() + timeoutS * 1000;
        while (pulled.size() < 12 && System.currentTimeMillis() < deadline) {
            for (MessageExt m : lp.poll()) {
                if (pulled.add(body(m))) {
                    emit("s", "litepull", "body", body(m), "queueId", m.getQueueId(), "queueOffset", m.getQueueOffset());
                }
            }
        }
        lp.shutdown();

        boolean ok = true;
        String[] names = {"push", "orderly", "txconsume", "delayconsume", "retry", "dlq"};
        CountDownLatch[] latches = {pushDone, orderDone, txDone, delayDone, retryDone, dlqDone};
        for (int i = 0; i < latches.length; i++) {
            long left = Math.max(0, deadline - System.currentTimeMillis());
            boolean got = latches[i].await(left, TimeUnit.MILLISECONDS);
            ok &= got;
            emit("s", "wait", "what", names[i], "ok", got, "missing", latches[i].getCount());
        }
        ok &= pulled.size() == 12;
        emit("s", "wait", "what", "litepull", "ok", pulled.size() == 12, "missing", 12 - pulled.size());
        emit("s", "dups", "push", pushDup.get());
        // shutdown sends each client's last trace records (AsyncTraceDispatcher) and persists offsets
        for (int i = closers.size() - 1; i >= 0; i--) {
            Object c = closers.get(i);
            if (c instanceof DefaultMQPushConsumer) {
                ((DefaultMQPushConsumer) c).shutdown();
            } else {
                ((DefaultMQProducer) c).shutdown();
            }
        }
        if (admin) {
            ok &= mqadmin(ns, px, topicP, pubIds.get(0), timeoutS);
        }
        emit("s", "summary", "ok", ok);
        System.exit(ok ? 0 : 1);
    }

    /** One mqadmin command in this JVM (MQAdminStartup.main0 never exits the JVM); its output. */
    private static String mqadmin(String... argv) {
        PrintStream out = System.out;
        ByteArrayOutputStream buf = new ByteArrayOutputStream();
        System.setOut(new PrintStream(buf, true));
        try {
            MQAdminStartup.main0(argv, null);
        } catch (Throwable e) {
            System.out.println("EXCEPTION " + e);
        } finally {
            System.setOut(out);
        }
        return buf.toString();
    }

    private static boolean mqadmin(String ns, String px, String topicP, String msgId, long timeoutS) throws Exception {
        String[][] cmds = {
            {"clusterList", "-n", ns},
            {"topicList", "-n", ns},
            {"topicRoute", "-t", topicP, "-n", ns},
            {"updateTopic", "-c", "DefaultCluster", "-t", px + "Admin", "-r", "2", "-w", "2", "-n", ns},
            {"consumerProgress", "-g", px + "CG", "-n", ns},
            {"queryMsgById", "-i", msgId, "-t", topicP, "-n", ns},
        };
        for (String[] c : cmds) {
            emit("s", "mqadmin", "cmd", c[0], "out", mqadmin(c));
        }
        // the trace records are sent at the clients' shutdown above: asked again until they are stored
        long deadline = System.currentTimeMillis() + timeoutS * 1000;
        String out = "";
        while (System.currentTimeMillis() < deadline) {
            out = mqadmin("queryMsgTraceById", "-i", msgId, "-n", ns);
            if (out.contains("Pub") && out.contains(px + "CG")) {
                break;
            }
            Thread.sleep(500);
        }
        emit("s", "mqadmin", "cmd", "queryMsgTraceById", "out", out);
        return out.contains("Pub");
    }
}
