// natsraw publishes to a JetStream stream with the NATS text protocol and no client library, from depth
// goroutines each waiting for its ack, over one connection (tests/clients/go/rawpipe): PUB with a reply
// subject under one inbox wildcard subscription, as nats.go's JetStream publish does, the ack matched to
// its publish by the reply subject.  The JetStream side of bench/datapath_bench.py's "raw" rows, beside
// remotingraw: load generators that cost a few µs per message for every server they drive.
//
//	natsraw -url nats://127.0.0.1:4222 -subject S -n N [-size B] [-depth D] [-warmup W] [-timeout 10s]
//
// An ack counts as failed when it carries "error" (JetStream's {"error":{...}}) or a status header (503: no
// stream takes the subject).  Prints {"event":"warm"}
// after the untimed warm-up, then one {"event":"summary"} line with rmqgo produce's fields.
package main

import (
	"bufio"
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"strconv"
	"sync/atomic"
	"time"

	"rocketscope/tests/clients/go/loadstat"
	"rocketscope/tests/clients/go/rawpipe"
)

func main() {
	server := flag.String("url", "nats://127.0.0.1:4222", "server URL")
	subject := flag.String("subject", "bench.data", "subject of the stream")
	n := flag.Int("n", 10000, "timed messages")
	size := flag.Int("size", 1024, "body size")
	depth := flag.Int("depth", 64, "publishes in flight (goroutines)")
	warmup := flag.Int("warmup", 0, "untimed messages first")
	timeout := flag.Duration("timeout", 10*time.Second, "a publish unacknowledged this long ends the run")
	flag.Parse()
	u, err := url.Parse(*server)
	if err != nil {
		loadstat.Fail("url %s: %v", *server, err)
	}
	conn, err := net.Dial("tcp", u.Host)
	if err != nil {
		loadstat.Fail("server %s: %v", u.Host, err)
	}
	r := bufio.NewReaderSize(conn, 1<<20)
	if line, err := r.ReadString('\n'); err != nil || len(line) < 4 || line[:4] != "INFO" {
		loadstat.Fail("server %s did not send INFO: %q %v", u.Host, line, err)
	}
	inbox := "_INBOX.raw" + strconv.Itoa(os.Getpid()) + "."
	// headers and no_responders, as nats.go asks: a publish no stream takes is answered 503 at once
	hello := `CONNECT {"verbose":false,"pedantic":false,"headers":true,"no_responders":true,"lang":"go",` +
		`"version":"raw"}` + "\r\n" +
		"SUB " + inbox + "* 1\r\nPING\r\n"
	if _, err = conn.Write([]byte(hello)); err != nil {
		loadstat.Fail("server %s: %v", u.Host, err)
	}
	for { // PONG: the subscription is in place before the first publish
		line, err := r.ReadString('\n')
		if err != nil {
			loadstat.Fail("server %s: %v", u.Host, err)
		}
		if line == "PONG\r\n" {
			break
		}
		if len(line) >= 4 && line[:4] == "-ERR" {
			loadstat.Fail("server %s: %s", u.Host, line)
		}
	}
	read := func(r *bufio.Reader, resolve func(uint64, error), write func([]byte)) error {
		for {
			line, err := r.ReadSlice('\n')
			if err != nil {
				return err
			}
			switch {
			case bytes.HasPrefix(line, []byte("MSG ")):
				// MSG <subject> <sid> <bytes>\r\n<payload>\r\n
				parts := bytes.Fields(line[4:])
				if len(parts) != 3 {
					return fmt.Errorf("bad MSG line %q", line)
				}
				id, err1 := strconv.ParseUint(string(parts[0][len(inbox):]), 10, 64)
				length, err2 := strconv.Atoi(string(parts[2]))
				if err1 != nil || err2 != nil {
					return fmt.Errorf("bad MSG line %q", line)
				}
				payload := make([]byte, length+2)
				if _, err := io.ReadFull(r, payload); err != nil {
					return err
				}
				if bytes.Contains(payload, []byte(`"error"`)) {
					resolve(id, fmt.Errorf("%.200s", payload))
				} else {
					resolve(id, nil)
				}
			case bytes.HasPrefix(line, []byte("HMSG ")):
				// HMSG <subject> <sid> <header bytes> <total bytes>\r\n<headers><payload>\r\n: a status (503: no
				// stream takes the subject) or an ack with headers
				parts := bytes.Fields(line[5:])
				if len(parts) != 4 {
					return fmt.Errorf("bad HMSG line %q", line)
				}
				id, err1 := strconv.ParseUint(string(parts[0][len(inbox):]), 10, 64)
				hlen, err2 := strconv.Atoi(string(parts[2]))
				total, err3 := strconv.Atoi(string(parts[3]))
				if err1 != nil || err2 != nil || err3 != nil || hlen > total {
					return fmt.Errorf("bad HMSG line %q", line)
				}
				data := make([]byte, total+2)
				if _, err := io.ReadFull(r, data); err != nil {
					return err
				}
				status := data[:bytes.IndexByte(data[:hlen], '\n')+1]
				if len(bytes.Fields(status)) > 1 || bytes.Contains(data[hlen:], []byte(`"error"`)) {
					resolve(id, fmt.Errorf("%.200s", bytes.TrimSpace(data)))
				} else {
					resolve(id, nil)
				}
			case bytes.HasPrefix(line, []byte("PING")):
				write([]byte("PONG\r\n"))
			case bytes.HasPrefix(line, []byte("-ERR")):
				return errors.New(string(bytes.TrimSpace(line)))
			}
		}
	}
	pipe := rawpipe.Open(conn, r, read, *timeout)
	body := make([]byte, *size)
	for i := range body {
		body[i] = 'x'
	}
	pub := []byte("PUB " + *subject + " " + inbox)
	tail := " " + strconv.Itoa(*size) + "\r\n"
	var next atomic.Uint64
	loadstat.Run(*n, *warmup, *depth, func() error {
		id := next.Add(1)
		f := make([]byte, 0, len(pub)+len(tail)+24+len(body)+2)
		f = append(f, pub...)
		f = strconv.AppendUint(f, id, 10)
		f = append(f, tail...)
		f = append(f, body...)
		f = append(f, "\r\n"...)
		return pipe.Call(id, f)
	})
}
