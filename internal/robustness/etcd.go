package robustness

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// etcdCluster is a cluster of etcd member processes on loopback, plain
// HTTP. Members can be killed, paused, restarted and replaced (removed
// and a new member with a fresh data dir added). Its methods are safe for
// concurrent use, but faults are injected one at a time (quorum).
type etcdCluster struct {
	bin, dir string
	name     string // members are NAME-0, NAME-1, ...
	cli      *clientv3.Client
	net      *memberNet // nil: every member on loopback

	mu      sync.Mutex
	members []*etcdMember // by slot: a replacement takes its predecessor's slot
	next    int           // for names of replacements
}

type etcdMember struct {
	slot            int
	name            string
	id              uint64
	clientURL, peer string
	dataDir         string
	proc            *process
	initialCluster  string
	initialState    string
}

func (m *etcdMember) args() []string {
	return []string{
		"--name=" + m.name, "--data-dir=" + m.dataDir,
		"--listen-client-urls=" + m.clientURL, "--advertise-client-urls=" + m.clientURL,
		"--listen-peer-urls=" + m.peer, "--initial-advertise-peer-urls=" + m.peer,
		"--initial-cluster=" + m.initialCluster, "--initial-cluster-state=" + m.initialState,
		"--initial-cluster-token=robustness",
		// Fast failover, as etcd's own robustness tests run it.
		"--heartbeat-interval=50", "--election-timeout=500",
		"--unsafe-no-fsync", "--snapshot-count=2000",
		"--logger=zap", "--log-level=warn",
	}
}

// newMember prepares a member for slot: on loopback with free ports, or
// at the slot's address in its network namespace.
func (c *etcdCluster) newMember(slot int, name string) (*etcdMember, error) {
	dir := c.dir
	if c.net != nil {
		a := c.net.addr(slot)
		return &etcdMember{slot: slot, name: name, dataDir: filepath.Join(dir, name), clientURL: "http://" + a + ":2379", peer: "http://" + a + ":2380"}, nil
	}
	cp, err := freePort()
	if err != nil {
		return nil, err
	}
	pp, err := freePort()
	if err != nil {
		return nil, err
	}
	return &etcdMember{
		slot: slot, name: name, dataDir: filepath.Join(dir, name),
		clientURL: fmt.Sprintf("http://127.0.0.1:%d", cp), peer: fmt.Sprintf("http://127.0.0.1:%d", pp),
	}, nil
}

// process returns m's process: etcd, in its namespace if it has one.
func (c *etcdCluster) process(m *etcdMember, logDir string) *process {
	path, args := c.bin, m.args()
	if c.net != nil {
		path, args = c.net.command(m.slot, path, args)
	}
	return &process{name: m.name, path: path, args: args, logPath: filepath.Join(logDir, m.name+".log")}
}

// startEtcd starts n members in dir and waits until the cluster serves;
// with namespaces, each member in its own (memberNet).
func startEtcd(ctx context.Context, bin, name, dir, logDir string, n int, namespaces bool) (_ *etcdCluster, err error) {
	c := &etcdCluster{bin: bin, dir: dir, name: name, next: n}
	defer func() {
		if err != nil {
			c.close()
		}
	}()
	if namespaces {
		if c.net, err = newMemberNet(n); err != nil {
			return nil, err
		}
	}
	var peers []string
	for i := range n {
		m, err := c.newMember(i, fmt.Sprintf("%s-%d", c.name, i))
		if err != nil {
			return nil, err
		}
		c.members = append(c.members, m)
		peers = append(peers, m.name+"="+m.peer)
	}
	for _, m := range c.members {
		m.initialCluster, m.initialState = strings.Join(peers, ","), "new"
		m.proc = c.process(m, logDir)
		if err := m.proc.start(); err != nil {
			return nil, err
		}
	}
	c.cli, err = clientv3.New(clientv3.Config{
		Endpoints: c.endpoints(), DialTimeout: 2 * time.Second,
		DialKeepAliveTime: 2 * time.Second, DialKeepAliveTimeout: 2 * time.Second,
		Logger: zap.NewNop(),
	})
	if err != nil {
		return nil, err
	}
	if err := c.waitHealthy(ctx); err != nil {
		return nil, err
	}
	ml, err := c.cli.MemberList(ctx)
	if err != nil {
		return nil, err
	}
	for _, mm := range ml.Members {
		for _, m := range c.members {
			if mm.Name == m.name {
				m.id = mm.ID
			}
		}
	}
	return c, nil
}

func (c *etcdCluster) endpoints() []string {
	var eps []string
	for _, m := range c.members {
		eps = append(eps, m.clientURL)
	}
	return eps
}

// snapshot returns the members by slot.
func (c *etcdCluster) snapshot() []*etcdMember {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]*etcdMember(nil), c.members...)
}

