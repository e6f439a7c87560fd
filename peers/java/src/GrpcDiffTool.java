import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.Iterator;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.TreeSet;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

import org.apache.rocketmq.client.apis.ClientConfiguration;
import org.apache.rocketmq.client.apis.ClientServiceProvider;
import org.apache.rocketmq.client.apis.consumer.FilterExpression;
import org.apache.rocketmq.client.apis.consumer.FilterExpressionType;
import org.apache.rocketmq.client.apis.consumer.SimpleConsumer;
import org.apache.rocketmq.client.apis.message.Message;
import org.apache.rocketmq.client.apis.message.MessageBuilder;
import org.apache.rocketmq.client.apis.message.MessageView;
import org.apache.rocketmq.client.apis.producer.Producer;
import org.apache.rocketmq.client.apis.producer.SendReceipt;
import org.apache.rocketmq.client.apis.producer.Transaction;
import org.apache.rocketmq.client.apis.producer.TransactionResolution;

/**
 * The differential scenarios of tests/diff_support.py, run by Apache's gRPC Java client
 * (rocketmq-client-java 5.0.8) in one JVM, so a test can compare what this client observes of Apache
 * RocketMQ's proxy and of RocketScope (tests/test_diff_grpc.py, issue 18). A JVM start costs seconds,
 * so all scenarios run in one process, side by side on their own topics.
 *
 * <pre>
 * GrpcDiffTool ENDPOINT PREFIX [SCENARIO ...]
 * </pre>
 * The caller creates the topics and groups first (Apache's gRPC clients never create them): topic
 * PREFIX + Normal / Fifo / Delay / Tx / Recall / Dlq / Inv / Change / Bad / BadFifo with the message
 * types their names say (Dlq, Inv, Change, Bad: NORMAL; Recall: DELAY; BadFifo: FIFO), groups
 * GID_PREFIX_normal, _fifo (orderly), _delay, _tx, _recall, _dlq (retryMaxTimes 1), _inv, _change,
 * _bad. Prints one JSON object per scenario, {"scenario": NAME, ...}; a scenario that throws prints
 * {"scenario": NAME, "error": "..."}. Names in messages are left as they are (the test makes them
 * relative).
 */
public final class GrpcDiffTool {
    static final List<String> ALL = List.of("normal", "fifo", "delay", "transaction", "recall", "retry_dlq",
        "invisible_time", "change_invisible", "bad_input");
    static final Pattern CODE = Pattern.compile("response-code=(\\d+)");

    private final ClientServiceProvider provider = ClientServiceProvider.loadService();
    private final ClientConfiguration cfg;
    private final String prefix;

    private GrpcDiffTool(String endpoint, String prefix) {
        this.cfg = ClientConfiguration.newBuilder().setEndpoints(endpoint).enableSsl(false)
            .setRequestTimeout(Duration.ofSeconds(10)).build();
        this.prefix = prefix;
    }

    public static void main(String[] args) throws Exception {
        if (args.length < 2) {
            System.err.println("usage: GrpcDiffTool ENDPOINT PREFIX [" + String.join("|", ALL) + " ...]");
            System.exit(2);
        }
        GrpcDiffTool tool = new GrpcDiffTool(args[0], args[1]);
        List<String> wanted = args.length > 2 ? List.of(args).subList(2, args.length) : ALL;
        ExecutorService pool = Executors.newFixedThreadPool(wanted.size());
        Map<String, Future<Map<String, Object>>> running = new LinkedHashMap<>();
        for (String name : wanted) {
            running.put(name, pool.submit(() -> tool.run(name)));
        }
        for (Map.Entry<String, Future<Map<String, Object>>> e : running.entrySet()) {
            Map<String, Object> out = new LinkedHashMap<>();
            out.put("scenario", e.getKey());
            try {
                out.putAll(e.getValue().get());
            } catch (Exception exc) {
                StringBuilder chain = new StringBuilder();
                for (Throwable t = exc.getCause() == null ? exc : exc.getCause(); t != null; t = t.getCause()) {
                    chain.append(chain.length() == 0 ? "" : " <- ").append(t.getClass().getName()).append(": ")
                        .append(t.getMessage());
                }
                out.put("error", chain.toString());
            }
            synchronized (System.out) {
                System.out.println(json(out));
                System.out.flush();
            }
        }
        pool.shutdownNow();
        System.exit(0);
    }

