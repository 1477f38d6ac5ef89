package brokertest_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/retry-scheduler/retry-scheduler/internal/broker"
	"github.com/retry-scheduler/retry-scheduler/internal/broker/brokertest"
)

func TestDefaultURLIsTheServices(t *testing.T) {
	require.Equal(t, broker.DefaultURL, brokertest.DefaultURL)
}

func TestURLFollowsTheEnvironment(t *testing.T) {
	t.Setenv("RABBITMQ_URL", "amqp://u:p@rabbit:5672/v")
	require.Equal(t, "amqp://u:p@rabbit:5672/v", brokertest.URL())
	t.Setenv("RABBITMQ_URL", "")
	require.Equal(t, brokertest.DefaultURL, brokertest.URL())
}
