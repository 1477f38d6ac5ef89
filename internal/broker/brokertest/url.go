package brokertest

import "os"

// DefaultURL is the broker of the tests, the bench and the soak when RABBITMQ_URL is unset:
// the service's own default (broker.DefaultURL), the local RabbitMQ with its default account
// as `make rabbitmq` starts it. It is repeated, not imported, because broker's own tests
// import this package; url_test.go holds the two equal.
const DefaultURL = "amqp://guest:guest@127.0.0.1:5672/"

// URL is the broker the tests (and the bench and the soak) use: $RABBITMQ_URL, else
// DefaultURL.
func URL() string {
	if u := os.Getenv("RABBITMQ_URL"); u != "" {
		return u
	}
	return DefaultURL
}
