package workflows

// Names shared with the bridge, the ops API and the CLI recipes.
const (
	// RetryWorkflowName is the registered workflow type.
	RetryWorkflowName = "RetryWorkflow"
	// DefaultTaskQueue is the task queue workers poll unless configured otherwise.
	DefaultTaskQueue = "retry-scheduler"

	// SignalFailureReport carries a message.FailureReport: the message failed (again).
	SignalFailureReport = "failure-report"
	// SignalRetryNow carries an OperatorAction: republish now (from dead: with the count reset).
	SignalRetryNow = "retry-now"
	// SignalSkip carries an OperatorAction: stop retrying, send to dead now.
	SignalSkip = "skip"
	// SignalResolve carries an OperatorAction: a dead message was dealt with by hand; close it.
	SignalResolve = "resolve"
	// SignalDiscard carries an OperatorAction: a dead message is to be dropped; close it.
	SignalDiscard = "discard"
	// QueryState returns State.
	QueryState = "state"
)
