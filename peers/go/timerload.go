package main

// rmqgo timerload: many delayed messages written fast into a broker through Apache's Go client, for
// bench/timer_bench.py (issue 21). The Python remoting loader (tests/timer_load.py) reached about 600
// messages a second into Apache's broker on this machine, too slow for a million pending messages.
//
//	rmqgo timerload -n 127.0.0.1:9876 -t Topic -c 1000000 -start-ms 1700000000000 [-window 512]
//
// Message i is due at start-ms + 2 h + (i mod 3600) s (bench/timer_bench.py due_far), set with the
// client's WithDelayTimestamp (property TIMER_DELIVER_MS, RocketMQ 5's timer). Up to -window async
// sends are in flight; a send the broker refuses (e.g. flow control, "broker busy") is retried after a
// growing pause, up to -retries times, so the broker sets the pace. One JSON line is printed at the end:
// {"sent", "failed", "retried", "seconds", "rate", "errors"}.

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/apache/rocketmq-client-go/v2"
	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/apache/rocketmq-client-go/v2/producer"
)

type loadResult struct {
	Sent    int64    `json:"sent"`
	Failed  int64    `json:"failed"`
	Retried int64    `json:"retried"`
	Seconds float64  `json:"seconds"`
	Rate    float64  `json:"rate"`
	Errors  []string `json:"errors"`
}

func timerLoad(args []string) {
	fs := flag.NewFlagSet("timerload", flag.ExitOnError)
	ns := fs.String("n", "127.0.0.1:9876", "name server address")
	topic := fs.String("t", "", "topic")
	group := fs.String("g", "rmqgo-timerload", "producer group")
	count := fs.Int("c", 1000, "messages to send")
	window := fs.Int("window", 512, "async sends in flight")
	retries := fs.Int("retries", 20, "attempts per message before it counts as failed")
	startMs := fs.Int64("start-ms", time.Now().UnixMilli(), "base of the due times (ms since the epoch)")
	progress := fs.Int("progress", 100000, "print a progress line to stderr every this many sends")
	_ = fs.Parse(args)
	resolver := primitive.NewPassthroughResolver([]string{*ns})
	p, err := rocketmq.NewProducer(producer.WithNsResolver(resolver), producer.WithGroupName(*group),
		producer.WithRetry(0), producer.WithSendMsgTimeout(30*time.Second))
	must(err)
	must(p.Start())
	defer func() { _ = p.Shutdown() }()

	var sent, failed, retried atomic.Int64
	var errMu sync.Mutex
	var errs []string
	note := func(e string) {
		errMu.Lock()
		defer errMu.Unlock()
		if len(errs) < 5 {
			errs = append(errs, e)
		}
	}
	slots := make(chan struct{}, *window)
	var wg sync.WaitGroup
	started := time.Now()
	var send func(i, attempt int)
	send = func(i, attempt int) {
		due := time.UnixMilli(*startMs + 2*3600_000 + int64(i%3600)*1000)
		msg := primitive.NewMessage(*topic, []byte(fmt.Sprintf("timer-%d", i))).WithDelayTimestamp(due)
		again := func(e string) {
			if attempt+1 >= *retries {
				failed.Add(1)
				note(e)
				<-slots
				wg.Done()
				return
			}
			retried.Add(1)
			time.AfterFunc(time.Duration(50*(attempt+1))*time.Millisecond, func() { send(i, attempt+1) })
		}
		err := p.SendAsync(context.Background(), func(_ context.Context, r *primitive.SendResult, err error) {
			switch {
			case err != nil:
				again(err.Error())
			case r.Status != primitive.SendOK:
				again(fmt.Sprintf("status %d", r.Status))
			default:
				if n := sent.Add(1); *progress > 0 && n%int64(*progress) == 0 {
					fmt.Fprintf(os.Stderr, "timerload: %d sent in %.1f s\n", n, time.Since(started).Seconds())
				}
				<-slots
				wg.Done()
			}
		}, msg)
		if err != nil {
			again(err.Error())
		}
	}
	for i := 0; i < *count; i++ {
		slots <- struct{}{}
		wg.Add(1)
		send(i, 0)
	}
	wg.Wait()
	secs := time.Since(started).Seconds()
	must(json.NewEncoder(os.Stdout).Encode(loadResult{Sent: sent.Load(), Failed: failed.Load(), Retried: retried.Load(),
		Seconds: secs, Rate: float64(sent.Load()) / secs, Errors: errs}))
	if failed.Load() > 0 {
		os.Exit(1)
	}
}
