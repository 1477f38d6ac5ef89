package retryclient_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/retry-scheduler/retry-scheduler/clients/go/retryclient"
)

// A consumer of "orders" that reports each failure to the scheduler, then acks.
func Example() {
	conn, err := amqp.Dial("amqp://guest:guest@127.0.0.1:5672/")
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()
	reports, err := retryclient.New(conn, retryclient.Options{Service: "orders-api", ServiceVersion: "1.4.2"})
	if err != nil {
		log.Fatal(err)
	}
	defer reports.Close()

	ch, err := conn.Channel()
	if err != nil {
		log.Fatal(err)
	}
	deliveries, err := ch.Consume("orders", "", false, false, false, false, nil)
	if err != nil {
		log.Fatal(err)
	}
	for d := range deliveries {
		if err := process(d); err != nil {
			if rerr := reports.Report(context.Background(), d, "orders", err); rerr != nil {
				_ = d.Nack(false, true) // not reported: keep the message
				continue
			}
		}
		_ = d.Ack(false)
	}
}

func process(d amqp.Delivery) error {
	if len(d.Body) == 0 {
		return retryclient.Permanent(errors.New("empty order"))
	}
	return &retryclient.HTTPError{Status: 503, RetryAfter: 2 * time.Second}
}

// The report of a delivery that failed its first retry with a rate limit.
func ExampleBuildMessage() {
	d := amqp.Delivery{
		MessageId: "order-42",
		Body:      []byte(`{"order":42}`),
		Headers:   amqp.Table{"x-retry-count": int32(1), "x-retry-key": "order-42:1", "traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"},
	}
	err := retryclient.RateLimited(errors.New("payments: too many requests"), 5*time.Second)
	m := retryclient.BuildMessage(d, "orders", err, retryclient.Options{Service: "orders-api"})
	fmt.Println(m.MessageID, m.OriginalQueue, m.RetryCount, m.RetryKey)
	fmt.Println(m.ErrorCategory, m.RetryAfterMs, m.ErrorReason)
	fmt.Println(m.OriginalHeaders)
	// Output:
	// order-42 orders 1 order-42:1
	// rate-limited 5000 payments: too many requests
	// map[traceparent:00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01]
}
