package activities

import (
	"fmt"
	"math"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/retry-scheduler/retry-scheduler/message"
)

// republishHeaders builds the headers of a republish: the message's headers as
// message.AMQPHeaders puts them on the wire (denied ones left out), plus x-retry-count,
// x-retry-key and x-retry-republished-at (at, in unix milliseconds), which a failure report
// copies back to date the failure for the destination's breaker. It fails when a value has
// no AMQP encoding.
func republishHeaders(h map[string]any, attempt int, key string, at time.Time) (amqp.Table, error) {
	if attempt < 0 || attempt > math.MaxInt32 {
		return nil, fmt.Errorf("attempt %d out of range for %s", attempt, message.HeaderRetryCount)
	}
	t, err := message.AMQPHeaders(h)
	if err != nil {
		return nil, err
	}
	t[message.HeaderRetryCount] = int32(attempt)
	t[message.HeaderRetryKey] = key
	t[message.HeaderRetryRepublishedAt] = at.UnixMilli()
	return t, nil
}
