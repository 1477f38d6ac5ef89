package service

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/mock"
	"github.com/stretchr/testify/require"
	commonpb "go.temporal.io/api/common/v1"
	workflowpb "go.temporal.io/api/workflow/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/mocks"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/retry-scheduler/retry-scheduler/internal/config"
	"github.com/retry-scheduler/retry-scheduler/internal/ops"
	"github.com/retry-scheduler/retry-scheduler/internal/policy"
	"github.com/retry-scheduler/retry-scheduler/message"
	"github.com/retry-scheduler/retry-scheduler/workflows"
)

var discard = slog.New(slog.DiscardHandler)

func TestOpsAuthTokensFromTheEnvironmentAndAFile(t *testing.T) {
	file := filepath.Join(t.TempDir(), "tokens")
	require.NoError(t, os.WriteFile(file, []byte("# operators\nbob:operator=file-secret-0123456789\n"), 0o600))
	auth, err := opsAuth(config.Config{APITokens: "alice:admin=env-secret-0123456789", APITokensFile: file}, discard)
	require.NoError(t, err)

	assert.False(t, auth.Off())
	assert.Equal(t, 2, auth.Count())
	p, err := auth.Authenticate("Bearer file-secret-0123456789")
	require.NoError(t, err)
	assert.Equal(t, "bob", p.Name)
	assert.Equal(t, ops.RoleOperator, p.Role)
	_, err = auth.Authenticate("Bearer nope")
	assert.Error(t, err)
}

func TestOpsAuthOffAndNone(t *testing.T) {
	auth, err := opsAuth(config.Config{APIAuth: config.APIAuthOff, APITokens: "alice:admin=s"}, discard)
	require.NoError(t, err)
	assert.True(t, auth.Off(), "API_AUTH=off wins over tokens")

	auth, err = opsAuth(config.Config{}, discard)
	require.NoError(t, err)
	assert.Zero(t, auth.Count())
	_, err = auth.Authenticate("Bearer anything")
	assert.Error(t, err, "no tokens: every call is refused")
}

func TestOpsAuthErrorsNameTheirSource(t *testing.T) {
	_, err := opsAuth(config.Config{APITokens: "alice:root=root-secret-0123456789"}, discard)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "API_TOKENS")
	assert.NotContains(t, err.Error(), "root-secret", "an error never quotes a secret")

	_, err = opsAuth(config.Config{APITokensFile: filepath.Join(t.TempDir(), "missing")}, discard)
	require.ErrorContains(t, err, "API_TOKENS_FILE")

	file := filepath.Join(t.TempDir(), "tokens")
	require.NoError(t, os.WriteFile(file, []byte("no-equals-sign\n"), 0o600))
	_, err = opsAuth(config.Config{APITokensFile: file}, discard)
	require.ErrorContains(t, err, file)

	// A name given in both places is one name twice.
	require.NoError(t, os.WriteFile(file, []byte("alice:viewer=file-secret-0123456789\n"), 0o600))
	_, err = opsAuth(config.Config{APITokens: "alice:admin=env-secret-0123456789", APITokensFile: file}, discard)
	require.ErrorContains(t, err, `API_TOKENS: token name "alice" is used twice`)
	assert.NotContains(t, err.Error(), "secret-0123456789")
}

func TestLoadCatalogShapesTheBuiltInDefault(t *testing.T) {
	c, err := loadCatalog(config.Config{DefaultMaxRetries: 7, BaseDelay: 2 * time.Second, MaxDelay: time.Minute})
	require.NoError(t, err)
	assert.Equal(t, policy.Default(7, 2*time.Second, time.Minute), c.Policies[policy.DefaultName])
}

func TestLoadCatalogKeepsAFilesOwnDefault(t *testing.T) {
	file := writePolicyFile(t, `policies:
  default:
    backoff: {type: schedule, delays: [1s]}
    max_retries: 2
`)
	c, err := loadCatalog(config.Config{PolicyFile: file, DefaultMaxRetries: 7, BaseDelay: time.Second, MaxDelay: time.Minute})
	require.NoError(t, err)
	assert.Equal(t, 2, c.Policies[policy.DefaultName].MaxRetries)

	_, err = loadCatalog(config.Config{PolicyFile: filepath.Join(t.TempDir(), "missing.yaml")})
	require.ErrorContains(t, err, "policy file")
}

// stateValue is a query answer holding a workflows.State.
type stateValue struct{ s workflows.State }

func (v stateValue) HasValue() bool { return true }
func (v stateValue) Get(ptr any) error {
	b, err := json.Marshal(v.s)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, ptr)
}

func closedRun(runID string, closed time.Time) *workflowpb.WorkflowExecutionInfo {
	return &workflowpb.WorkflowExecutionInfo{
		Execution: &commonpb.WorkflowExecution{WorkflowId: "wf", RunId: runID},
		CloseTime: timestamppb.New(closed),
	}
}

