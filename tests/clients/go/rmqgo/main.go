// rmqgo drives Apache's Go client v2 (remoting protocol) against a name server, for RocketScope's tests.
//
//	rmqgo produce -ns ADDR -topic T -n N [-size B] [-batch K] [-depth D] [-group G] [-warmup W]
//	rmqgo consume -ns ADDR -topic T -group G -n N [-timeout S]
//	rmqgo pull -ns ADDR -route T -topic Q -broker B -group G -n N [-queue I] [-offset O] [-timeout S]
//
// -ak/-sk (both commands) sign every request with primitive.Credentials (the broker's aclEnable).
// -tls (both commands) speaks TLS to the name server and the brokers (WithTls).
//
// Every outcome is one JSON line on stdout, so the Python tests read ground truth, not logs.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/apache/rocketmq-client-go/v2"
	"github.com/apache/rocketmq-client-go/v2/consumer"
	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/apache/rocketmq-client-go/v2/producer"
	"github.com/apache/rocketmq-client-go/v2/rlog"

	"rocketscope/tests/clients/go/loadstat"
)

func fail(format string, args ...interface{}) {
	loadstat.Emit(map[string]interface{}{"event": "error", "error": fmt.Sprintf(format, args...)})
	os.Exit(1)
}

func main() {
	level := os.Getenv("RMQGO_LOG") // debug, info, warn or error (default)
	if level == "" {
		level = "error"
	}
	rlog.SetLogLevel(level)
	if len(os.Args) < 2 {
		fail("usage: rmqgo produce|consume ...")
	}
	switch os.Args[1] {
	case "produce":
		produce(os.Args[2:])
	case "consume":
		consume(os.Args[2:])
	case "pull":
		pull(os.Args[2:])
	default:
		fail("unknown command %q", os.Args[1])
	}
}

