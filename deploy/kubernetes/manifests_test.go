// Package kubernetes holds retry-scheduler's Kubernetes manifests: a kustomize base, the
// autoscaling and monitoring components and an example overlay (README.md). This test renders
// each with `kubectl kustomize`, decodes every object strictly into its API type, and checks
// the objects against the service itself: its configuration loader, its ops handler, its
// policy parser and the image its Dockerfile builds.
package kubernetes

import (
	"bytes"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"

	"github.com/retry-scheduler/retry-scheduler/internal/config"
	"github.com/retry-scheduler/retry-scheduler/internal/metrics"
	"github.com/retry-scheduler/retry-scheduler/internal/ops"
	"github.com/retry-scheduler/retry-scheduler/internal/policy"
	"github.com/retry-scheduler/retry-scheduler/internal/testenv"
)

const (
	// secretsExample documents the Secrets the manifests reference (not applied by them).
	secretsExample = "base/secrets.example.yaml"
	// exampleOverlay is the overlay whose image and namespace are checked against its
	// kustomization.
	exampleOverlay = "overlays/example"
	// httpDrain is how long the service's ops server drains on SIGTERM (service's
	// shutdownTimeout), after which a worker waits up to WORKER_STOP_TIMEOUT.
	httpDrain = 5 * time.Second
	// minLivenessWindow is the least time a liveness probe must keep failing before the
	// kubelet restarts the container: a restart is the last resort, not a reflex.
	minLivenessWindow = 30 * time.Second
)

// A layout is a kustomization the test renders, with how many objects of each kind it must
// hold.
type layout struct {
	dir    string
	counts map[string]int
}

func baseCounts(extra map[string]int) map[string]int {
	c := map[string]int{"ServiceAccount": 1, "ConfigMap": 2, "Service": 2, "Deployment": 3, "PodDisruptionBudget": 3, "NetworkPolicy": 1}
	for k, v := range extra {
		c[k] = v
	}
	return c
}

var layouts = []layout{
	{"base", baseCounts(nil)},
	{"testdata/keda", baseCounts(map[string]int{"ScaledObject": 2, "TriggerAuthentication": 2})},
	{"testdata/hpa", baseCounts(map[string]int{"HorizontalPodAutoscaler": 2})},
	{"testdata/servicemonitor", baseCounts(map[string]int{"ServiceMonitor": 1})},
	{"testdata/prometheusrule", baseCounts(map[string]int{"PrometheusRule": 1})},
	{exampleOverlay, baseCounts(map[string]int{"ScaledObject": 2, "TriggerAuthentication": 2, "ServiceMonitor": 1, "PrometheusRule": 1})},
	{secondInstall, baseCounts(map[string]int{"ScaledObject": 2, "TriggerAuthentication": 2, "ServiceMonitor": 1})},
}

// secondInstall is a second install next to exampleOverlay, in its namespace: its own
// instance and name suffix.
const secondInstall = "testdata/second-install"

// The recommended labels every object and pod template carries; selectors use only
// selectorLabels (a Deployment's selector is immutable, so labels that change, like
// version, stay out).
const (
	labelName      = "app.kubernetes.io/name"
	labelInstance  = "app.kubernetes.io/instance"
	labelVersion   = "app.kubernetes.io/version"
	labelComponent = "app.kubernetes.io/component"
	labelPartOf    = "app.kubernetes.io/part-of"
	labelManagedBy = "app.kubernetes.io/managed-by"
)

var selectorLabels = []string{labelComponent, labelInstance, labelName}

// The custom resources, reduced to the fields the manifests use; decoded strictly, so a field
// outside them (a misspelt one included) fails the test.

type scaledObject struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		ScaleTargetRef  scaleTargetRef `json:"scaleTargetRef"`
		PollingInterval *int32         `json:"pollingInterval,omitempty"`
		CooldownPeriod  *int32         `json:"cooldownPeriod,omitempty"`
		MinReplicaCount *int32         `json:"minReplicaCount,omitempty"`
		MaxReplicaCount *int32         `json:"maxReplicaCount,omitempty"`
		Advanced        *struct {
			HorizontalPodAutoscalerConfig *struct {
				Behavior *autoscalingv2.HorizontalPodAutoscalerBehavior `json:"behavior,omitempty"`
			} `json:"horizontalPodAutoscalerConfig,omitempty"`
		} `json:"advanced,omitempty"`
		Triggers []struct {
			Type              string            `json:"type"`
			Metadata          map[string]string `json:"metadata"`
			AuthenticationRef *struct {
				Name string `json:"name"`
				Kind string `json:"kind,omitempty"`
			} `json:"authenticationRef,omitempty"`
		} `json:"triggers"`
	} `json:"spec"`
}

type scaleTargetRef struct {
	APIVersion string `json:"apiVersion,omitempty"`
	Kind       string `json:"kind,omitempty"`
	Name       string `json:"name"`
}

type triggerAuthentication struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		SecretTargetRef []struct {
			Parameter string `json:"parameter"`
			Name      string `json:"name"`
			Key       string `json:"key"`
		} `json:"secretTargetRef"`
	} `json:"spec"`
}

// ruleGroup is a Prometheus rule group, as the rules file and a PrometheusRule hold it.
type ruleGroup struct {
	Name     string `json:"name"`
	Interval string `json:"interval,omitempty"`
	Rules    []struct {
		Record      string            `json:"record,omitempty"`
		Alert       string            `json:"alert,omitempty"`
		Expr        string            `json:"expr"`
		For         string            `json:"for,omitempty"`
		Labels      map[string]string `json:"labels,omitempty"`
		Annotations map[string]string `json:"annotations,omitempty"`
	} `json:"rules"`
}

type prometheusRuleObject struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		Groups []ruleGroup `json:"groups"`
	} `json:"spec"`
}

type serviceMonitor struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		Selector        metav1.LabelSelector `json:"selector"`
		PodTargetLabels []string             `json:"podTargetLabels,omitempty"`
		Endpoints       []struct {
			Port          string `json:"port"`
			Path          string `json:"path,omitempty"`
			Interval      string `json:"interval,omitempty"`
			ScrapeTimeout string `json:"scrapeTimeout,omitempty"`
		} `json:"endpoints"`
	} `json:"spec"`
}

// objects is one rendered kustomization, by kind.
type objects struct {
	counts          map[string]int
	metas           []objectRef
	serviceAccounts []corev1.ServiceAccount
	configMaps      []corev1.ConfigMap
	services        []corev1.Service
	deployments     []appsv1.Deployment
	pdbs            []policyv1.PodDisruptionBudget
	hpas            []autoscalingv2.HorizontalPodAutoscaler
	scaledObjects   []scaledObject
	triggerAuths    []triggerAuthentication
	serviceMonitors []serviceMonitor
	prometheusRules []prometheusRuleObject
	netpols         []networkingv1.NetworkPolicy
}

type objectRef struct {
	kind string
	meta metav1.ObjectMeta
}

var docSeparator = regexp.MustCompile(`(?m)^---[ \t]*$`)

// render runs `kubectl kustomize dir` and decodes its output.
func render(t *testing.T, kubectl, dir string) *objects {
	t.Helper()
	cmd := exec.Command(kubectl, "kustomize", dir)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("kubectl kustomize %s: %v\n%s", dir, err, stderr.String())
	}
	o, errs := decode(dir, out)
	for _, err := range errs {
		t.Error(err)
	}
	return o
}

