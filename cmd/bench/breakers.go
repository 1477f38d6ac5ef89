package main

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/retry-scheduler/retry-scheduler/workflows"
)

// breakerOpens is how many times the service's circuit breakers opened so far, from its
// worker's /metrics (the breakers are on by default): retries a breaker held are late on
// purpose, and the step says how many times that could have happened. -1 when unreadable.
func breakerOpens(ctx context.Context, httpAddr string) int {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+httpAddr+"/metrics", nil)
	if err != nil {
		return -1
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		return -1
	}
	n, err := countOpens(fams)
	if err != nil {
		return -1
	}
	return n
}

// countOpens sums the breaker transitions to open in a scrape (the SDK's exporter may prefix
// the name).
func countOpens(fams map[string]*dto.MetricFamily) (int, error) {
	total := 0.0
	for name, f := range fams {
		if !strings.HasSuffix(name, workflows.MetricBreakerTransitions) {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "to" && l.GetValue() == string(workflows.BreakerOpen) {
					total += m.GetCounter().GetValue()
				}
			}
		}
	}
	if total < 0 {
		return 0, fmt.Errorf("breaker opens: negative count %v", total)
	}
	return int(total), nil
}
