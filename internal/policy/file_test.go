package policy

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseExampleFile(t *testing.T) {
	c, err := LoadFile("testdata/policies.yaml")
	require.NoError(t, err)
	require.NoError(t, c.Validate())

	assert.Equal(t, StandardName, c.Default)
	assert.Equal(t, Policy{
		Name:              "billing",
		Backoff:           Backoff{Kind: Exponential, Initial: time.Second, Multiplier: 2, Max: 30 * time.Second},
		Jitter:            Jitter{Mode: Equal},
		MaxRetries:        5,
		UnknownMaxRetries: 2,
		MaxRetriesCeiling: 10,
		MaxWindow:         10 * time.Minute,
		QuietWindow:       30 * time.Second,
		DeadLetterQueue:   "billing.dead",
		Breaker: Breaker{
			Window: time.Minute, MinRepublishes: 20, FailureRatio: 0.8, Cooldown: 30 * time.Second,
			CooldownMax: 10 * time.Minute, Probes: 5, ProbeWindow: 20 * time.Second, ReleaseRate: 50, IdleEnd: time.Hour,
		},
	}, c.Policies["billing"])
	assert.Equal(t, Policy{
		Name:        "notifications",
		Backoff:     Backoff{Kind: Schedule, Delays: []time.Duration{time.Minute, 5 * time.Minute, 15 * time.Minute}},
		Jitter:      Jitter{Mode: Proportional, Fraction: 0.2},
		MaxRetries:  4,
		QuietWindow: 30 * time.Second,
		Breaker:     Breaker{Disabled: true},
	}, c.Policies["notifications"])

	// The file's "aggressive" replaces the built-in; multiplier defaults to 2.
	assert.Equal(t, Policy{
		Name:              AggressiveName,
		Backoff:           Backoff{Kind: Exponential, Initial: 200 * time.Millisecond, Multiplier: 2, Max: 2 * time.Second},
		Jitter:            Jitter{Mode: Additive, Max: 100 * time.Millisecond},
		MaxRetries:        2,
		UnknownMaxRetries: 1,
		QuietWindow:       30 * time.Second,
	}, c.Policies[AggressiveName])

	// Built-ins the file does not mention are still there, unchanged.
	for name, p := range Builtins() {
		if name != AggressiveName {
			assert.Equal(t, p, c.Policies[name], name)
		}
	}
	assert.Len(t, c.Policies, len(Builtins())+2)
	assert.Equal(t, Destinations{
		Queues:    []string{"billing.*", "notify.*", "email.*", "orders.*"},
		Exchanges: []ExchangeRule{{Exchange: "events", RoutingKeys: []string{"order.*", "invoice.*"}}},
		Producers: []ProducerRule{{User: "billing-svc", Queues: []string{"billing.*"}, Exchanges: []ExchangeRule{}, Tenants: []string{"acme", ""}},
			{Anonymous: true, Queues: []string{"notify.*", "email.*", "orders.*"}}},
	}, c.Destinations)

	assert.Equal(t, []Route{
		{Queue: "billing.refunds", Policy: CriticalName, DeadLetterQueue: "billing.refunds.dead"},
		{Queue: "billing.*", Policy: "billing"},
		{Queue: "notify.*", Policy: "notifications"},
		{Queue: "email.[a-z]*", Policy: EmailName},
		{Service: "billing-svc", EventType: "invoice.*", Policy: PatientName},
	}, c.Routes)
	assert.Len(t, c.CategoryRules, 8, "the file's classification rules (TestExampleFileClassifies)")

	p, dlq, note := c.Resolve("billing.refunds", "")
	assert.Equal(t, CriticalName, p.Name)
	assert.Equal(t, "billing.refunds.dead", dlq)
	assert.Empty(t, note)
	p, dlq, _ = c.Resolve("billing.invoices", "")
	assert.Equal(t, "billing", p.Name)
	assert.Equal(t, "billing.dead", dlq)
	p, _, _ = c.Resolve("email.7", "")
	assert.Equal(t, StandardName, p.Name, "[a-z] does not match a digit")
}

// The README's example must stay the same valid file as the test data.
func TestExampleInRepoRoot(t *testing.T) {
	root, err := os.ReadFile("../../policies.example.yaml")
	require.NoError(t, err, "the README's example file")
	data, err := os.ReadFile("testdata/policies.yaml")
	require.NoError(t, err)
	assert.Equal(t, string(data), string(root))
}

