package worker

import (
	"context"
	"sync"
	"time"
)

// Fatal holds the first fatal error of a worker: the one the SDK stops it for and does not
// retry (in SDK v1.51.0 a poll answered NamespaceNotFound, InvalidArgument or
// ClientVersionNotSupported for longer than its two-minute grace). Its Report is the worker's
// Options.OnFatalError; its Check is a liveness check. The zero value is not usable: use
// NewFatal.
type Fatal struct {
	once sync.Once
	done chan struct{}
	// err and at are written once, before done is closed.
	err error
	at  time.Time
}

// NewFatal returns a Fatal with nothing reported.
func NewFatal() *Fatal {
	return &Fatal{done: make(chan struct{})}
}

// Report records err and when it came, the first time; later calls do nothing. It does not
// block.
func (f *Fatal) Report(err error) {
	f.once.Do(func() {
		f.err, f.at = err, time.Now()
		close(f.done)
	})
}

// Done is closed once an error is reported.
func (f *Fatal) Done() <-chan struct{} { return f.done }

// Err is the reported error; nil before.
func (f *Fatal) Err() error {
	select {
	case <-f.done:
		return f.err
	default:
		return nil
	}
}

// At is when the error was reported; the zero time before.
func (f *Fatal) At() time.Time {
	select {
	case <-f.done:
		return f.at
	default:
		return time.Time{}
	}
}

// Check is a liveness check: nil until an error is reported, then that error.
func (f *Fatal) Check(context.Context) error { return f.Err() }
