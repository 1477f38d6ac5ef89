package retryclient

import (
	"errors"
	"fmt"
	"net"
	"syscall"
	"time"
)

// Categories the scheduler's policies know. A category set by the reporter wins over every
// other clue (HTTP status, error code, reason text).
const (
	CategoryTransient   = "transient"
	CategoryRateLimited = "rate-limited"
	CategoryPermanent   = "permanent"
	CategoryValidation  = "validation"
)

// categorized is an error marked with a category by Transient, Permanent, RateLimited or
// Validation.
type categorized struct {
	err        error
	category   string
	retryAfter time.Duration
}

func (e *categorized) Error() string { return e.err.Error() }
func (e *categorized) Unwrap() error { return e.err }

func mark(err error, category string, retryAfter time.Duration) error {
	if err == nil {
		err = errors.New(category)
	}
	return &categorized{err: err, category: category, retryAfter: retryAfter}
}

// Transient marks err as a failure that passes with time (a timeout, a dependency down):
// retried with the policy's backoff.
func Transient(err error) error { return mark(err, CategoryTransient, 0) }

// Permanent marks err as a failure no retry can mend (a bug, a message that cannot be
// processed): the message is dead-lettered at once.
func Permanent(err error) error { return mark(err, CategoryPermanent, 0) }

// Validation marks err as a message that failed validation: dead-lettered at once.
func Validation(err error) error { return mark(err, CategoryValidation, 0) }

// RateLimited marks err as throttling by a dependency; retryAfter (0 when unknown) is the
// earliest time to try again that the dependency asked for.
func RateLimited(err error, retryAfter time.Duration) error {
	return mark(err, CategoryRateLimited, retryAfter)
}

// HTTPError is a failed HTTP call: the scheduler classifies by Status (429 rate-limited, 408,
// 502, 503 and 504 transient, other 4xx permanent, other 5xx unknown) unless a category is set.
type HTTPError struct {
	Status int
	// RetryAfter is the response's Retry-After, 0 when it had none.
	RetryAfter time.Duration
	// Err is the cause, if any.
	Err error
}

func (e *HTTPError) Error() string {
	if e.Err != nil {
		return fmt.Sprintf("http status %d: %v", e.Status, e.Err)
	}
	return fmt.Sprintf("http status %d", e.Status)
}

// HTTPStatus reports the status; any error with this method gives its status to the report.
func (e *HTTPError) HTTPStatus() int { return e.Status }

func (e *HTTPError) Unwrap() error { return e.Err }

// errorCodes are the socket errors the scheduler treats as transient, by the names it reads
// (the libc and Node.js spelling).
var errorCodes = []struct {
	errno syscall.Errno
	name  string
}{
	{syscall.ECONNRESET, "ECONNRESET"},
	{syscall.ECONNREFUSED, "ECONNREFUSED"},
	{syscall.ECONNABORTED, "ECONNABORTED"},
	{syscall.EPIPE, "EPIPE"},
	{syscall.ETIMEDOUT, "ETIMEDOUT"},
	{syscall.EHOSTUNREACH, "EHOSTUNREACH"},
	{syscall.ENETUNREACH, "ENETUNREACH"},
}

// errorCode names the socket error in err's chain, "ETIMEDOUT" for any network or context
// timeout, "" otherwise.
func errorCode(err error) string {
	for _, c := range errorCodes {
		if errors.Is(err, c.errno) {
			return c.name
		}
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return "ETIMEDOUT"
	}
	return ""
}

// classification is what an error says about itself.
type classification struct {
	category   string
	httpStatus int
	errorCode  string
	retryAfter time.Duration
}

// classify reads the category, HTTP status, socket error code and retry-after from err's
// chain; the scheduler decides the rest from the reason text.
func classify(err error) classification {
	var c classification
	var cat *categorized
	if errors.As(err, &cat) {
		c.category, c.retryAfter = cat.category, cat.retryAfter
	}
	var hs interface{ HTTPStatus() int }
	if errors.As(err, &hs) {
		if s := hs.HTTPStatus(); s > 0 && s <= 999 {
			c.httpStatus = s
		}
	}
	var he *HTTPError
	if c.retryAfter == 0 && errors.As(err, &he) && he.RetryAfter > 0 {
		c.retryAfter = he.RetryAfter
	}
	c.errorCode = errorCode(err)
	return c
}