func TestParseMinimal(t *testing.T) {
	t.Run("empty file gives the built-ins", func(t *testing.T) {
		for _, in := range []string{"", "# only a comment\n", "---\n"} {
			c, err := Parse([]byte(in))
			require.NoError(t, err, "%q", in)
			assert.Equal(t, NewCatalog(), c, "%q", in)
		}
	})
	t.Run("defaults", func(t *testing.T) {
		c, err := Parse([]byte(`
policies:
  p:
    backoff: {type: Exponential, initial: 1s, max: 4s}
    jitter: {}
    max_retries: 0
`))
		require.NoError(t, err)
		assert.Equal(t, DefaultName, c.Default)
		assert.Equal(t, Policy{
			Name:        "p",
			Backoff:     Backoff{Kind: Exponential, Initial: time.Second, Multiplier: 2, Max: 4 * time.Second},
			Jitter:      Jitter{Mode: NoJitter},
			QuietWindow: 30 * time.Second,
		}, c.Policies["p"])
	})
	t.Run("explicit zero quiet window and manual", func(t *testing.T) {
		c, err := Parse([]byte(`
default_policy: hold
policies:
  hold:
    backoff: {type: schedule, delays: [5s]}
    jitter: {mode: EQUAL}
    max_retries: 0
    quiet_window: 0s
    manual: true
`))
		require.NoError(t, err)
		p := c.Policies["hold"]
		assert.Equal(t, time.Duration(0), p.QuietWindow)
		assert.True(t, p.Manual)
		assert.Equal(t, Equal, p.Jitter.Mode)
		assert.Equal(t, "hold", c.Default)
	})
	t.Run("breaker: omitted keys stay unset, so the defaults apply where it is used", func(t *testing.T) {
		c, err := Parse([]byte(`
policies:
  p:
    backoff: {type: schedule, delays: [1s]}
    max_retries: 1
    breaker: {failure_ratio: 0.25, probes: 1}
  q:
    backoff: {type: schedule, delays: [1s]}
    max_retries: 1
`))
		require.NoError(t, err)
		assert.Equal(t, Breaker{FailureRatio: 0.25, Probes: 1}, c.Policies["p"].Breaker)
		assert.Equal(t, Breaker{}, c.Policies["q"].Breaker, "no block: every default")
		b := c.Policies["p"].Breaker.WithDefaults()
		assert.Equal(t, 0.25, b.FailureRatio)
		assert.Equal(t, DefaultBreakerWindow, b.Window)
		assert.Equal(t, DefaultBreakerReleaseRate, b.ReleaseRate)
	})
	t.Run("override of a builtin replaces it whole", func(t *testing.T) {
		c, err := Parse([]byte(`
policies:
  default:
    backoff: {type: schedule, delays: [1m]}
    max_retries: 1
`))
		require.NoError(t, err)
		assert.Equal(t, Policy{
			Name:        DefaultName,
			Backoff:     Backoff{Kind: Schedule, Delays: []time.Duration{time.Minute}},
			Jitter:      Jitter{Mode: NoJitter},
			MaxRetries:  1,
			QuietWindow: 30 * time.Second,
		}, c.Policies[DefaultName])
		p, _, _ := c.Resolve("anything", "")
		assert.Equal(t, time.Minute, p.Delay(1, 0.9))
	})
}