// status asks one member for its status.
func (c *etcdCluster) status(ctx context.Context, m *etcdMember) (*clientv3.StatusResponse, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	return c.cli.Status(ctx, strings.TrimPrefix(m.clientURL, "http://"))
}

// waitHealthy waits until every member answers and agrees on a leader.
func (c *etcdCluster) waitHealthy(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var last error
	for {
		leader, ok := uint64(0), true
		for _, m := range c.snapshot() {
			st, err := c.status(ctx, m)
			switch {
			case err != nil:
				ok, last = false, fmt.Errorf("%s: %w", m.name, err)
			case st.Leader == 0 || leader != 0 && st.Leader != leader:
				ok, last = false, fmt.Errorf("%s: no agreed leader", m.name)
			default:
				leader = st.Leader
			}
		}
		if ok {
			rctx, rcancel := context.WithTimeout(ctx, 2*time.Second)
			_, err := c.cli.Get(rctx, "health")
			rcancel()
			if err == nil {
				return nil
			}
			last = err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("etcd not healthy: %w", last)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// leader returns the member that leads now, and the others.
func (c *etcdCluster) leader(ctx context.Context) (*etcdMember, []*etcdMember, error) {
	ms := c.snapshot()
	for _, m := range ms {
		st, err := c.status(ctx, m)
		if err != nil || st.Leader == 0 {
			continue
		}
		var leader *etcdMember
		var followers []*etcdMember
		for _, o := range ms {
			if o.id == st.Leader {
				leader = o
			} else {
				followers = append(followers, o)
			}
		}
		if leader != nil {
			return leader, followers, nil
		}
	}
	return nil, nil, errors.New("etcd: no leader")
}

// restart starts a killed member again with its data dir.
func (c *etcdCluster) restart(m *etcdMember) error { return m.proc.start() }

// replace removes member m from the cluster, kills it and adds a new
// member, with a fresh data dir, in its slot. It returns the new member.
func (c *etcdCluster) replace(ctx context.Context, m *etcdMember, logDir string) (*etcdMember, error) {
	rctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	// etcd refuses to remove a member while the others have not all been
	// connected for a while (a member restarted by the last fault).
	// An answer lost with the connection (the request went to m, which
	// leaves) may hide a removal that happened: ask the member list.
	for {
		_, err := c.cli.MemberRemove(rctx, m.id)
		if err == nil {
			break
		}
		if ml, lerr := c.cli.MemberList(rctx); lerr == nil && !hasMember(ml.Members, m.id) {
			break
		}
		if rctx.Err() != nil || !strings.Contains(err.Error(), "unhealthy cluster") && !strings.Contains(err.Error(), "Unavailable") {
			return nil, fmt.Errorf("member remove %s: %w", m.name, err)
		}
		sleep(rctx, 500*time.Millisecond)
	}
	m.proc.kill()
	os.RemoveAll(m.dataDir)
	c.mu.Lock()
	name := fmt.Sprintf("%s-%d", c.name, c.next)
	c.next++
	c.mu.Unlock()
	nm, err := c.newMember(m.slot, name)
	if err != nil {
		return nil, err
	}
	var members []*etcdserverpb.Member
	for nm.id == 0 {
		added, err := c.cli.MemberAdd(rctx, []string{nm.peer})
		if err == nil {
			nm.id, members = added.Member.ID, added.Members
			break
		}
		if ml, lerr := c.cli.MemberList(rctx); lerr == nil {
			for _, mm := range ml.Members {
				if slices.Contains(mm.PeerURLs, nm.peer) {
					nm.id, members = mm.ID, ml.Members
				}
			}
		}
		if nm.id == 0 && rctx.Err() != nil {
			return nil, fmt.Errorf("member add %s: %w", name, err)
		}
		sleep(rctx, 200*time.Millisecond)
	}
	var peers []string
	for _, mm := range members {
		n := mm.Name
		if mm.ID == nm.id {
			n = name
		}
		for _, u := range mm.PeerURLs {
			peers = append(peers, n+"="+u)
		}
	}
	nm.initialCluster, nm.initialState = strings.Join(peers, ","), "existing"
	nm.proc = c.process(nm, logDir)
	if err := nm.proc.start(); err != nil {
		return nil, err
	}
	c.mu.Lock()
	for i, o := range c.members {
		if o == m {
			c.members[i] = nm
		}
	}
	eps := c.endpoints()
	c.mu.Unlock()
	c.cli.SetEndpoints(eps...)
	return nm, nil
}

func hasMember(ms []*etcdserverpb.Member, id uint64) bool {
	for _, m := range ms {
		if m.ID == id {
			return true
		}
	}
	return false
}

// close kills every member and closes the client.
func (c *etcdCluster) close() {
	if c.cli != nil {
		c.cli.Close()
	}
	for _, m := range c.snapshot() {
		if m.proc != nil {
			m.proc.kill()
		}
	}
	if c.net != nil {
		c.net.close()
	}
}