// decoders decode a document of each apiVersion and kind the manifests use into its list in
// an objects.
var decoders = map[string]func(o *objects, strict func(any) bool) metav1.ObjectMeta{
	"v1, Kind=ServiceAccount":                       func(o *objects, strict func(any) bool) metav1.ObjectMeta { return decodeAs(strict, &o.serviceAccounts) },
	"v1, Kind=ConfigMap":                            func(o *objects, strict func(any) bool) metav1.ObjectMeta { return decodeAs(strict, &o.configMaps) },
	"v1, Kind=Service":                              func(o *objects, strict func(any) bool) metav1.ObjectMeta { return decodeAs(strict, &o.services) },
	"apps/v1, Kind=Deployment":                      func(o *objects, strict func(any) bool) metav1.ObjectMeta { return decodeAs(strict, &o.deployments) },
	"policy/v1, Kind=PodDisruptionBudget":           func(o *objects, strict func(any) bool) metav1.ObjectMeta { return decodeAs(strict, &o.pdbs) },
	"autoscaling/v2, Kind=HorizontalPodAutoscaler":  func(o *objects, strict func(any) bool) metav1.ObjectMeta { return decodeAs(strict, &o.hpas) },
	"keda.sh/v1alpha1, Kind=ScaledObject":           func(o *objects, strict func(any) bool) metav1.ObjectMeta { return decodeAs(strict, &o.scaledObjects) },
	"keda.sh/v1alpha1, Kind=TriggerAuthentication":  func(o *objects, strict func(any) bool) metav1.ObjectMeta { return decodeAs(strict, &o.triggerAuths) },
	"monitoring.coreos.com/v1, Kind=ServiceMonitor": func(o *objects, strict func(any) bool) metav1.ObjectMeta { return decodeAs(strict, &o.serviceMonitors) },
	"monitoring.coreos.com/v1, Kind=PrometheusRule": func(o *objects, strict func(any) bool) metav1.ObjectMeta { return decodeAs(strict, &o.prometheusRules) },
	"networking.k8s.io/v1, Kind=NetworkPolicy":      func(o *objects, strict func(any) bool) metav1.ObjectMeta { return decodeAs(strict, &o.netpols) },
}

// decodeAs decodes a document with strict into a T, appends it to list and returns its
// metadata (empty when it did not decode).
func decodeAs[T any, P interface {
	*T
	GetObjectMeta() metav1.Object
}](strict func(any) bool, list *[]T) metav1.ObjectMeta {
	var v T
	if !strict(&v) {
		return metav1.ObjectMeta{}
	}
	*list = append(*list, v)
	return *P(&v).GetObjectMeta().(*metav1.ObjectMeta)
}

// decode splits a YAML stream into documents and decodes each strictly (unknown or duplicate
// fields fail) into the type of its apiVersion and kind; a kind the test does not know is an
// error.
func decode(source string, stream []byte) (*objects, []error) {
	o := &objects{counts: map[string]int{}}
	var errs []error
	for i, doc := range docSeparator.Split(string(stream), -1) {
		if strings.TrimSpace(strings.Join(nonComments(doc), "")) == "" {
			continue
		}
		var tm metav1.TypeMeta
		if err := yaml.Unmarshal([]byte(doc), &tm); err != nil {
			errs = append(errs, fmt.Errorf("%s: document %d: %w", source, i, err))
			continue
		}
		gvk := tm.APIVersion + ", Kind=" + tm.Kind
		strict := func(v any) bool {
			if err := yaml.UnmarshalStrict([]byte(doc), v); err != nil {
				errs = append(errs, fmt.Errorf("%s: document %d (%s): %w", source, i, gvk, err))
				return false
			}
			return true
		}
		add, ok := decoders[gvk]
		if !ok {
			errs = append(errs, fmt.Errorf("%s: document %d: unexpected %s (teach the test its type and checks)", source, i, gvk))
			continue
		}
		meta := add(o, strict)
		o.counts[tm.Kind]++
		o.metas = append(o.metas, objectRef{tm.Kind, meta})
	}
	return o, errs
}

func (o *objects) configMap(name string) (corev1.ConfigMap, bool) {
	for _, cm := range o.configMaps {
		if cm.Name == name {
			return cm, true
		}
	}
	return corev1.ConfigMap{}, false
}

// secrets are the Secrets of secretsExample: name, then key, then placeholder value.
func exampleSecrets(t *testing.T) map[string]map[string]string {
	t.Helper()
	b, err := os.ReadFile(secretsExample)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]map[string]string{}
	for i, doc := range docSeparator.Split(string(b), -1) {
		if strings.TrimSpace(strings.Join(nonComments(doc), "")) == "" {
			continue
		}
		var s corev1.Secret
		if err := yaml.UnmarshalStrict([]byte(doc), &s); err != nil {
			t.Fatalf("%s: document %d: %v", secretsExample, i, err)
		}
		if s.Kind != "Secret" || s.APIVersion != "v1" {
			t.Fatalf("%s: document %d is a %s %s, not a v1 Secret", secretsExample, i, s.APIVersion, s.Kind)
		}
		keys := map[string]string{}
		for k, v := range s.StringData {
			keys[k] = v
		}
		for k, v := range s.Data {
			keys[k] = string(v)
		}
		out[s.Name] = keys
	}
	return out
}

func nonComments(doc string) []string {
	var out []string
	for _, l := range strings.Split(doc, "\n") {
		if !strings.HasPrefix(strings.TrimSpace(l), "#") {
			out = append(out, l)
		}
	}
	return out
}