func TestParseErrors(t *testing.T) {
	const okPolicy = "    backoff: {type: schedule, delays: [1s]}\n    max_retries: 1\n"
	tests := []struct {
		name string
		in   string
		want []string
	}{
		{"bad duration", "policies:\n  p:\n    backoff: {type: exponential, initial: 1x, max: 2s}\n    max_retries: 1\n",
			[]string{`line 3: invalid duration "1x"`}},
		{"unit-less duration", "policies:\n  p:\n    backoff: {type: schedule, delays: [1s, 30]}\n    max_retries: 1\n",
			[]string{`line 3: invalid duration "30"`}},
		{"duration not a scalar", "policies:\n  p:\n" + okPolicy + "    max_window: [1s]\n",
			[]string{`line 5: expected a duration`}},
		{"unknown top-level key", "default_policy: standard\nretries: 3\n",
			[]string{`line 2: unknown key "retries" in the policy file`}},
		{"unknown policy key", "policies:\n  p:\n" + okPolicy + "    max_retry: 3\n",
			[]string{`line 5: unknown key "max_retry" in a policy`}},
		{"unknown backoff key", "policies:\n  p:\n    backoff: {type: schedule, delay: [1s]}\n    max_retries: 1\n",
			[]string{`line 3: unknown key "delay" in backoff`}},
		{"unknown jitter key", "policies:\n  p:\n" + okPolicy + "    jitter: {mode: additive, maximum: 1s}\n",
			[]string{`line 5: unknown key "maximum" in jitter`}},
		{"unknown route key", "routes:\n  - queue: a\n    policy: standard\n    dlq: x\n",
			[]string{`line 4: unknown key "dlq" in a route`}},
		{"wrong shape", "- a\n- b\n", []string{`line 1: cannot unmarshal !!seq into the policy file`}},
		{"policy not a map", "policies:\n  p: 3\n", []string{`line 2: cannot unmarshal !!int ` + "`3`" + ` into a policy`}},
		{"wrong scalar type", "policies:\n  p:\n    backoff: {type: schedule, delays: [1s]}\n    max_retries: lots\n",
			[]string{"line 4: cannot unmarshal !!str `lots` into int"}},
		{"two documents", "default_policy: standard\n---\ndefault_policy: none\n", []string{"more than one YAML document"}},
		{"syntax error", "policies: {p: [\n", []string{"yaml:"}},
		{"unknown route policy", "routes:\n  - queue: billing.*\n    policy: gold\n",
			[]string{`route 1 (queue "billing.*"): unknown policy "gold"`}},
		{"bad glob", "routes:\n  - queue: billing.[\n    policy: standard\n",
			[]string{`route 1 (queue "billing.["): queue is not a valid glob`}},
		{"missing default", "default_policy: gold\n", []string{`default_policy "gold" is not a known policy`}},
		{"missing backoff", "policies:\n  p:\n    max_retries: 1\n", []string{`policy "p": backoff is required`}},
		{"missing backoff type", "policies:\n  p:\n    backoff: {delays: [1s]}\n    max_retries: 1\n",
			[]string{`policy "p": backoff.type is required (exponential or schedule)`}},
		{"bad backoff type", "policies:\n  p:\n    backoff: {type: linear, initial: 1s}\n    max_retries: 1\n",
			[]string{`policy "p": backoff.type "linear" must be exponential or schedule`}},
		{"missing max_retries", "policies:\n  p:\n    backoff: {type: schedule, delays: [1s]}\n",
			[]string{`policy "p": max_retries is required`}},
		{"delays on exponential", "policies:\n  p:\n    backoff: {type: exponential, initial: 1s, max: 2s, delays: [1s]}\n    max_retries: 1\n",
			[]string{`policy "p": backoff.delays only applies to type schedule`}},
		{"initial on schedule", "policies:\n  p:\n    backoff: {type: schedule, delays: [1s], multiplier: 3}\n    max_retries: 1\n",
			[]string{`policy "p": backoff.initial, multiplier and max only apply to type exponential`}},
		{"jitter max without additive", "policies:\n  p:\n" + okPolicy + "    jitter: {mode: equal, max: 1s}\n",
			[]string{`policy "p": jitter.max only applies to mode additive`}},
		{"jitter fraction without proportional", "policies:\n  p:\n" + okPolicy + "    jitter: {max: 1s, fraction: 0.1}\n",
			[]string{`policy "p": jitter.max only applies to mode additive`, `policy "p": jitter.fraction only applies to mode proportional`}},
		{"invalid values", "policies:\n  p:\n    backoff: {type: exponential, initial: 0s, max: 1s}\n    max_retries: 1001\n",
			[]string{`policy "p": backoff.initial must be above 0`, `policy "p": max_retries must be between 0 and 1000`}},
		{"bad jitter mode", "policies:\n  p:\n" + okPolicy + "    jitter: {mode: gaussian}\n",
			[]string{`policy "p": jitter.mode "gaussian" must be one of`}},
		{"negative unknown cap", "policies:\n  p:\n" + okPolicy + "    unknown_max_retries: -1\n",
			[]string{`policy "p": unknown_max_retries must be between 0 and 1000, not -1`}},
		{"negative window", "policies:\n  p:\n" + okPolicy + "    max_window: -1m\n",
			[]string{`policy "p": max_window must not be negative`}},
		{"unknown breaker key", "policies:\n  p:\n" + okPolicy + "    breaker: {ratio: 0.5}\n",
			[]string{`line 5: unknown key "ratio" in breaker`}},
		{"breaker duration without unit", "policies:\n  p:\n" + okPolicy + "    breaker: {cooldown: 10}\n",
			[]string{`line 5: invalid duration "10"`}},
		{"breaker ratio above 1", "policies:\n  p:\n" + okPolicy + "    breaker: {failure_ratio: 1.5}\n",
			[]string{`policy "p": breaker: failure_ratio 1.5 must be within 0..1`}},
		{"breaker negative count", "policies:\n  p:\n" + okPolicy + "    breaker: {release_rate: -1}\n",
			[]string{`policy "p": breaker: counts must not be negative`}},
		{"breaker cooldown above the default cap", "policies:\n  p:\n" + okPolicy + "    breaker: {cooldown: 10m}\n",
			[]string{`policy "p": breaker: cooldown 10m0s exceeds cooldown_max 5m0s`}},
		{"breaker settings while disabled", "policies:\n  p:\n" + okPolicy + "    breaker: {disabled: true, probes: 2}\n",
			[]string{`policy "p": breaker settings have no effect with breaker.disabled`}},
		{"empty policy name", "policies:\n  \"\":\n" + okPolicy, []string{`policy "": name must not be empty`}},
		{"null policy", "policies:\n  p:\n", []string{`policy "p": backoff is required`, `policy "p": max_retries is required`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Parse([]byte(tt.in))
			require.Error(t, err)
			assert.Nil(t, c)
			assert.True(t, strings.HasPrefix(err.Error(), "parse policy file: "), err.Error())
			for _, w := range tt.want {
				assert.ErrorContains(t, err, w)
			}
			assert.NotContains(t, err.Error(), "policy.file", "no Go type names")
		})
	}
}

