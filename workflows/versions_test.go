package workflows_test

import (
	"github.com/retry-scheduler/retry-scheduler/workflows"
	"go/ast"
	"go/parser"
	"go/token"
	"maps"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/workflow"
)

// versionGate is one workflow.GetVersion call in the package's source.
type versionGate struct {
	changeID                   string
	minSupported, maxSupported workflow.Version
	at                         string
}

// branches are the versions a gate can still return: a version below minSupported can no
// longer run (raising minSupported is how a gate retires its old branch).
func (g versionGate) branches() []workflow.Version {
	var out []workflow.Version
	for v := g.minSupported; v <= g.maxSupported; v++ {
		if v == 0 && g.minSupported < 0 && g.maxSupported > 0 {
			// DefaultVersion is -1 and the first change is version 1: 0 is no branch.
			continue
		}
		out = append(out, v)
	}
	return out
}

// TestEveryVersionBranchHasARecordedHistory: for every workflow.GetVersion gate in this
// package, each branch that can still run (each version from minSupported to maxSupported,
// DefaultVersion included) is taken by at least one recorded history, so the replay test
// checks that the code still runs it. Branches are what the gate returned while replaying
// each history; the histories' Version markers must agree.
func TestEveryVersionBranchHasARecordedHistory(t *testing.T) {
	gates := versionGates(t)
	require.NotEmpty(t, gates, "no workflow.GetVersion calls found in the package")

	taken := map[string]map[workflow.Version][]string{}
	for _, f := range recordedHistories(t) {
		if !replays(f) {
			continue
		}
		rec := &versionRecorder{}
		require.NoError(t, replayHistory(t, f, rec), "replay %s", f)
		for id, vs := range rec.taken() {
			_, known := gates[id]
			require.True(t, known, "%s: GetVersion(%q) is not a gate found in the source", filepath.Base(f), id)
			if taken[id] == nil {
				taken[id] = map[workflow.Version][]string{}
			}
			for _, v := range vs {
				taken[id][v] = append(taken[id][v], filepath.Base(f))
			}
		}
		for id, v := range versionMarkers(t, f) {
			require.Contains(t, rec.taken()[id], v, "%s: marker %s=%d was not what the replay's GetVersion returned", filepath.Base(f), id, v)
		}
	}

	for _, id := range slices.Sorted(maps.Keys(gates)) {
		g := gates[id]
		for _, v := range g.branches() {
			if files := taken[id][v]; len(files) > 0 {
				t.Logf("%s (%s) version %d: %s", id, g.at, v, strings.Join(files, ", "))
				continue
			}
			t.Errorf("change id %q (%s): no recorded history takes the %s branch; record one (CONTRIBUTING.md, \"Recording a history\")",
				id, g.at, branchName(v))
		}
	}
}

func branchName(v workflow.Version) string {
	if v == workflow.DefaultVersion {
		return "old (DefaultVersion)"
	}
	return "version " + strconv.Itoa(int(v))
}

// changeIDsFile holds every change id constant of the package, in one block.
const changeIDsFile = "revision.go"

// versionGates finds the workflow.GetVersion calls in the package's non-test source, by change
// id. A change id given by anything but a change… string constant declared in changeIDsFile
// fails the test: the test must see every gate, and the ids are read in one place.
func versionGates(t *testing.T) map[string]versionGate {
	t.Helper()
	fset := token.NewFileSet()
	paths, err := filepath.Glob("*.go")
	require.NoError(t, err)
	var files []*ast.File
	for _, p := range paths {
		if strings.HasSuffix(p, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, p, nil, 0)
		require.NoError(t, err)
		files = append(files, f)
	}
	require.NotEmpty(t, files, "no package source found")

	consts := map[string]string{}
	for _, f := range files {
		for _, d := range f.Decls {
			gd, ok := d.(*ast.GenDecl)
			if !ok || gd.Tok != token.CONST {
				continue
			}
			for _, spec := range gd.Specs {
				vs := spec.(*ast.ValueSpec)
				for i, name := range vs.Names {
					if i < len(vs.Values) {
						if lit, ok := vs.Values[i].(*ast.BasicLit); ok && lit.Kind == token.STRING {
							s, err := strconv.Unquote(lit.Value)
							require.NoError(t, err)
							consts[name.Name] = s
							if strings.HasPrefix(name.Name, "change") {
								require.Equal(t, changeIDsFile, filepath.Base(fset.Position(name.Pos()).Filename), "%s: declare change id %s in %s, with the others", fset.Position(name.Pos()), name.Name, changeIDsFile)
							}
						}
					}
				}
			}
		}
	}

	gates := map[string]versionGate{}
	for _, f := range files {
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			sel, ok := call.Fun.(*ast.SelectorExpr)
			if !ok || (sel.Sel.Name != "GetVersion" && sel.Sel.Name != "GetVersionWithOptions") {
				return true
			}
			if pkgID, ok := sel.X.(*ast.Ident); !ok || pkgID.Name != "workflow" {
				return true
			}
			at := fset.Position(call.Pos()).String()
			require.GreaterOrEqual(t, len(call.Args), 4, "%s: GetVersion with too few arguments", at)
			g := versionGate{
				changeID:     stringValue(t, at, call.Args[1], consts),
				minSupported: versionValue(t, at, call.Args[2]),
				maxSupported: versionValue(t, at, call.Args[3]),
				at:           filepath.Base(at),
			}
			if prev, dup := gates[g.changeID]; dup {
				require.Equal(t, prev.branches(), g.branches(), "%s and %s gate %q with different versions", prev.at, g.at, g.changeID)
			}
			gates[g.changeID] = g
			return true
		})
	}
	return gates
}

