package bridge

import (
	"errors"
)

// permanentError marks a Reporter error that no retry can mend.
type permanentError struct{ err error }

func (e *permanentError) Error() string { return e.err.Error() }
func (e *permanentError) Unwrap() error { return e.err }

// Permanent marks a Reporter error as one that retrying cannot mend (Temporal rejected the
// report as invalid, say). The bridge dead-letters such a delivery as poison instead of
// requeueing it, which would block the queue behind it for ever.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &permanentError{err: err}
}

// IsPermanent reports whether err was marked by Permanent.
func IsPermanent(err error) bool {
	var p *permanentError
	return errors.As(err, &p)
}

// unavailableError marks a Reporter error that says Temporal as a whole cannot take work now.
type unavailableError struct{ err error }

func (e *unavailableError) Error() string { return e.err.Error() }
func (e *unavailableError) Unwrap() error { return e.err }

// Unavailable marks a Reporter error as Temporal's, not the message's (overloaded, rate
// limited): the bridge holds the delivery and probes, and does not count a try against the
// message, whatever the Probe says.
func Unavailable(err error) error {
	if err == nil {
		return nil
	}
	return &unavailableError{err: err}
}

// IsUnavailable reports whether err was marked by Unavailable.
func IsUnavailable(err error) bool {
	var u *unavailableError
	return errors.As(err, &u)
}
