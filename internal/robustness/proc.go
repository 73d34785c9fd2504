package robustness

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"
)

// process is one external process (an etcd member or an objwatch server)
// that can be killed, paused and started again with the same arguments.
// Its output goes to logPath (appended to across restarts). The child is
// killed if the harness's process dies (Pdeathsig), so a crashed test
// leaves no orphan. Its methods are safe for concurrent use.
type process struct {
	name    string
	path    string
	args    []string
	logPath string

	mu      sync.Mutex
	cmd     *exec.Cmd
	exited  chan struct{} // closed when cmd's Wait returned
	stopped bool          // SIGSTOPped
}

// start starts the process; it must not be running.
func (p *process) start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil {
		return fmt.Errorf("%s: already running", p.name)
	}
	log, err := os.OpenFile(p.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	cmd := exec.Command(p.path, p.args...)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	if err := cmd.Start(); err != nil {
		log.Close()
		return fmt.Errorf("%s: %w", p.name, err)
	}
	exited := make(chan struct{})
	go func() { // owned by the process: ends when it exits (kill waits for it)
		defer close(exited)
		cmd.Wait()
		log.Close()
	}()
	p.cmd, p.exited, p.stopped = cmd, exited, false
	return nil
}

// kill sends SIGKILL (kill -9) and waits for the process to exit; it does
// nothing when the process is not running.
func (p *process) kill() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return
	}
	p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.exited
	p.cmd, p.exited, p.stopped = nil, nil, false
}

// pause sends SIGSTOP (stop true) or SIGCONT.
func (p *process) pause(stop bool) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return fmt.Errorf("%s: not running", p.name)
	}
	sig := syscall.SIGCONT
	if stop {
		sig = syscall.SIGSTOP
	}
	p.stopped = stop
	if err := p.cmd.Process.Signal(sig); err != nil || !stop {
		return err
	}
	// A signal is delivered after kill returns: a thread running on
	// another CPU stops only when the kernel next switches it. Until every
	// thread has stopped, the member can still commit a write (a probe
	// sent at once could be answered 201 with two members "paused").
	return waitStopped(p.cmd.Process.Pid, 5*time.Second)
}

// waitStopped waits until every thread of process pid is stopped by a
// signal (state T in /proc), at most wait. Where /proc is absent it
// returns at once.
func waitStopped(pid int, wait time.Duration) error {
	dir := fmt.Sprintf("/proc/%d/task", pid)
	if _, err := os.Stat(dir); err != nil {
		return nil
	}
	for deadline := time.Now().Add(wait); ; time.Sleep(time.Millisecond) {
		running := ""
		tasks, err := os.ReadDir(dir)
		if err != nil {
			return fmt.Errorf("pid %d: %w", pid, err)
		}
		for _, task := range tasks {
			st, ok := procState(filepath.Join(dir, task.Name(), "stat"))
			if ok && st != 'T' && st != 't' && st != 'Z' && st != 'X' { // !ok: the thread exited
				running = task.Name()
				break
			}
		}
		if running == "" {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("pid %d: thread %s not stopped %v after SIGSTOP", pid, running, wait)
		}
	}
}

// alive reports whether the process runs and has not exited by itself.
func (p *process) alive() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return false
	}
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

// freePort returns a loopback TCP port that was free a moment ago.
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	a, ok := ln.Addr().(*net.TCPAddr)
	if !ok {
		return 0, errors.New("not a TCP address")
	}
	return a.Port, nil
}

// pid is the running process's id, 0 when it does not run.
func (p *process) pid() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return 0
	}
	return p.cmd.Process.Pid
}

// procState is the state letter of a /proc stat file (R, S, T, ...);
// ok is false when it cannot be read.
func procState(statPath string) (state byte, ok bool) {
	b, err := os.ReadFile(statPath)
	if err != nil {
		return 0, false
	}
	// The state follows the command name, which is in parentheses and may
	// itself hold ") ".
	i := bytes.LastIndex(b, []byte(") "))
	if i < 0 || i+2 >= len(b) {
		return 0, false
	}
	return b[i+2], true
}
