package robustness

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"time"
)

// The faults the harness injects, by kind.
const (
	FaultKillServer     = "kill-server"         // kill -9 an objwatch server, restart it
	FaultKillEtcdLeader = "kill-etcd-leader"    // kill -9 etcd's leader, restart it
	FaultKillEtcdFollow = "kill-etcd-follower"  // kill -9 an etcd follower, restart it
	FaultPauseServer    = "pause-server"        // SIGSTOP the garbage collector's leader, SIGCONT after a while
	FaultPauseEtcd      = "pause-etcd"          // SIGSTOP an etcd member, SIGCONT after a while
	FaultReplaceEtcd    = "replace-etcd-member" // MemberRemove a follower, MemberAdd a new one with a fresh data dir
	FaultNetDelay       = "net-delay"           // add latency between one server and every etcd member
	FaultNetBlackhole   = "net-blackhole"       // forward nothing between one server and etcd for a while
	FaultNetReset       = "net-reset"           // cut one server's etcd connections, a few times
	FaultLoseQuorum     = "lose-quorum"         // SIGSTOP two of three etcd members (the leader among them), SIGCONT after a while
	// With Config.Namespaces: cut a member off from its peers, both ways,
	// while every server still reaches it; heal after a while.
	FaultPartitionLeader = "partition-etcd-leader"
	FaultPartitionFollow = "partition-etcd-follower"
)

// PartitionFaults are the kinds that need Config.Namespaces.
var PartitionFaults = []string{FaultPartitionLeader, FaultPartitionFollow}

// AllFaults is every kind, in the order a short run injects them.
var AllFaults = []string{
	FaultKillServer, FaultKillEtcdLeader, FaultPauseServer, FaultNetBlackhole, FaultKillEtcdFollow,
	FaultReplaceEtcd, FaultPauseEtcd, FaultNetDelay, FaultNetReset, FaultLoseQuorum,
}

// FaultRecord is one injected fault.
type FaultRecord struct {
	Kind   string        `json:"kind"`
	Target string        `json:"target"`
	Start  time.Duration `json:"start"`
	End    time.Duration `json:"end"`       // when it was lifted
	Ready  time.Duration `json:"recovered"` // when everything served again
	Note   string        `json:"note,omitempty"`
	Err    string        `json:"err,omitempty"`
}

func (f FaultRecord) String() string {
	s := fmt.Sprintf("%8v %-20s %-10s lifted %v, recovered %v", f.Start.Round(time.Millisecond), f.Kind, f.Target, f.End.Round(time.Millisecond), f.Ready.Round(time.Millisecond))
	if f.Note != "" {
		s += " (" + f.Note + ")"
	}
	if f.Err != "" {
		s += " ERROR " + f.Err
	}
	return s
}

