//go:build integration

package devserver

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/retry-scheduler/retry-scheduler/internal/freeport"
	"github.com/retry-scheduler/retry-scheduler/workflows"
)

func postgresOptions(t *testing.T) Options {
	t.Helper()
	pg, err := PostgresFromEnv(os.Getenv)
	require.NoError(t, err)
	return Options{Engine: EnginePostgres, Postgres: pg}
}

// The postgres engine: schema, namespace with its retention, search attributes, IDs and
// keywords as wide as the schema's VARCHAR(255) columns, and a workflow that outlives a
// SIGKILL and a restart. Its temporary databases are gone after Stop.
func TestPostgresEngine(t *testing.T) {
	began := time.Now()
	o := postgresOptions(t)
	metricsPort, err := freeport.Get()
	require.NoError(t, err)
	o.Postgres.MetricsAddress = "127.0.0.1:" + strconv.Itoa(metricsPort)
	s := startOwnedForTest(t, o)
	t.Logf("started in %s (log: %s)", time.Since(began).Round(time.Millisecond), s.LogFile)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	assert.Equal(t, EnginePostgres, s.Engine)
	assert.Empty(t, s.UIAddress)
	assert.Empty(t, s.DBFile)
	assert.True(t, strings.HasPrefix(s.Database, "retry_scheduler_tmp_"), s.Database)
	assert.Equal(t, s.Database+"_visibility", s.VisibilityDatabase)
	require.NoError(t, CheckHealth(ctx, s.Address, s.Namespace))

	c, err := s.Dial(ctx)
	require.NoError(t, err)
	defer func() { c.Close() }()

	info, err := c.WorkflowService().GetClusterInfo(ctx, &workflowservice.GetClusterInfoRequest{})
	require.NoError(t, err)
	assert.Equal(t, PostgresPlugin, info.GetPersistenceStore())
	assert.Equal(t, PostgresPlugin, info.GetVisibilityStore())
	assert.Equal(t, strings.TrimPrefix(ServerVersion, "v"), info.GetServerVersion())

	ns, err := c.WorkflowService().DescribeNamespace(ctx, &workflowservice.DescribeNamespaceRequest{Namespace: s.Namespace})
	require.NoError(t, err)
	assert.GreaterOrEqual(t, ns.GetConfig().GetWorkflowExecutionRetentionTtl().AsDuration(), 720*time.Hour)

	assertSearchAttributes(ctx, t, c, s.Namespace)

	// A 255-byte workflow ID and a 255-byte keyword fit the schema; a 256-byte ID is
	// refused by the frontend (limit.maxIDLength) rather than by the database.
	id := "devserver-pg-"
	id += strings.Repeat("x", 255-len(id))
	queue := strings.Repeat("q", 255)
	run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{
		ID:                    id,
		TaskQueue:             "devserver-test-no-worker",
		WorkflowRunTimeout:    time.Hour,
		TypedSearchAttributes: temporal.NewSearchAttributes(workflows.SAOriginalQueue.ValueSet(queue), workflows.SARetryCount.ValueSet(3)),
	}, "NoSuchWorkflow", "arg")
	require.NoError(t, err)
	_, err = c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: id + "y", TaskQueue: "devserver-test-no-worker"}, "NoSuchWorkflow")
	var invalid *serviceerror.InvalidArgument
	require.ErrorAs(t, err, &invalid, "a 256-byte workflow ID")

	// SQL visibility finds it by the attributes (written asynchronously, hence the wait).
	query := workflows.SAOriginalQueue.GetName() + " = '" + queue + "' AND " + workflows.SARetryCount.GetName() + " = 3"
	require.Eventually(t, func() bool {
		resp, err := c.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{Namespace: s.Namespace, Query: query})
		return err == nil && len(resp.GetExecutions()) == 1 && resp.GetExecutions()[0].GetExecution().GetWorkflowId() == id
	}, time.Minute, 200*time.Millisecond, "visibility lists the workflow by its search attributes")
	c.Close()

	// The server's Prometheus metrics (the bench reads its persistence counters), named as the
	// dev server names them.
	metrics := httpGet(ctx, t, "http://"+o.Postgres.MetricsAddress+"/metrics")
	assert.Regexp(t, `(?m)^persistence_requests\{[^}]*operation="CreateWorkflowExecution"[^}]*\} [1-9]`, metrics)
	assert.Regexp(t, `(?m)^visibility_persistence_requests\{[^}]*operation="RecordWorkflowExecutionStarted"[^}]*\} [1-9]`, metrics)

	killAndRestart(ctx, t, s)
	c, err = s.Dial(ctx)
	require.NoError(t, err)
	assertStillOpen(ctx, t, c, id, run.GetRunID())
	assertSearchAttributes(ctx, t, c, s.Namespace)
	c.Close()

	// Stop also drops the temporary databases.
	assertStopIsFinal(ctx, t, s)
	assertDropped(t, s.opts.Postgres, s.Database, s.VisibilityDatabase)
}

