//go:build integration

package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/retry-scheduler/retry-scheduler/internal/devserver"
	"github.com/retry-scheduler/retry-scheduler/message"
	"github.com/retry-scheduler/retry-scheduler/workflows"
)

// recipeDocs are the documents whose `temporal` CLI recipes TestDocumentedCLIRecipes runs.
var recipeDocs = []string{"../docs/operations.md", "../README.md"}

// The recipes' sample names, replaced by the test's own before a recipe runs.
const (
	sampleWorkflowID = "retry/orders/order-42"
	sampleBreakerID  = "breaker/orders"
	sampleQueue      = `"orders"`
)

// recipe is one documented command line: a line of a sh code block that starts with
// "temporal " (lines inside loops, indented, take shell variables and are not recipes).
type recipe struct {
	doc, line string
}

// documentedRecipes are the recipes of recipeDocs in order, each once.
func documentedRecipes(t *testing.T) []recipe {
	t.Helper()
	var out []recipe
	seen := map[string]bool{}
	for _, doc := range recipeDocs {
		f, err := os.Open(doc)
		require.NoError(t, err)
		sc := bufio.NewScanner(f)
		inSh := false
		for sc.Scan() {
			line := sc.Text()
			switch {
			case strings.HasPrefix(line, "```"):
				inSh = !inSh && strings.TrimPrefix(line, "```") == "sh"
			case inSh && strings.HasPrefix(line, "temporal ") && !seen[line]:
				seen[line] = true
				out = append(out, recipe{doc: filepath.Base(doc), line: line})
			}
		}
		require.NoError(t, sc.Err())
		require.NoError(t, f.Close())
	}
	return out
}

var (
	recipeCommand = regexp.MustCompile(`^temporal ((?:workflow update execute)|(?:\w+ \w+))`)
	recipeName    = regexp.MustCompile(`--name (\S+)`)
	cliTotal      = regexp.MustCompile(`(?m)^Total: \d+$`)
)

// recipeKey names what a recipe does: its command, and the signal, query or update it
// sends ("workflow signal retry-now"), "bulk" for a signal to a visibility query's workflows.
func recipeKey(line string) string {
	m := recipeCommand.FindStringSubmatch(line)
	if m == nil {
		return ""
	}
	key := m[1]
	if n := recipeName.FindStringSubmatch(line); n != nil {
		key += " " + n[1]
	}
	if strings.HasPrefix(key, "workflow signal ") && strings.Contains(line, "--query ") {
		key += " bulk"
	}
	return key
}

// recipeRun is one recipe's run: its line with the test's names, the dead letters made for
// it, and what the CLI printed.
type recipeRun struct {
	s     *stack
	queue string
	line  string
	dead  []string // workflow IDs of dead letters made for this recipe
	out   string
}

// recipeCheck prepares the world a recipe expects and checks what it did.
type recipeCheck struct {
	// dead is how many fresh dead letters of the test's queue to make first; the first
	// stands for the recipe's sample message.
	dead int
	// breaker is the mode the test's breaker must be in first ("" for any, or none).
	breaker workflows.BreakerMode
	// check says what is not (yet) as the recipe should have left it; it is polled, since
	// visibility and signals take effect a moment later.
	check func(r *recipeRun) error
}

// listed: the output names every ID of want, and none of unwanted.
func listed(want, unwanted func(r *recipeRun) []string) func(*recipeRun) error {
	return func(r *recipeRun) error {
		for _, id := range want(r) {
			if !strings.Contains(r.out, id) {
				return fmt.Errorf("%s does not list %s:\n%s", r.line, id, r.out)
			}
		}
		for _, id := range unwanted(r) {
			if strings.Contains(r.out, id) {
				return fmt.Errorf("%s lists %s:\n%s", r.line, id, r.out)
			}
		}
		return nil
	}
}

