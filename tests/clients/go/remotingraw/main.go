// remotingraw sends RocketMQ remoting SEND_MESSAGE_V2 requests (code 310, JSON header, the fields and
// properties Apache's Go client v2 sends for a plain message: UNIQ_KEY and WAIT) from depth goroutines over
// one connection to the topic's master, as rmqgo produce does with SendSync, but without a client library:
// each request is a few appends to a byte slice, every frame queued by the time the writer runs goes out in
// one write, and an answer is matched to its send by opaque (tests/clients/go/rawpipe).  It is the
// remoting side of bench/datapath_bench.py's "raw" rows, which compare servers with load generators that cost
// a few µs per message on every side (natsraw for JetStream).
//
//	remotingraw -ns 127.0.0.1:9876 -topic T -n N [-size B] [-depth D] [-warmup W] [-group G] [-timeout 10s]
//
// The route comes from the name server (GET_ROUTEINFO_BY_TOPIC): the broker with id 0 and its write queues,
// used round robin.  An answer counts as failed unless its code is 0 (SUCCESS).  Prints {"event":"warm"}
// after the untimed warm-up, then one {"event":"summary"} line with rmqgo produce's fields.
package main

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"regexp"
	"strconv"
	"sync/atomic"
	"time"

	"rocketscope/tests/clients/go/loadstat"
	"rocketscope/tests/clients/go/rawpipe"
)

// frame is one remoting frame with a JSON header: length, serialize type 0 and header length, header, body.
func frame(header, body []byte) []byte {
	out := make([]byte, 8, 8+len(header)+len(body))
	binary.BigEndian.PutUint32(out[0:], uint32(4+len(header)+len(body)))
	binary.BigEndian.PutUint32(out[4:], uint32(len(header)))
	out = append(out, header...)
	return append(out, body...)
}

// readFrame reads one frame: its JSON header and body.
func readFrame(r *bufio.Reader) (header, body []byte, err error) {
	var head [8]byte
	if _, err = io.ReadFull(r, head[:]); err != nil {
		return nil, nil, err
	}
	total := binary.BigEndian.Uint32(head[0:])
	hlen := binary.BigEndian.Uint32(head[4:]) & 0xFFFFFF
	if head[4] != 0 || hlen+4 > total || total > 64<<20 {
		return nil, nil, fmt.Errorf("not a JSON remoting frame (length %d, header %d, type %d)", total, hlen, head[4])
	}
	buf := make([]byte, total-4)
	if _, err = io.ReadFull(r, buf); err != nil {
		return nil, nil, err
	}
	return buf[:hlen], buf[hlen:], nil
}

// intField reads the number after `"name":` in a JSON header (the first occurrence: code and opaque come
// before extFields in every answer we read).
func intField(header []byte, name string) (int64, bool) {
	key := []byte(`"` + name + `":`)
	for i := 0; i+len(key) <= len(header); i++ {
		if string(header[i:i+len(key)]) == string(key) {
			j := i + len(key)
			k := j
			for k < len(header) && (header[k] == '-' || (header[k] >= '0' && header[k] <= '9')) {
				k++
			}
			v, err := strconv.ParseInt(string(header[j:k]), 10, 64)
			return v, err == nil
		}
	}
	return 0, false
}

var brokerRe = regexp.MustCompile(`"brokerAddrs":\{"?0"?:"([^"]+)"`)
var queuesRe = regexp.MustCompile(`"writeQueueNums":(\d+)`)

// route asks the name server for the topic's master and its write queues.
func route(ns, topic string) (string, int) {
	conn, err := net.DialTimeout("tcp", ns, 5*time.Second)
	if err != nil {
		loadstat.Fail("name server %s: %v", ns, err)
	}
	defer conn.Close()
	header, _ := json.Marshal(map[string]interface{}{"code": 105, "language": "GO", "version": 317, "opaque": 1,
		"flag": 0, "extFields": map[string]string{"topic": topic}})
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err = conn.Write(frame(header, nil)); err != nil {
		loadstat.Fail("name server %s: %v", ns, err)
	}
	h, body, err := readFrame(bufio.NewReader(conn))
	if err != nil {
		loadstat.Fail("name server %s: %v", ns, err)
	}
	if code, _ := intField(h, "code"); code != 0 {
		loadstat.Fail("no route for topic %s: %s", topic, h)
	}
	b, q := brokerRe.FindSubmatch(body), queuesRe.FindSubmatch(body)
	if b == nil || q == nil {
		loadstat.Fail("route of %s has no master or queues: %s", topic, body)
	}
	queues, _ := strconv.Atoi(string(q[1]))
	return string(b[1]), queues
}

func main() {
	ns := flag.String("ns", "127.0.0.1:9876", "name server")
	topic := flag.String("topic", "bench", "topic")
	group := flag.String("group", "remotingraw", "producer group")
	n := flag.Int("n", 10000, "timed sends")
	size := flag.Int("size", 1024, "body size")
	depth := flag.Int("depth", 64, "sends in flight (goroutines)")
	warmup := flag.Int("warmup", 0, "untimed sends first")
	timeout := flag.Duration("timeout", 10*time.Second, "a send unanswered this long ends the run")
	flag.Parse()
	addr, queues := route(*ns, *topic)
	if queues < 1 {
		loadstat.Fail("topic %s has no write queues", *topic)
	}
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		loadstat.Fail("broker %s: %v", addr, err)
	}
	read := func(r *bufio.Reader, resolve func(uint64, error), _ func([]byte)) error {
		for {
			h, _, err := readFrame(r)
			if err != nil {
				return err
			}
			opaque, ok := intField(h, "opaque")
			if !ok {
				return errors.New("an answer without opaque")
			}
			code, _ := intField(h, "code")
			if code != 0 {
				resolve(uint64(opaque), fmt.Errorf("code %d: %.200s", code, h))
			} else {
				resolve(uint64(opaque), nil)
			}
		}
	}
	pipe := rawpipe.Open(conn, bufio.NewReaderSize(conn, 1<<20), read, *timeout)
	body := make([]byte, *size)
	for i := range body {
		body[i] = 'x'
	}
	prefix := []byte(`{"code":310,"language":"GO","version":317,"flag":0,"opaque":`)
	fields := `,"extFields":{"a":` + strconv.Quote(*group) + `,"b":` + strconv.Quote(*topic) +
		`,"c":"TBW102","d":"4","e":"`
	pid := strconv.FormatInt(int64(os.Getpid()), 16)
	var next atomic.Int64
	loadstat.Run(*n, *warmup, *depth, func() error {
		id := next.Add(1)
		h := make([]byte, 0, 320)
		h = append(h, prefix...)
		h = strconv.AppendInt(h, id, 10)
		h = append(h, fields...)
		h = strconv.AppendInt(h, id%int64(queues), 10)
		h = append(h, `","f":"0","g":"`...)
		h = strconv.AppendInt(h, time.Now().UnixMilli(), 10)
		// UNIQ_KEY \u0001 key \u0002 WAIT \u0001 true \u0002, as the Go client writes properties
		h = append(h, `","h":"0","i":"UNIQ_KEY\u0001`...)
		h = append(h, pid...)
		h = append(h, '-')
		h = strconv.AppendInt(h, id, 16)
		h = append(h, `\u0002WAIT\u0001true\u0002","j":"0","k":"false","m":"false"}}`...)
		return pipe.Call(uint64(id), frame(h, body))
	})
}
