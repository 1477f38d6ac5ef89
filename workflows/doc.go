// Package workflows holds RetryWorkflow: the durable owner of one failed message from its
// first failure report to its end (delivered, resolved, discarded or expired), and
// BreakerWorkflow, the circuit breaker of one destination. worker.RegisterWorkflows registers
// them under their names (RetryWorkflowName, BreakerWorkflowName) on a worker, the service's
// or a team's own (package worker), beside the activities of package activities.
//
// A RetryWorkflow run is a retryRun: its state (State, queryable) and its signal channels,
// driven by a loop that waits for what the current status waits for. Its methods are in files
// named for the run's lifecycle:
//
//   - retry.go: RetryWorkflow, the run's type and setup, the loop (step), search attributes;
//   - retry_start.go: the first report, a delayed start or one the bridge deferred, an
//     earlier run's attempts;
//   - retry_wait.go: the wait for the scheduled retry, the republish, the quiet window;
//   - held.go: a retry held by its destination's breaker, and its release;
//   - retry_reports.go: taking a failure report and the policy's decision on it, and telling
//     the breaker when the failure is its probe's;
//   - setaside.go: reports that are not the latest republish's failure, kept as notes;
//   - retry_dead.go: dead-lettering, the parked wait for an operator, poison deliveries;
//   - retry_operator.go: operator signals and updates, and retry from dead;
//   - actions.go: which operator action is legal in which status;
//   - edit.go: the edit-and-retry and snooze updates, their refusals and the edit's record.
//
// The rest: state.go (Input, Result, State), names.go, searchattributes.go and metrics.go
// (what other packages read), startplan.go (a new run's first delay, for the bridge),
// jitter.go (the key a retry's jitter is drawn from),
// breaker.go and breakertypes.go (BreakerWorkflow), revision.go (the code's revisions and
// every workflow.GetVersion change id, in one table).
//
// Changes to what a running workflow does go behind workflow.GetVersion; the recorded
// histories in testdata/histories, each listed with its SHA-256 in testdata/histories/MANIFEST,
// are replayed by the tests (CONTRIBUTING.md, "Changing workflow code: replay histories").
package workflows