func none(*recipeRun) []string        { return nil }
func deadIDs(r *recipeRun) []string   { return r.dead }
func breakerID(r *recipeRun) []string { return []string{message.BreakerWorkflowID(r.queue)} }

// prints: the output holds every string of want (the recipe's sample message ID for "").
func prints(want ...string) func(*recipeRun) error {
	return func(r *recipeRun) error {
		for _, w := range want {
			if w == "" {
				w = r.dead[0]
			}
			if !strings.Contains(r.out, w) {
				return fmt.Errorf("%s does not print %q:\n%s", r.line, w, r.out)
			}
		}
		return nil
	}
}

// statusBecomes: every dead letter made for the recipe reaches a status that ok accepts, and
// records the recipe's signal with the actor and reason of its --input.
func statusBecomes(ok func(workflows.Status) bool) func(*recipeRun) error {
	return func(r *recipeRun) error {
		signal, a, err := r.action()
		if err != nil {
			return err
		}
		for _, id := range r.dead {
			st, err := r.s.state(id)
			if err != nil {
				return err
			}
			if !ok(st.Status) {
				return fmt.Errorf("%s: status %q after %s", id, st.Status, r.line)
			}
			if !slices.ContainsFunc(st.Events, func(e workflows.Event) bool {
				return e.Kind == signal && e.Actor == a.Actor && e.Detail == a.Reason
			}) {
				return fmt.Errorf("%s: no %s event by %q (%q) in %+v", id, signal, a.Actor, a.Reason, st.Events)
			}
		}
		return nil
	}
}

var recipeInput = regexp.MustCompile(`--input '([^']*)'`)

// action is the operator action the recipe sends: its signal or update name and its --input.
func (r *recipeRun) action() (string, workflows.OperatorAction, error) {
	var a workflows.OperatorAction
	name, in := recipeName.FindStringSubmatch(r.line), recipeInput.FindStringSubmatch(r.line)
	if name == nil || in == nil {
		return "", a, fmt.Errorf("%s: no --name or --input", r.line)
	}
	dec := json.NewDecoder(strings.NewReader(in[1]))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&a); err != nil {
		return "", a, fmt.Errorf("%s: --input: %w", r.line, err)
	}
	return name[1], a, nil
}

// pausedBy: the test's breaker is paused by the actor, for the reason, of the recipe's --input.
func pausedBy(r *recipeRun) error {
	if err := breakerBecomes(workflows.BreakerPaused)(r); err != nil {
		return err
	}
	_, a, err := r.action()
	if err != nil {
		return err
	}
	st, err := r.s.breakerState(r.queue)
	if err != nil {
		return err
	}
	if st.PausedBy == nil || st.PausedBy.Actor != a.Actor || st.PausedBy.Reason != a.Reason {
		return fmt.Errorf("paused by %+v after %s, want %+v", st.PausedBy, r.line, a)
	}
	return nil
}

func isNot(s workflows.Status) func(workflows.Status) bool {
	return func(got workflows.Status) bool { return got != s }
}

func is(s workflows.Status) func(workflows.Status) bool {
	return func(got workflows.Status) bool { return got == s }
}

// breakerBecomes: the test's breaker is in mode m.
func breakerBecomes(m workflows.BreakerMode) func(*recipeRun) error {
	return func(r *recipeRun) error {
		st, err := r.s.breakerState(r.queue)
		if err == nil && st.Mode != m {
			err = fmt.Errorf("breaker %s after %s, want %s", st.Mode, r.line, m)
		}
		return err
	}
}

