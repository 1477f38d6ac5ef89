// Package proc supervises the child processes of this repository's tools and tests (the
// Temporal servers of devserver, the service processes of the bench and the soak, the
// private RabbitMQ node of brokertest): start a command with its output appended to a log
// file, wait until a probe says it is ready, stop it with SIGTERM and then SIGKILL after a
// grace, and show the end of its log when something goes wrong.
//
// Every child runs in its own process group, so a terminal's Ctrl-C reaches only the
// parent, which stops it in order; on Linux it is also killed when the parent dies, so a
// crashed test or tool leaves nothing behind.
package proc

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"time"
)

// Command says what to run.
type Command struct {
	// Name names the process in errors ("Temporal dev server", "bridge").
	Name string
	// Path and Args are the program and its arguments (without the program).
	Path string
	Args []string
	// Env is the whole environment; nil inherits this process's.
	Env []string
	// Dir is the working directory; "" is this process's.
	Dir string
	// LogPath receives the process's stdout and stderr, appended.
	LogPath string
	// Banner, when set, is appended to the log before the process starts, so that the
	// runs sharing one log file can be told apart.
	Banner string
}

// Process is one run of a Command.
type Process struct {
	name, logPath string
	cmd           *exec.Cmd
	done          chan struct{} // closed when the process has exited
	err           error         // Wait's result, set before done is closed
}

// Start starts c. The process runs until it exits, Stop or Kill.
func Start(c Command) (*Process, error) {
	logf, err := os.OpenFile(c.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("%s: log file: %w", c.Name, err)
	}
	if c.Banner != "" {
		if _, err := logf.WriteString(c.Banner); err != nil {
			logf.Close()
			return nil, fmt.Errorf("%s: log file: %w", c.Name, err)
		}
	}
	cmd := exec.Command(c.Path, c.Args...)
	cmd.Env, cmd.Dir = c.Env, c.Dir
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("%s: start %s: %w", c.Name, c.Path, err)
	}
	p := &Process{name: c.Name, logPath: c.LogPath, cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		logf.Close()
		close(p.done)
	}()
	return p, nil
}

// Done is closed when the process has exited.
func (p *Process) Done() <-chan struct{} { return p.done }

// Exited reports whether the process has exited.
func (p *Process) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Err is the process's exit status once Done is closed (nil before).
func (p *Process) Err() error {
	if !p.Exited() {
		return nil
	}
	return p.err
}

// Pid is the process's id.
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// LogPath is the file the process's output goes to.
func (p *Process) LogPath() string { return p.logPath }

// Kill sends SIGKILL (a crash) and waits until the process is gone.
func (p *Process) Kill() error {
	if p.Exited() {
		return nil
	}
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("%s: SIGKILL: %w", p.name, err)
	}
	<-p.done
	return nil
}

// Stop sends SIGTERM and waits up to grace for the process to exit, then sends SIGKILL.
// It returns an error wrapping ErrKilled when the process needed the SIGKILL.
func (p *Process) Stop(grace time.Duration) error {
	if p.Exited() {
		return nil
	}
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("%s: SIGTERM: %w", p.name, err)
	}
	timer := time.NewTimer(grace)
	defer timer.Stop()
	select {
	case <-p.done:
		return nil
	case <-timer.C:
	}
	if err := p.Kill(); err != nil {
		return err
	}
	return fmt.Errorf("%s: %w: it did not stop within %s of SIGTERM", p.name, ErrKilled, grace)
}

// ErrKilled says that Stop had to kill the process.
var ErrKilled = errors.New("killed")

// ErrNotReady wraps the errors of AwaitReady.
var ErrNotReady = errors.New("not ready")

// permanent marks a probe error that waiting does not mend.
type permanent struct{ error }

func (e permanent) Unwrap() error { return e.error }

// Permanent marks err, returned by a probe, as one that waiting does not mend: AwaitReady
// returns it at once.
func Permanent(err error) error { return permanent{err} }

// AwaitReady calls probe every interval until it returns nil (ready), returns an error
// marked Permanent, the process exits, or ctx ends. The errors name the log file.
func (p *Process) AwaitReady(ctx context.Context, interval time.Duration, probe func(context.Context) error) error {
	ticker := time.NewTicker(interval)
	defer ticker.Stop()
	for {
		if p.Exited() {
			return fmt.Errorf("%s: %w: it exited during start-up (%v); log: %s", p.name, ErrNotReady, p.err, p.logPath)
		}
		last := probe(ctx)
		if last == nil {
			return nil
		}
		if _, ok := errors.AsType[permanent](last); ok {
			return fmt.Errorf("%s: %w: %w", p.name, ErrNotReady, last)
		}
		select {
		case <-p.done:
		case <-ctx.Done():
			return fmt.Errorf("%s: %w in time (%v): %w; log: %s", p.name, ErrNotReady, ctx.Err(), last, p.logPath)
		case <-ticker.C:
		}
	}
}
