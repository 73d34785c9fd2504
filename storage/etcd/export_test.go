package etcd

import "time"

// BreakFeed fails f's current shared watch with err, as an error response
// of etcd would; it blocks until the shared watch takes it.
func BreakFeed(f *Feed, err error) { f.breakc <- err }

// SetFeedLimits sets f's ring bounds, how often a catching-up watch asks
// for progress and the first backoff of a restart; call it before Run.
func SetFeedLimits(f *Feed, ringBytes int, ringAge, probe, retry time.Duration) {
	f.ringBytes, f.ringAge, f.probe, f.retry = ringBytes, ringAge, probe, retry
}