// recipeChecks holds a check for every kind of documented recipe (recipeKey): a recipe with
// none fails the test, so a new recipe comes with its check.
var recipeChecks = map[string]func(line string) (recipeCheck, bool){
	"workflow list": func(line string) (recipeCheck, bool) {
		switch {
		case strings.Contains(line, `RetryStatus="dead" AND OriginalQueue=`):
			return recipeCheck{dead: 1, check: listed(deadIDs, none)}, true
		case strings.Contains(line, `RetryStatus=\"dead\" AND DeadAt <`):
			// Dead for two days: not one dead a moment ago.
			return recipeCheck{dead: 1, check: listed(none, deadIDs)}, true
		case strings.Contains(line, `RetryStatus="scheduled" AND NextRetryTime <`):
			return recipeCheck{dead: 1, check: listed(none, deadIDs)}, true
		case strings.Contains(line, `RetryStatus="held" AND OriginalQueue=`):
			// The queue's dead letters are not held.
			return recipeCheck{dead: 1, breaker: workflows.BreakerPaused, check: listed(none, deadIDs)}, true
		case strings.Contains(line, `WorkflowType="BreakerWorkflow"`):
			return recipeCheck{breaker: workflows.BreakerClosed, check: listed(breakerID, none)}, true
		case strings.Contains(line, `BreakerState="paused"`):
			return recipeCheck{breaker: workflows.BreakerPaused, check: listed(breakerID, none)}, true
		}
		return recipeCheck{}, false
	},
	"workflow count": func(string) (recipeCheck, bool) {
		return recipeCheck{check: func(r *recipeRun) error {
			if !cliTotal.MatchString(r.out) {
				return fmt.Errorf("%s prints no total:\n%s", r.line, r.out)
			}
			return nil
		}}, true
	},
	"workflow describe": func(string) (recipeCheck, bool) {
		return recipeCheck{dead: 1, check: prints("")}, true
	},
	"workflow query state": func(string) (recipeCheck, bool) {
		return recipeCheck{dead: 1, check: prints("", `"status":"dead"`)}, true
	},
	"workflow signal retry-now": func(string) (recipeCheck, bool) {
		return recipeCheck{dead: 1, check: statusBecomes(isNot(workflows.StatusDead))}, true
	},
	"workflow signal retry-now bulk": func(string) (recipeCheck, bool) {
		return recipeCheck{dead: 2, check: statusBecomes(isNot(workflows.StatusDead))}, true
	},
	"workflow signal resolve": func(string) (recipeCheck, bool) {
		return recipeCheck{dead: 1, check: statusBecomes(is(workflows.StatusResolved))}, true
	},
	"workflow signal discard": func(string) (recipeCheck, bool) {
		return recipeCheck{dead: 1, check: statusBecomes(is(workflows.StatusDiscarded))}, true
	},
	"workflow query breaker-state": func(string) (recipeCheck, bool) {
		return recipeCheck{breaker: workflows.BreakerPaused, check: prints(`"mode":"paused"`)}, true
	},
	"workflow update execute breaker-pause": func(string) (recipeCheck, bool) {
		return recipeCheck{breaker: workflows.BreakerClosed, check: pausedBy}, true
	},
	"workflow update execute breaker-resume": func(string) (recipeCheck, bool) {
		return recipeCheck{breaker: workflows.BreakerPaused, check: breakerBecomes(workflows.BreakerClosed)}, true
	},
	"workflow signal breaker-pause": func(string) (recipeCheck, bool) {
		return recipeCheck{breaker: workflows.BreakerClosed, check: pausedBy}, true
	},
	"workflow signal breaker-resume": func(string) (recipeCheck, bool) {
		return recipeCheck{breaker: workflows.BreakerPaused, check: breakerBecomes(workflows.BreakerClosed)}, true
	},
}

