package brokertest

import (
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// ReceiveTimeout is how long Receive waits for a delivery.
const ReceiveTimeout = 10 * time.Second

// Receive is the next delivery on d; the test fails when none comes within ReceiveTimeout
// or the consumer is closed.
func Receive(tb testing.TB, d <-chan amqp.Delivery) amqp.Delivery {
	tb.Helper()
	select {
	case m, ok := <-d:
		if !ok {
			tb.Fatal("consumer closed")
		}
		return m
	case <-time.After(ReceiveTimeout):
		tb.Fatalf("no message within %s", ReceiveTimeout)
		return amqp.Delivery{}
	}
}
