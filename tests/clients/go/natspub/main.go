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
	"flag"
	"os"

	"github.com/nats-io/nats.go"

	"rocketscope/tests/clients/go/loadstat"
)

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
		loadstat.Emit(map[string]interface{}{"event": "error", "error": err.Error()})
		os.Exit(1)
	}
	defer nc.Close()
	js, err := nc.JetStream()
	if err != nil {
		loadstat.Emit(map[string]interface{}{"event": "error", "error": err.Error()})
		os.Exit(1)
	}
	body := make([]byte, *size)
	for i := range body {
		body[i] = 'x'
	}
	send := func() error {
		_, err := js.Publish(*subject, body)
		return err
	}
	loadstat.Emit(loadstat.Drive(*n, *warmup, *depth, send))
}