// imageTitle is the image name the Dockerfile labels its image with.
func imageTitle(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("../../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	// LABEL instructions may continue over lines ending in a backslash.
	text := strings.ReplaceAll(string(b), "\\\n", " ")
	m := regexp.MustCompile(`(?m)^LABEL\s.*\borg\.opencontainers\.image\.title=("([^"]*)"|(\S+))`).FindStringSubmatch(text)
	if m == nil {
		t.Fatal("../../Dockerfile has no LABEL org.opencontainers.image.title: the image name the manifests must use")
	}
	return m[2] + m[3]
}

// imageName is an image reference without its tag and digest.
func imageName(ref string) string {
	ref, _, _ = strings.Cut(ref, "@")
	if i := strings.LastIndex(ref, ":"); i > strings.LastIndex(ref, "/") {
		ref = ref[:i]
	}
	return ref
}

// overlayImage is what exampleOverlay sets the image called title to.
type overlayImage struct {
	Name    string `json:"name"`
	NewName string `json:"newName"`
	NewTag  string `json:"newTag"`
	Digest  string `json:"digest"`
}

func readOverlay(t *testing.T, dir, title string) (namespace string, image overlayImage) {
	t.Helper()
	b, err := os.ReadFile(path.Join(dir, "kustomization.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var k struct {
		Namespace string         `json:"namespace"`
		Images    []overlayImage `json:"images"`
	}
	if err := yaml.Unmarshal(b, &k); err != nil {
		t.Fatalf("%s/kustomization.yaml: %v", dir, err)
	}
	for _, im := range k.Images {
		if im.Name == title {
			return k.Namespace, im
		}
	}
	t.Fatalf("%s/kustomization.yaml: no images entry for %q", dir, title)
	return "", overlayImage{}
}

// served answers the status the service's ops handler gives a GET of a path: the routes every
// mode serves (/healthz, /readyz, /metrics).
func served(t *testing.T) func(string) int {
	srv := httptest.NewServer(ops.Handler(metrics.NewRegistry(), nil, nil))
	t.Cleanup(srv.Close)
	return func(p string) int {
		resp, err := http.Get(srv.URL + p)
		if err != nil {
			t.Fatalf("GET %s: %v", p, err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
}

// process is one Deployment's container as the service would see it.
type process struct {
	deploy appsv1.Deployment
	c      corev1.Container
	env    map[string]string // what the container's environment holds
	cfg    config.Config     // what the service loads from it
	loaded bool              // cfg is valid
}

func TestManifests(t *testing.T) {
	title := imageTitle(t)
	secrets := exampleSecrets(t)
	status := served(t)
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	kubectl := testenv.LookPath(t, "kubectl", "install kubectl, which has kustomize built in")
	for _, l := range layouts {
		t.Run(l.dir, func(t *testing.T) {
			o := render(t, kubectl, l.dir)
			t.Logf("%s: %d objects: %v", l.dir, len(o.metas), o.counts)
			for kind, n := range l.counts {
				if o.counts[kind] != n {
					t.Errorf("%d %s objects, want %d", o.counts[kind], kind, n)
				}
			}
			for kind := range o.counts {
				if _, ok := l.counts[kind]; !ok {
					t.Errorf("unexpected %s objects (%d)", kind, o.counts[kind])
				}
			}
			procs := checkDeployments(t, o, secrets, string(readme), status)
			checkImages(t, l.dir, procs, title)
			checkDisruptionBudgets(t, o)
			checkServices(t, o, procs)
			checkScalers(t, o, procs, secrets)
			checkServiceMonitors(t, o, status)
			checkPrometheusRules(t, o)
			checkNetworkPolicy(t, o)
			checkLabels(t, o, procs)
			if l.dir == exampleOverlay {
				ns, _ := readOverlay(t, exampleOverlay, title)
				if ns == "" {
					t.Errorf("%s sets no namespace", exampleOverlay)
				}
				for _, m := range o.metas {
					if m.meta.Namespace != ns {
						t.Errorf("%s %s: namespace %q, want the overlay's %q", m.kind, m.meta.Name, m.meta.Namespace, ns)
					}
				}
			}
		})
	}
}

// checkDeployments checks every Deployment's pod and container and returns them as the
// service would run them.
func checkDeployments(t *testing.T, o *objects, secrets map[string]map[string]string, readme string, status func(string) int) []process {
	var procs []process
	pollers := 0
	modes := map[string]int{}
	for _, d := range o.deployments {
		pod := d.Spec.Template.Spec
		where := "Deployment " + d.Name
		if d.Spec.Selector == nil {
			t.Errorf("%s: no selector", where)
		} else if sel, err := metav1.LabelSelectorAsSelector(d.Spec.Selector); err != nil || sel.Empty() || !sel.Matches(labels.Set(d.Spec.Template.Labels)) {
			t.Errorf("%s: selector %v does not select its own pods (%v; %v)", where, d.Spec.Selector, d.Spec.Template.Labels, err)
		}
		checkPodSecurity(t, where, pod)
		checkServiceAccount(t, o, where, pod)
		checkVolumes(t, o, where, pod, secrets, readme)
		if len(pod.Containers) != 1 || len(pod.InitContainers) != 0 {
			t.Errorf("%s: %d containers and %d init containers, want one container", where, len(pod.Containers), len(pod.InitContainers))
		}
		for _, c := range pod.Containers {
			p := checkContainer(t, o, d, c, secrets, status)
			procs = append(procs, p)
			if !p.loaded {
				continue
			}
			modes[p.cfg.Mode]++
			if p.cfg.RunsDepthPoller() {
				pollers++
			}
		}
		// Several replicas (or a count left to an autoscaler) spread softly over nodes.
		if d.Spec.Replicas == nil || *d.Spec.Replicas > 1 {
			if !spreads(pod, d.Spec.Template.Labels) {
				t.Errorf("%s: several replicas but no soft topologySpreadConstraints or preferred podAntiAffinity over its own pods", where)
			}
		}
	}
	if pollers != 1 {
		t.Errorf("%d Deployments run the depth poller (mode bridge or all, DEPTH_POLLER not off), want exactly 1", pollers)
	}
	if modes[config.ModeWorker]+modes[config.ModeAll] == 0 || modes[config.ModeBridge]+modes[config.ModeAll] == 0 {
		t.Errorf("modes run %v: want a worker and a bridge", modes)
	}
	return procs
}

func checkPodSecurity(t *testing.T, where string, pod corev1.PodSpec) {
	const nonroot = 65532 // distroless's nonroot user and group
	sc := pod.SecurityContext
	switch {
	case sc == nil:
		t.Errorf("%s: no pod securityContext", where)
	default:
		if sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot {
			t.Errorf("%s: pod runAsNonRoot is not true", where)
		}
		for name, id := range map[string]*int64{"runAsUser": sc.RunAsUser, "runAsGroup": sc.RunAsGroup, "fsGroup": sc.FSGroup} {
			if id == nil || *id != nonroot {
				t.Errorf("%s: pod %s is not %d", where, name, nonroot)
			}
		}
		if sc.SeccompProfile == nil || sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
			t.Errorf("%s: pod seccompProfile is not RuntimeDefault", where)
		}
	}
	for _, c := range pod.Containers {
		sc := c.SecurityContext
		if sc == nil {
			t.Errorf("%s: container %s has no securityContext", where, c.Name)
			continue
		}
		if sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
			t.Errorf("%s: container %s: readOnlyRootFilesystem is not true", where, c.Name)
		}
		if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
			t.Errorf("%s: container %s: allowPrivilegeEscalation is not false", where, c.Name)
		}
		if sc.Privileged != nil && *sc.Privileged {
			t.Errorf("%s: container %s is privileged", where, c.Name)
		}
		if sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(sc.Capabilities.Add) > 0 {
			t.Errorf("%s: container %s: capabilities %v, want drop [ALL] and no add", where, c.Name, sc.Capabilities)
		}
	}
}

func checkServiceAccount(t *testing.T, o *objects, where string, pod corev1.PodSpec) {
	if pod.AutomountServiceAccountToken == nil || *pod.AutomountServiceAccountToken {
		t.Errorf("%s: automountServiceAccountToken is not false", where)
	}
	for _, sa := range o.serviceAccounts {
		if sa.Name == pod.ServiceAccountName {
			if sa.AutomountServiceAccountToken == nil || *sa.AutomountServiceAccountToken {
				t.Errorf("ServiceAccount %s: automountServiceAccountToken is not false", sa.Name)
			}
			return
		}
	}
	t.Errorf("%s: serviceAccountName %q is not in the render", where, pod.ServiceAccountName)
}

// checkVolumes: every mount names a volume; a ConfigMap volume's ConfigMap is in the render;
// a Secret volume's Secret is optional, or documented in secretsExample, and named in the
// README.
func checkVolumes(t *testing.T, o *objects, where string, pod corev1.PodSpec, secrets map[string]map[string]string, readme string) {
	vols := map[string]corev1.Volume{}
	for _, v := range pod.Volumes {
		vols[v.Name] = v
		switch {
		case v.ConfigMap != nil:
			if _, ok := o.configMap(v.ConfigMap.Name); !ok {
				t.Errorf("%s: volume %s: ConfigMap %q is not in the render", where, v.Name, v.ConfigMap.Name)
			}
		case v.Secret != nil:
			_, documented := secrets[v.Secret.SecretName]
			if !documented && (v.Secret.Optional == nil || !*v.Secret.Optional) {
				t.Errorf("%s: volume %s: Secret %q is required but not in %s", where, v.Name, v.Secret.SecretName, secretsExample)
			}
			if !strings.Contains(readme, v.Secret.SecretName) {
				t.Errorf("%s: volume %s: Secret %q is not documented in README.md", where, v.Name, v.Secret.SecretName)
			}
		case v.EmptyDir != nil:
		default:
			t.Errorf("%s: volume %s: unexpected source (configMap, secret and emptyDir only)", where, v.Name)
		}
	}
	for _, c := range pod.Containers {
		for _, m := range c.VolumeMounts {
			if _, ok := vols[m.Name]; !ok {
				t.Errorf("%s: container %s mounts volume %q, which the pod does not have", where, c.Name, m.Name)
			}
		}
	}
}

// checkContainer checks one container and loads the service's configuration from its
// environment.
func checkContainer(t *testing.T, o *objects, d appsv1.Deployment, c corev1.Container, secrets map[string]map[string]string, status func(string) int) process {
	where := fmt.Sprintf("Deployment %s, container %s", d.Name, c.Name)
	p := process{deploy: d, c: c, env: map[string]string{}}

	// Resources: requests and limits of CPU and memory, requests within limits.
	for _, r := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
		req, hasReq := c.Resources.Requests[r]
		lim, hasLim := c.Resources.Limits[r]
		if !hasReq || !hasLim || req.IsZero() || lim.IsZero() {
			t.Errorf("%s: %s needs a request and a limit (requests %v, limits %v)", where, r, c.Resources.Requests, c.Resources.Limits)
		} else if req.Cmp(lim) > 0 {
			t.Errorf("%s: %s request %s above its limit %s", where, r, req.String(), lim.String())
		}
	}

	// The environment, as the kubelet builds it: envFrom first, then env, which wins.
	for _, ef := range c.EnvFrom {
		switch {
		case ef.ConfigMapRef != nil:
			cm, ok := o.configMap(ef.ConfigMapRef.Name)
			if !ok {
				t.Errorf("%s: envFrom ConfigMap %q is not in the render", where, ef.ConfigMapRef.Name)
				continue
			}
			for k, v := range cm.Data {
				if !config.KnownEnv(ef.Prefix + k) {
					t.Errorf("%s: envFrom ConfigMap %s: the service does not read %s", where, cm.Name, ef.Prefix+k)
				}
				p.env[ef.Prefix+k] = v
			}
		default:
			t.Errorf("%s: envFrom %+v: only ConfigMaps (secrets one by one, through secretKeyRef)", where, ef)
		}
	}
	literal := map[string]bool{}
	gomemlimit := false
	for _, e := range c.Env {
		if !config.KnownEnv(e.Name) {
			t.Errorf("%s: env %s: the service does not read it", where, e.Name)
		}
		if e.ValueFrom == nil {
			p.env[e.Name], literal[e.Name] = e.Value, true
			continue
		}
		switch vf := e.ValueFrom; {
		case vf.SecretKeyRef != nil:
			ref := vf.SecretKeyRef
			keys, ok := secrets[ref.Name]
			if !ok {
				t.Errorf("%s: env %s: Secret %q is not one of %s", where, e.Name, ref.Name, secretsExample)
				continue
			}
			v, ok := keys[ref.Key]
			if !ok {
				t.Errorf("%s: env %s: key %q is not in the Secret %s of %s", where, e.Name, ref.Key, ref.Name, secretsExample)
				continue
			}
			p.env[e.Name] = v
		case vf.ConfigMapKeyRef != nil:
			ref := vf.ConfigMapKeyRef
			cm, ok := o.configMap(ref.Name)
			if !ok {
				t.Errorf("%s: env %s: ConfigMap %q is not in the render", where, e.Name, ref.Name)
				continue
			}
			v, ok := cm.Data[ref.Key]
			if !ok && (ref.Optional == nil || !*ref.Optional) {
				t.Errorf("%s: env %s: ConfigMap %s has no key %q", where, e.Name, ref.Name, ref.Key)
			}
			p.env[e.Name] = v
		case vf.ResourceFieldRef != nil:
			ref := vf.ResourceFieldRef
			if ref.ContainerName != "" && ref.ContainerName != c.Name {
				t.Errorf("%s: env %s: resourceFieldRef of container %q", where, e.Name, ref.ContainerName)
			}
			lim, ok := c.Resources.Limits[corev1.ResourceName(strings.TrimPrefix(ref.Resource, "limits."))]
			if !ok || !strings.HasPrefix(ref.Resource, "limits.") {
				t.Errorf("%s: env %s: resourceFieldRef %s is not a limit the container has", where, e.Name, ref.Resource)
				continue
			}
			div := int64(1)
			if !ref.Divisor.IsZero() {
				div = ref.Divisor.Value()
			}
			p.env[e.Name] = strconv.FormatInt(lim.Value()/div, 10)
			if e.Name == "GOMEMLIMIT" {
				// GOMEMLIMIT without a unit is bytes: a divisor would shrink the limit.
				gomemlimit = ref.Resource == "limits.memory" && div == 1
			}
		default:
			t.Errorf("%s: env %s: unexpected valueFrom %+v", where, e.Name, vf)
		}
	}
	if !gomemlimit {
		t.Errorf("%s: GOMEMLIMIT is not the container's limits.memory in bytes (resourceFieldRef, divisor 1)", where)
	}

	// What the service makes of it: the arguments (the mode) and the environment.
	cfg, err := config.Load(c.Args, func(k string) (string, bool) { v, ok := p.env[k]; return v, ok })
	if err != nil {
		t.Errorf("%s: the service refuses its configuration (args %q): %v", where, c.Args, err)
		return p
	}
	p.cfg, p.loaded = cfg, true
	if len(c.Command) > 0 {
		t.Errorf("%s: command %q replaces the image's entrypoint", where, c.Command)
	}

	// Shutdown: the ops server drains, then the worker waits WORKER_STOP_TIMEOUT; the grace
	// period must cover both. The timeout is set in the Deployment, where the grace is.
	if !literal["WORKER_STOP_TIMEOUT"] {
		t.Errorf("%s: WORKER_STOP_TIMEOUT is not set in env, next to the grace period", where)
	} else if wst, err := config.ParseDuration(p.env["WORKER_STOP_TIMEOUT"]); err != nil {
		t.Errorf("%s: WORKER_STOP_TIMEOUT: %v", where, err)
	} else if g := d.Spec.Template.Spec.TerminationGracePeriodSeconds; g == nil {
		t.Errorf("%s: no terminationGracePeriodSeconds; it must exceed WORKER_STOP_TIMEOUT %s + %s", where, wst, httpDrain)
	} else if time.Duration(*g)*time.Second <= wst+httpDrain {
		t.Errorf("%s: terminationGracePeriodSeconds %d must exceed WORKER_STOP_TIMEOUT %s + %s", where, *g, wst, httpDrain)
	}

	// Probes: paths the service serves, on the port it listens on.
	_, portText, err := net.SplitHostPort(cfg.HTTPAddr)
	if err != nil {
		t.Fatalf("%s: HTTP address %q: %v", where, cfg.HTTPAddr, err)
	}
	httpPort, _ := strconv.Atoi(portText)
	if c.ReadinessProbe == nil || c.LivenessProbe == nil {
		t.Errorf("%s: needs a readiness and a liveness probe", where)
	}
	probes := []struct {
		name, want string
		p          *corev1.Probe
	}{{"readiness", "/readyz", c.ReadinessProbe}, {"liveness", "/healthz", c.LivenessProbe}, {"startup", "", c.StartupProbe}}
	for _, pr := range probes {
		if pr.p == nil {
			continue
		}
		g := pr.p.HTTPGet
		if g == nil {
			t.Errorf("%s: %s probe is not an httpGet", where, pr.name)
			continue
		}
		if pr.want != "" && g.Path != pr.want {
			t.Errorf("%s: %s probe path %s, want %s", where, pr.name, g.Path, pr.want)
		}
		if s := status(g.Path); s == http.StatusNotFound {
			t.Errorf("%s: %s probe path %s: the service answers 404", where, pr.name, g.Path)
		}
		if port, err := containerPort(c, g.Port); err != nil {
			t.Errorf("%s: %s probe: %v", where, pr.name, err)
		} else if port != httpPort {
			t.Errorf("%s: %s probe port %s is %d, the service listens on %d", where, pr.name, g.Port.String(), port, httpPort)
		}
	}
	if lp := c.LivenessProbe; lp != nil {
		if window := time.Duration(orDefault(lp.FailureThreshold, 3)*orDefault(lp.PeriodSeconds, 10)) * time.Second; window < minLivenessWindow {
			t.Errorf("%s: liveness restarts after %s of failures, want at least %s", where, window, minLivenessWindow)
		}
	}

	checkPolicyFile(t, o, where, d.Spec.Template.Spec, c, cfg.PolicyFile)
	// The example's token is a placeholder: the service refuses it at start, so that the
	// example deployed as it is has no known admin token.
	if v, ok := p.env["API_TOKENS"]; ok && v != "" {
		if _, err := ops.ParseTokens("API_TOKENS", v); err == nil || !strings.Contains(err.Error(), "placeholder") {
			t.Errorf("%s: API_TOKENS from %s: the service must refuse its placeholder, got %v", where, secretsExample, err)
		}
	}
	return p
}

// orDefault is a probe field, or Kubernetes' default for it when unset.
func orDefault(v, def int32) int32 {
	if v == 0 {
		return def
	}
	return v
}

// containerPort resolves a probe's or Service's port (a number or a port name) to a number
// the container declares.
func containerPort(c corev1.Container, port intstr.IntOrString) (int, error) {
	for _, cp := range c.Ports {
		if (port.Type == intstr.String && cp.Name == port.StrVal) || (port.Type == intstr.Int && cp.ContainerPort == port.IntVal) {
			return int(cp.ContainerPort), nil
		}
	}
	return 0, fmt.Errorf("port %s is not a port of container %s", port.String(), c.Name)
}

// checkPolicyFile: POLICY_FILE is a file of a mounted ConfigMap, and the policy package
// parses it.
func checkPolicyFile(t *testing.T, o *objects, where string, pod corev1.PodSpec, c corev1.Container, file string) {
	if file == "" {
		t.Errorf("%s: POLICY_FILE is not set", where)
		return
	}
	dir, base := path.Split(file)
	for _, m := range c.VolumeMounts {
		if path.Clean(m.MountPath) != path.Clean(dir) || m.SubPath != "" {
			continue
		}
		for _, v := range pod.Volumes {
			if v.Name != m.Name || v.ConfigMap == nil {
				continue
			}
			key := base
			if len(v.ConfigMap.Items) > 0 {
				key = ""
				for _, it := range v.ConfigMap.Items {
					if it.Path == base {
						key = it.Key
					}
				}
			}
			cm, _ := o.configMap(v.ConfigMap.Name)
			data, ok := cm.Data[key]
			if !ok {
				t.Errorf("%s: POLICY_FILE %s: ConfigMap %s has no key %q", where, file, cm.Name, key)
				return
			}
			if _, err := policy.Parse([]byte(data)); err != nil {
				t.Errorf("%s: POLICY_FILE %s (ConfigMap %s): %v", where, file, cm.Name, err)
			}
			return
		}
	}
	t.Errorf("%s: POLICY_FILE %s is not in a ConfigMap volume mounted at %s", where, file, dir)
}

// spreads reports whether the pod spreads softly over its own replicas.
func spreads(pod corev1.PodSpec, podLabels map[string]string) bool {
	selects := func(ls *metav1.LabelSelector) bool {
		sel, err := metav1.LabelSelectorAsSelector(ls)
		return err == nil && !sel.Empty() && sel.Matches(labels.Set(podLabels))
	}
	for _, tsc := range pod.TopologySpreadConstraints {
		if tsc.WhenUnsatisfiable == corev1.ScheduleAnyway && selects(tsc.LabelSelector) {
			return true
		}
	}
	if a := pod.Affinity; a != nil && a.PodAntiAffinity != nil {
		for _, w := range a.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution {
			if selects(w.PodAffinityTerm.LabelSelector) {
				return true
			}
		}
	}
	return false
}

// checkImages: every container runs the Dockerfile's image; the example overlay renames it to
// its registry and pins a tag or digest.
func checkImages(t *testing.T, dir string, procs []process, title string) {
	want, pinned := title, ""
	if dir == exampleOverlay || dir == secondInstall {
		_, im := readOverlay(t, dir, title)
		if im.NewName == "" || im.NewName == title {
			t.Errorf("%s: the overlay does not rename the image %s (images: newName)", dir, title)
		}
		switch {
		case im.Digest != "":
			pinned = "@" + im.Digest
		case im.NewTag != "" && im.NewTag != "latest":
			pinned = ":" + im.NewTag
		default:
			t.Errorf("%s: the overlay pins no tag or digest for %s", dir, title)
		}
		want = im.NewName
	}
	for _, p := range procs {
		if got := imageName(p.c.Image); got != want {
			t.Errorf("Deployment %s: image %s, want %s", p.deploy.Name, p.c.Image, want)
		}
		if pinned != "" && !strings.HasSuffix(p.c.Image, pinned) {
			t.Errorf("Deployment %s: image %s does not end in the overlay's %s", p.deploy.Name, p.c.Image, pinned)
		}
	}
}

// checkDisruptionBudgets: every Deployment has exactly one PDB, whose selector selects its pods
// and no other Deployment's.
func checkDisruptionBudgets(t *testing.T, o *objects) {
	covered := map[string]int{}
	for _, pdb := range o.pdbs {
		sel, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector)
		if err != nil || sel.Empty() {
			t.Errorf("PodDisruptionBudget %s: selector %v selects everything or nothing (%v)", pdb.Name, pdb.Spec.Selector, err)
			continue
		}
		var matched []string
		for _, d := range o.deployments {
			if sel.Matches(labels.Set(d.Spec.Template.Labels)) {
				matched = append(matched, d.Name)
				covered[d.Name]++
			}
		}
		if len(matched) != 1 {
			t.Errorf("PodDisruptionBudget %s selects the pods of %v, want one Deployment's", pdb.Name, matched)
		}
		if pdb.Spec.MaxUnavailable == nil && pdb.Spec.MinAvailable == nil {
			t.Errorf("PodDisruptionBudget %s: neither maxUnavailable nor minAvailable", pdb.Name)
		}
		// minAvailable over a single replica would block every node drain.
		if pdb.Spec.MinAvailable != nil {
			t.Errorf("PodDisruptionBudget %s: minAvailable; use maxUnavailable, which lets a single replica be drained", pdb.Name)
		}
	}
	for _, d := range o.deployments {
		if covered[d.Name] != 1 {
			t.Errorf("Deployment %s: %d PodDisruptionBudgets, want 1", d.Name, covered[d.Name])
		}
	}
}

