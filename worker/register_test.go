package worker

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/workflow"

	"github.com/retry-scheduler/retry-scheduler/activities"
	"github.com/retry-scheduler/retry-scheduler/internal/jobs"
	"github.com/retry-scheduler/retry-scheduler/workflows"
)

// namesRegistry records the names workflows are registered under.
type namesRegistry struct{ names []string }

func (r *namesRegistry) RegisterWorkflow(any) { r.names = append(r.names, "(unnamed)") }
func (r *namesRegistry) RegisterWorkflowWithOptions(_ any, o workflow.RegisterOptions) {
	r.names = append(r.names, o.Name)
}
func (r *namesRegistry) RegisterDynamicWorkflow(any, workflow.DynamicRegisterOptions) {
	r.names = append(r.names, "(dynamic)")
}

// Runs started by the bridge, the breakers and the ops API name their workflow type: each
// must be registered under that name, or its tasks wait for a worker that never comes.
func TestRegisterWorkflowsUnderTheirTypeNames(t *testing.T) {
	var r namesRegistry
	RegisterWorkflows(&r)
	assert.ElementsMatch(t, []string{workflows.RetryWorkflowName, workflows.BreakerWorkflowName, jobs.WorkflowName}, r.names)
}

// New registers the workflows and both activity structs on one worker: two activities of the
// same name would panic here, at start-up, rather than in a test.
func TestNewRegistersWithoutAClash(t *testing.T) {
	c, err := client.NewLazyClient(client.Options{HostPort: "127.0.0.1:1"})
	require.NoError(t, err)
	t.Cleanup(c.Close)
	for _, o := range []Options{{TaskQueue: "q"}, {TaskQueue: "q", Jobs: &jobs.Activities{}}} {
		require.NotPanics(t, func() {
			assert.NotNil(t, New(c, o, &activities.Activities{}))
		})
	}
}
