// Package worker builds the Temporal worker that runs RetryWorkflow, BreakerWorkflow,
// JobWorkflow and their activities.
//
// The service's worker mode runs New. A team that runs its own worker fleet registers the
// same workflows and activities on a worker of its own, polling the task queue the bridges
// start runs on (TASK_QUEUE), with SDKOptions (every activity is local):
//
//	w := sdkworker.New(c, taskQueue, worker.SDKOptions(worker.Options{}))
//	worker.RegisterWorkflows(w)
//	w.RegisterActivity(&activities.Activities{Publisher: publisher, Logger: logger})
//	err := w.Run(sdkworker.InterruptCh())
//
// publisher publishes with confirms (activities.Publisher; the service's is the broker
// package's pool). The operators' jobs need New's Options.Jobs, which only the service sets.
package worker

import (
	"time"

	"go.temporal.io/sdk/client"
	sdkworker "go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/retry-scheduler/retry-scheduler/activities"
	"github.com/retry-scheduler/retry-scheduler/internal/jobs"
	"github.com/retry-scheduler/retry-scheduler/workflows"
)

// Defaults of Options.
const (
	// DefaultWorkflowPollers is the worker's workflow-task pollers unless told. A task that
	// finds a poller waiting is handed over at once; one that finds none waits in Temporal's
	// matching (the first task of a delayed start comes through the normal queue), so too few
	// pollers cap the throughput (cmd/bench/README.md, Levers).
	DefaultWorkflowPollers = 16
	// DefaultStopTimeout lets in-flight publishes finish on shutdown.
	DefaultStopTimeout = 30 * time.Second
	// DefaultMaxConcurrentLocalActivities bounds concurrent publishes.
	DefaultMaxConcurrentLocalActivities = 256
	// DefaultStickyTimeout is how long a workflow task waits on the sticky queue of the
	// worker that has its workflow cached before Temporal moves it to the normal queue. The
	// SDK's 5 s is reached whenever the engine is behind: each task that times out costs two
	// more history events and a replay elsewhere, so an engine overloaded for a minute served
	// 16–18 retries/s where it serves 25–26 with 30 s (cmd/bench/README.md, Levers). The cost: a
	// task sent to a worker that has just crashed waits up to this long (a worker that stops
	// cleanly hands its tasks back at once).
	DefaultStickyTimeout = 30 * time.Second
)

// Options tune the worker.
type Options struct {
	// TaskQueue is polled for workflow tasks. Defaults to workflows.DefaultTaskQueue.
	TaskQueue string
	// StopTimeout lets in-flight publishes finish on shutdown; it must exceed the publish
	// deadline. Defaults to DefaultStopTimeout.
	StopTimeout time.Duration
	// WorkflowPollers is the number of workflow task pollers. Defaults to DefaultWorkflowPollers.
	WorkflowPollers int
	// MaxConcurrentLocalActivities bounds concurrent publishes. Defaults to
	// DefaultMaxConcurrentLocalActivities.
	MaxConcurrentLocalActivities int
	// StickyTimeout is the sticky queue's schedule-to-start timeout. Defaults to
	// DefaultStickyTimeout.
	StickyTimeout time.Duration
	// OnFatalError is called once, on its own goroutine, with the error that stopped the
	// worker for good (the SDK stops the worker when it returns); it must not block. Fatal.Report
	// fits. Defaults to nil: the worker stops and nobody is told.
	OnFatalError func(error)
	// Jobs are the operators' long actions' activities (jobs.JobWorkflow runs them as local
	// activities). Defaults to nil: a job's activities then fail, as there is nothing to act with.
	Jobs *jobs.Activities
}

func (o Options) withDefaults() Options {
	if o.TaskQueue == "" {
		o.TaskQueue = workflows.DefaultTaskQueue
	}
	if o.StopTimeout <= 0 {
		o.StopTimeout = DefaultStopTimeout
	}
	if o.WorkflowPollers <= 0 {
		o.WorkflowPollers = DefaultWorkflowPollers
	}
	if o.MaxConcurrentLocalActivities <= 0 {
		o.MaxConcurrentLocalActivities = DefaultMaxConcurrentLocalActivities
	}
	if o.StickyTimeout <= 0 {
		o.StickyTimeout = DefaultStickyTimeout
	}
	return o
}

// New registers the workflows and the activities on a worker for the task queue; the caller
// runs it (Start/Stop or Run).
func New(c client.Client, o Options, acts *activities.Activities) sdkworker.Worker {
	o = o.withDefaults()
	w := sdkworker.New(c, o.TaskQueue, SDKOptions(o))
	RegisterWorkflows(w)
	w.RegisterActivity(acts)
	ja := o.Jobs
	if ja == nil {
		ja = &jobs.Activities{}
	}
	w.RegisterActivity(ja)
	return w
}

// SDKOptions are the SDK worker options New uses for o (defaults applied). The benchmark's
// bare-engine probe (./cmd/bench) runs on them too, so that its ceiling is measured with the
// service's own worker settings.
func SDKOptions(o Options) sdkworker.Options {
	o = o.withDefaults()
	return sdkworker.Options{
		WorkerStopTimeout:                       o.StopTimeout,
		MaxConcurrentWorkflowTaskPollers:        o.WorkflowPollers,
		MaxConcurrentLocalActivityExecutionSize: o.MaxConcurrentLocalActivities,
		StickyScheduleToStartTimeout:            o.StickyTimeout,
		OnFatalError:                            o.OnFatalError,
		// Every activity of the workflows is local, and always was: activity-task pollers
		// would only hold long polls open on the server for tasks that never come. A job's
		// are local too: short batches whose paging state lives in the job's workflow.
		LocalActivityWorkerOnly: true,
	}
}

// RegisterWorkflows puts the workflows on a registry: a worker, or a replayer in tests.
func RegisterWorkflows(r sdkworker.WorkflowRegistry) {
	r.RegisterWorkflowWithOptions(workflows.RetryWorkflow, workflow.RegisterOptions{Name: workflows.RetryWorkflowName})
	r.RegisterWorkflowWithOptions(workflows.BreakerWorkflow, workflow.RegisterOptions{Name: workflows.BreakerWorkflowName})
	r.RegisterWorkflowWithOptions(jobs.JobWorkflow, workflow.RegisterOptions{Name: jobs.WorkflowName})
}
