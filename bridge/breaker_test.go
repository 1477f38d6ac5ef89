package bridge

import (
	"errors"
	"sync"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/assert"

	"github.com/retry-scheduler/retry-scheduler/internal/policy"
)

// fakeBreakers records the failures counted, by queue.
type fakeBreakers struct {
	mu       sync.Mutex
	failed   map[string]int
	settings []policy.Breaker
}

func (f *fakeBreakers) Failed(queue string, settings policy.Breaker) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.failed == nil {
		f.failed = map[string]int{}
	}
	f.failed[queue]++
	f.settings = append(f.settings, settings)
}

// breakerResolver gives every message a policy with the breaker settings b.
type breakerResolver struct{ b policy.Breaker }

func (r breakerResolver) Choose(policy.Origin, string) (policy.Policy, string, string) {
	return policy.Policy{Name: "standard", MaxRetries: 3, Breaker: r.b}, "", ""
}

func (breakerResolver) RuleCategory(policy.Origin, policy.Failure, string) (policy.Category, string, bool) {
	return "", "", false
}

// Only an accepted, acked report of a retry whose policy has a breaker counts towards it.
func TestProcessCountsFailedRetriesTowardsTheBreaker(t *testing.T) {
	custom := policy.Breaker{FailureRatio: 0.9}
	for _, tt := range []struct {
		name       string
		retryCount int
		breaker    policy.Breaker
		reportErr  error
		ackErr     error
		want       int
	}{
		{name: "a retry failed", retryCount: 1, breaker: custom, want: 1},
		{name: "a later retry failed", retryCount: 3, want: 1},
		{name: "a first failure is no retry", retryCount: 0},
		{name: "the policy disables its breaker", retryCount: 2, breaker: policy.Breaker{Disabled: true}},
		{name: "Temporal did not take the report", retryCount: 1, reportErr: errors.New("temporal down")},
		{name: "the ack failed: the redelivery counts it", retryCount: 1, ackErr: amqp.ErrClosed},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s, _ := testSession(t, &fakeReporter{err: tt.reportErr}, &fakePublisher{})
			counted := &fakeBreakers{}
			s.b.cfg.Breakers = counted
			s.b.cfg.Decode.Resolver = breakerResolver{b: tt.breaker}
			fields := validRetryMessage()
			fields["retry_count"] = tt.retryCount
			ack := &fakeAck{err: tt.ackErr}

			s.process(&entry{d: amqp.Delivery{Acknowledger: ack, ContentType: "application/json", Body: jsonBody(t, fields), DeliveryTag: 7}})

			assert.Equal(t, tt.want, counted.failed["orders"])
			if tt.want > 0 {
				assert.Equal(t, []policy.Breaker{tt.breaker}, counted.settings, "the policy's settings, as they are")
			}
		})
	}
}

// Without a counter (BREAKERS=off) nothing is counted and nothing breaks.
func TestProcessWithoutBreakers(t *testing.T) {
	s, _ := testSession(t, &fakeReporter{}, &fakePublisher{})
	ack := &fakeAck{}
	r := s.process(&entry{d: retryDelivery(t, ack)})
	assert.Equal(t, OutcomeAccepted, r.outcome)
}