// checkServices: every Service selects pods and targets their HTTP port; one ClusterIP Service
// serves the ops process (the depth poller's Deployment) and one headless Service lists every
// pod for scraping.
func checkServices(t *testing.T, o *objects, procs []process) {
	var opsServices, metricsServices int
	for _, s := range o.services {
		where := "Service " + s.Name
		if len(s.Spec.Selector) == 0 {
			t.Errorf("%s: no selector", where)
			continue
		}
		sel := labels.SelectorFromSet(s.Spec.Selector)
		var selected []process
		for _, p := range procs {
			if sel.Matches(labels.Set(p.deploy.Spec.Template.Labels)) {
				selected = append(selected, p)
			}
		}
		if len(selected) == 0 {
			t.Errorf("%s: selector %v selects no Deployment's pods", where, s.Spec.Selector)
			continue
		}
		hasHTTP := false
		for _, sp := range s.Spec.Ports {
			for _, p := range selected {
				port, err := containerPort(p.c, sp.TargetPort)
				if err != nil {
					t.Errorf("%s: port %s: Deployment %s: %v", where, sp.Name, p.deploy.Name, err)
					continue
				}
				_, want, _ := net.SplitHostPort(p.cfg.HTTPAddr)
				if sp.Name == "http" && strconv.Itoa(port) == want {
					hasHTTP = true
				}
			}
		}
		if !hasHTTP {
			t.Errorf("%s: no port named http on the service's HTTP port", where)
		}
		headless := s.Spec.ClusterIP == corev1.ClusterIPNone
		switch {
		case headless && len(selected) == len(procs):
			metricsServices++
			if !s.Spec.PublishNotReadyAddresses {
				t.Errorf("%s: scrape targets should include not-ready pods (publishNotReadyAddresses)", where)
			}
		case !headless && len(selected) == 1 && selected[0].cfg.RunsDepthPoller():
			opsServices++
			if s.Spec.Ports[0].Port != config.DefaultHTTPPort {
				t.Errorf("%s: port %d, want %d", where, s.Spec.Ports[0].Port, config.DefaultHTTPPort)
			}
		default:
			t.Errorf("%s: neither the ops Service (the depth poller's pods) nor the headless metrics Service (every pod)", where)
		}
	}
	if opsServices != 1 || metricsServices != 1 {
		t.Errorf("%d ops Services and %d metrics Services, want one of each", opsServices, metricsServices)
	}
}