func httpGet(ctx context.Context, t *testing.T, url string) string {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	require.NoError(t, err)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode, url)
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return string(b)
}

// Named databases outlive the server: a second start upgrades them in place and finds the
// namespace and the workflows of the first.
func TestPostgresDurableDatabases(t *testing.T) {
	o := postgresOptions(t)
	suffix := make([]byte, 4)
	_, _ = rand.Read(suffix)
	o.Postgres.Database = "retry_scheduler_test_" + hex.EncodeToString(suffix)
	o.Namespace = "durable"
	o.Retention = 48 * time.Hour

	t.Cleanup(func() { dropForTest(t, o.Postgres) }) // after the servers' Stop
	s := startOwnedForTest(t, o)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	assert.Equal(t, o.Postgres.Database+"_visibility", s.VisibilityDatabase)
	c, err := s.Dial(ctx)
	require.NoError(t, err)
	run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: "durable", TaskQueue: "devserver-test-no-worker"}, "NoSuchWorkflow")
	require.NoError(t, err)
	c.Close()
	require.NoError(t, s.Stop())

	o.Retention = 0 // an existing namespace keeps its own
	s2 := startOwnedForTest(t, o)
	c, err = s2.Dial(ctx)
	require.NoError(t, err)
	defer c.Close()
	assertStillOpen(ctx, t, c, "durable", run.GetRunID())
	ns, err := c.WorkflowService().DescribeNamespace(ctx, &workflowservice.DescribeNamespaceRequest{Namespace: "durable"})
	require.NoError(t, err)
	assert.Equal(t, 48*time.Hour, ns.GetConfig().GetWorkflowExecutionRetentionTtl().AsDuration())
}

// dropForTest drops the named databases of pg.
func dropForTest(t *testing.T, pg PostgresOptions) {
	t.Helper()
	if t.Skipped() {
		return // the engine was unavailable: no database was made, and no schema tool is at hand
	}
	pg = pg.withDefaults()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	tool := newSchemaTool(filepath.Join(pg.Dir, "bin", "sql"), pg, nil)
	assert.NoError(t, tool.drop(ctx, pg.Database))
	assert.NoError(t, tool.drop(ctx, pg.VisibilityDatabase))
	assertDropped(t, pg, pg.Database, pg.VisibilityDatabase)
}

// assertDropped checks that the databases are gone: the schema tool cannot connect to them.
func assertDropped(t *testing.T, pg PostgresOptions, dbs ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pg = pg.withDefaults()
	tool := newSchemaTool(filepath.Join(pg.Dir, "bin", "sql"), pg, nil)
	for _, db := range dbs {
		err := tool.run(ctx, db, "setup-schema", "--version", "0.0")
		if assert.Error(t, err, "database %s dropped", db) {
			assert.Contains(t, err.Error(), "does not exist", db)
		}
	}
}