// inject injects one fault of kind and waits until it is lifted.
func (r *run) inject(ctx context.Context, kind string, rng *rand.Rand) FaultRecord {
	f := FaultRecord{Kind: kind, Start: r.since()}
	hold := func(min, max time.Duration) { sleep(ctx, min+time.Duration(rng.Int64N(int64(max-min)))) }
	srv := r.servers[rng.IntN(len(r.servers))]
	var err error
	switch kind {
	case FaultKillServer:
		f.Target = srv.name
		srv.proc.kill()
		hold(300*time.Millisecond, time.Second)
		err = srv.proc.start()
	case FaultPauseServer:
		// The collector's leader, so that another takes its lease over.
		if l := r.currentLeader(); l != nil {
			srv = l
		}
		f.Target = srv.name
		if err = srv.proc.pause(true); err == nil {
			hold(r.cfg.GCLease+500*time.Millisecond, r.cfg.GCLease+1500*time.Millisecond)
			err = srv.proc.pause(false)
		}
	case FaultKillEtcdLeader, FaultKillEtcdFollow, FaultPauseEtcd:
		leader, followers, lerr := r.etcd.leader(ctx)
		if lerr != nil {
			err = lerr
			break
		}
		m := leader
		if kind == FaultKillEtcdFollow || kind == FaultPauseEtcd && rng.IntN(2) == 0 {
			m = followers[rng.IntN(len(followers))]
		}
		f.Target = m.name
		if m == leader {
			f.Note = "leader"
		}
		if kind == FaultPauseEtcd {
			if err = m.proc.pause(true); err == nil {
				hold(500*time.Millisecond, 2*time.Second)
				err = m.proc.pause(false)
			}
			break
		}
		m.proc.kill()
		hold(300*time.Millisecond, time.Second)
		err = r.etcd.restart(m)
	case FaultLoseQuorum:
		leader, followers, lerr := r.etcd.leader(ctx)
		if lerr != nil {
			err = lerr
			break
		}
		if len(followers) < 2 {
			err = fmt.Errorf("quorum loss needs 3 members, have %d", len(followers)+1)
			break
		}
		gone := []*etcdMember{leader, followers[rng.IntN(len(followers))]}
		f.Target, f.Note = srv.name, fmt.Sprintf("%s and %s paused", gone[0].name, gone[1].name)
		for _, m := range gone {
			if perr := m.proc.pause(true); perr != nil && err == nil {
				err = perr
			}
		}
		if err == nil {
			err = r.duringQuorumLoss(ctx, srv)
		}
		for _, m := range gone {
			if perr := m.proc.pause(false); perr != nil && err == nil {
				err = perr
			}
		}
	case FaultPartitionLeader, FaultPartitionFollow:
		if r.etcd.net == nil {
			err = fmt.Errorf("%s needs member namespaces (Config.Namespaces)", kind)
			break
		}
		leader, followers, lerr := r.etcd.leader(ctx)
		if lerr != nil {
			err = lerr
			break
		}
		m := leader
		if kind == FaultPartitionFollow {
			m = followers[rng.IntN(len(followers))]
		} else {
			f.Note = "leader"
		}
		f.Target = m.name
		var others []int
		for _, o := range r.etcd.snapshot() {
			if o != m {
				others = append(others, o.slot)
			}
		}
		if err = r.etcd.net.partition(m.slot, others); err == nil {
			hold(time.Second, 3*time.Second)
		}
		if herr := r.etcd.net.heal(); herr != nil && err == nil {
			err = herr
		}
	case FaultReplaceEtcd:
		_, followers, lerr := r.etcd.leader(ctx)
		if lerr != nil {
			err = lerr
			break
		}
		m := followers[rng.IntN(len(followers))]
		slot := r.etcd.slot(m)
		nm, rerr := r.etcd.replace(ctx, m, r.logDir)
		if err = rerr; err == nil {
			f.Target, f.Note = m.name, "replaced by "+nm.name
			for _, s := range r.servers {
				// The faulted cluster's proxy: with an override, s.proxies
				// begins with the main cluster's, which must keep pointing
				// there (it once took the new member's address, and a
				// server reconnecting after a net-reset talked to the
				// override cluster as its main one: creates answered 404
				// for a namespace that cluster lacks, two collector
				// leaders).
				s.faulted[slot].setTarget(nm.clientURL[len("http://"):])
			}
		}
	case FaultNetDelay:
		f.Target = srv.name
		d := time.Duration(20+rng.IntN(130)) * time.Millisecond
		f.Note = d.String() + " a chunk"
		for _, p := range srv.proxies {
			p.delay.Store(int64(d))
		}
		hold(time.Second, 3*time.Second)
		for _, p := range srv.proxies {
			p.delay.Store(0)
		}
	case FaultNetBlackhole:
		// The collector's leader: it must stop collecting before its
		// lease expires and another server takes over.
		if l := r.currentLeader(); l != nil {
			srv = l
		}
		f.Target = srv.name
		for _, p := range srv.proxies {
			p.blackhole.Store(true)
		}
		hold(r.cfg.GCLease, r.cfg.GCLease+time.Second)
		for _, p := range srv.proxies {
			p.blackhole.Store(false)
		}
	case FaultNetReset:
		f.Target = srv.name
		for range 3 {
			for _, p := range srv.proxies {
				p.reset()
			}
			hold(100*time.Millisecond, 500*time.Millisecond)
		}
	default:
		err = fmt.Errorf("unknown fault %q", kind)
	}
	f.End = r.since()
	if err != nil {
		f.Err = err.Error()
	}
	if err := r.recover(ctx); err != nil && f.Err == "" {
		f.Err = "no recovery: " + err.Error()
	}
	f.Ready = r.since()
	return f
}

// recover waits until the etcd cluster is healthy and every server ready.
func (r *run) recover(ctx context.Context) error {
	if err := r.etcd.waitHealthy(ctx); err != nil {
		return err
	}
	for _, s := range r.servers {
		if !s.proc.alive() {
			if err := s.proc.start(); err != nil {
				return err
			}
		}
		if err := s.waitReady(ctx, r.hc, 60*time.Second); err != nil {
			return err
		}
	}
	return nil
}

// slot is m's place in the cluster (its proxies' index).
func (c *etcdCluster) slot(m *etcdMember) int {
	for i, o := range c.snapshot() {
		if o == m {
			return i
		}
	}
	return -1
}

// quorumLossWait bounds how long a write may take to fail, and /readyz to
// fail, while etcd has no quorum: the server's storage monitor counts etcd
// as lost after 3 s of failed probes, then refuses requests at once.
const quorumLossWait = 15 * time.Second

// duringQuorumLoss checks what srv answers while etcd has no quorum: a
// write fails with a clear Status (503 or 504) within quorumLossWait, and
// /readyz fails. Its write goes to another namespace than the traffic's:
// a write that times out may still be applied once quorum is back.
func (r *run) duringQuorumLoss(ctx context.Context, srv *apiServer) error {
	start := time.Now()
	wctx, cancel := context.WithTimeout(ctx, quorumLossWait+5*time.Second)
	defer cancel()
	name := fmt.Sprintf("quorum-probe-%d", start.UnixNano())
	code, obj, err := DoJSON(wctx, r.hc, http.MethodPost, srv.url+"/api/v1/namespaces/default/configmaps",
		map[string]any{"metadata": map[string]any{"name": name}})
	took := time.Since(start)
	switch {
	case err != nil:
		return fmt.Errorf("quorum lost: a write got no answer after %v: %w", took.Round(time.Millisecond), err)
	case code != http.StatusServiceUnavailable && code != http.StatusGatewayTimeout:
		return fmt.Errorf("quorum lost: a write answered %d %s after %v, want 503 or 504", code, obj.Message, took.Round(time.Millisecond))
	case took > quorumLossWait:
		return fmt.Errorf("quorum lost: a write failed only after %v", took.Round(time.Millisecond))
	}
	for {
		rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		req, _ := http.NewRequestWithContext(rctx, http.MethodGet, srv.url+"/readyz", nil)
		resp, err := r.hc.Do(req)
		cancel()
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusServiceUnavailable {
				return nil
			}
		}
		if time.Since(start) > quorumLossWait {
			return fmt.Errorf("quorum lost: /readyz of %s did not fail within %v", srv.name, quorumLossWait)
		}
		sleep(ctx, 100*time.Millisecond)
	}
}