// TestDocumentedCLIRecipes runs every `temporal` recipe of the operations guide and the README
// as written, on the test's own queue, message and breaker, and checks what each did: a
// recipe the docs change so that it no longer works (a renamed signal, a search attribute,
// a flag, a payload field) fails here.
func TestDocumentedCLIRecipes(t *testing.T) {
	recipes := documentedRecipes(t)
	// The operations guide's recipes: lists, count, describe, the state query, the
	// operator signals one by one and in bulk, the breaker's query, updates and signals.
	require.GreaterOrEqual(t, len(recipes), 15, "recipes found in %v", recipeDocs)
	checks := make([]recipeCheck, len(recipes))
	for i, r := range recipes {
		key := recipeKey(r.line)
		choose, ok := recipeChecks[key]
		if ok {
			checks[i], ok = choose(r.line)
		}
		require.True(t, ok, "%s: recipe %q (%q) has no check in e2e/recipes_test.go", r.doc, r.line, key)
	}

	s := newStack(t)
	s.withBreakerPolicies(t)
	api := s.runWithOps()
	q := s.queue(s.prefix+".paused-orders", nil)
	breakerPath := "/api/breakers/" + url.PathEscape(q)
	setBreaker := func(m workflows.BreakerMode) {
		st, err := s.breakerState(q)
		switch {
		case err == nil && st.Mode == m:
			return
		case m == workflows.BreakerPaused:
			api.must(200, opToken, "POST", breakerPath+"/pause", map[string]any{"reason": "recipe test"})
		case err != nil: // no breaker yet: pause starts one; resume leaves it closed
			api.must(200, opToken, "POST", breakerPath+"/pause", map[string]any{"reason": "recipe test"})
			api.must(200, opToken, "POST", breakerPath+"/resume", map[string]any{"reason": "recipe test"})
		default:
			api.must(200, opToken, "POST", breakerPath+"/resume", map[string]any{"reason": "recipe test"})
		}
		eventually(t, patience, func() error {
			return breakerBecomes(m)(&recipeRun{s: s, queue: q, line: "POST " + breakerPath})
		})
	}

	env := append(os.Environ(),
		"TEMPORAL_ADDRESS="+s.temporal.Address,
		"TEMPORAL_NAMESPACE="+s.temporal.Namespace,
		"PATH="+filepath.Dir(devserver.DefaultBinary())+string(os.PathListSeparator)+os.Getenv("PATH"))
	for i, r := range recipes {
		c := checks[i]
		run := &recipeRun{s: s, queue: q}
		if c.dead > 0 {
			ids := make([]string, c.dead)
			for k := range ids {
				ids[k] = fmt.Sprintf("order-42-%d-%d", i, k)
			}
			run.dead = s.dead(q, "", ids...)
			for _, id := range run.dead {
				eventually(t, patience, func() error {
					if st := s.retryStatus(id); st != workflows.StatusDead {
						return fmt.Errorf("%s: RetryStatus %q", id, st)
					}
					return nil
				})
			}
		}
		if c.breaker != "" {
			setBreaker(c.breaker)
		}
		run.line = strings.NewReplacer(
			sampleWorkflowID, firstOr(run.dead, sampleWorkflowID),
			sampleBreakerID, message.BreakerWorkflowID(q),
			sampleQueue, `"`+q+`"`,
		).Replace(r.line)
		t.Logf("%s: %s", r.doc, run.line)
		if strings.HasPrefix(recipeKey(r.line), "workflow list") {
			// Visibility lags behind a workflow's state: a list runs again until it checks.
			eventually(t, patience, func() error {
				if err := run.exec(env); err != nil {
					return err
				}
				return c.check(run)
			})
			continue
		}
		require.NoError(t, run.exec(env))
		eventually(t, patience, func() error { return c.check(run) })
	}
}

// exec runs the recipe's line in bash with env, keeping what it printed.
func (r *recipeRun) exec(env []string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-euo", "pipefail", "-c", r.line)
	cmd.Env = env
	b, err := cmd.CombinedOutput()
	r.out = string(b)
	if err != nil {
		return fmt.Errorf("%s: %w\n%s", r.line, err, b)
	}
	return nil
}

// firstOr is ids[0], or def when there is none.
func firstOr(ids []string, def string) string {
	if len(ids) == 0 {
		return def
	}
	return ids[0]
}
