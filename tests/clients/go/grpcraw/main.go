// grpcraw sends one pre-serialised unary gRPC request again and again from depth goroutines over one
// HTTP/2 connection, as rmqgo produce and natspub do for their protocols: the load generator of
// bench/grpc_floor.py, which measures what a gRPC server costs per call with a client that costs far
// less CPU per call than the server (Apache's Java client costs about as much as the broker it drives).
//
//	grpcraw -addr 127.0.0.1:8081 -method /apache.rocketmq.v2.MessagingService/SendMessage \
//	        -request req.bin -n N [-depth D] [-warmup W] [-header k=v ...] [-ok-code 20000]
//
// The request file holds the protobuf bytes of one request message. An answer counts as failed when the
// call fails or when its field 1 (a RocketMQ v2 Status) carries a code other than -ok-code (0 turns the
// check off). Prints {"event":"warm"} after the untimed warm-up, then one {"event":"summary"} line with the
// fields of rmqgo produce: sent, failed, seconds, rate, p50_ms, p99_ms, cpu_s, cpu_us_per_msg.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/encoding/protowire"

	"rocketscope/tests/clients/go/loadstat"
)

// rawCodec passes bytes through: the request is serialised once, before the run.
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error) { return *(v.(*[]byte)), nil }
func (rawCodec) Unmarshal(data []byte, v any) error {
	*(v.(*[]byte)) = append([]byte(nil), data...)
	return nil
}
func (rawCodec) Name() string { return "proto" }

type headers []string

func (h *headers) String() string     { return strings.Join(*h, ",") }
func (h *headers) Set(v string) error { *h = append(*h, v); return nil }

// statusCode reads field 1 (a message) of an answer and, inside it, field 1 (a varint): the code of a
// RocketMQ v2 Status. -1 when the answer has no such field.
func statusCode(answer []byte) int64 {
	for len(answer) > 0 {
		num, typ, n := protowire.ConsumeTag(answer)
		if n < 0 {
			return -1
		}
		answer = answer[n:]
		if num == 1 && typ == protowire.BytesType {
			inner, m := protowire.ConsumeBytes(answer)
			if m < 0 {
				return -1
			}
			for len(inner) > 0 {
				fnum, ftyp, k := protowire.ConsumeTag(inner)
				if k < 0 {
					return -1
				}
				inner = inner[k:]
				if fnum == 1 && ftyp == protowire.VarintType {
					v, j := protowire.ConsumeVarint(inner)
					if j < 0 {
						return -1
					}
					return int64(v)
				}
				skip := protowire.ConsumeFieldValue(fnum, ftyp, inner)
				if skip < 0 {
					return -1
				}
				inner = inner[skip:]
			}
			return -1
		}
		skip := protowire.ConsumeFieldValue(num, typ, answer)
		if skip < 0 {
			return -1
		}
		answer = answer[skip:]
	}
	return -1
}

func main() {
	addr := flag.String("addr", "127.0.0.1:8081", "server host:port")
	method := flag.String("method", "/apache.rocketmq.v2.MessagingService/SendMessage", "full method name")
	requestFile := flag.String("request", "", "file with the serialised request")
	n := flag.Int("n", 10000, "timed calls")
	depth := flag.Int("depth", 64, "calls in flight (goroutines)")
	warmup := flag.Int("warmup", 0, "untimed calls first")
	okCode := flag.Int64("ok-code", 20000, "the Status code of a good answer (0: do not check)")
	var hdrs headers
	flag.Var(&hdrs, "header", "k=v request metadata (repeatable)")
	flag.Parse()
	request, err := os.ReadFile(*requestFile)
	if err != nil {
		loadstat.Fail("%v", err)
	}
	conn, err := grpc.NewClient(*addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		loadstat.Fail("%v", err)
	}
	defer conn.Close()
	pairs := []string{}
	for _, h := range hdrs {
		k, v, _ := strings.Cut(h, "=")
		pairs = append(pairs, k, v)
	}
	ctx := metadata.NewOutgoingContext(context.Background(), metadata.Pairs(pairs...))
	loadstat.Run(*n, *warmup, *depth, func() error {
		var answer []byte
		req := request
		err := conn.Invoke(ctx, *method, &req, &answer, grpc.ForceCodec(rawCodec{}))
		if err == nil && *okCode != 0 {
			if code := statusCode(answer); code != *okCode {
				err = fmt.Errorf("status code %d", code)
			}
		}
		return err
	})
}
