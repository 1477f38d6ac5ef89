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
	assert.Equal(t, DefaultStickyTimeout, o.StickyScheduleToStartTimeout)

	o = SDKOptions(Options{StopTimeout: time.Minute, WorkflowPollers: 4, MaxConcurrentLocalActivities: 8, StickyTimeout: 20 * time.Second})
	assert.Equal(t, time.Minute, o.WorkerStopTimeout)
	assert.Equal(t, 4, o.MaxConcurrentWorkflowTaskPollers)
	assert.Equal(t, 8, o.MaxConcurrentLocalActivityExecutionSize)
	assert.Equal(t, 20*time.Second, o.StickyScheduleToStartTimeout)
}
