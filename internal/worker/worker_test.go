package worker

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

func TestSDKOptionsDefaults(t *testing.T) {
	o := SDKOptions(Options{})
	assert.Equal(t, DefaultStopTimeout, o.WorkerStopTimeout)
	assert.Equal(t, DefaultWorkflowPollers, o.MaxConcurrentWorkflowTaskPollers)
	assert.Equal(t, DefaultMaxConcurrentLocalActivities, o.MaxConcurrentLocalActivityExecutionSize)

	o = SDKOptions(Options{StopTimeout: time.Minute, WorkflowPollers: 4, MaxConcurrentLocalActivities: 8})
	assert.Equal(t, time.Minute, o.WorkerStopTimeout)
	assert.Equal(t, 4, o.MaxConcurrentWorkflowTaskPollers)
	assert.Equal(t, 8, o.MaxConcurrentLocalActivityExecutionSize)
}
