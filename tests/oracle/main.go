// Command oracle answers "which nodes can this pod's ResourceClaims be allocated on,
// and with which devices?" by running the real Kubernetes structured allocator
// (k8s.io/dynamic-resource-allocation/structured) the way kube-scheduler's
// DynamicResources plugin does. It is the reference for the Python allocator's
// differential tests and benchmarks. See README.md.
//
// Usage:
//
//	oracle < scenario.json         one scenario object -> one result object
//	oracle < scenarios.json        a JSON array of scenarios -> a JSON array of results
//	oracle -jsonl < scenarios.jsonl one scenario per line -> one result per line (streamed)
//	oracle -bench < scenario.json  time decisions for one scenario, print JSON timings
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"sort"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
)

func main() {
	var (
		bench      = flag.Bool("bench", false, "time the decision for one scenario (the first one of an array) and print timings as JSON")
		benchTime  = flag.Duration("bench-time", 3*time.Second, "with -bench: how long to measure")
		benchIters = flag.Int("bench-min-iters", 50, "with -bench: measure at least this many decisions")
		jsonl      = flag.Bool("jsonl", false, "read one scenario per line and write one result per line, flushing after each")
		workers    = flag.Int("j", runtime.GOMAXPROCS(0), "batch mode: scenarios evaluated in parallel")
		timeout    = flag.Duration("timeout", 10*time.Second, "limit for one Allocate call, like the scheduler's filterTimeout (0: none)")
	)
	flag.Parse()
	ctx := context.Background()

	var err error
	switch {
	case *jsonl:
		err = runJSONL(ctx, os.Stdin, os.Stdout, *timeout)
	case *bench:
		err = runBench(ctx, os.Stdin, os.Stdout, *benchTime, *benchIters, *timeout)
	default:
		err = runDocument(ctx, os.Stdin, os.Stdout, *workers, *timeout)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "oracle:", err)
		os.Exit(1)
	}
}

// runDocument handles one scenario object or an array of scenarios.
func runDocument(ctx context.Context, in io.Reader, out io.Writer, workers int, timeout time.Duration) error {
	data, err := io.ReadAll(in)
	if err != nil {
		return err
	}
	data = bytes.TrimSpace(data)
	if len(data) == 0 {
		return errors.New("empty input: expected a scenario object or an array of scenarios")
	}
	w := bufio.NewWriterSize(out, 1<<20)
	defer w.Flush()
	enc := json.NewEncoder(w)
	switch data[0] {
	case '{':
		return enc.Encode(evaluate(ctx, data, timeout))
	case '[':
		var raws []json.RawMessage
		if err := json.Unmarshal(data, &raws); err != nil {
			return fmt.Errorf("decode scenario array: %w", err)
		}
		return enc.Encode(evaluateAll(ctx, raws, workers, timeout))
	default:
		return errors.New("input must be a JSON object or array")
	}
}

// evaluateAll evaluates scenarios in parallel, keeping the input order.
func evaluateAll(ctx context.Context, raws []json.RawMessage, workers int, timeout time.Duration) []*ScenarioResult {
	results := make([]*ScenarioResult, len(raws))
	if workers < 1 {
		workers = 1
	}
	next := make(chan int)
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				results[i] = evaluate(ctx, raws[i], timeout)
			}
		}()
	}
	for i := range raws {
		next <- i
	}
	close(next)
	wg.Wait()
	return results
}

func runJSONL(ctx context.Context, in io.Reader, out io.Writer, timeout time.Duration) error {
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 0, 1<<20), 1<<30)
	w := bufio.NewWriter(out)
	enc := json.NewEncoder(w)
	for sc.Scan() {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 {
			continue
		}
		if err := enc.Encode(evaluate(ctx, line, timeout)); err != nil {
			return err
		}
		if err := w.Flush(); err != nil {
			return err
		}
	}
	return sc.Err()
}