    Map<String, Object> run(String name) throws Exception {
        switch (name) {
            case "normal": return normal();
            case "fifo": return fifo();
            case "delay": return delay();
            case "transaction": return transaction();
            case "recall": return recall();
            case "retry_dlq": return retryDlq();
            case "invisible_time": return invisibleTime();
            case "change_invisible": return changeInvisible();
            case "bad_input": return badInput();
            default: throw new IllegalArgumentException("unknown scenario " + name);
        }
    }

    // ------------------------------------------------------------------ clients
    String topic(String suffix) {
        return prefix + suffix;
    }

    String group(String suffix) {
        return "GID_" + prefix + "_" + suffix;
    }

    interface Build<T> {
        T build() throws Exception;
    }

    /**
     * A client of a topic the caller created: its start-up (a route query and the Settings) is tried three
     * times, since on a heavily loaded machine Apache's proxy answered it too late for the client (which then
     * fails to start with IllegalStateException). The bad-input cases that expect a failed start use one try.
     */
    static <T> T started(Build<T> build) throws Exception {
        for (int i = 1; ; i++) {
            try {
                return build.build();
            } catch (IllegalStateException e) {
                if (i == 3) {
                    throw e;
                }
                Thread.sleep(1000);
            }
        }
    }

    Producer producer(String topic) throws Exception {
        return started(() -> producerOnce(topic));
    }

    Producer producerOnce(String topic) throws Exception {
        return provider.newProducerBuilder().setClientConfiguration(cfg).setTopics(topic).build();
    }

    SimpleConsumer consumer(String group, String topic) throws Exception {
        return started(() -> consumerOnce(group, topic));
    }

    SimpleConsumer consumerOnce(String group, String topic) throws Exception {
        // await 2 s: Apache's proxy polls at least 5 s and needs the deadline (await + request timeout) above it
        return provider.newSimpleConsumerBuilder().setClientConfiguration(cfg).setConsumerGroup(group)
            .setAwaitDuration(Duration.ofSeconds(2))
            .setSubscriptionExpressions(Collections.singletonMap(topic, new FilterExpression("*", FilterExpressionType.TAG)))
            .build();
    }

    MessageBuilder message(String topic, String body) {
        return provider.newMessageBuilder().setTopic(topic).setBody(body.getBytes(StandardCharsets.UTF_8));
    }

    /**
     * One receive. A receive that reaches Apache's proxy before the client's Settings fails with
     * INTERNAL_SERVER_ERROR ("settings" is null, docs/COMPATIBILITY.md row 41): retried, as the Python side does.
     */
    static List<MessageView> receive(SimpleConsumer c, int max, Duration invisible) throws Exception {
        for (int i = 0; ; i++) {
            try {
                return c.receive(max, invisible);
            } catch (Exception e) {
                if (i >= 50 || !String.valueOf(e.getMessage()).contains("\"settings\" is null")) {
                    throw e;
                }
                Thread.sleep(200);
            }
        }
    }

    static List<MessageView> drain(SimpleConsumer c, int expected, long timeoutMs, Duration invisible, boolean ack)
        throws Exception {
        List<MessageView> got = new ArrayList<>();
        long deadline = System.currentTimeMillis() + timeoutMs;
        while (got.size() < expected && System.currentTimeMillis() < deadline) {
            for (MessageView v : receive(c, 32, invisible)) {
                got.add(v);
                if (ack) {
                    c.ack(v);
                }
            }
        }
        return got;
    }

    static String body(MessageView v) {
        return StandardCharsets.UTF_8.decode(v.getBody().duplicate()).toString();
    }