func TestPriorAttemptsQueriesTheLatestClosedRun(t *testing.T) {
	c := mocks.NewClient(t)
	t0 := time.Date(2026, 11, 27, 0, 0, 0, 0, time.UTC)
	c.On("ListWorkflow", mock.Anything, mock.MatchedBy(func(r *workflowservice.ListWorkflowExecutionsRequest) bool {
		return r.GetNamespace() == "ns"
	})).Return(&workflowservice.ListWorkflowExecutionsResponse{Executions: []*workflowpb.WorkflowExecutionInfo{
		closedRun("older", t0),
		closedRun("latest", t0.Add(time.Minute)),
		closedRun("current", t0.Add(time.Hour)), // the asking run itself is not an earlier one
	}}, nil)
	want := []message.Attempt{{Attempt: 1, Error: "boom", Category: "transient"}, {Attempt: 2, Error: "boom again", Category: "transient"}}
	c.On("QueryWorkflow", mock.Anything, "wf", "latest", workflows.QueryState).Return(stateValue{workflows.State{Attempts: want}}, nil)

	got, err := history{client: c, namespace: "ns"}.PriorAttempts(context.Background(), "wf", "current", "")

	require.NoError(t, err)
	assert.Equal(t, want, got)
}

func TestPriorAttemptsWithoutAClosedRunSaysSo(t *testing.T) {
	c := mocks.NewClient(t)
	c.On("ListWorkflow", mock.Anything, mock.Anything).Return(&workflowservice.ListWorkflowExecutionsResponse{
		Executions: []*workflowpb.WorkflowExecutionInfo{closedRun("current", time.Now())}}, nil)

	_, err := history{client: c, namespace: "ns"}.PriorAttempts(context.Background(), "wf", "current", "")

	assert.ErrorIs(t, err, errNoEarlierRun)
}

func TestPriorAttemptsWrapsTemporalErrors(t *testing.T) {
	c := mocks.NewClient(t)
	c.On("ListWorkflow", mock.Anything, mock.Anything).Return(nil, errors.New("unavailable")).Once()
	_, err := history{client: c, namespace: "ns"}.PriorAttempts(context.Background(), "wf", "current", "")
	require.ErrorContains(t, err, "list runs: unavailable")

	c.On("ListWorkflow", mock.Anything, mock.Anything).Return(&workflowservice.ListWorkflowExecutionsResponse{
		Executions: []*workflowpb.WorkflowExecutionInfo{closedRun("earlier", time.Now())}}, nil)
	c.On("QueryWorkflow", mock.Anything, "wf", "earlier", workflows.QueryState).Return(nil, errors.New("no worker"))
	_, err = history{client: c, namespace: "ns"}.PriorAttempts(context.Background(), "wf", "current", "")
	require.ErrorContains(t, err, "query run earlier: no worker")
}

// The run the bridge named is queried as it is: visibility is not asked, so its lag cannot
// hide the run.
func TestPriorAttemptsQueriesTheNamedRunWithoutListing(t *testing.T) {
	c := mocks.NewClient(t) // ListWorkflow is not expected: the mock fails the test on a call
	want := []message.Attempt{{Attempt: 1, Error: "boom", Category: "transient"}}
	c.On("QueryWorkflow", mock.Anything, "wf", "earlier", workflows.QueryState).Return(stateValue{workflows.State{Attempts: want}}, nil).Once()

	got, err := history{client: c, namespace: "ns"}.PriorAttempts(context.Background(), "wf", "current", "earlier")

	require.NoError(t, err)
	assert.Equal(t, want, got)

	c.On("QueryWorkflow", mock.Anything, "wf", "gone", workflows.QueryState).Return(nil, errors.New("not found")).Once()
	_, err = history{client: c, namespace: "ns"}.PriorAttempts(context.Background(), "wf", "current", "gone")
	require.ErrorContains(t, err, "query run gone: not found")
}

// badState is a query answer that does not decode.
type badState struct{}

func (badState) HasValue() bool { return true }
func (badState) Get(any) error  { return errors.New("not a State") }

func TestPriorAttemptsWrapsADecodeError(t *testing.T) {
	c := mocks.NewClient(t)
	c.On("ListWorkflow", mock.Anything, mock.Anything).Return(&workflowservice.ListWorkflowExecutionsResponse{
		Executions: []*workflowpb.WorkflowExecutionInfo{closedRun("earlier", time.Now())}}, nil)
	c.On("QueryWorkflow", mock.Anything, "wf", "earlier", workflows.QueryState).Return(badState{}, nil)

	_, err := history{client: c, namespace: "ns"}.PriorAttempts(context.Background(), "wf", "current", "")

	require.ErrorContains(t, err, "decode state of run earlier: not a State")
}
