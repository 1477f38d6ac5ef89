package promql

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Names are found in every shape of expression the rules and the dashboard use; what cannot
// be read is refused.
func TestMetricNames(t *testing.T) {
	for _, tc := range []struct {
		expr string
		want []string
	}{
		{`up`, []string{"up"}},
		{`max(retry_due{job=~"$job"})`, []string{"retry_due"}},
		{`histogram_quantile(0.99, sum by (task_queue, le) (rate(temporal_x_seconds_bucket{job=~"a|b", le!="+Inf"}[$__rate_interval])))`,
			[]string{"temporal_x_seconds_bucket"}},
		{`sum(rate(a_total[5m])) by (queue) / ignoring(status) group_left(queue) sum without (x) (b_total offset 1h)`,
			[]string{"a_total", "b_total"}},
		{`60 * ((sum(rate(dead_letters_total[2m])) or vector(0)) + 1e3) > bool 10`, []string{"dead_letters_total"}},
		{`time() - max(ts_seconds) > 48 * 3600 and on () absent(up{job=~".*x.*"}) unless nan`, []string{"ts_seconds", "up"}},
		{`retry_scheduler:dead_letter_inflow:per_minute > 10`, []string{"retry_scheduler:dead_letter_inflow:per_minute"}},
		{`label_replace(a, "dst", "$1", "src", "(by|on) (.*)")`, []string{"a"}},
		{`rate(a[${__range}]) + b @ end()`, []string{"a", "b"}},
		{`max_over_time(a[1h:5m]) and a`, []string{"a"}},
	} {
		got, err := MetricNames(tc.expr)
		require.NoError(t, err, tc.expr)
		assert.Equal(t, tc.want, got, tc.expr)
	}
	for _, bad := range []string{`sum(rate(a[5m])`, `a{job="x"`, `a]`, `{__name__=~"a|b"}`} {
		_, err := MetricNames(bad)
		assert.Error(t, err, bad)
	}
}