func TestLoadFileErrors(t *testing.T) {
	_, err := LoadFile(filepath.Join(t.TempDir(), "missing.yaml"))
	assert.ErrorContains(t, err, "read policy file: ")
	assert.ErrorIs(t, err, os.ErrNotExist)

	path := filepath.Join(t.TempDir(), "bad.yaml")
	require.NoError(t, os.WriteFile(path, []byte("default_policy: gold\n"), 0o600))
	_, err = LoadFile(path)
	assert.EqualError(t, err, `parse policy file: default_policy "gold" is not a known policy`)
}

func FuzzParse(f *testing.F) {
	if data, err := os.ReadFile("testdata/policies.yaml"); err == nil {
		f.Add(data)
	}
	for _, s := range []string{
		"",
		"default_policy: none\n",
		"policies:\n  p:\n    backoff: {type: exponential, initial: 1s, multiplier: .inf, max: 2s}\n    max_retries: 1\n",
		"policies:\n  p:\n    backoff: {type: exponential, initial: 1s, multiplier: .nan, max: 2s}\n    max_retries: 1\n",
		"policies:\n  p:\n    backoff: {type: schedule, delays: [2562047h]}\n    jitter: {mode: additive, max: 2562047h}\n    max_retries: 3\n",
		"policies:\n  p:\n    backoff: {type: schedule, delays: [1s]}\n    jitter: {mode: proportional, fraction: 1}\n    max_retries: 1\n",
		"routes:\n  - {queue: 'a*', policy: standard}\n  - {queue: '[', policy: x}\n",
		"a: &a [*a, *a]\n",
		"policies: {p: {backoff: {type: schedule}, max_retries: -1}}\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := Parse(data)
		if err != nil {
			if c != nil {
				t.Fatal("catalog returned with an error")
			}
			return
		}
		if err := c.Validate(); err != nil {
			t.Fatalf("Parse accepted a catalog that fails Validate: %v", err)
		}
		// Every accepted policy must give sane delays and decisions.
		for _, p := range c.Policies {
			for _, attempt := range []int{1, 2, p.MaxRetries + 1, 1 << 20} {
				for _, u := range []float64{0, 0.5, 0.999999} {
					if d := p.Delay(attempt, u); d < 0 {
						t.Fatalf("policy %q: negative delay %s", p.Name, d)
					}
				}
			}
			d := Decide(p, Failure{HTTPStatus: 429}, 0, 0, time.Hour, 0.3)
			if d.Retry && d.Delay < 0 {
				t.Fatalf("policy %q: negative decided delay", p.Name)
			}
		}
		c.Resolve("billing.x", "none")
	})
}
