// Package loadstat holds what every Go load generator of bench/datapath_bench.py prints the same way: one
// JSON line per event, its own CPU (so a benchmark row shows the generator is not the bottleneck), and the
// nearest-rank percentiles of its latencies, as bench/common.py computes them.
package loadstat

import (
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Emit prints v as one JSON line.
func Emit(v map[string]interface{}) {
	b, _ := json.Marshal(v)
	fmt.Println(string(b))
}

// CPUSeconds is this process's user+system CPU so far (every thread).
func CPUSeconds() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return float64(ru.Utime.Sec+ru.Stime.Sec) + float64(ru.Utime.Usec+ru.Stime.Usec)/1e6
}

// Percentile is the nearest-rank percentile of sorted samples (0 when empty), as bench/common.py's.
func Percentile(sorted []float64, q float64) float64 {
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

// Summary is the {"event":"summary"} line of a timed run of n sends: per-worker latencies in seconds are
// merged and sorted; cpu is the CPU seconds the run took.
func Summary(n int, failed int64, secs, cpu float64, perWorker [][]float64) map[string]interface{} {
	var all []float64
	for _, l := range perWorker {
		all = append(all, l...)
	}
	sort.Float64s(all)
	ok := int64(n) - failed
	div := ok
	if div < 1 {
		div = 1
	}
	return map[string]interface{}{"event": "summary", "sent": ok, "failed": failed, "seconds": secs,
		"rate": float64(ok) / secs, "p50_ms": Percentile(all, 0.5) * 1000,
		"p99_ms": Percentile(all, 0.99) * 1000, "cpu_s": cpu, "cpu_us_per_msg": cpu / float64(div) * 1e6}
}

// Drive calls send from depth goroutines: warmup untimed calls, then the {"event":"warm"} line, then n
// timed calls; it returns their summary line (not yet printed: a caller may add fields). A send that
// returns an error counts as failed and has no latency.
func Drive(n, warmup, depth int, send func() error) map[string]interface{} {
	run := func(count int, lat [][]float64) int64 {
		var next, failed int64
		var wg sync.WaitGroup
		for w := 0; w < depth; w++ {
			w := w
			wg.Add(1)
			go func() {
				defer wg.Done()
				for atomic.AddInt64(&next, 1) <= int64(count) {
					t0 := time.Now()
					if err := send(); err != nil {
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
	run(warmup, nil)
	Emit(map[string]interface{}{"event": "warm", "sent": warmup})
	lat := make([][]float64, depth)
	cpu0 := CPUSeconds()
	start := time.Now()
	failed := run(n, lat)
	return Summary(n, failed, time.Since(start).Seconds(), CPUSeconds()-cpu0, lat)
}

// Fail prints an {"event":"error"} line (a generator that cannot start) and exits 1.
func Fail(format string, args ...interface{}) {
	Emit(map[string]interface{}{"event": "error", "error": fmt.Sprintf(format, args...)})
	os.Exit(1)
}

// Run is Drive for a send whose error says why it failed: the summary line, with the last such error as
// "last_error" (so a row of failed sends says what the server answered), is printed and returned.
func Run(n, warmup, depth int, send func() error) map[string]interface{} {
	var lastError atomic.Value
	summary := Drive(n, warmup, depth, func() error {
		err := send()
		if err != nil {
			lastError.Store(err.Error())
		}
		return err
	})
	if e := lastError.Load(); e != nil {
		summary["last_error"] = e
	}
	Emit(summary)
	return summary
}
