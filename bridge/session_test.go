package bridge

import (
	"errors"
	"strconv"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// declaringChannel is a channel that records the session's set-up; a queue in refuse
// exists with other arguments, and the broker refuses to declare it (closing the channel).
type declaringChannel struct {
	fakeChannel
	refuse     map[string]bool
	passiveErr error
	qosErr     error
	log        *[]string
}

func (c *declaringChannel) QueueDeclare(name string, durable, _, _, _ bool, args amqp.Table) (amqp.Queue, error) {
	*c.log = append(*c.log, "declare "+name)
	if !durable {
		return amqp.Queue{}, errors.New("not durable")
	}
	if c.refuse[name] {
		return amqp.Queue{}, &amqp.Error{Code: amqp.PreconditionFailed, Reason: "PRECONDITION_FAILED - inequivalent arg 'x-queue-type'"}
	}
	return amqp.Queue{Name: name}, nil
}

func (c *declaringChannel) QueueDeclarePassive(name string, _, _, _, _ bool, _ amqp.Table) (amqp.Queue, error) {
	*c.log = append(*c.log, "check "+name)
	return amqp.Queue{Name: name}, c.passiveErr
}

func (c *declaringChannel) Qos(prefetch, _ int, global bool) error {
	*c.log = append(*c.log, "qos "+strconv.Itoa(prefetch))
	if global {
		return errors.New("global prefetch")
	}
	return c.qosErr
}

// setupSession is a session whose channels are ch, opened as many times as the log says.
func setupSession(t *testing.T, ch *declaringChannel) (*session, *[]string) {
	t.Helper()
	log := &[]string{}
	ch.log = log
	b := New(Config{Queue: "in", DeadLetterQueue: "dead", Prefetch: 32, Decode: testOptions()}, nil, &fakeReporter{}, &fakePublisher{}, nil, nil)
	s := &session{b: b, open: func() (channel, error) {
		*log = append(*log, "open")
		return ch, nil
	}}
	return s, log
}

func TestSetupDeclaresTheDeadLetterQueueFirstThenSetsThePrefetch(t *testing.T) {
	s, log := setupSession(t, &declaringChannel{})

	require.NoError(t, s.setup())

	assert.Equal(t, []string{"open", "declare dead", "declare in", "qos 32"}, *log)
}

func TestSetupAcceptsAQueueDeclaredWithOtherArguments(t *testing.T) {
	s, log := setupSession(t, &declaringChannel{refuse: map[string]bool{"in": true}})

	require.NoError(t, s.setup())

	// The refused declare closed the channel: a new one checks that the queue exists.
	assert.Equal(t, []string{"open", "declare dead", "declare in", "open", "check in", "qos 32"}, *log)
}

func TestSetupErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		ch   *declaringChannel
		open error
		want string
	}{
		{"channel refused", &declaringChannel{}, errors.New("channel_max reached"), "open channel: channel_max reached"},
		{"queue missing after all", &declaringChannel{refuse: map[string]bool{"dead": true}, passiveErr: errors.New("NOT_FOUND")}, nil, "check queue dead: NOT_FOUND"},
		{"prefetch refused", &declaringChannel{qosErr: errors.New("not allowed")}, nil, "set prefetch: not allowed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, _ := setupSession(t, tc.ch)
			if tc.open != nil {
				s.open = func() (channel, error) { return nil, tc.open }
			}
			assert.EqualError(t, s.setup(), tc.want)
		})
	}
}
