package broker

import (
	"context"
	"errors"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// NewPublisher does not connect: a broker that is down at start-up shows as a Publish error.
func TestPublisherConnectsLazily(t *testing.T) {
	p := NewPublisher(Config{URL: "amqp://guest:secret@127.0.0.1:1/", DialTimeout: 2 * time.Second}, nil)
	err := p.Publish(context.Background(), "", "q", true, amqp.Publishing{Body: []byte("x")})
	require.Error(t, err)
	assert.Contains(t, err.Error(), `publish to exchange "" key "q"`)
	assert.NotContains(t, err.Error(), "secret")
	require.NoError(t, p.Close())
}

func TestPublishAfterClose(t *testing.T) {
	p := NewPublisher(Config{URL: "amqp://guest:guest@127.0.0.1:1/"}, nil)
	require.NoError(t, p.Close())
	require.NoError(t, p.Close(), "Close is idempotent")
	err := p.Publish(context.Background(), "", "q", true, amqp.Publishing{})
	assert.True(t, errors.Is(err, ErrClosed), "%v", err)
}

// A publish waiting for a free channel gives up with its context.
func TestPublishWaitsForChannelWithContext(t *testing.T) {
	p := NewPublisher(Config{URL: "amqp://guest:guest@127.0.0.1:1/", Channels: 1}, nil)
	defer p.Close()
	<-p.slots // hold the only channel
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	err := p.Publish(ctx, "", "q", true, amqp.Publishing{})
	assert.True(t, errors.Is(err, context.DeadlineExceeded), "%v", err)
	p.slots <- nil
}