// checkScalers: HPAs and ScaledObjects target Deployments that exist, leave them no fixed
// replica count, keep workers at one or more, and measure the queues the service uses.
func checkScalers(t *testing.T, o *objects, procs []process, secrets map[string]map[string]string) {
	targeted := map[string]string{}
	target := func(by, kind, name string, min *int32) (process, bool) {
		if kind != "" && kind != "Deployment" {
			t.Errorf("%s: scales a %s, want a Deployment", by, kind)
			return process{}, false
		}
		if prev, ok := targeted[name]; ok {
			t.Errorf("%s and %s both scale Deployment %s", prev, by, name)
		}
		targeted[name] = by
		for _, p := range procs {
			if p.deploy.Name != name {
				continue
			}
			if p.deploy.Spec.Replicas != nil {
				t.Errorf("%s: Deployment %s keeps replicas %d, which every apply would reset the scaled count to", by, name, *p.deploy.Spec.Replicas)
			}
			if runsWorker := p.cfg.Mode == config.ModeWorker || p.cfg.Mode == config.ModeAll; runsWorker && (min == nil || *min < 1) {
				t.Errorf("%s: a worker Deployment may scale to zero: timers that come due need a polling worker", by)
			}
			return p, true
		}
		t.Errorf("%s: Deployment %s is not in the render", by, name)
		return process{}, false
	}
	for _, h := range o.hpas {
		target("HorizontalPodAutoscaler "+h.Name, h.Spec.ScaleTargetRef.Kind, h.Spec.ScaleTargetRef.Name, h.Spec.MinReplicas)
		if h.Spec.MinReplicas != nil && *h.Spec.MinReplicas > h.Spec.MaxReplicas {
			t.Errorf("HorizontalPodAutoscaler %s: minReplicas above maxReplicas", h.Name)
		}
	}
	auths := map[string]triggerAuthentication{}
	for _, a := range o.triggerAuths {
		auths[a.Name] = a
		for _, ref := range a.Spec.SecretTargetRef {
			if _, ok := secrets[ref.Name][ref.Key]; !ok {
				t.Errorf("TriggerAuthentication %s: parameter %s: key %q of Secret %q is not in %s", a.Name, ref.Parameter, ref.Key, ref.Name, secretsExample)
			}
		}
	}
	for _, so := range o.scaledObjects {
		by := "ScaledObject " + so.Name
		p, ok := target(by, so.Spec.ScaleTargetRef.Kind, so.Spec.ScaleTargetRef.Name, so.Spec.MinReplicaCount)
		if so.Spec.MaxReplicaCount == nil || (so.Spec.MinReplicaCount != nil && *so.Spec.MinReplicaCount > *so.Spec.MaxReplicaCount) {
			t.Errorf("%s: want maxReplicaCount, at least minReplicaCount", by)
		}
		if len(so.Spec.Triggers) == 0 {
			t.Errorf("%s: no triggers", by)
		}
		for _, tr := range so.Spec.Triggers {
			if tr.AuthenticationRef != nil {
				if _, found := auths[tr.AuthenticationRef.Name]; !found || (tr.AuthenticationRef.Kind != "" && tr.AuthenticationRef.Kind != "TriggerAuthentication") {
					t.Errorf("%s: authenticationRef %+v is not a TriggerAuthentication in the render", by, *tr.AuthenticationRef)
				}
			}
			if !ok || !p.loaded {
				continue
			}
			md := tr.Metadata
			switch tr.Type {
			case "temporal":
				ns := md["namespace"]
				if ns == "" {
					ns = "default" // the scaler's default
				}
				for field, want := range map[string]string{"endpoint": p.cfg.TemporalAddress, "namespace": p.cfg.Namespace, "taskQueue": p.cfg.TaskQueue} {
					got := md[field]
					if field == "namespace" {
						got = ns
					}
					if got != want {
						t.Errorf("%s: temporal trigger %s %q, but Deployment %s uses %q", by, field, got, p.deploy.Name, want)
					}
				}
				// The worker runs its activities as local activities: it polls workflow
				// tasks only, and an activity backlog would be no work of its.
				if md["queueTypes"] != "workflow" {
					t.Errorf("%s: temporal trigger queueTypes %q, want workflow (the worker polls no activity tasks)", by, md["queueTypes"])
				}
				// The scaler authenticates as the worker does: the API key of its Secret.
				if md["apiKey"] != "" || md["apiKeyFromEnv"] != "" {
					t.Errorf("%s: temporal trigger: the API key belongs in a TriggerAuthentication, not in metadata", by)
				}
				checkTemporalAuth(t, by, tr.AuthenticationRef, auths, p)
				checkPositive(t, by, "targetQueueSize", md["targetQueueSize"])
			case "rabbitmq":
				if md["queueName"] != p.cfg.RetryQueue {
					t.Errorf("%s: rabbitmq trigger queueName %q, but Deployment %s consumes RETRY_QUEUE %q", by, md["queueName"], p.deploy.Name, p.cfg.RetryQueue)
				}
				if md["mode"] != "QueueLength" {
					t.Errorf("%s: rabbitmq trigger mode %q, want QueueLength", by, md["mode"])
				}
				checkPositive(t, by, "value", md["value"])
				if md["host"] != "" || tr.AuthenticationRef == nil {
					t.Errorf("%s: rabbitmq trigger: the host (with its password) belongs in a TriggerAuthentication, not in metadata", by)
				}
			default:
				t.Errorf("%s: unexpected trigger type %q", by, tr.Type)
			}
		}
	}
	for _, p := range procs {
		if _, scaled := targeted[p.deploy.Name]; !scaled && p.deploy.Spec.Replicas == nil {
			t.Errorf("Deployment %s: no replicas and no autoscaler", p.deploy.Name)
		}
	}
}