    /** What a failed call looked like to the client: where it failed, the code and the message. */
    static Map<String, Object> failure(Throwable t) {
        while ((t instanceof java.util.concurrent.ExecutionException || t instanceof java.util.concurrent.CompletionException)
            && t.getCause() != null) {
            t = t.getCause();
        }
        Map<String, Object> out = new LinkedHashMap<>();
        String msg = String.valueOf(t.getMessage());
        Matcher m = CODE.matcher(msg);
        boolean server = m.find();
        out.put("outcome", server ? "server" : "client");
        out.put("code", server ? Integer.parseInt(m.group(1)) : 0);
        out.put("exception", t.getClass().getSimpleName());
        int cut = msg.indexOf("] ");
        out.put("message", server && cut >= 0 ? msg.substring(cut + 2) : msg);
        return out;
    }

    interface Call {
        void run() throws Exception;
    }

    static Map<String, Object> outcome(Call call) {
        try {
            call.run();
            Map<String, Object> ok = new LinkedHashMap<>();
            ok.put("outcome", "ok");
            ok.put("code", 0);
            return ok;
        } catch (Throwable t) {
            return failure(t);
        }
    }

    // ------------------------------------------------------------------ scenarios
    /** Three tagged, keyed messages with a user property; a simple consumer receives and acks them. */
    Map<String, Object> normal() throws Exception {
        String t = topic("Normal");
        List<String> ids = new ArrayList<>();
        try (Producer p = producer(t)) {
            for (int i = 0; i < 3; i++) {
                ids.add(p.send(message(t, "n" + i).setTag("TagA").setKeys("k" + i).addProperty("i", "" + i)
                    .build()).getMessageId().toString());
            }
        }
        List<Object> messages = new ArrayList<>();
        List<String> got = new ArrayList<>();
        try (SimpleConsumer c = consumer(group("normal"), t)) {
            for (MessageView v : drain(c, 3, 60_000, Duration.ofSeconds(30), true)) {
                got.add(v.getMessageId().toString());
                messages.add(List.of(body(v), v.getTag().orElse(""), new ArrayList<>(v.getKeys()),
                    String.valueOf(v.getProperties().get("i")), v.getTopic().equals(t), v.getDeliveryAttempt(),
                    v.getMessageGroup().isPresent(), v.getDeliveryTimestamp().isPresent(),
                    !v.getBornHost().isEmpty(), Math.abs(System.currentTimeMillis() - v.getBornTimestamp()) < 120_000));
            }
        }
        messages.sort((a, b) -> a.toString().compareTo(b.toString()));
        Collections.sort(ids);
        Collections.sort(got);
        Map<String, Object> out = new LinkedHashMap<>();
        out.put("sent", ids.size());
        out.put("same_ids", ids.equals(got));
        out.put("messages", messages);
        return out;
    }

    /** Six messages in each of two message groups: order per group, and batches with two of one group. */
    Map<String, Object> fifo() throws Exception {
        String t = topic("Fifo");
        try (Producer p = producer(t)) {
            for (int i = 0; i < 6; i++) {
                for (String g : List.of("A", "B")) {
                    p.send(message(t, g + i).setMessageGroup(g).build());
                }
            }
        }
        Map<String, List<String>> order = new TreeMap<>();
        order.put("A", new ArrayList<>());
        order.put("B", new ArrayList<>());
        int twoInFlight = 0;
        try (SimpleConsumer c = consumer(group("fifo"), t)) {
            long deadline = System.currentTimeMillis() + 90_000;
            while (order.get("A").size() + order.get("B").size() < 12 && System.currentTimeMillis() < deadline) {
                List<MessageView> got = receive(c, 32, Duration.ofSeconds(10));
                List<String> groups = new ArrayList<>();
                for (MessageView v : got) {
                    groups.add(v.getMessageGroup().orElse(""));
                }
                twoInFlight += groups.size() - new TreeSet<>(groups).size();
                for (MessageView v : got) {
                    order.computeIfAbsent(v.getMessageGroup().orElse(""), k -> new ArrayList<>()).add(body(v));
                    c.ack(v);
                }
            }
        }
        Map<String, Object> out = new LinkedHashMap<>();
        out.put("order", order);
        out.put("batches_with_two_of_one_group", twoInFlight);
        return out;
    }