func stringValue(t *testing.T, at string, e ast.Expr, consts map[string]string) string {
	t.Helper()
	switch e := e.(type) {
	case *ast.Ident:
		s, ok := consts[e.Name]
		require.True(t, ok, "%s: change id %s is not a package string constant", at, e.Name)
		require.True(t, strings.HasPrefix(e.Name, "change"), "%s: name change id constant %s change… and declare it in %s", at, e.Name, changeIDsFile)
		return s
	}
	t.Fatalf("%s: a change id is a string constant declared in %s", at, changeIDsFile)
	return ""
}

func versionValue(t *testing.T, at string, e ast.Expr) workflow.Version {
	t.Helper()
	switch e := e.(type) {
	case *ast.SelectorExpr:
		if x, ok := e.X.(*ast.Ident); ok && x.Name == "workflow" && e.Sel.Name == "DefaultVersion" {
			return workflow.DefaultVersion
		}
	case *ast.BasicLit:
		n, err := strconv.Atoi(e.Value)
		require.NoError(t, err, "%s: version", at)
		return workflow.Version(n)
	}
	t.Fatalf("%s: a version is neither workflow.DefaultVersion nor an integer literal", at)
	return 0
}

// versionMarkers are the Version markers recorded in the history in file f: change id to
// version.
func versionMarkers(t *testing.T, f string) map[string]workflow.Version {
	t.Helper()
	dc := converter.GetDefaultDataConverter()
	out := map[string]workflow.Version{}
	for _, e := range loadHistory(t, f).GetEvents() {
		if e.GetEventType() != enumspb.EVENT_TYPE_MARKER_RECORDED {
			continue
		}
		a := e.GetMarkerRecordedEventAttributes()
		if a.GetMarkerName() != "Version" {
			continue
		}
		var id string
		var v workflow.Version
		require.NoError(t, dc.FromPayloads(a.GetDetails()["change-id"], &id), "%s: marker change-id", f)
		require.NoError(t, dc.FromPayloads(a.GetDetails()["version"], &v), "%s: marker version", f)
		out[id] = v
	}
	return out
}

// versionRecorder is a worker interceptor that notes what every GetVersion call returned.
type versionRecorder struct {
	interceptor.WorkerInterceptorBase
	mu   sync.Mutex
	seen map[string][]workflow.Version
}

func (r *versionRecorder) note(changeID string, v workflow.Version) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.seen == nil {
		r.seen = map[string][]workflow.Version{}
	}
	if !slices.Contains(r.seen[changeID], v) {
		r.seen[changeID] = append(r.seen[changeID], v)
	}
}

func (r *versionRecorder) taken() map[string][]workflow.Version {
	r.mu.Lock()
	defer r.mu.Unlock()
	return maps.Clone(r.seen)
}

func (r *versionRecorder) InterceptWorkflow(_ workflow.Context, next interceptor.WorkflowInboundInterceptor) interceptor.WorkflowInboundInterceptor {
	return &versionInbound{WorkflowInboundInterceptorBase: interceptor.WorkflowInboundInterceptorBase{Next: next}, rec: r}
}

type versionInbound struct {
	interceptor.WorkflowInboundInterceptorBase
	rec *versionRecorder
}

func (i *versionInbound) Init(outbound interceptor.WorkflowOutboundInterceptor) error {
	return i.Next.Init(&versionOutbound{WorkflowOutboundInterceptorBase: interceptor.WorkflowOutboundInterceptorBase{Next: outbound}, rec: i.rec})
}

type versionOutbound struct {
	interceptor.WorkflowOutboundInterceptorBase
	rec *versionRecorder
}

func (o *versionOutbound) GetVersion(ctx workflow.Context, changeID string, minSupported, maxSupported workflow.Version) workflow.Version {
	v := o.Next.GetVersion(ctx, changeID, minSupported, maxSupported)
	o.rec.note(changeID, v)
	return v
}

func (o *versionOutbound) GetVersionWithOptions(ctx workflow.Context, changeID string, minSupported, maxSupported workflow.Version,
	options workflow.GetVersionOptions) workflow.Version {
	v := o.Next.GetVersionWithOptions(ctx, changeID, minSupported, maxSupported, options)
	o.rec.note(changeID, v)
	return v
}

// TestEveryRevisionHasARecordedHistory: runs started at each revision (0: before revisions)
// take other branches without a marker to say so, so each revision up to CurrentRevision is
// the start input of at least one recorded RetryWorkflow history that must replay.
func TestEveryRevisionHasARecordedHistory(t *testing.T) {
	dc := converter.GetDefaultDataConverter()
	seen := map[int][]string{}
	for _, f := range recordedHistories(t) {
		if !replays(f) {
			continue
		}
		start := loadHistory(t, f).GetEvents()[0].GetWorkflowExecutionStartedEventAttributes()
		if start.GetWorkflowType().GetName() != workflows.RetryWorkflowName {
			continue
		}
		var in workflows.Input
		require.NoError(t, dc.FromPayloads(start.GetInput(), &in), "%s: start input", filepath.Base(f))
		seen[in.Revision] = append(seen[in.Revision], filepath.Base(f))
	}
	for rev := 0; rev <= workflows.CurrentRevision; rev++ {
		require.NotEmpty(t, seen[rev], "no recorded history of a run started at revision %d; record one (CONTRIBUTING.md, \"Recording a history\")", rev)
		t.Logf("revision %d: %s", rev, strings.Join(seen[rev], ", "))
	}
}