// checkTemporalAuth: the temporal trigger's TriggerAuthentication passes apiKey from the very
// Secret key the worker reads TEMPORAL_API_KEY from.
func checkTemporalAuth(t *testing.T, by string, ref *struct {
	Name string `json:"name"`
	Kind string `json:"kind,omitempty"`
}, auths map[string]triggerAuthentication, p process) {
	if ref == nil {
		t.Errorf("%s: temporal trigger has no authenticationRef (the Secret's TEMPORAL_API_KEY)", by)
		return
	}
	var workerRef *corev1.SecretKeySelector
	for _, e := range p.c.Env {
		if e.Name == "TEMPORAL_API_KEY" && e.ValueFrom != nil {
			workerRef = e.ValueFrom.SecretKeyRef
		}
	}
	if workerRef == nil {
		t.Errorf("%s: Deployment %s reads no TEMPORAL_API_KEY from a Secret", by, p.deploy.Name)
		return
	}
	for _, st := range auths[ref.Name].Spec.SecretTargetRef {
		if st.Parameter == "apiKey" {
			if st.Name != workerRef.Name || st.Key != workerRef.Key {
				t.Errorf("%s: apiKey from Secret %s key %s, but Deployment %s reads TEMPORAL_API_KEY from %s key %s", by, st.Name, st.Key, p.deploy.Name, workerRef.Name, workerRef.Key)
			}
			return
		}
	}
	t.Errorf("%s: TriggerAuthentication %s has no apiKey parameter", by, ref.Name)
}

