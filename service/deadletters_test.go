package service

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/retry-scheduler/retry-scheduler/policy"
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
