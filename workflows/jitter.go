package workflows

import "strconv"

// JitterKey is what a run's jitter hashes (policy.JitterFraction) with the attempt: the
// workflow ID and how many times an operator reset the count, so that messages that failed
// together spread out, a reset draws new jitter, and a replay draws the same.
func JitterKey(workflowID string, resets int) string {
	return workflowID + "#" + strconv.Itoa(resets)
}
