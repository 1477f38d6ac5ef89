package policy

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestBuiltinsCatalogue(t *testing.T) {
	const s, m = time.Second, time.Minute
	tests := []struct {
		name        string
		maxRetries  int
		maxWindow   time.Duration
		quietWindow time.Duration
		jitter      JitterMode
		manual      bool
	}{
		{AggressiveName, 3, 15 * s, 30 * s, Equal, false},
		{StandardName, 5, 5 * m, 30 * s, Equal, false},
		{PatientName, 8, 15 * m, 30 * s, Equal, false},
		{CriticalName, 12, 30 * m, 30 * s, Equal, false},
		{NoneName, 0, 0, 30 * s, NoJitter, false},
		{DefaultName, 3, 0, 30 * s, Additive, false},
		{OutboundName, 3, 0, 30 * s, Proportional, false},
		{EmailName, 8, 0, 5 * m, NoJitter, false},
		{ExponentialName, 3, 0, 30 * s, NoJitter, false},
		{ImmediateName, 3, 0, 30 * s, NoJitter, false},
		{ManualName, 0, 0, 30 * s, NoJitter, true},
	}
	b := Builtins()
	require.Len(t, b, len(tests))
	for _, tt := range tests {
		p, ok := b[tt.name]
		require.True(t, ok, tt.name)
		assert.Equal(t, tt.name, p.Name)
		assert.Equal(t, tt.maxRetries, p.MaxRetries, tt.name)
		assert.Equal(t, tt.maxWindow, p.MaxWindow, tt.name)
		assert.Equal(t, tt.quietWindow, p.QuietWindow, tt.name)
		assert.Equal(t, tt.jitter, p.Jitter.Mode, tt.name)
		assert.Equal(t, tt.manual, p.Manual, tt.name)
		assert.Empty(t, p.DeadLetterQueue, tt.name)
		assert.NoError(t, p.Validate(), tt.name)
	}
}

func TestBuiltinsAreFresh(t *testing.T) {
	a := Builtins()
	a[EmailName].Backoff.Delays[0] = time.Nanosecond
	delete(a, DefaultName)
	b := Builtins()
	assert.Equal(t, time.Minute, b[EmailName].Backoff.Delays[0])
	assert.Contains(t, b, DefaultName)
}

func TestDefault(t *testing.T) {
	p := Default(7, 500*time.Millisecond, 10*time.Second)
	assert.Equal(t, Policy{
		Name:        DefaultName,
		Backoff:     Backoff{Kind: Exponential, Initial: 500 * time.Millisecond, Multiplier: 2, Max: 10 * time.Second},
		Jitter:      Jitter{Mode: Additive, Max: time.Second},
		MaxRetries:  7,
		QuietWindow: 30 * time.Second,
	}, p)
	assert.Equal(t, Builtins()[DefaultName], Default(3, 2*time.Second, time.Minute))
}

func TestPolicyValidate(t *testing.T) {
	valid := func() Policy {
		return Policy{
			Name:        "billing",
			Backoff:     Backoff{Kind: Exponential, Initial: time.Second, Multiplier: 2, Max: 30 * time.Second},
			Jitter:      Jitter{Mode: Equal},
			MaxRetries:  5,
			QuietWindow: 30 * time.Second,
		}
	}
	schedule := func(delays ...time.Duration) Backoff { return Backoff{Kind: Schedule, Delays: delays} }
	tests := []struct {
		name   string
		change func(*Policy)
		want   string // empty: valid
	}{
		{"valid", func(*Policy) {}, ""},
		{"empty jitter mode", func(p *Policy) { p.Jitter = Jitter{} }, ""},
		{"none jitter", func(p *Policy) { p.Jitter = Jitter{Mode: NoJitter} }, ""},
		{"multiplier 1", func(p *Policy) { p.Backoff.Multiplier = 1; p.Backoff.Max = time.Second }, ""},
		{"max retries 1000", func(p *Policy) { p.MaxRetries = 1000 }, ""},
		{"schedule", func(p *Policy) { p.Backoff = schedule(time.Second, time.Minute) }, ""},
		{"proportional 1", func(p *Policy) { p.Jitter = Jitter{Mode: Proportional, Fraction: 1} }, ""},

		{"empty name", func(p *Policy) { p.Name = "" }, `policy "": name must not be empty`},
		{"no kind", func(p *Policy) { p.Backoff.Kind = "" }, `policy "billing": backoff.type "" must be "exponential" or "schedule"`},
		{"initial 0", func(p *Policy) { p.Backoff.Initial = 0 }, `policy "billing": backoff.initial must be above 0`},
		{"multiplier below 1", func(p *Policy) { p.Backoff.Multiplier = 0.5 }, `policy "billing": backoff.multiplier must be a finite number of at least 1, not 0.5`},
		{"multiplier NaN", func(p *Policy) { p.Backoff.Multiplier = math.NaN() }, `backoff.multiplier`},
		{"multiplier Inf", func(p *Policy) { p.Backoff.Multiplier = math.Inf(1) }, `backoff.multiplier`},
		{"max below initial", func(p *Policy) { p.Backoff.Max = 500 * time.Millisecond }, `policy "billing": backoff.max (500ms) must be at least backoff.initial (1s)`},
		{"empty schedule", func(p *Policy) { p.Backoff = schedule() }, `policy "billing": backoff.delays must list at least one delay`},
		{"zero delay", func(p *Policy) { p.Backoff = schedule(time.Second, 0) }, `policy "billing": backoff.delays[1] must be above 0, not 0s`},
		{"bad jitter mode", func(p *Policy) { p.Jitter.Mode = "fuzzy" }, `policy "billing": jitter.mode "fuzzy" must be one of none, additive, proportional, equal`},
		{"additive without max", func(p *Policy) { p.Jitter = Jitter{Mode: Additive} }, `policy "billing": jitter.max must be above 0 for additive jitter`},
		{"proportional 0", func(p *Policy) { p.Jitter = Jitter{Mode: Proportional} }, `policy "billing": jitter.fraction must be above 0 and at most 1`},
		{"proportional above 1", func(p *Policy) { p.Jitter = Jitter{Mode: Proportional, Fraction: 1.5} }, `jitter.fraction`},
		{"proportional NaN", func(p *Policy) { p.Jitter = Jitter{Mode: Proportional, Fraction: math.NaN()} }, `jitter.fraction`},
		{"negative max retries", func(p *Policy) { p.MaxRetries = -1 }, `policy "billing": max_retries must be between 0 and 1000, not -1`},
		{"too many retries", func(p *Policy) { p.MaxRetries = 1001 }, `max_retries must be between 0 and 1000, not 1001`},
		{"negative unknown cap", func(p *Policy) { p.UnknownMaxRetries = -1 }, `policy "billing": unknown_max_retries must be between 0 and 1000, not -1`},
		{"negative max window", func(p *Policy) { p.MaxWindow = -1 }, `policy "billing": max_window must not be negative`},
		{"negative quiet window", func(p *Policy) { p.QuietWindow = -1 }, `policy "billing": quiet_window must not be negative`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := valid()
			tt.change(&p)
			err := p.Validate()
			if tt.want == "" {
				assert.NoError(t, err)
				return
			}
			assert.ErrorContains(t, err, tt.want)
		})
	}

	t.Run("reports every problem", func(t *testing.T) {
		p := valid()
		p.Backoff.Initial = 0
		p.MaxRetries = -1
		err := p.Validate()
		assert.ErrorContains(t, err, "backoff.initial")
		assert.ErrorContains(t, err, "max_retries")
	})
}