    /** A message due in 4 s arrives no earlier, with its delivery timestamp. */
    Map<String, Object> delay() throws Exception {
        String t = topic("Delay");
        long due;
        String id;
        try (Producer p = producer(t)) {
            due = (System.currentTimeMillis() / 1000 + 4) * 1000;  // after the start-up, which took minutes under load
            id = p.send(message(t, "later").setDeliveryTimestamp(due).build()).getMessageId().toString();
        }
        List<MessageView> got;
        long arrived;
        try (SimpleConsumer c = consumer(group("delay"), t)) {
            got = drain(c, 1, 60_000, Duration.ofSeconds(30), true);
            arrived = System.currentTimeMillis();
        }
        List<Object> received = new ArrayList<>();
        List<Object> ts = new ArrayList<>();
        for (MessageView v : got) {
            received.add(v.getMessageId().toString().equals(id));
            ts.add(v.getDeliveryTimestamp().map(x -> x - due).orElse(-1L));
        }
        Map<String, Object> out = new LinkedHashMap<>();
        out.put("received", received);
        out.put("not_before_due", arrived >= due);
        out.put("delivery_timestamp_minus_due_ms", ts);
        out.put("_late_ms", arrived - due);
        return out;
    }

    /** Commit, rollback, and two half messages left open that the server checks back. */
    Map<String, Object> transaction() throws Exception {
        String t = topic("Tx");
        List<String> checked = Collections.synchronizedList(new ArrayList<>());
        Producer p = started(() -> provider.newProducerBuilder().setClientConfiguration(cfg).setTopics(t)
            .setTransactionChecker(v -> {
                String b = body(v);
                checked.add(b);
                return "check-commit".equals(b) ? TransactionResolution.COMMIT : TransactionResolution.ROLLBACK;
            }).build());
        List<String> received = new ArrayList<>();
        try {
            Transaction tx = p.beginTransaction();
            p.send(message(t, "commit").build(), tx);
            tx.commit();
            tx = p.beginTransaction();
            p.send(message(t, "rollback").build(), tx);
            tx.rollback();
            for (String b : List.of("check-commit", "check-rollback")) {
                p.send(message(t, b).build(), p.beginTransaction());
            }
            try (SimpleConsumer c = consumer(group("tx"), t)) {
                for (MessageView v : drain(c, 2, 120_000, Duration.ofSeconds(30), true)) {
                    received.add(body(v));
                }
                for (MessageView v : drain(c, 10, 5_000, Duration.ofSeconds(30), true)) {
                    received.add(body(v));
                }
            }
        } finally {
            p.close();
        }
        Collections.sort(received);
        Map<String, Object> out = new LinkedHashMap<>();
        out.put("received", received);
        out.put("checked", new ArrayList<>(new TreeSet<>(checked)));
        out.put("_checks", checked.size());
        return out;
    }

    /** Two delayed messages (due in 15 s); one is recalled, then recalled again; only the other arrives. */
    Map<String, Object> recall() throws Exception {
        String t = topic("Recall");
        Map<String, Object> out = new LinkedHashMap<>();
        List<String> bodies = new ArrayList<>();
        try (Producer p = producer(t)) {
            // after the producer's start-up (minutes under load: a due time taken before it had passed once)
            long due = System.currentTimeMillis() + 15_000;
            p.send(message(t, "keep").setDeliveryTimestamp(due).build());
            SendReceipt drop = p.send(message(t, "drop").setDeliveryTimestamp(due).build());
            out.put("has_recall_handle", drop.getRecallHandle() != null && !drop.getRecallHandle().isEmpty());
            Map<String, Object> first = outcome(() -> {
                String id = p.recallMessage(t, drop.getRecallHandle()).getMessageId().toString();
                if (!id.equals(drop.getMessageId().toString())) {
                    throw new IllegalStateException("recall answered another message id " + id);
                }
            });
            out.put("recall", first);
            out.put("recall_again", outcome(() -> p.recallMessage(t, drop.getRecallHandle())));
            out.put("recall_bad_handle", outcome(() -> p.recallMessage(t, "not-a-handle")));
        }
        try (SimpleConsumer c = consumer(group("recall"), t)) {
            for (MessageView v : drain(c, 2, 30_000, Duration.ofSeconds(30), true)) {
                bodies.add(body(v));
            }
        }
        Collections.sort(bodies);
        out.put("received", bodies);
        return out;
    }

