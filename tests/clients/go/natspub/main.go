// natspub publishes to a JetStream stream from depth goroutines, each waiting for its ack, as rmqgo
// produce does with SendSync: the JetStream side of bench/datapath_bench.py, with a client that costs
// less CPU per message than the server (nats-py costs more than nats-server does).
//
//	natspub -url nats://127.0.0.1:4222 -subject S -n N [-size B] [-depth D] [-warmup W]
//
// Prints {"event":"warm"} after the untimed warm-up, then one {"event":"summary"} line (the same
// fields as rmqgo produce: sent, failed, seconds, rate, p50_ms, p99_ms, cpu_s, cpu_us_per_msg).
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"sort"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
)

func emit(v map[string]interface{}) {
	b, _ := json.Marshal(v)
	fmt.Println(string(b))
}

func cpuSeconds() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return float64(ru.Utime.Sec+ru.Stime.Sec) + float64(ru.Utime.Usec+ru.Stime.Usec)/1e6
}

func percentile(sorted []float64, q float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	rank := int(q*float64(len(sorted))+0.5) - 1
	if rank < 0 {
		rank = 0
	}
	if rank >= len(sorted) {
		rank = len(sorted) - 1
	}
	return sorted[rank]
}

func main() {
	url := flag.String("url", nats.DefaultURL, "server URL")
	subject := flag.String("subject", "bench.data", "subject of the stream")
	n := flag.Int("n", 10000, "timed messages")
	size := flag.Int("size", 1024, "body size")
	depth := flag.Int("depth", 64, "publishes in flight (goroutines)")
	warmup := flag.Int("warmup", 0, "untimed messages first")
	flag.Parse()
	nc, err := nats.Connect(*url)
	if err != nil {
		emit(map[string]interface{}{"event": "error", "error": err.Error()})
		os.Exit(1)
	}
	defer nc.Close()
	js, err := nc.JetStream()
	if err != nil {
		emit(map[string]interface{}{"event": "error", "error": err.Error()})
		os.Exit(1)
	}
	body := make([]byte, *size)
	for i := range body {
		body[i] = 'x'
	}
	run := func(count int, lat [][]float64) int64 {
		var next, failed int64
		var wg sync.WaitGroup
		for w := 0; w < *depth; w++ {
			w := w
			wg.Add(1)
			go func() {
				defer wg.Done()
				for atomic.AddInt64(&next, 1) <= int64(count) {
					t0 := time.Now()
					if _, err := js.Publish(*subject, body); err != nil {
						atomic.AddInt64(&failed, 1)
						continue
					}
					if lat != nil {
						lat[w] = append(lat[w], time.Since(t0).Seconds())
					}
				}
			}()
		}
		wg.Wait()
		return failed
	}
	run(*warmup, nil)
	emit(map[string]interface{}{"event": "warm", "sent": *warmup})
	lat := make([][]float64, *depth)
	cpu0 := cpuSeconds()
	start := time.Now()
	failed := run(*n, lat)
	secs := time.Since(start).Seconds()
	cpu := cpuSeconds() - cpu0
	var all []float64
	for _, l := range lat {
		all = append(all, l...)
	}
	sort.Float64s(all)
	ok := int64(*n) - failed
	if ok < 1 {
		ok = 1
	}
	emit(map[string]interface{}{"event": "summary", "sent": int64(*n) - failed, "failed": failed, "seconds": secs,
		"rate": float64(int64(*n)-failed) / secs, "p50_ms": percentile(all, 0.5) * 1000,
		"p99_ms": percentile(all, 0.99) * 1000, "cpu_s": cpu, "cpu_us_per_msg": cpu / float64(ok) * 1e6})
}