func checkPositive(t *testing.T, by, field, v string) {
	if f, err := strconv.ParseFloat(v, 64); err != nil || f <= 0 {
		t.Errorf("%s: %s %q is not a positive number", by, field, v)
	}
}

// checkServiceMonitors: each selects exactly one Service, and scrapes a port of it at a path
// the service serves.
func checkServiceMonitors(t *testing.T, o *objects, status func(string) int) {
	for _, sm := range o.serviceMonitors {
		where := "ServiceMonitor " + sm.Name
		sel, err := metav1.LabelSelectorAsSelector(&sm.Spec.Selector)
		if err != nil || sel.Empty() {
			t.Errorf("%s: selector %v selects every Service or none (%v)", where, sm.Spec.Selector, err)
			continue
		}
		var svc []corev1.Service
		for _, s := range o.services {
			if sel.Matches(labels.Set(s.Labels)) {
				svc = append(svc, s)
			}
		}
		if len(svc) != 1 {
			t.Errorf("%s selects %d Services, want 1 (every pod once)", where, len(svc))
			continue
		}
		if len(sm.Spec.Endpoints) == 0 {
			t.Errorf("%s: no endpoints", where)
		}
		for _, ep := range sm.Spec.Endpoints {
			if !slices.ContainsFunc(svc[0].Spec.Ports, func(p corev1.ServicePort) bool { return p.Name == ep.Port }) {
				t.Errorf("%s: port %q is not a port of Service %s", where, ep.Port, svc[0].Name)
			}
			p := ep.Path
			if p == "" {
				p = "/metrics"
			}
			if s := status(p); s != http.StatusOK {
				t.Errorf("%s: path %s: the service answers %d", where, p, s)
			}
		}
	}
}

// TestImageName pins the parsing of image references the image check relies on.
func TestImageName(t *testing.T) {
	for ref, want := range map[string]string{
		"retry-scheduler":                                 "retry-scheduler",
		"retry-scheduler:latest":                          "retry-scheduler",
		"ghcr.io/example/retry-scheduler:1.0.0":           "ghcr.io/example/retry-scheduler",
		"registry:5000/retry-scheduler":                   "registry:5000/retry-scheduler",
		"registry:5000/retry-scheduler@sha256:0123abcdef": "registry:5000/retry-scheduler",
	} {
		if got := imageName(ref); got != want {
			t.Errorf("imageName(%q) = %q, want %q", ref, got, want)
		}
	}
}

// TestDecodeStrict shows the decoder refuses what the checks could not see: a misspelt field
// of a built-in kind or of a custom resource, and a kind the test has no checks for; and that
// it decodes a well-formed document.
func TestDecodeStrict(t *testing.T) {
	for name, doc := range map[string]string{
		"misspelt field": "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: x}\nspec: {replica: 2}\n",
		"unknown kind":   "apiVersion: batch/v1\nkind: Job\nmetadata: {name: x}\n",
		"misspelt CRD":   "apiVersion: keda.sh/v1alpha1\nkind: ScaledObject\nmetadata: {name: x}\nspec: {minReplicas: 1}\n",
		"duplicate key":  "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\ndata: {A: a, A: b}\n",
	} {
		if _, errs := decode(name, []byte(doc)); len(errs) == 0 {
			t.Errorf("%s: decoded without an error", name)
		}
	}
	good := strings.Join([]string{
		"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\ndata: {A: a}",
		"# a comment only",
		"apiVersion: keda.sh/v1alpha1\nkind: ScaledObject\nmetadata: {name: y}\nspec: {scaleTargetRef: {name: x}, minReplicaCount: 1}",
	}, "\n---\n")
	o, errs := decode("good", []byte(good))
	if len(errs) > 0 || o.counts["ConfigMap"] != 1 || o.counts["ScaledObject"] != 1 || o.configMaps[0].Data["A"] != "a" {
		t.Errorf("good documents: counts %v, errors %v", o.counts, errs)
	}
}

// checkLabels: every object and pod template carries the recommended labels, one instance and
// one version per render (the version the image's tag); selectors use name, instance and
// component only, so that they never change with a release and never reach another
// instance's pods.
func checkLabels(t *testing.T, o *objects, procs []process) {
	instances, versions := map[string]bool{}, map[string]bool{}
	check := func(where string, l map[string]string) {
		for _, k := range []string{labelName, labelInstance, labelVersion, labelComponent, labelPartOf, labelManagedBy} {
			if l[k] == "" {
				t.Errorf("%s: no label %s (labels %v)", where, k, l)
			}
		}
		if l[labelName] != "retry-scheduler" || l[labelPartOf] != "retry-scheduler" || l[labelManagedBy] != "kustomize" {
			t.Errorf("%s: name %q, part-of %q, managed-by %q; want retry-scheduler, retry-scheduler, kustomize", where, l[labelName], l[labelPartOf], l[labelManagedBy])
		}
		instances[l[labelInstance]], versions[l[labelVersion]] = true, true
	}
	for _, m := range o.metas {
		check(m.kind+" "+m.meta.Name, m.meta.Labels)
	}
	for _, d := range o.deployments {
		where := "Deployment " + d.Name
		check(where+" pod template", d.Spec.Template.Labels)
		if d.Spec.Template.Labels[labelComponent] != d.Labels[labelComponent] {
			t.Errorf("%s: pod component %q, Deployment's %q", where, d.Spec.Template.Labels[labelComponent], d.Labels[labelComponent])
		}
		if d.Spec.Selector != nil {
			checkSelectorKeys(t, where, d.Spec.Selector.MatchLabels, len(d.Spec.Selector.MatchExpressions), selectorLabels)
		}
	}
	for _, pdb := range o.pdbs {
		if pdb.Spec.Selector != nil {
			checkSelectorKeys(t, "PodDisruptionBudget "+pdb.Name, pdb.Spec.Selector.MatchLabels, len(pdb.Spec.Selector.MatchExpressions), selectorLabels)
		}
	}
	for _, s := range o.services {
		want := selectorLabels
		if s.Spec.ClusterIP == corev1.ClusterIPNone { // the metrics Service: every component
			want = []string{labelInstance, labelName}
		}
		checkSelectorKeys(t, "Service "+s.Name, s.Spec.Selector, 0, want)
	}
	for _, sm := range o.serviceMonitors {
		checkSelectorKeys(t, "ServiceMonitor "+sm.Name, sm.Spec.Selector.MatchLabels, len(sm.Spec.Selector.MatchExpressions), selectorLabels)
	}
	if len(instances) != 1 || len(versions) != 1 {
		t.Errorf("instances %v and versions %v: want one of each in a render", instances, versions)
	}
	for _, p := range procs {
		if tag := imageTag(p.c.Image); !versions[tag] {
			t.Errorf("Deployment %s: image tag %q is not the version label %v", p.deploy.Name, tag, versions)
		}
	}
}

