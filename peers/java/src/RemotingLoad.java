import java.lang.management.ManagementFactory;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.Semaphore;
import java.util.concurrent.atomic.AtomicLong;

import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendCallback;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.common.message.Message;

/**
 * A load generator for the data-path benchmark (bench/datapath_bench.py): Apache's remoting client
 * (rocketmq-client 5.3.3, DefaultMQProducer) sending asynchronously with at most DEPTH sends in flight;
 * with BATCH > 1 each send is a batch of BATCH messages (SEND_BATCH_MESSAGE, sent synchronously from
 * DEPTH threads, as the client has no asynchronous batch send). The remoting peer of GrpcLoad.
 *
 * <pre>
 * RemotingLoad NAMESRV TOPIC COUNT DEPTH SIZE WARMUP [BATCH]
 * </pre>
 * Prints {"event":"warm"} after WARMUP untimed messages, then one {"event":"summary",...} line with the
 * same fields as GrpcLoad's (latency per send: per batch when batching).
 */
public final class RemotingLoad {
    private RemotingLoad() {
    }

    static double cpuSeconds() {
        return ((com.sun.management.OperatingSystemMXBean) ManagementFactory.getOperatingSystemMXBean())
            .getProcessCpuTime() / 1e9;
    }

    static void single(DefaultMQProducer p, String topic, int count, int depth, byte[] body, long[] lat,
                       AtomicLong failed) throws Exception {
        Semaphore window = new Semaphore(depth);
        CountDownLatch done = new CountDownLatch(count);
        for (int i = 0; i < count; i++) {
            window.acquire();
            final long t0 = System.nanoTime();
            final int slot = i;
            p.send(new Message(topic, body), new SendCallback() {
                @Override
                public void onSuccess(SendResult r) {
                    finish(null);
                }

                @Override
                public void onException(Throwable e) {
                    finish(e);
                }

                private void finish(Throwable e) {
                    if (lat != null) {
                        lat[slot] = System.nanoTime() - t0;
                    }
                    if (e != null) {
                        failed.incrementAndGet();
                    }
                    window.release();
                    done.countDown();
                }
            });
        }
        done.await();
    }

    static void batches(DefaultMQProducer p, String topic, int count, int depth, int batch, byte[] body,
                        long[] lat, AtomicLong failed) throws Exception {
        int sends = (count + batch - 1) / batch;
        AtomicLong next = new AtomicLong();
        List<Thread> threads = new ArrayList<>();
        for (int w = 0; w < depth; w++) {
            Thread t = new Thread(() -> {
                long i;
                while ((i = next.getAndIncrement()) < sends) {
                    List<Message> msgs = new ArrayList<>();
                    for (int k = 0; k < batch; k++) {
                        msgs.add(new Message(topic, body));
                    }
                    long t0 = System.nanoTime();
                    try {
                        p.send(msgs);
                    } catch (Exception e) {
                        failed.addAndGet(batch);
                    }
                    if (lat != null) {
                        lat[(int) i] = System.nanoTime() - t0;
                    }
                }
            });
            t.start();
            threads.add(t);
        }
        for (Thread t : threads) {
            t.join();
        }
    }

    public static void main(String[] args) throws Exception {
        if (args.length < 6) {
            System.err.println("usage: RemotingLoad NAMESRV TOPIC COUNT DEPTH SIZE WARMUP [BATCH]");
            System.exit(2);
        }
        String topic = args[1];
        int count = Integer.parseInt(args[2]);
        int depth = Integer.parseInt(args[3]);
        byte[] body = new byte[Integer.parseInt(args[4])];
        Arrays.fill(body, (byte) 'x');
        int warmup = Integer.parseInt(args[5]);
        int batch = args.length > 6 ? Integer.parseInt(args[6]) : 1;
        DefaultMQProducer p = new DefaultMQProducer("RemotingLoad");
        p.setNamesrvAddr(args[0]);
        p.setSendMsgTimeout(10_000);
        p.setMqClientApiTimeout(30_000);
        p.setRetryTimesWhenSendAsyncFailed(0);
        p.setRetryTimesWhenSendFailed(0);
        p.start();
        AtomicLong failed = new AtomicLong();
        int sends = batch > 1 ? (count + batch - 1) / batch : count;
        if (batch > 1) {
            batches(p, topic, warmup, depth, batch, body, null, failed);
        } else {
            single(p, topic, warmup, depth, body, null, failed);
        }
        System.out.println("{\"event\":\"warm\",\"sent\":" + warmup + ",\"failed\":" + failed.get() + "}");
        System.out.flush();
        failed.set(0);
        long[] lat = new long[sends];
        double cpu0 = cpuSeconds();
        long t0 = System.nanoTime();
        if (batch > 1) {
            batches(p, topic, count, depth, batch, body, lat, failed);
        } else {
            single(p, topic, count, depth, body, lat, failed);
        }
        double secs = (System.nanoTime() - t0) / 1e9;
        double cpu = cpuSeconds() - cpu0;
        Arrays.sort(lat);
        long ok = count - failed.get();
        System.out.println("{\"event\":\"summary\",\"sent\":" + ok + ",\"failed\":" + failed.get()
            + ",\"seconds\":" + secs + ",\"rate\":" + (ok / secs)
            + ",\"p50_ms\":" + pct(lat, 0.5) / 1e6 + ",\"p99_ms\":" + pct(lat, 0.99) / 1e6
            + ",\"cpu_s\":" + cpu + ",\"cpu_us_per_msg\":" + (cpu / Math.max(1, ok) * 1e6) + "}");
        System.out.flush();
        p.shutdown();
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