func produce(args []string) {
	fs := flag.NewFlagSet("produce", flag.ExitOnError)
	ns := fs.String("ns", "127.0.0.1:9876", "name server")
	topic := fs.String("topic", "", "topic")
	group := fs.String("group", "rmqgo-producer", "producer group")
	n := fs.Int("n", 10, "messages")
	size := fs.Int("size", 0, "body size (0: 'go-<i>' bodies)")
	batch := fs.Int("batch", 1, "messages per send (SEND_BATCH_MESSAGE when > 1)")
	depth := fs.Int("depth", 1, "sends in flight (goroutines)")
	tag := fs.String("tag", "", "tag")
	quiet := fs.Bool("quiet", false, "print only the summary")
	warmup := fs.Int("warmup", 0, "untimed messages sent first (route, connections, JIT of the server); "+
		"a {\"event\":\"warm\"} line marks the start of the timed part")
	ak := fs.String("ak", "", "access key (ACL; with -sk)")
	sk := fs.String("sk", "", "secret key (ACL)")
	retries := fs.Int("retries", 2, "retries of a failed send")
	useTLS := fs.Bool("tls", false, "TLS to the name server and brokers (WithTls; the client skips verification)")
	_ = fs.Parse(args)
	popts := []producer.Option{
		producer.WithNsResolver(primitive.NewPassthroughResolver(strings.Split(*ns, ";"))),
		producer.WithGroupName(*group), producer.WithRetry(*retries),
		producer.WithSendMsgTimeout(10 * time.Second)}
	if *ak != "" {
		popts = append(popts, producer.WithCredentials(primitive.Credentials{AccessKey: *ak, SecretKey: *sk}))
	}
	if *useTLS {
		popts = append(popts, producer.WithTls(true))
	}
	p, err := rocketmq.NewProducer(popts...)
	if err != nil {
		fail("new producer: %v", err)
	}
	if err := p.Start(); err != nil {
		fail("start producer: %v", err)
	}
	defer func() { _ = p.Shutdown() }()
	body := func(i int) []byte {
		if *size > 0 {
			b := make([]byte, *size)
			copy(b, fmt.Sprintf("go-%d-", i))
			return b
		}
		return []byte(fmt.Sprintf("go-%d", i))
	}
	if *warmup > 0 {
		var wwg sync.WaitGroup
		var wnext int64
		for w := 0; w < *depth; w++ {
			wwg.Add(1)
			go func() {
				defer wwg.Done()
				for atomic.AddInt64(&wnext, int64(*batch)) <= int64(*warmup) {
					var msgs []*primitive.Message
					for i := 0; i < *batch; i++ {
						msgs = append(msgs, primitive.NewMessage(*topic, body(i)))
					}
					_, _ = p.SendSync(context.Background(), msgs...)
				}
			}()
		}
		wwg.Wait()
		loadstat.Emit(map[string]interface{}{"event": "warm", "sent": *warmup})
	}
	var next, ok, failed int64 = 0, 0, 0
	var mu sync.Mutex
	lat := make([][]float64, *depth) // per goroutine: seconds of each SendSync call
	cpu0 := loadstat.CPUSeconds()
	start := time.Now()
	var wg sync.WaitGroup
	for w := 0; w < *depth; w++ {
		w := w
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				first := int(atomic.AddInt64(&next, int64(*batch))) - *batch
				if first >= *n {
					return
				}
				var msgs []*primitive.Message
				for i := first; i < first+*batch && i < *n; i++ {
					m := primitive.NewMessage(*topic, body(i))
					if *tag != "" {
						m.WithTag(*tag)
					}
					m.WithKeys([]string{fmt.Sprintf("k%d", i)})
					msgs = append(msgs, m)
				}
				t0 := time.Now()
				res, err := p.SendSync(context.Background(), msgs...)
				lat[w] = append(lat[w], time.Since(t0).Seconds())
				if err != nil || res.Status != primitive.SendOK {
					atomic.AddInt64(&failed, int64(len(msgs)))
					if !*quiet {
						mu.Lock()
						ev := map[string]interface{}{"event": "send_failed", "first": first, "error": fmt.Sprint(err),
							"seconds": time.Since(t0).Seconds()}
						if err == nil && res != nil { // answered, not SEND_OK: FLUSH_SLAVE_TIMEOUT (2), SLAVE_NOT_AVAILABLE (3), ...
							ev["status"] = int(res.Status)
							ev["offsetMsgId"] = res.OffsetMsgID
						}
						loadstat.Emit(ev)
						mu.Unlock()
					}
					continue
				}
				atomic.AddInt64(&ok, int64(len(msgs)))
				if !*quiet {
					mu.Lock()
					loadstat.Emit(map[string]interface{}{"event": "sent", "first": first, "count": len(msgs),
						"msgId": res.MsgID, "offsetMsgId": res.OffsetMsgID, "broker": res.MessageQueue.BrokerName,
						"queueId": res.MessageQueue.QueueId, "queueOffset": res.QueueOffset})
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	secs := time.Since(start).Seconds()
	cpu := loadstat.CPUSeconds() - cpu0
	var all []float64
	for _, l := range lat {
		all = append(all, l...)
	}
	sort.Float64s(all)
	loadstat.Emit(map[string]interface{}{"event": "summary", "sent": ok, "failed": failed, "seconds": secs,
		"rate": float64(ok) / secs, "p50_ms": loadstat.Percentile(all, 0.5) * 1000, "p99_ms": loadstat.Percentile(all, 0.99) * 1000,
		"cpu_s": cpu, "cpu_us_per_msg": cpu / float64(max64(ok, 1)) * 1e6})
}

func max64(a, b int64) int64 {
	if a > b {
		return a
	}
	return b
}

func consume(args []string) {
	fs := flag.NewFlagSet("consume", flag.ExitOnError)
	ns := fs.String("ns", "127.0.0.1:9876", "name server")
	topic := fs.String("topic", "", "topic")
	group := fs.String("group", "rmqgo-consumer", "consumer group")
	n := fs.Int("n", 10, "stop after this many distinct messages")
	timeout := fs.Int("timeout", 60, "give up after this many seconds")
	failFirst := fs.Int("fail-first", 0, "ask for redelivery (ConsumeRetryLater) of the first N deliveries")
	ak := fs.String("ak", "", "access key (ACL; with -sk)")
	sk := fs.String("sk", "", "secret key (ACL)")
	useTLS := fs.Bool("tls", false, "TLS to the name server and brokers (WithTls; the client skips verification)")
	_ = fs.Parse(args)
	copts := []consumer.Option{
		consumer.WithNsResolver(primitive.NewPassthroughResolver(strings.Split(*ns, ";"))),
		consumer.WithGroupName(*group), consumer.WithConsumeFromWhere(consumer.ConsumeFromFirstOffset),
		consumer.WithConsumerModel(consumer.Clustering)}
	if *ak != "" {
		copts = append(copts, consumer.WithCredentials(primitive.Credentials{AccessKey: *ak, SecretKey: *sk}))
	}
	if *useTLS {
		copts = append(copts, consumer.WithTls(true))
	}
	c, err := rocketmq.NewPushConsumer(copts...)
	if err != nil {
		fail("new consumer: %v", err)
	}
	var mu sync.Mutex
	seen := map[string]bool{}
	deliveries := 0
	done := make(chan struct{})
	var once sync.Once
	err = c.Subscribe(*topic, consumer.MessageSelector{}, func(ctx context.Context,
		msgs ...*primitive.MessageExt) (consumer.ConsumeResult, error) {
		mu.Lock()
		defer mu.Unlock()
		for _, m := range msgs {
			deliveries++
			if deliveries <= *failFirst {
				loadstat.Emit(map[string]interface{}{"event": "retry_later", "msgId": m.MsgId, "body": string(m.Body),
					"reconsumeTimes": m.ReconsumeTimes})
				return consumer.ConsumeRetryLater, nil
			}
		}
		for _, m := range msgs {
			loadstat.Emit(map[string]interface{}{"event": "received", "msgId": m.MsgId, "body": string(m.Body),
				"queueId": m.Queue.QueueId, "queueOffset": m.QueueOffset, "reconsumeTimes": m.ReconsumeTimes,
				"tags": m.GetTags(), "keys": m.GetKeys()})
			seen[m.MsgId] = true
		}
		if len(seen) >= *n {
			once.Do(func() { close(done) })
		}
		return consumer.ConsumeSuccess, nil
	})
	if err != nil {
		fail("subscribe: %v", err)
	}
	if err := c.Start(); err != nil {
		fail("start consumer: %v", err)
	}
	select {
	case <-done:
	case <-time.After(time.Duration(*timeout) * time.Second):
	}
	mu.Lock()
	got := len(seen)
	mu.Unlock()
	// the callback that completed the count returns after done closed: give the client a moment to record
	// that batch's offset, so Shutdown persists it and a restarted group resumes after it
	time.Sleep(time.Second)
	_ = c.Shutdown()
	loadstat.Emit(map[string]interface{}{"event": "summary", "received": got})
}

// pull reads one queue by offset with the client's PullConsumer.PullFrom, as Apache's example LMQPullConsumer
// reads an LMQ queue (%LMQ%..., queue 0): no name server route exists for it, so the consumer subscribes a
// topic (-route) whose route names the broker, then pulls the queue of -broker directly.
func pull(args []string) {
	fs := flag.NewFlagSet("pull", flag.ExitOnError)
	ns := fs.String("ns", "127.0.0.1:9876", "name server")
	route := fs.String("route", "", "a topic on the broker, read for its route (the LMQ's parent topic)")
	topic := fs.String("topic", "", "the topic or LMQ queue to pull")
	broker := fs.String("broker", "", "broker name of the queue")
	group := fs.String("group", "rmqgo-puller", "consumer group")
	queue := fs.Int("queue", 0, "queue id")
	offset := fs.Int64("offset", 0, "first offset")
	n := fs.Int("n", 10, "stop after this many messages")
	timeout := fs.Int("timeout", 60, "give up after this many seconds")
	_ = fs.Parse(args)
	c, err := rocketmq.NewPullConsumer(
		consumer.WithNsResolver(primitive.NewPassthroughResolver(strings.Split(*ns, ";"))),
		consumer.WithGroupName(*group), consumer.WithConsumerModel(consumer.Clustering))
	if err != nil {
		fail("new pull consumer: %v", err)
	}
	if err := c.Subscribe(*route, consumer.MessageSelector{}); err != nil {
		fail("subscribe %s: %v", *route, err)
	}
	if err := c.Start(); err != nil {
		fail("start pull consumer: %v", err)
	}
	mq := &primitive.MessageQueue{Topic: *topic, BrokerName: *broker, QueueId: *queue}
	next, got, status := *offset, 0, ""
	deadline := time.Now().Add(time.Duration(*timeout) * time.Second)
	for got < *n && time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		res, err := c.PullFrom(ctx, mq, next, 32)
		cancel()
		if err != nil {
			_ = c.Shutdown()
			fail("pull %s queue %d at %d: %v", *topic, *queue, next, err)
		}
		status = fmt.Sprint(res.Status)
		for _, m := range res.GetMessageExts() {
			loadstat.Emit(map[string]interface{}{"event": "received", "msgId": m.MsgId, "body": string(m.Body),
				"topic": m.Topic, "queueId": m.Queue.QueueId, "queueOffset": m.QueueOffset,
				"multiDispatch":    m.GetProperty("INNER_MULTI_DISPATCH"),
				"multiQueueOffset": m.GetProperty("INNER_MULTI_QUEUE_OFFSET")})
			got++
		}
		next = res.NextBeginOffset
		if res.Status != primitive.PullFound {
			break
		}
	}
	_ = c.Shutdown()
	loadstat.Emit(map[string]interface{}{"event": "summary", "received": got, "nextOffset": next, "status": status})
}
