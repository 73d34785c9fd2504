package server

import (
	"context"
	"math/rand/v2"
	rtmetrics "runtime/metrics"
	"sync/atomic"
	"time"
)

// flushPacer chooses how long busy watches batch their output before a
// flush (the flush window), from how long this process's goroutines wait
// for a CPU.
//
// Each flush of a watch costs a write system call, a TLS record and, over
// loopback, the receiver's share of the TCP work: about 12 µs in Go's
// net/http (BenchmarkDeliveryFloor), more than the event itself. When the
// CPUs have room, output goes out at once (within the base window) for the
// least latency. When goroutines queue for a CPU, delivering each event in
// its own write makes the queue longer — every watch and every write
// request waits — so batching more events per flush then lowers the
// latency as well as the CPU per event. The pacer doubles the window
// (up to max) after each period in which the 90th percentile of the
// scheduling delay was at least busyDelay, and shrinks it by a quarter
// (down to base) after each period at most idleDelay.
//
// Window may be called from any goroutine; run belongs to the server's
// Run and ends with its context.
type flushPacer struct {
	base, max time.Duration
	cur       atomic.Int64 // the window, nanoseconds
	delay     atomic.Int64 // the last period's p90 scheduling delay, ns

	sample []rtmetrics.Sample
	prev   []uint64 // cumulative bucket counts at the last sample
}

const (
	pacerPeriod = 100 * time.Millisecond
	busyDelay   = time.Millisecond
	idleDelay   = 250 * time.Microsecond
	schedMetric = "/sched/latencies:seconds"
)

func newFlushPacer(base, most time.Duration) *flushPacer {
	p := &flushPacer{base: base, max: max(base, most)}
	p.cur.Store(int64(base))
	p.sample = []rtmetrics.Sample{{Name: schedMetric}}
	return p
}

// Window is the current flush window.
func (p *flushPacer) Window() time.Duration { return time.Duration(p.cur.Load()) }

// window is a flush window for one batch: the current one, shortened by a
// random part of up to half. Watches that see the same events then flush
// at different moments instead of all together at the end of a common
// window, which would queue every goroutine behind a thousand writes.
func (p *flushPacer) window() time.Duration {
	w := p.Window()
	return w - rand.N(w/2+1)
}

// run adjusts the window every pacerPeriod until ctx ends. It does nothing
// when the window cannot vary.
func (p *flushPacer) run(ctx context.Context) {
	if p.max <= p.base {
		return
	}
	p.schedDelay() // the baseline
	t := time.NewTicker(pacerPeriod)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			p.cur.Store(int64(p.base))
			return
		case <-t.C:
			d, ok := p.schedDelay()
			if !ok {
				continue
			}
			p.delay.Store(int64(d))
			p.cur.Store(int64(nextWindow(p.Window(), p.base, p.max, d)))
		}
	}
}

// nextWindow is the window after a period whose p90 scheduling delay was d.
func nextWindow(cur, base, most time.Duration, d time.Duration) time.Duration {
	switch {
	case d >= busyDelay:
		return min(most, 2*cur)
	case d <= idleDelay:
		return max(base, cur-cur/4)
	}
	return cur
}

// schedDelay returns the 90th percentile of the scheduling delays since
// the previous call; ok is false when there were none.
func (p *flushPacer) schedDelay() (time.Duration, bool) {
	rtmetrics.Read(p.sample)
	if p.sample[0].Value.Kind() != rtmetrics.KindFloat64Histogram {
		return 0, false
	}
	h := p.sample[0].Value.Float64Histogram()
	if len(p.prev) != len(h.Counts) {
		p.prev = append([]uint64(nil), h.Counts...)
		return 0, false
	}
	var total uint64
	delta := make([]uint64, len(h.Counts))
	for i, c := range h.Counts {
		delta[i] = c - p.prev[i]
		total += delta[i]
	}
	copy(p.prev, h.Counts)
	return percentile(delta, h.Buckets, total, 0.9)
}

// percentile returns the upper bound of the bucket holding quantile q of a
// histogram with the given bucket counts (bucket i is [bounds[i],
// bounds[i+1])) and total.
func percentile(counts []uint64, bounds []float64, total uint64, q float64) (time.Duration, bool) {
	if total == 0 {
		return 0, false
	}
	want := uint64(q*float64(total)) + 1
	var seen uint64
	for i, c := range counts {
		seen += c
		if seen >= want {
			upper := bounds[i+1]
			if upper > 1e9 { // +Inf
				upper = bounds[i]
			}
			return time.Duration(upper * float64(time.Second)), true
		}
	}
	return time.Duration(bounds[len(bounds)-1] * float64(time.Second)), true
}
