package broker

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestTopologyDeclaresEveryDeadLetterQueueLikeTheMainOne(t *testing.T) {
	cfg := Config{QueueType: QueueTypeQuorum}
	qs := Topology(cfg, "retry.scheduled", "manual-review.pending", "billing.dead", "", "manual-review.pending", "billing.dead", "orders.dead")
	var names []string
	for _, q := range qs {
		names = append(names, q.Name)
	}
	assert.Equal(t, []string{"manual-review.pending", "billing.dead", "orders.dead", "retry.scheduled"}, names,
		"dead-letter queues first, each once, then the ingress")
	for _, q := range qs[:3] {
		assert.Equal(t, QueueArgs(cfg), q.Args, q.Name)
	}
	assert.Equal(t, IngressArgs(cfg, "manual-review.pending"), qs[3].Args)
}
