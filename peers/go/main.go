// Command rmqgo drives Apache's Go client (github.com/apache/rocketmq-client-go/v2, remoting
// protocol) against a name server, for the reference cluster of peers/reference_cluster.py.
//
//	rmqgo send    -n 127.0.0.1:9876 -t Topic -c 10 [-trace]   prints one JSON line per message
//	rmqgo consume -n 127.0.0.1:9876 -t Topic -g Group -c 10 [-timeout 60s]
//	rmqgo timerload -n 127.0.0.1:9876 -t Topic -c 1000000 -start-ms MS   (timerload.go)
//
// Both print JSON lines ({"msgId": ..., "body": ...}) so a test can compare what was sent with
// what came back; the exit code is non-zero when a send fails or the count is not reached.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/apache/rocketmq-client-go/v2"
	"github.com/apache/rocketmq-client-go/v2/consumer"
	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/apache/rocketmq-client-go/v2/producer"
	"github.com/apache/rocketmq-client-go/v2/rlog"
)

type line struct {
	MsgID string `json:"msgId"`
	Body  string `json:"body"`
	Queue int    `json:"queue"`
}

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: rmqgo send|consume|timerload [flags]")
		os.Exit(2)
	}
	if os.Args[1] == "timerload" {
		rlog.SetLogLevel("error")
		timerLoad(os.Args[2:])
		return
	}
	fs := flag.NewFlagSet(os.Args[1], flag.ExitOnError)
	ns := fs.String("n", "127.0.0.1:9876", "name server address")
	topic := fs.String("t", "", "topic")
	group := fs.String("g", "rmqgo", "producer or consumer group")
	count := fs.Int("c", 1, "messages to send or to wait for")
	trace := fs.Bool("trace", false, "write message trace to RMQ_SYS_TRACE_TOPIC")
	timeout := fs.Duration("timeout", 60*time.Second, "consume: give up after this long")
	_ = fs.Parse(os.Args[2:])
	rlog.SetLogLevel("error")
	// a passthrough resolver: the default one asks an HTTP address server on the internet
	resolver := primitive.NewPassthroughResolver([]string{*ns})
	out := json.NewEncoder(os.Stdout)
	switch os.Args[1] {
	case "send":
		opts := []producer.Option{producer.WithNsResolver(resolver), producer.WithGroupName(*group), producer.WithRetry(2)}
		if *trace {
			opts = append(opts, producer.WithTrace(&primitive.TraceConfig{Access: primitive.Local, Resolver: resolver}))
		}
		p, err := rocketmq.NewProducer(opts...)
		must(err)
		must(p.Start())
		defer func() { _ = p.Shutdown() }()
		for i := 0; i < *count; i++ {
			body := fmt.Sprintf("go-%d", i)
			res, err := p.SendSync(context.Background(), primitive.NewMessage(*topic, []byte(body)))
			must(err)
			if res.Status != primitive.SendOK {
				must(fmt.Errorf("send %d: status %d", i, res.Status))
			}
			must(out.Encode(line{MsgID: res.MsgID, Body: body, Queue: res.MessageQueue.QueueId}))
		}
	case "consume":
		c, err := rocketmq.NewPushConsumer(consumer.WithNsResolver(resolver), consumer.WithGroupName(*group),
			consumer.WithConsumeFromWhere(consumer.ConsumeFromFirstOffset))
		must(err)
		var mu sync.Mutex
		seen := map[string]bool{}
		done := make(chan struct{})
		must(c.Subscribe(*topic, consumer.MessageSelector{}, func(ctx context.Context, msgs ...*primitive.MessageExt) (consumer.ConsumeResult, error) {
			mu.Lock()
			defer mu.Unlock()
			for _, m := range msgs {
				if seen[m.MsgId] {
					continue
				}
				seen[m.MsgId] = true
				_ = out.Encode(line{MsgID: m.MsgId, Body: string(m.Body), Queue: m.Queue.QueueId})
				if len(seen) == *count {
					close(done)
				}
			}
			return consumer.ConsumeSuccess, nil
		}))
		must(c.Start())
		defer func() { _ = c.Shutdown() }()
		select {
		case <-done:
		case <-time.After(*timeout):
			fmt.Fprintf(os.Stderr, "timed out with %d of %d messages\n", len(seen), *count)
			os.Exit(1)
		}
	default:
		fmt.Fprintln(os.Stderr, "unknown command", os.Args[1])
		os.Exit(2)
	}
}

func must(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "rmqgo:", err)
		os.Exit(1)
	}
}
