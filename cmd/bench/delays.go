package main

import (
	"time"

	"github.com/retry-scheduler/retry-scheduler/internal/policy"
	"github.com/retry-scheduler/retry-scheduler/workflows"
)

// Bench policies (-policy): the service's default policy, what every queue without a route
// gets, or one fixed delay without jitter (-delay, -quiet-window).
const (
	policyDefault = "default"
	policyFixed   = "fixed"
)

// retryDelays is the wait before each retry of a bench message, computed as the service
// computes it: the policy's backoff plus its jitter, which hashes the workflow ID and the
// attempt (never random), so the bench knows each retry's scheduled time exactly.
type retryDelays struct{ pol policy.Policy }

// of is the delay before retry attempt (1-based) of the workflow with this ID, counted from
// the failure it answers. No bench message is reset by an operator.
func (r retryDelays) of(workflowID string, attempt int) time.Duration {
	return r.pol.Delay(attempt, policy.JitterFraction(workflows.JitterKey(workflowID, 0), attempt))
}

// nominal is the first retry's middle delay: where a step's throughput window starts.
func (r retryDelays) nominal() time.Duration { return r.pol.Delay(1, 0.5) }

// benchPolicyOf is the policy a bench run routes its queues to.
func benchPolicyOf(name string, delay, quietWindow time.Duration) policy.Policy {
	if name == policyDefault {
		return policy.Builtins()[policy.DefaultName]
	}
	return policy.Policy{
		Name:        "bench",
		Backoff:     policy.Backoff{Kind: policy.Schedule, Delays: []time.Duration{delay}},
		Jitter:      policy.Jitter{Mode: policy.NoJitter},
		MaxRetries:  benchMaxRetries,
		QuietWindow: quietWindow,
	}
}