// BenchResult is what -bench prints.
type BenchResult struct {
	Name       string `json:"name,omitempty"`
	Allocator  string `json:"allocator"`
	Nodes      int    `json:"nodes"`
	Iterations int    `json:"iterations"`
	// Decision: what the scheduler plugin does for one pod: NewAllocator
	// (PreFilter) plus one Allocate per node, nodes evaluated one after the other.
	Decision Stats `json:"decision"`
	// AllocateOnly: Allocate over all nodes with an allocator built once.
	AllocateOnly Stats `json:"allocateOnly"`
	// FeasibleNodes in the measured decision, as a sanity check.
	FeasibleNodes int `json:"feasibleNodes"`
	ErrorNodes    int `json:"errorNodes"`
}

// Stats are nanoseconds per full-node-list decision.
type Stats struct {
	MeanNs    int64 `json:"meanNs"`
	P50Ns     int64 `json:"p50Ns"`
	P99Ns     int64 `json:"p99Ns"`
	MinNs     int64 `json:"minNs"`
	MaxNs     int64 `json:"maxNs"`
	PerNodeNs int64 `json:"perNodeP50Ns"`
}

func stats(d []time.Duration, nodes int) Stats {
	if len(d) == 0 {
		return Stats{}
	}
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	var sum time.Duration
	for _, x := range s {
		sum += x
	}
	q := func(p float64) int64 {
		i := int(p * float64(len(s)-1))
		return s[i].Nanoseconds()
	}
	st := Stats{
		MeanNs: (sum / time.Duration(len(s))).Nanoseconds(),
		P50Ns:  q(0.50),
		P99Ns:  q(0.99),
		MinNs:  s[0].Nanoseconds(),
		MaxNs:  s[len(s)-1].Nanoseconds(),
	}
	if nodes > 0 {
		st.PerNodeNs = st.P50Ns / int64(nodes)
	}
	return st
}

func runBench(ctx context.Context, in io.Reader, out io.Writer, benchTime time.Duration, minIters int, timeout time.Duration) error {
	data, err := io.ReadAll(in)
	if err != nil {
		return err
	}
	data = bytes.TrimSpace(data)
	if len(data) > 0 && data[0] == '[' {
		var raws []json.RawMessage
		if err := json.Unmarshal(data, &raws); err != nil {
			return fmt.Errorf("decode scenario array: %w", err)
		}
		if len(raws) == 0 {
			return errors.New("empty scenario array")
		}
		data = raws[0]
	}
	var sc Scenario
	if err := json.Unmarshal(data, &sc); err != nil {
		return fmt.Errorf("decode scenario: %w", err)
	}
	applyDefaults(&sc)

	decideAll := func(p *prepared) (feasible, errs int) {
		for _, n := range p.nodes {
			r := p.decide(ctx, n, timeout)
			if r.Feasible {
				feasible++
			}
			if r.Error != "" {
				errs++
			}
		}
		return
	}
	once := func() (*prepared, int, int, error) {
		p, err := prepare(ctx, &sc)
		if err != nil {
			return nil, 0, 0, err
		}
		f, e := decideAll(p)
		return p, f, e, nil
	}

	// Warm up (CEL compilation, caches).
	p, feasible, errNodes, err := once()
	if err != nil {
		return err
	}
	for range 3 {
		if _, _, _, err := once(); err != nil {
			return err
		}
	}

	measure := func(f func()) []time.Duration {
		var ds []time.Duration
		start := time.Now()
		for len(ds) < minIters || time.Since(start) < benchTime {
			t0 := time.Now()
			f()
			ds = append(ds, time.Since(t0))
		}
		return ds
	}
	var nodes []*v1.Node = p.nodes
	decision := measure(func() {
		q, _ := prepare(ctx, &sc)
		decideAll(q)
	})
	shared, _ := prepare(ctx, &sc)
	allocOnly := measure(func() { decideAll(shared) })

	res := BenchResult{
		Name:          sc.Name,
		Allocator:     p.channel,
		Nodes:         len(nodes),
		Iterations:    len(decision),
		Decision:      stats(decision, len(nodes)),
		AllocateOnly:  stats(allocOnly, len(nodes)),
		FeasibleNodes: feasible,
		ErrorNodes:    errNodes,
	}
	enc := json.NewEncoder(out)
	enc.SetIndent("", "  ")
	return enc.Encode(res)
}
