import java.lang.management.ManagementFactory;
import java.time.Duration;
import java.util.Arrays;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.Semaphore;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;

import org.apache.rocketmq.client.apis.ClientConfiguration;
import org.apache.rocketmq.client.apis.ClientServiceProvider;
import org.apache.rocketmq.client.apis.message.Message;
import org.apache.rocketmq.client.apis.producer.Producer;

/**
 * A load generator for the data-path benchmark (bench/datapath_bench.py): Apache's gRPC client
 * (rocketmq-client-java 5) sending with {@code sendAsync} and at most DEPTH sends in flight, so one
 * JVM keeps a broker or a proxy saturated at a small CPU cost per message (the official Python
 * client cannot: it spends more CPU per message than the broker).
 *
 * <pre>
 * GrpcLoad ENDPOINT TOPIC COUNT DEPTH SIZE WARMUP
 * </pre>
 * Prints {"event":"warm"} when the WARMUP untimed sends are done (the benchmark starts reading the
 * servers' CPU there), then one {"event":"summary",...} line: sent, failed, seconds, rate, latency
 * p50/p99 of each send (ms) and this JVM's CPU per timed message (µs).
 */
public final class GrpcLoad {
    private GrpcLoad() {
    }

    static double cpuSeconds() {
        return ((com.sun.management.OperatingSystemMXBean) ManagementFactory.getOperatingSystemMXBean())
            .getProcessCpuTime() / 1e9;
    }

    static void run(Producer producer, ClientServiceProvider provider, String topic, int count, int depth,
                    byte[] body, long[] latNanos, AtomicLong failed) throws InterruptedException {
        Semaphore window = new Semaphore(depth);
        CountDownLatch done = new CountDownLatch(count);
        for (int i = 0; i < count; i++) {
            window.acquire();
            Message msg = provider.newMessageBuilder().setTopic(topic).setBody(body).build();
            long t0 = System.nanoTime();
            final int slot = i;
            producer.sendAsync(msg).whenComplete((receipt, err) -> {
                if (latNanos != null) {
                    latNanos[slot] = System.nanoTime() - t0;
                }
                if (err != null) {
                    failed.incrementAndGet();
                }
                window.release();
                done.countDown();
            });
        }
        done.await();
    }

    public static void main(String[] args) throws Exception {
        if (args.length < 6) {
            System.err.println("usage: GrpcLoad ENDPOINT TOPIC COUNT DEPTH SIZE WARMUP");
            System.exit(2);
        }
        String topic = args[1];
        int count = Integer.parseInt(args[2]);
        int depth = Integer.parseInt(args[3]);
        byte[] body = new byte[Integer.parseInt(args[4])];
        Arrays.fill(body, (byte) 'x');
        int warmup = Integer.parseInt(args[5]);
        ClientServiceProvider provider = ClientServiceProvider.loadService();
        ClientConfiguration cfg = ClientConfiguration.newBuilder().setEndpoints(args[0]).enableSsl(false)
            .setRequestTimeout(Duration.ofSeconds(10)).build();
        try (Producer producer = provider.newProducerBuilder().setClientConfiguration(cfg).setTopics(topic)
            .setMaxAttempts(1).build()) {
            AtomicLong failed = new AtomicLong();
            run(producer, provider, topic, warmup, depth, body, null, failed);
            System.out.println("{\"event\":\"warm\",\"sent\":" + warmup + ",\"failed\":" + failed.get() + "}");
            System.out.flush();
            failed.set(0);
            long[] lat = new long[count];
            double cpu0 = cpuSeconds();
            long t0 = System.nanoTime();
            run(producer, provider, topic, count, depth, body, lat, failed);
            double secs = (System.nanoTime() - t0) / 1e9;
            double cpu = cpuSeconds() - cpu0;
            Arrays.sort(lat);
            long ok = count - failed.get();
            System.out.println("{\"event\":\"summary\",\"sent\":" + ok + ",\"failed\":" + failed.get()
                + ",\"seconds\":" + secs + ",\"rate\":" + (ok / secs)
                + ",\"p50_ms\":" + pct(lat, 0.5) / 1e6 + ",\"p99_ms\":" + pct(lat, 0.99) / 1e6
                + ",\"cpu_s\":" + cpu + ",\"cpu_us_per_msg\":" + (cpu / Math.max(1, ok) * 1e6) + "}");
            System.out.flush();
        }
        System.exit(0);
    }

    static long pct(long[] sorted, double q) {
        if (sorted.length == 0) {
            return 0;
        }
        int rank = (int) (q * sorted.length + 0.5) - 1;
        return sorted[Math.max(0, Math.min(sorted.length - 1, rank))];
    }
}