// checkSelectorKeys: a selector of exactly these label keys, no expressions.
func checkSelectorKeys(t *testing.T, where string, matchLabels map[string]string, expressions int, want []string) {
	var keys []string
	for k := range matchLabels {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	if !slices.Equal(keys, want) || expressions > 0 {
		t.Errorf("%s: selector on %v (and %d expressions), want exactly %v", where, keys, expressions, want)
	}
}

// imageTag is an image reference's tag, or its digest, or latest.
func imageTag(ref string) string {
	if _, digest, ok := strings.Cut(ref, "@"); ok {
		return digest
	}
	if i := strings.LastIndex(ref, ":"); i > strings.LastIndex(ref, "/") {
		return ref[i+1:]
	}
	return "latest"
}

// Two installs in one namespace (the example overlay and a second instance with a name
// suffix): no object of one has the name of the other's, and no selector of one reaches the
// other's pods.
func TestTwoInstallsDoNotCollide(t *testing.T) {
	kubectl := testenv.LookPath(t, "kubectl", "install kubectl, which has kustomize built in")
	a, b := render(t, kubectl, exampleOverlay), render(t, kubectl, secondInstall)
	collide := func(x, y *objects, xn, yn string) {
		names := map[string]bool{}
		for _, m := range x.metas {
			names[m.kind+"/"+m.meta.Namespace+"/"+m.meta.Name] = true
		}
		for _, m := range y.metas {
			if names[m.kind+"/"+m.meta.Namespace+"/"+m.meta.Name] {
				t.Errorf("%s and %s both have %s %s/%s", xn, yn, m.kind, m.meta.Namespace, m.meta.Name)
			}
		}
		for _, s := range x.selectors() {
			for _, d := range y.deployments {
				if s.sel.Matches(labels.Set(d.Spec.Template.Labels)) {
					t.Errorf("%s's %s selects the pods of %s's Deployment %s", xn, s.by, yn, d.Name)
				}
			}
		}
		for _, sm := range x.serviceMonitors {
			sel, _ := metav1.LabelSelectorAsSelector(&sm.Spec.Selector)
			for _, s := range y.services {
				if sel.Matches(labels.Set(s.Labels)) {
					t.Errorf("%s's ServiceMonitor %s selects %s's Service %s", xn, sm.Name, yn, s.Name)
				}
			}
		}
	}
	if a.metas[0].meta.Namespace != b.metas[0].meta.Namespace {
		t.Fatalf("the two installs are in namespaces %q and %q: the test is about one", a.metas[0].meta.Namespace, b.metas[0].meta.Namespace)
	}
	collide(a, b, exampleOverlay, secondInstall)
	collide(b, a, secondInstall, exampleOverlay)
	// The second install's ScaledObjects and references follow its suffixed names.
	for _, so := range b.scaledObjects {
		if !strings.HasSuffix(so.Spec.ScaleTargetRef.Name, "-b") {
			t.Errorf("%s: ScaledObject %s scales %s, not its own install's Deployment", secondInstall, so.Name, so.Spec.ScaleTargetRef.Name)
		}
		for _, tr := range so.Spec.Triggers {
			if tr.AuthenticationRef != nil && !strings.HasSuffix(tr.AuthenticationRef.Name, "-b") {
				t.Errorf("%s: ScaledObject %s uses TriggerAuthentication %s, not its own install's", secondInstall, so.Name, tr.AuthenticationRef.Name)
			}
		}
	}
}

type namedSelector struct {
	by  string
	sel labels.Selector
}

// selectors are the pod selectors of a render: Deployments', PDBs', Services' and the
// topology spread constraints'.
func (o *objects) selectors() []namedSelector {
	var out []namedSelector
	add := func(by string, ls *metav1.LabelSelector) {
		if sel, err := metav1.LabelSelectorAsSelector(ls); err == nil && ls != nil {
			out = append(out, namedSelector{by, sel})
		}
	}
	for _, d := range o.deployments {
		add("Deployment "+d.Name, d.Spec.Selector)
		for _, tsc := range d.Spec.Template.Spec.TopologySpreadConstraints {
			add("Deployment "+d.Name+" topology spread", tsc.LabelSelector)
		}
	}
	for _, p := range o.pdbs {
		add("PodDisruptionBudget "+p.Name, p.Spec.Selector)
	}
	for _, np := range o.netpols {
		add("NetworkPolicy "+np.Name, &np.Spec.PodSelector)
	}
	for _, s := range o.services {
		out = append(out, namedSelector{"Service " + s.Name, labels.SelectorFromSet(s.Spec.Selector)})
	}
	return out
}

// checkNetworkPolicy: one ingress policy selects every pod of this install, and of no other
// (an empty selector would restrict every pod of a shared namespace), and admits only each
// container's HTTP port, the one its probes, metrics and API are served on.
func checkNetworkPolicy(t *testing.T, o *objects) {
	t.Helper()
	if len(o.netpols) != 1 {
		t.Errorf("%d NetworkPolicies, want 1", len(o.netpols))
		return
	}
	np := o.netpols[0]
	if len(np.Spec.PodSelector.MatchLabels) == 0 && len(np.Spec.PodSelector.MatchExpressions) == 0 {
		t.Errorf("NetworkPolicy %s selects every pod of the namespace", np.Name)
	}
	sel, err := metav1.LabelSelectorAsSelector(&np.Spec.PodSelector)
	if err != nil {
		t.Errorf("NetworkPolicy %s: %v", np.Name, err)
		return
	}
	for _, d := range o.deployments {
		if !sel.Matches(labels.Set(d.Spec.Template.Labels)) {
			t.Errorf("NetworkPolicy %s does not select the pods of Deployment %s", np.Name, d.Name)
		}
	}
	if !slices.Equal(np.Spec.PolicyTypes, []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}) {
		t.Errorf("NetworkPolicy %s: policy types %v, want Ingress only (egress is the install's to restrict)", np.Name, np.Spec.PolicyTypes)
	}
	if len(np.Spec.Ingress) != 1 || len(np.Spec.Ingress[0].Ports) != 1 || len(np.Spec.Ingress[0].From) != 0 {
		t.Errorf("NetworkPolicy %s: ingress %+v, want one rule admitting one port", np.Name, np.Spec.Ingress)
		return
	}
	port := np.Spec.Ingress[0].Ports[0].Port
	for _, d := range o.deployments {
		for _, c := range d.Spec.Template.Spec.Containers {
			if port == nil {
				t.Errorf("NetworkPolicy %s admits every port", np.Name)
				return
			}
			if _, err := containerPort(c, *port); err != nil {
				t.Errorf("NetworkPolicy %s admits port %s, which container %s of %s does not name: %v", np.Name, port.String(), c.Name, d.Name, err)
			}
		}
	}
}
