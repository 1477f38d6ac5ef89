package service

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/retry-scheduler/retry-scheduler/internal/config"
	"github.com/retry-scheduler/retry-scheduler/internal/policy"
)

func TestDeadLetterQueuesOfTheCatalogue(t *testing.T) {
	assert.Nil(t, deadLetterQueues(nil))
	c := policy.NewCatalog()
	p := c.Policies[policy.DefaultName]
	p.Name, p.DeadLetterQueue = "billing", "billing.dead"
	c.Set(p)
	c.Routes = []policy.Route{
		{Queue: "orders.*", Policy: "billing", DeadLetterQueue: "orders.dead"},
		{Queue: "billing.*", Policy: "billing"},
		{Queue: "x", Policy: "billing", DeadLetterQueue: "orders.dead"},
	}
	assert.Equal(t, []string{"billing.dead", "orders.dead"}, deadLetterQueues(c))
}

// The archive of expired envelopes is declared with the dead-letter queues, once.
func TestTheArchiveQueueIsDeclaredWithTheDeadLetterQueues(t *testing.T) {
	c := policy.NewCatalog()
	p := c.Policies[policy.DefaultName]
	p.Name, p.DeadLetterQueue = "billing", "billing.dead"
	c.Policies["billing"] = p
	cfg := config.Config{ManualReviewQueue: "manual-review.pending"}
	assert.Equal(t, []string{"billing.dead"}, declaredDeadLetterQueues(cfg, c), "no archive: none added")
	cfg.ExpiredArchiveQueue = "dead.archive"
	assert.Equal(t, []string{"billing.dead", "dead.archive"}, declaredDeadLetterQueues(cfg, c))
	cfg.ExpiredArchiveQueue = "billing.dead"
	assert.Equal(t, []string{"billing.dead"}, declaredDeadLetterQueues(cfg, c), "a dead-letter queue is declared once")
}
