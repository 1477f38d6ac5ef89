package main

import (
	"strings"
	"testing"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestCountOpensSumsTransitionsToOpen(t *testing.T) {
	const scrape = `# TYPE retry_scheduler_breaker_transitions_total counter
retry_scheduler_breaker_transitions_total{queue="a",to="open"} 2
retry_scheduler_breaker_transitions_total{queue="b",to="open"} 1
retry_scheduler_breaker_transitions_total{queue="a",to="half-open"} 2
# TYPE retry_scheduler_retries_scheduled_total counter
retry_scheduler_retries_scheduled_total{queue="a"} 40
`
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(strings.NewReader(scrape))
	require.NoError(t, err)
	n, err := countOpens(fams)
	require.NoError(t, err)
	assert.Equal(t, 3, n)
}
