package robustness

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
)

// memberNet puts each etcd member in a network namespace of its own, on
// a bridge in the harness's namespace, so that a fault can cut the
// traffic between members (peer partitions) while the servers, in the
// harness's namespace, still reach every member: on one loopback every
// member dials its peers' one advertised address and messages flow both
// ways on either side's connections, so no proxy can cut one pair. It
// needs root and iproute2 (see netnsAvailable).
//
// Slot i's member listens on 10.A.B.(10+i), ports 2379 (clients) and 2380
// (peers); a member replacing it takes its address. Its methods are safe
// for concurrent use.
type memberNet struct {
	id     string // names: bridge id, namespaces id-N, veths idvN
	subnet string // "10.A.B."

	mu  sync.Mutex
	cut map[[2]int]bool // prohibit routes in place, from slot to slot
	ns  []string
}

// netnsAvailable says why member namespaces cannot be made here, or nil.
func netnsAvailable() error {
	if os.Geteuid() != 0 {
		return errors.New("not root")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		return errors.New("no ip command (iproute2)")
	}
	return nil
}

// newMemberNet makes the bridge and n member namespaces.
func newMemberNet(n int) (_ *memberNet, err error) {
	pid := os.Getpid()
	m := &memberNet{id: fmt.Sprintf("owr%d", pid%10000000), subnet: fmt.Sprintf("10.%d.%d.", 100+(pid>>8)%100, pid&0xff), cut: map[[2]int]bool{}}
	defer func() {
		if err != nil {
			m.close()
		}
	}()
	if err := ipCmd("link", "add", m.id, "type", "bridge"); err != nil {
		return nil, err
	}
	for _, args := range [][]string{{"addr", "add", m.subnet + "1/24", "dev", m.id}, {"link", "set", m.id, "up"}} {
		if err := ipCmd(args...); err != nil {
			return nil, err
		}
	}
	for i := range n {
		ns, veth := fmt.Sprintf("%s-%d", m.id, i), fmt.Sprintf("%sv%d", m.id, i)
		if err := ipCmd("netns", "add", ns); err != nil {
			return nil, err
		}
		m.ns = append(m.ns, ns)
		for _, args := range [][]string{
			{"link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns},
			{"link", "set", veth, "master", m.id},
			{"link", "set", veth, "up"},
			{"-n", ns, "addr", "add", m.addr(i) + "/24", "dev", "eth0"},
			{"-n", ns, "link", "set", "eth0", "up"},
			{"-n", ns, "link", "set", "lo", "up"},
		} {
			if err := ipCmd(args...); err != nil {
				return nil, err
			}
		}
	}
	return m, nil
}

func (m *memberNet) addr(slot int) string { return fmt.Sprintf("%s%d", m.subnet, 10+slot) }

// command wraps a member's command line to run in slot's namespace.
func (m *memberNet) command(slot int, bin string, args []string) (string, []string) {
	ipPath, _ := exec.LookPath("ip")
	return ipPath, append([]string{"netns", "exec", m.ns[slot], bin}, args...)
}

// partition cuts the traffic between slot and each of others, both ways
// (a prohibit route in each side's namespace: sends fail at once).
func (m *memberNet) partition(slot int, others []int) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, o := range others {
		for _, p := range [][2]int{{slot, o}, {o, slot}} {
			if m.cut[p] {
				continue
			}
			if err := ipCmd("-n", m.ns[p[0]], "route", "add", "prohibit", m.addr(p[1])+"/32"); err != nil {
				return err
			}
			m.cut[p] = true
		}
	}
	return nil
}

// heal removes every cut.
func (m *memberNet) heal() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	var errs []error
	for p := range m.cut {
		if err := ipCmd("-n", m.ns[p[0]], "route", "del", "prohibit", m.addr(p[1])+"/32"); err != nil {
			errs = append(errs, err)
			continue
		}
		delete(m.cut, p)
	}
	return errors.Join(errs...)
}

// close removes the namespaces (their veths go with them) and the bridge.
func (m *memberNet) close() {
	for _, ns := range m.ns {
		ipCmd("netns", "del", ns)
	}
	ipCmd("link", "del", m.id)
}

func ipCmd(args ...string) error {
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}
