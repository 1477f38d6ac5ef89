package kubernetes

import (
	"flag"
	"os"
	"reflect"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

const (
	// alertRules is the rules file Prometheus loads directly; the PrometheusRule carries the
	// same groups for the Prometheus Operator.
	alertRules     = "../../alerts/retry-scheduler.rules.yml"
	prometheusRule = "components/prometheusrule/prometheusrule.yaml"
)

var updateRule = flag.Bool("update-prometheusrule", false, "write "+prometheusRule+" from "+alertRules)

// prometheusRuleHeader precedes the rules file's groups, indented under spec.
const prometheusRuleHeader = `# Generated from alerts/retry-scheduler.rules.yml; do not edit. After a change to the rules:
#   go test ./deploy/kubernetes/ -run TestPrometheusRuleIsTheAlertRules -update-prometheusrule
apiVersion: monitoring.coreos.com/v1
kind: PrometheusRule
metadata:
  name: retry-scheduler
  labels:
    app.kubernetes.io/component: alerts
spec:
`

// generatedPrometheusRule is the PrometheusRule of the rules file: its groups, comments
// included, under spec.
func generatedPrometheusRule(rules string) string {
	_, groups, _ := strings.Cut(rules, "\ngroups:")
	var b strings.Builder
	b.WriteString(prometheusRuleHeader)
	for _, line := range strings.Split("groups:"+groups, "\n") {
		if line != "" {
			b.WriteString("  " + line)
		}
		b.WriteString("\n")
	}
	return strings.TrimRight(b.String(), "\n") + "\n"
}

// The component's PrometheusRule is the rules file's groups, byte for byte as generated, and
// the same rules once decoded.
func TestPrometheusRuleIsTheAlertRules(t *testing.T) {
	rules, err := os.ReadFile(alertRules)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(rules), "\ngroups:") {
		t.Fatalf("%s has no top-level groups", alertRules)
	}
	want := generatedPrometheusRule(string(rules))
	if *updateRule {
		if err := os.WriteFile(prometheusRule, []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(prometheusRule)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != want {
		t.Errorf("%s is not generated from %s: run go test ./deploy/kubernetes/ -run TestPrometheusRuleIsTheAlertRules -update-prometheusrule", prometheusRule, alertRules)
	}

	var file struct {
		Groups []ruleGroup `json:"groups"`
	}
	if err := yaml.UnmarshalStrict(rules, &file); err != nil {
		t.Fatalf("%s: %v", alertRules, err)
	}
	o, errs := decode(prometheusRule, got)
	for _, err := range errs {
		t.Error(err)
	}
	if len(o.prometheusRules) != 1 {
		t.Fatalf("%s: %d PrometheusRules, want 1", prometheusRule, len(o.prometheusRules))
	}
	if len(file.Groups) == 0 || !reflect.DeepEqual(o.prometheusRules[0].Spec.Groups, file.Groups) {
		t.Errorf("%s: groups differ from %s's", prometheusRule, alertRules)
	}
}

// checkPrometheusRules: a rendered PrometheusRule holds the rules file's groups.
func checkPrometheusRules(t *testing.T, o *objects) {
	rules, err := os.ReadFile(alertRules)
	if err != nil {
		t.Fatal(err)
	}
	var file struct {
		Groups []ruleGroup `json:"groups"`
	}
	if err := yaml.UnmarshalStrict(rules, &file); err != nil {
		t.Fatalf("%s: %v", alertRules, err)
	}
	for _, pr := range o.prometheusRules {
		if !reflect.DeepEqual(pr.Spec.Groups, file.Groups) {
			t.Errorf("PrometheusRule %s: groups differ from %s's", pr.Name, alertRules)
		}
	}
}
