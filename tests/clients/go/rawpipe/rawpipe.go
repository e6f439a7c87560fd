// Package rawpipe is the connection of the raw load generators (remotingraw, natsraw): many calls in flight on
// one TCP connection, their frames written by one goroutine that coalesces whatever is queued into one write
// (as nats.go's flusher does), their answers matched to the waiting call by an id the protocol carries
// (remoting's opaque, a NATS reply subject).  The generators cost a few µs of CPU per message, so on a machine
// the servers share with them, a benchmark row measures the servers rather than a client library's overhead.
package rawpipe

import (
	"bufio"
	"fmt"
	"net"
	"sync"
	"time"
)

// Pipe is one connection with calls in flight.
type Pipe struct {
	Conn    net.Conn
	out     chan []byte
	mu      sync.Mutex
	pending map[uint64]call
	err     error
}

type call struct {
	done chan error
	at   time.Time
}

// Reader reads answers from r until the connection fails, calling resolve(id, err) for each answered call and
// write(frame) when the protocol must answer the server itself (a NATS PING).
type Reader func(r *bufio.Reader, resolve func(id uint64, err error), write func([]byte)) error

// Open starts the writer goroutine on conn and the reader on r (conn's reader: a handshake may have read
// through it already).  A call not answered within timeout fails the pipe, and every call with it: a server
// that stops answering ends the run with an error rather than a hang.
func Open(conn net.Conn, r *bufio.Reader, read Reader, timeout time.Duration) *Pipe {
	p := &Pipe{Conn: conn, out: make(chan []byte, 4096), pending: make(map[uint64]call)}
	go p.writeLoop()
	go p.watch(timeout)
	go func() {
		err := read(r, p.resolve, p.Write)
		p.fail(fmt.Errorf("connection lost: %w", err))
	}()
	return p
}

// Write queues one frame (no answer expected).
func (p *Pipe) Write(frame []byte) { p.out <- frame }

// Call queues frame and waits for the answer with this id.
func (p *Pipe) Call(id uint64, frame []byte) error {
	done := make(chan error, 1)
	p.mu.Lock()
	if p.err != nil {
		p.mu.Unlock()
		return p.err
	}
	p.pending[id] = call{done, time.Now()}
	p.mu.Unlock()
	p.out <- frame
	return <-done
}

func (p *Pipe) resolve(id uint64, err error) {
	p.mu.Lock()
	c, ok := p.pending[id]
	delete(p.pending, id)
	p.mu.Unlock()
	if ok {
		c.done <- err
	}
}

// fail answers every waiting call with err, and every later one.
func (p *Pipe) fail(err error) {
	p.mu.Lock()
	p.err = err
	waiting := p.pending
	p.pending = make(map[uint64]call)
	p.mu.Unlock()
	for _, c := range waiting {
		c.done <- err
	}
}

// watch fails the pipe once a call has waited longer than timeout (checked every quarter of it).
func (p *Pipe) watch(timeout time.Duration) {
	for {
		time.Sleep(timeout / 4)
		late := false
		p.mu.Lock()
		if p.err != nil {
			p.mu.Unlock()
			return
		}
		for _, c := range p.pending {
			if time.Since(c.at) > timeout {
				late = true
				break
			}
		}
		p.mu.Unlock()
		if late {
			p.fail(fmt.Errorf("no answer within %v", timeout))
			return
		}
	}
}

// writeLoop writes every queued frame, one flush for all frames queued by the time the first is taken.
func (p *Pipe) writeLoop() {
	w := bufio.NewWriterSize(p.Conn, 1<<20)
	for frame := range p.out {
		w.Write(frame)
		for more := true; more; {
			select {
			case f := <-p.out:
				w.Write(f)
			default:
				more = false
			}
		}
		if err := w.Flush(); err != nil {
			p.fail(err)
			return
		}
	}
}