    /** retryMaxTimes=1 (the caller's group): a message never acked is delivered twice, then no more. */
    Map<String, Object> retryDlq() throws Exception {
        String t = topic("Dlq");
        try (Producer p = producer(t)) {
            p.send(message(t, "doomed").build());
        }
        List<Integer> attempts = new ArrayList<>();
        try (SimpleConsumer c = consumer(group("dlq"), t)) {
            long deadline = System.currentTimeMillis() + 90_000;
            long quietSince = System.currentTimeMillis();
            while (System.currentTimeMillis() < deadline && System.currentTimeMillis() - quietSince < 12_000) {
                for (MessageView v : receive(c, 1, Duration.ofSeconds(1))) {
                    attempts.add(v.getDeliveryAttempt());
                    quietSince = System.currentTimeMillis();
                }
            }
        }
        Map<String, Object> out = new LinkedHashMap<>();
        out.put("delivery_attempts", attempts);
        return out;
    }

    /** A received, unacked message stays invisible for its 10 s, then comes back as attempt 2. */
    Map<String, Object> invisibleTime() throws Exception {
        String t = topic("Inv");
        String id;
        try (Producer p = producer(t)) {
            id = p.send(message(t, "once").build()).getMessageId().toString();
        }
        Map<String, Object> out = new LinkedHashMap<>();
        try (SimpleConsumer c = consumer(group("inv"), t)) {
            List<MessageView> first = drain(c, 1, 60_000, Duration.ofSeconds(10), false);
            long t0 = System.currentTimeMillis();
            List<MessageView> early = receive(c, 32, Duration.ofSeconds(10));
            List<MessageView> second = drain(c, 1, 60_000, Duration.ofSeconds(30), true);
            long waited = System.currentTimeMillis() - t0;
            out.put("first", views(first, id));
            out.put("within_invisible_time", early.size());
            out.put("second", views(second, id));
            out.put("second_not_before_invisible_time", waited >= 9_500);
            out.put("_waited_ms", waited);
        }
        return out;
    }

    /** Received with 30 s invisible, changed to 2 s: it comes back as attempt 2 well before the 30 s. */
    Map<String, Object> changeInvisible() throws Exception {
        String t = topic("Change");
        String id;
        try (Producer p = producer(t)) {
            id = p.send(message(t, "changed").build()).getMessageId().toString();
        }
        Map<String, Object> out = new LinkedHashMap<>();
        try (SimpleConsumer c = consumer(group("change"), t)) {
            List<MessageView> first = drain(c, 1, 60_000, Duration.ofSeconds(30), false);
            long t0 = System.currentTimeMillis();
            out.put("change", first.isEmpty() ? Map.of("outcome", "nothing received")
                : outcome(() -> c.changeInvisibleDuration(first.get(0), Duration.ofSeconds(2))));
            List<MessageView> second = drain(c, 1, 25_000, Duration.ofSeconds(30), true);
            long waited = System.currentTimeMillis() - t0;
            out.put("first", views(first, id));
            out.put("second", views(second, id));
            out.put("second_before_the_first_invisible_time", !second.isEmpty() && waited < 28_000);
            out.put("_waited_ms", waited);
        }
        return out;
    }

    static List<Object> views(List<MessageView> vs, String id) {
        List<Object> out = new ArrayList<>();
        for (MessageView v : vs) {
            out.add(List.of(v.getMessageId().toString().equals(id), v.getDeliveryAttempt()));
        }
        return out;
    }

