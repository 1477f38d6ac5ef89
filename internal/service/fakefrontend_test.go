package service

import (
	"context"
	"net"
	"path"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	namespacepb "go.temporal.io/api/namespace/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/log"
	"google.golang.org/grpc"
	"google.golang.org/grpc/status"
)

// temporalFake is an in-process Temporal frontend without TLS that answers what a worker
// needs to start and poll: the system's and the namespace's description, and long polls that
// wait until their caller gives up. Every other method answers Unimplemented. It records the
// methods called and the task queues polled.
type temporalFake struct {
	workflowservice.UnimplementedWorkflowServiceServer
	addr string
	// polled receives each task queue a poll names, without blocking.
	polled chan string

	mu    sync.Mutex
	calls map[string]int
}

// startTemporalFake serves a temporalFake on 127.0.0.1 until the test ends. A method named
// in fail (e.g. "DescribeNamespace") answers its error instead (a gRPC status error, so that
// the client sees its code).
func startTemporalFake(t *testing.T, fail map[string]error) *temporalFake {
	t.Helper()
	f := &temporalFake{polled: make(chan string, 64), calls: map[string]int{}}
	srv := grpc.NewServer(grpc.UnaryInterceptor(
		func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			method := path.Base(info.FullMethod)
			f.mu.Lock()
			f.calls[method]++
			f.mu.Unlock()
			if err := fail[method]; err != nil {
				return nil, err
			}
			return h(ctx, req)
		}))
	f.addr = serveFrontend(t, srv, f)
	return f
}

// serveFrontend serves frontend as srv's Temporal frontend on 127.0.0.1 until the test ends,
// and returns its address.
func serveFrontend(t *testing.T, srv *grpc.Server, frontend workflowservice.WorkflowServiceServer) string {
	t.Helper()
	workflowservice.RegisterWorkflowServiceServer(srv, frontend)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	return lis.Addr().String()
}

// client is a Temporal client of f on namespace "default", closed when the test ends.
func (f *temporalFake) client(t *testing.T) client.Client {
	t.Helper()
	c, err := client.Dial(client.Options{HostPort: f.addr, Namespace: "default", Logger: log.NewStructuredLogger(discard)})
	require.NoError(t, err)
	t.Cleanup(c.Close)
	return c
}

// called is how many times method (e.g. "ShutdownWorker") was called.
func (f *temporalFake) called(method string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls[method]
}

func (f *temporalFake) GetSystemInfo(context.Context, *workflowservice.GetSystemInfoRequest) (*workflowservice.GetSystemInfoResponse, error) {
	return &workflowservice.GetSystemInfoResponse{Capabilities: &workflowservice.GetSystemInfoResponse_Capabilities{}}, nil
}

func (f *temporalFake) DescribeNamespace(_ context.Context, r *workflowservice.DescribeNamespaceRequest) (*workflowservice.DescribeNamespaceResponse, error) {
	return &workflowservice.DescribeNamespaceResponse{NamespaceInfo: &namespacepb.NamespaceInfo{Name: r.GetNamespace()}}, nil
}

func (f *temporalFake) PollWorkflowTaskQueue(ctx context.Context, r *workflowservice.PollWorkflowTaskQueueRequest) (*workflowservice.PollWorkflowTaskQueueResponse, error) {
	return nil, f.longPoll(ctx, r.GetTaskQueue().GetName())
}

func (f *temporalFake) PollActivityTaskQueue(ctx context.Context, r *workflowservice.PollActivityTaskQueueRequest) (*workflowservice.PollActivityTaskQueueResponse, error) {
	return nil, f.longPoll(ctx, r.GetTaskQueue().GetName())
}

func (f *temporalFake) ShutdownWorker(context.Context, *workflowservice.ShutdownWorkerRequest) (*workflowservice.ShutdownWorkerResponse, error) {
	return &workflowservice.ShutdownWorkerResponse{}, nil
}

// longPoll records a poll of taskQueue and holds it, with no task, until its caller cancels
// it: the worker's pollers wait instead of spinning.
func (f *temporalFake) longPoll(ctx context.Context, taskQueue string) error {
	select {
	case f.polled <- taskQueue:
	default:
	}
	<-ctx.Done()
	return status.FromContextError(ctx.Err()).Err()
}

// waitPolled waits until a poll names taskQueue.
func (f *temporalFake) waitPolled(t *testing.T, taskQueue string) {
	t.Helper()
	timeout := time.After(30 * time.Second)
	for {
		select {
		case q := <-f.polled:
			if q == taskQueue {
				return
			}
		case <-timeout:
			t.Fatalf("no poll of task queue %q", taskQueue)
		}
	}
}
