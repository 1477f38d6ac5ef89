package admission

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	taskqueuepb "go.temporal.io/api/taskqueue/v1"
	"go.temporal.io/api/workflowservice/v1"
	"google.golang.org/grpc"
)

// Describer answers DescribeTaskQueue: client.Client.WorkflowService() is one.
type Describer interface {
	DescribeTaskQueue(ctx context.Context, in *workflowservice.DescribeTaskQueueRequest, opts ...grpc.CallOption) (*workflowservice.DescribeTaskQueueResponse, error)
}

// ServiceOf is c's workflow service (a client.Client's) as a Describer, asked of c at each
// reading rather than once, so that building a Controller calls nothing on c.
func ServiceOf(c interface {
	WorkflowService() workflowservice.WorkflowServiceClient
}) Describer {
	return clientService{c}
}

type clientService struct {
	c interface {
		WorkflowService() workflowservice.WorkflowServiceClient
	}
}

func (s clientService) DescribeTaskQueue(ctx context.Context, in *workflowservice.DescribeTaskQueueRequest, opts ...grpc.CallOption) (*workflowservice.DescribeTaskQueueResponse, error) {
	return s.c.WorkflowService().DescribeTaskQueue(ctx, in, opts...)
}

// taskQueueTypes are the types whose backlog is read: the workflow tasks every retry needs,
// and the activity tasks (the service's activities are local, so that backlog stays 0 unless
// another worker fleet shares the task queue with real activities).
var taskQueueTypes = []enumspb.TaskQueueType{enumspb.TASK_QUEUE_TYPE_WORKFLOW, enumspb.TASK_QUEUE_TYPE_ACTIVITY}

// Reading is one measurement of the engine's lag.
type Reading struct {
	// At is when it was taken.
	At time.Time
	// BacklogAge is the age of the oldest task waiting in the task queue, the larger of its
	// workflow and activity types (TaskQueueStats.ApproximateBacklogAge); 0 when StatsErr.
	BacklogAge time.Duration
	// BacklogCount is the tasks waiting, both types together (ApproximateBacklogCount).
	BacklogCount int64
	// DispatchRate is the tasks dispatched a second over the server's last 30 s, both types
	// together (TasksDispatchRate).
	DispatchRate float64
	// ReportLatency is the 90th percentile of the report calls that succeeded since the last
	// reading, or the age of the oldest call still running when that is longer; 0 with none.
	ReportLatency time.Duration
	// Reports is how many report calls succeeded since the last reading.
	Reports int
	// Lag is what the limiter compares with its bound: max(BacklogAge, ReportLatency).
	Lag time.Duration
	// StatsErr is why the task queue's stats could not be read; Lag is then ReportLatency.
	StatsErr error
}

// maxSamples bounds the report latencies kept for one reading: past it, later ones overwrite
// the oldest, so that memory stays bounded at any report rate.
const maxSamples = 2048

// lagSource measures the engine's lag: the task queue's backlog, read from the server, and
// the latency of the bridge's own report calls, fed in by the bridge.
type lagSource struct {
	svc                  Describer
	namespace, taskQueue string
	timeout              time.Duration
	now                  func() time.Time

	mu sync.Mutex
	// samples are the latencies of the reports that succeeded since the last reading; n
	// counts them all, including those overwritten.
	samples []time.Duration
	n       int
	// inFlight holds the start of each report call still running, by call.
	inFlight map[uint64]time.Time
	nextCall uint64
}

func newLagSource(svc Describer, namespace, taskQueue string, timeout time.Duration, now func() time.Time) *lagSource {
	return &lagSource{svc: svc, namespace: namespace, taskQueue: taskQueue, timeout: timeout, now: now, inFlight: map[uint64]time.Time{}}
}

// reportStarted records a report call's start; done records its end, with whether it
// succeeded. A failed call is not a latency: the bridge's outage handling judges it.
func (s *lagSource) reportStarted() (done func(ok bool)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	id, start := s.nextCall, s.now()
	s.nextCall++
	s.inFlight[id] = start
	return func(ok bool) {
		s.mu.Lock()
		defer s.mu.Unlock()
		delete(s.inFlight, id)
		if !ok {
			return
		}
		d := s.now().Sub(start)
		if len(s.samples) < maxSamples {
			s.samples = append(s.samples, d)
		} else {
			s.samples[s.n%maxSamples] = d
		}
		s.n++
	}
}

// reportLatency is the latency figure of the reports since the last call, and starts the next
// window: the 90th percentile (nearest rank) of those that succeeded, or the age of the
// oldest still running when longer, so that calls that hang count before they end.
func (s *lagSource) reportLatency(now time.Time) (time.Duration, int) {
	s.mu.Lock()
	samples, n := s.samples, s.n
	s.samples, s.n = nil, 0
	var oldest time.Duration
	for _, start := range s.inFlight {
		oldest = max(oldest, now.Sub(start))
	}
	s.mu.Unlock()
	var p90 time.Duration
	if len(samples) > 0 {
		slices.Sort(samples)
		// Nearest rank: the smallest sample with at least 90 % of them at or below it.
		rank := (9*len(samples) + 9) / 10
		p90 = samples[rank-1]
	}
	return max(p90, oldest), n
}

// measure takes a reading: the backlog of both task-queue types, read with ReportStats, and
// the report latency since the last reading.
func (s *lagSource) measure(ctx context.Context) Reading {
	r := Reading{}
	if s.svc == nil {
		r.StatsErr = errors.New("no Temporal client to read task-queue stats from")
	} else {
		ctx, cancel := context.WithTimeout(ctx, s.timeout)
		r.BacklogAge, r.BacklogCount, r.DispatchRate, r.StatsErr = s.backlog(ctx)
		cancel()
	}
	r.At = s.now()
	r.ReportLatency, r.Reports = s.reportLatency(r.At)
	r.Lag = max(r.BacklogAge, r.ReportLatency)
	return r
}

// backlog reads the stats of each task-queue type: the oldest task's age, the tasks waiting
// and the dispatch rate. One type that cannot be read fails the reading: half a backlog would
// understate the lag.
func (s *lagSource) backlog(ctx context.Context) (age time.Duration, count int64, rate float64, err error) {
	for _, typ := range taskQueueTypes {
		resp, err := s.svc.DescribeTaskQueue(ctx, &workflowservice.DescribeTaskQueueRequest{
			Namespace:     s.namespace,
			TaskQueue:     &taskqueuepb.TaskQueue{Name: s.taskQueue, Kind: enumspb.TASK_QUEUE_KIND_NORMAL},
			TaskQueueType: typ,
			ReportStats:   true,
		})
		if err != nil {
			return 0, 0, 0, fmt.Errorf("describe the %s tasks of task queue %q: %w", typeName(typ), s.taskQueue, err)
		}
		st := resp.GetStats()
		if st == nil {
			return 0, 0, 0, fmt.Errorf("describe the %s tasks of task queue %q: the server reported no stats (a server too old for report_stats)", typeName(typ), s.taskQueue)
		}
		age = max(age, st.GetApproximateBacklogAge().AsDuration())
		count += st.GetApproximateBacklogCount()
		rate += float64(st.GetTasksDispatchRate())
	}
	return age, count, rate, nil
}

func typeName(t enumspb.TaskQueueType) string {
	switch t {
	case enumspb.TASK_QUEUE_TYPE_WORKFLOW:
		return "workflow"
	case enumspb.TASK_QUEUE_TYPE_ACTIVITY:
		return "activity"
	}
	return t.String()
}
