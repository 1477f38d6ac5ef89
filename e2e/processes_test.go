//go:build integration && processes

package e2e

import (
	"fmt"
	"os/exec"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/retry-scheduler/retry-scheduler/internal/freeport"
)

// serviceProcess is one of the stack's service processes run from the binary, so that a
// test can SIGKILL it.
type serviceProcess struct {
	name   string
	cmd    *exec.Cmd
	logs   *lockedBuffer
	exited chan struct{}
}

// startProcess runs the service in mode as its own process, with the stack's flags and a
// port of its own, and waits until it is ready. It is stopped (SIGTERM, then SIGKILL) when
// the test ends; its output is logged if the test failed.
func (s *stack) startProcess(t *testing.T, bin, mode, name string) *serviceProcess {
	t.Helper()
	port, err := freeport.Get()
	require.NoError(t, err)
	addr := "127.0.0.1:" + strconv.Itoa(port)
	// A later flag wins over the stack's own -http-addr.
	args := append(append([]string{mode}, s.args...), "-http-addr", addr)
	p := &serviceProcess{name: name, cmd: exec.Command(bin, args...), logs: &lockedBuffer{}, exited: make(chan struct{})}
	p.cmd.Stdout, p.cmd.Stderr = p.logs, p.logs
	require.NoError(t, p.cmd.Start())
	go func() {
		_ = p.cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.exited:
		case <-time.After(patience):
			_ = p.cmd.Process.Kill()
			<-p.exited
			t.Errorf("%s did not stop within 45s of SIGTERM", p.name)
		}
		if t.Failed() {
			t.Logf("%s output:\n%s", p.name, p.logs.String())
		}
	})
	url := "http://" + addr + "/readyz"
	eventually(t, patience, func() error {
		select {
		case <-p.exited:
			return fmt.Errorf("%s exited: %s", p.name, p.logs.String())
		default:
		}
		if !httpOK(url) {
			return fmt.Errorf("%s not ready at %s", p.name, url)
		}
		return nil
	})
	return p
}

// kill SIGKILLs the process (a crash: nothing is flushed, no delivery settled) and waits
// until it is gone.
func (p *serviceProcess) kill(t *testing.T) {
	t.Helper()
	require.NoError(t, p.cmd.Process.Kill())
	<-p.exited
}

// The breaker outage scenario with three `all` processes on one ingress queue and one task
// queue: each process counts what it sees for the destination's breaker and gates its own
// republishes. Nothing is lost or dead-lettered, the retries are held and released, and what
// goes into the open breaker once the gates have surely learnt of it is the probes, as with
// one process. Behind the processes build tag
// (make test-processes): on a busy 2-core machine it dead-letters (see docs/deployment.md).
func TestBreakerOutageAcrossProcesses(t *testing.T) {
	s := newStack(t)
	s.withBreakerPolicies(t)
	bin := buildBinary(t)
	for i := range 3 {
		s.startProcess(t, bin, "all", fmt.Sprintf("process %d", i+1))
	}
	q := s.queue(s.prefix+".outage-orders", nil)
	dead := s.consume(s.dlq, nil)
	s.checkOutageHeld(t, "3 processes", q, dead, s.outage(q))
}

// TestBreakerOutageAcrossProcessesWithKills is that scenario with one process killed
// (SIGKILL) a third into the outage and another as the destination recovers, each replaced
// at once.
func TestBreakerOutageAcrossProcessesWithKills(t *testing.T) {
	s := newStack(t)
	s.withBreakerPolicies(t)
	bin := buildBinary(t)
	procs := make([]*serviceProcess, 3)
	for i := range procs {
		procs[i] = s.startProcess(t, bin, "all", fmt.Sprintf("process %d", i+1))
	}
	q := s.queue(s.prefix+".outage-orders", nil)
	dead := s.consume(s.dlq, nil)
	r := s.outage(q)
	start, recovered := r.start, r.recovered

	// First kill: a third into the outage, while the processes' counts and gates are in
	// play (the scenario's clock: the breaker is not queried during the outage, as in the
	// one-process test).
	<-time.After(time.Until(start.Add(outageLength / 3)))
	procs[0].kill(t)
	t.Logf("killed %s at +%s", procs[0].name, time.Since(start).Round(100*time.Millisecond))
	procs[0] = s.startProcess(t, bin, "all", "process 4")

	// Second kill: as the destination recovers and the held retries are released.
	<-time.After(time.Until(recovered)) // the scenario's clock, not a wait for an event
	procs[1].kill(t)
	t.Logf("killed %s at +%s, the destination recovered", procs[1].name, time.Since(start).Round(100*time.Millisecond))
	procs[1] = s.startProcess(t, bin, "all", "process 5")

	s.checkOutageHeld(t, "3 processes, 2 killed", q, dead, r)
}