    /** Requests the Java client lets through to the server (or refuses itself): where each fails and how. */
    Map<String, Object> badInput() throws Exception {
        String t = topic("Bad");
        String fifoTopic = topic("BadFifo");
        Map<String, Object> out = new LinkedHashMap<>();
        try (Producer p = started(() -> provider.newProducerBuilder().setClientConfiguration(cfg).setTopics(t, fifoTopic)
            .setMaxAttempts(1).setTransactionChecker(v -> TransactionResolution.ROLLBACK).build())) {
            out.put("send: FIFO message to a NORMAL topic",
                outcome(() -> p.send(message(t, "x").setMessageGroup("g").build())));
            out.put("send: DELAY message to a NORMAL topic", outcome(() -> p.send(message(t, "x")
                .setDeliveryTimestamp(System.currentTimeMillis() + 60_000).build())));
            out.put("send: NORMAL message to a FIFO topic", outcome(() -> p.send(message(fifoTopic, "x").build())));
            out.put("send: body of 4 MiB + 1", outcome(() -> p.send(provider.newMessageBuilder().setTopic(t)
                .setBody(new byte[4 * 1024 * 1024 + 1]).build())));
            out.put("send: tag with |", outcome(() -> p.send(message(t, "x").setTag("a|b").build())));
            out.put("send: topic with a space", outcome(() -> p.send(message("bad topic", "x").build())));
            out.put("send: topic nobody created", outcome(() -> p.send(message(prefix + "Missing", "x").build())));
            out.put("recall: a NORMAL message's handle", outcome(() -> {
                SendReceipt r = p.send(message(t, "normal").build());
                p.recallMessage(t, r.getRecallHandle() == null ? "" : r.getRecallHandle());
            }));
            out.put("send: transactional message to a NORMAL topic", outcome(() -> {
                Transaction tx = p.beginTransaction();
                p.send(message(t, "x").build(), tx);
                tx.rollback();
            }));
        }
        out.put("producer: started on a topic nobody created", outcome(() -> producerOnce(prefix + "Missing3").close()));
        out.put("consumer: topic nobody created", outcome(() -> consumerOnce(group("bad"), prefix + "Missing2").close()));
        try (Producer p = producer(t); SimpleConsumer c = consumer(group("bad"), t)) {
            p.send(message(t, "for the receive cases").build());
            out.put("receive: invisible 100 ms", outcome(() -> receive(c, 1, Duration.ofMillis(100))));
            out.put("receive: batch 0", outcome(() -> receive(c, 0, Duration.ofSeconds(10))));
            out.put("receive: batch 2000", outcome(() -> {
                List<MessageView> got = receive(c, 2000, Duration.ofSeconds(30));
                for (MessageView v : got) {
                    c.ack(v);
                }
            }));
            p.send(message(t, "for the ack cases").build());
            List<MessageView> got = drain(c, 1, 60_000, Duration.ofSeconds(30), false);
            if (!got.isEmpty()) {
                MessageView v = got.get(0);
                out.put("ack: first", outcome(() -> c.ack(v)));
                out.put("ack: the same receipt again", outcome(() -> c.ack(v)));
                out.put("changeInvisibleDuration: after the ack", outcome(() ->
                    c.changeInvisibleDuration(v, Duration.ofSeconds(5))));
            }
        }
        return out;
    }

    // ------------------------------------------------------------------ JSON
    static String json(Object o) {
        StringBuilder sb = new StringBuilder();
        write(sb, o);
        return sb.toString();
    }

    static void write(StringBuilder sb, Object o) {
        if (o == null) {
            sb.append("null");
        } else if (o instanceof Number || o instanceof Boolean) {
            sb.append(o);
        } else if (o instanceof Map) {
            sb.append('{');
            Iterator<? extends Map.Entry<?, ?>> it = ((Map<?, ?>) o).entrySet().iterator();
            while (it.hasNext()) {
                Map.Entry<?, ?> e = it.next();
                write(sb, String.valueOf(e.getKey()));
                sb.append(':');
                write(sb, e.getValue());
                if (it.hasNext()) {
                    sb.append(',');
                }
            }
            sb.append('}');
        } else if (o instanceof Iterable) {
            sb.append('[');
            Iterator<?> it = ((Iterable<?>) o).iterator();
            while (it.hasNext()) {
                write(sb, it.next());
                if (it.hasNext()) {
                    sb.append(',');
                }
            }
            sb.append(']');
        } else {
            String s = o.toString();
            sb.append('"');
            for (int i = 0; i < s.length(); i++) {
                char ch = s.charAt(i);
                if (ch == '"' || ch == '\\') {
                    sb.append('\\').append(ch);
                } else if (ch < 0x20) {
                    sb.append(String.format("\\u%04x", (int) ch));
                } else {
                    sb.append(ch);
                }
            }
            sb.append('"');
        }
    }
}
