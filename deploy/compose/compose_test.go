// Package compose holds the files docker-compose.yml (the repository's root) mounts into its
// containers, and the tests that load that file the way docker compose does (compose-go)
// and check what a broken stack would get wrong: start order, healthchecks, image tags, the
// app processes' settings, the namespace retention, the codec wiring and the RabbitMQ policy.
package compose

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/compose-spec/compose-go/v2/loader"
	"github.com/compose-spec/compose-go/v2/types"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"gopkg.in/yaml.v3"

	"github.com/retry-scheduler/retry-scheduler/internal/broker"
	"github.com/retry-scheduler/retry-scheduler/internal/config"
	"github.com/retry-scheduler/retry-scheduler/internal/devserver"
)

// root is the repository's root, where docker-compose.yml lives and relative mounts resolve.
var root = filepath.Join("..", "..")

// load loads docker-compose.yml with env as the only environment, so that ${VAR:-default}
// interpolates the same on every machine.
func load(t *testing.T, env map[string]string) *types.Project {
	t.Helper()
	dir, err := filepath.Abs(root)
	require.NoError(t, err)
	p, err := loader.LoadWithContext(t.Context(), types.ConfigDetails{
		WorkingDir:  dir,
		ConfigFiles: []types.ConfigFile{{Filename: filepath.Join(dir, "docker-compose.yml")}},
		Environment: types.Mapping(env),
	})
	require.NoError(t, err, "docker-compose.yml does not load")
	return p
}

// stack is the loaded project with its services found by what they are, not by name.
type stack struct {
	p             *types.Project
	apps          []types.ServiceConfig // built from the repository's Dockerfile
	schemaJob     types.ServiceConfig   // runs temporal-sql-tool
	namespaceJob  types.ServiceConfig   // creates the namespace
	postgres      types.ServiceConfig
	temporal      types.ServiceConfig
	rabbitmq      types.ServiceConfig
	ui            types.ServiceConfig
	appEnv        map[string]config.Config // each app's configuration, by service name
	opsName       string                   // the app whose HTTP port is published
	uiOrigin      string                   // the Web UI as the browser reaches it
	opsOriginPort string
}

func newStack(t *testing.T, env map[string]string) stack {
	t.Helper()
	s := stack{p: load(t, env), appEnv: map[string]config.Config{}}
	one := func(what string, match func(types.ServiceConfig) bool) types.ServiceConfig {
		var found []types.ServiceConfig
		for _, svc := range s.p.Services {
			if match(svc) {
				found = append(found, svc)
			}
		}
		require.Len(t, found, 1, "docker-compose.yml: want exactly one %s service", what)
		return found[0]
	}
	command := func(svc types.ServiceConfig) string { return strings.Join(svc.Command, " ") }
	s.schemaJob = one("schema job (temporal-sql-tool)", func(svc types.ServiceConfig) bool {
		return strings.Contains(command(svc), "temporal-sql-tool")
	})
	s.namespaceJob = one("namespace job (temporal operator namespace create)", func(svc types.ServiceConfig) bool {
		return strings.Contains(command(svc), "operator namespace create")
	})
	s.postgres = one("postgres", func(svc types.ServiceConfig) bool { return repository(svc.Image) == "postgres" })
	s.temporal = one("temporalio/server", func(svc types.ServiceConfig) bool { return repository(svc.Image) == "temporalio/server" })
	s.rabbitmq = one("rabbitmq", func(svc types.ServiceConfig) bool { return repository(svc.Image) == "rabbitmq" })
	s.ui = one("temporalio/ui", func(svc types.ServiceConfig) bool { return repository(svc.Image) == "temporalio/ui" })
	for _, name := range s.p.ServiceNames() {
		if svc := s.p.Services[name]; svc.Build != nil {
			s.apps = append(s.apps, svc)
		}
	}
	require.NotEmpty(t, s.apps, "docker-compose.yml: no service built from the Dockerfile")

	for _, svc := range s.apps {
		cfg, err := config.Load(svc.Command, lookup(svc.Environment))
		require.NoError(t, err, "service %s: its environment and command do not load as the binary's configuration", svc.Name)
		s.appEnv[svc.Name] = cfg
		for _, port := range svc.Ports {
			if int(port.Target) == cfg.HTTPPort {
				require.Empty(t, s.opsName, "two app services publish their HTTP port: %s and %s", s.opsName, svc.Name)
				s.opsName, s.opsOriginPort = svc.Name, port.Published
			}
		}
	}
	require.NotEmpty(t, s.opsName, "no app service publishes its HTTP_PORT (the ops API, page and codec endpoint)")
	require.Len(t, s.ui.Ports, 1, "the Web UI publishes one port")
	s.uiOrigin = "http://localhost:" + s.ui.Ports[0].Published
	return s
}

// lookup is a config lookup over a service's environment; an entry without a value (passed
// through from the host) counts as unset, as it would be in the test's empty environment.
func lookup(env types.MappingWithEquals) func(string) (string, bool) {
	return func(name string) (string, bool) {
		v, ok := env[name]
		if !ok || v == nil {
			return "", false
		}
		return *v, true
	}
}

func envValue(svc types.ServiceConfig, name string) string {
	if v := svc.Environment[name]; v != nil {
		return *v
	}
	return ""
}

// repository is an image reference without its tag or digest.
func repository(image string) string {
	image, _, _ = strings.Cut(image, "@")
	if i := strings.LastIndex(image, ":"); i > strings.LastIndex(image, "/") {
		return image[:i]
	}
	return image
}

// tag is an image reference's tag ("" without one).
func tag(image string) string {
	image, _, _ = strings.Cut(image, "@")
	if i := strings.LastIndex(image, ":"); i > strings.LastIndex(image, "/") {
		return image[i+1:]
	}
	return ""
}

// exactParts is how many numeric parts a tag's version needs to name one release. Most
// images here version major.minor.patch, so 4.1 or 16 would float to whatever is newest;
// PostgreSQL versions major.minor since 10, so 16.10 is one release. A suffix may follow
// the version (-management, -tctl-1.18.4-cli-1.5.0); a digest pins any tag.
var exactParts = map[string]int{"postgres": 2}

var versionPrefix = regexp.MustCompile(`^v?(\d+(?:\.\d+)*)(?:$|-)`)

func exactTag(image string) bool {
	if strings.Contains(image, "@sha256:") {
		return true
	}
	m := versionPrefix.FindStringSubmatch(tag(image))
	if m == nil {
		return false
	}
	want, ok := exactParts[repository(image)]
	if !ok {
		want = 3
	}
	return len(strings.Split(m[1], ".")) >= want
}

func TestExactTag(t *testing.T) {
	for image, want := range map[string]bool{
		"temporalio/server:1.29.1":                            true,
		"temporalio/admin-tools:1.29.1-tctl-1.18.4-cli-1.5.0": true,
		"rabbitmq:4.1.4-management":                           true,
		"postgres:16.10":                                      true,
		"registry:5000/team/app:2.3.4":                        true,
		"postgres:16":                                         false,
		"rabbitmq:4.1-management":                             false,
		"temporalio/admin-tools:1.29":                         false,
		"temporalio/ui:latest":                                false,
		"temporalio/ui":                                       false,
		"registry:5000/team/app":                              false,
		"rabbitmq:management":                                 false,
		"rabbitmq@sha256:0123":                                true,
	} {
		assert.Equal(t, want, exactTag(image), image)
	}
}

func TestComposeImages(t *testing.T) {
	s := newStack(t, nil)
	for _, name := range s.p.ServiceNames() {
		svc := s.p.Services[name]
		assert.NotContains(t, svc.Image, "auto-setup", "service %s: temporalio/auto-setup is deprecated and no longer built", name)
		if svc.Build != nil {
			// A local build: its tag names the build, not a release.
			assert.NotEmpty(t, tag(svc.Image), "service %s: name the built image with a tag", name)
			assert.NotEqual(t, "latest", tag(svc.Image), "service %s", name)
			continue
		}
		assert.True(t, exactTag(svc.Image), "service %s: image %q is not pinned to one release", name, svc.Image)
	}

	// The server is the release the tests run against, and the schema job's admin-tools
	// carries that release's schema.
	server := strings.TrimPrefix(devserver.ServerVersion, "v")
	assert.Equal(t, server, tag(s.temporal.Image), "temporalio/server is not devserver.ServerVersion")
	for _, job := range []types.ServiceConfig{s.schemaJob, s.namespaceJob} {
		assert.Equal(t, "temporalio/admin-tools", repository(job.Image), "service %s", job.Name)
		v := tag(job.Image)
		assert.True(t, v == server || strings.HasPrefix(v, server+"-"), "service %s: admin-tools %q is not the server's release %s", job.Name, v, server)
	}
}

func TestComposePortsOnLoopback(t *testing.T) {
	s := newStack(t, nil)
	for _, name := range s.p.ServiceNames() {
		for _, port := range s.p.Services[name].Ports {
			assert.Equal(t, "127.0.0.1", port.HostIP, "service %s publishes %s beyond this machine: nothing here authenticates Temporal, and guest/guest is a placeholder", name, port.Published)
		}
	}
}

func TestComposeAppEnvironment(t *testing.T) {
	s := newStack(t, nil)
	for _, svc := range s.apps {
		for name := range svc.Environment {
			assert.True(t, config.KnownEnv(name), "service %s: the binary does not read %s (misspelt or removed setting?)", svc.Name, name)
		}
		cfg := s.appEnv[svc.Name]
		assert.Equal(t, broker.QueueTypeQuorum, cfg.QueueType, "service %s: QUEUE_TYPE", svc.Name)
		assert.Equal(t, "temporal:7233", cfg.TemporalAddress, "service %s: TEMPORAL_ADDRESS", svc.Name)
	}

	// One depth poller in the deployment: on the ops service, which is not scaled.
	var pollers []string
	for _, svc := range s.apps {
		if s.appEnv[svc.Name].RunsDepthPoller() {
			pollers = append(pollers, svc.Name)
		}
	}
	assert.Equal(t, []string{s.opsName}, pollers, "services running the depth poller")
	ops := s.p.Services[s.opsName]
	assert.True(t, ops.Deploy == nil || ops.Deploy.Replicas == nil || *ops.Deploy.Replicas <= 1, "the ops service runs the depth poller: one replica")
}

func TestComposeAppSecretsFromTheEnvironment(t *testing.T) {
	// Placeholders of the right shape, not keys of any deployment.
	keys := "k1=" + base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{7}, 32))
	token := "placeholder-codec-token"
	s := newStack(t, map[string]string{"PAYLOAD_KEYS": keys, "CODEC_TOKEN": token, "API_TOKENS": "ops:admin=placeholder-api-token"})
	for _, svc := range s.apps {
		cfg := s.appEnv[svc.Name]
		// Every process encodes or decodes payloads: each needs the keys.
		assert.Equal(t, keys, cfg.PayloadKeys.Reveal(), "service %s: PAYLOAD_KEYS does not reach it", svc.Name)
		assert.NotEmpty(t, cfg.APITokens, "service %s: API_TOKENS does not reach it", svc.Name)
	}
	assert.Equal(t, token, s.appEnv[s.opsName].CodecToken.Reveal(), "the ops service serves the codec endpoint: CODEC_TOKEN")
}

// deps is a service's depends_on: condition by service name.
func deps(svc types.ServiceConfig) map[string]string {
	out := map[string]string{}
	for name, d := range svc.DependsOn {
		out[name] = d.Condition
	}
	return out
}

func TestComposeStartOrder(t *testing.T) {
	s := newStack(t, nil)
	for _, svc := range s.apps {
		d := deps(svc)
		assert.Equal(t, types.ServiceConditionHealthy, d[s.rabbitmq.Name], "service %s on rabbitmq", svc.Name)
		assert.Equal(t, types.ServiceConditionCompletedSuccessfully, d[s.namespaceJob.Name], "service %s on the namespace job", svc.Name)
	}
	assert.Equal(t, types.ServiceConditionHealthy, deps(s.namespaceJob)[s.temporal.Name], "namespace job on temporal")
	assert.Equal(t, types.ServiceConditionCompletedSuccessfully, deps(s.temporal)[s.schemaJob.Name], "temporal on the schema job")
	assert.Equal(t, types.ServiceConditionHealthy, deps(s.schemaJob)[s.postgres.Name], "schema job on postgresql")
	assert.Equal(t, types.ServiceConditionHealthy, deps(s.ui)[s.temporal.Name], "the Web UI on temporal")

	// A condition must be one the target can meet: healthy needs a healthcheck, completed
	// needs a job that is not restarted after it exits.
	for _, name := range s.p.ServiceNames() {
		for dep, cond := range deps(s.p.Services[name]) {
			target, ok := s.p.Services[dep]
			require.True(t, ok, "service %s depends on %s, which does not exist", name, dep)
			switch cond {
			case types.ServiceConditionHealthy:
				assert.True(t, hasHealthcheck(target), "service %s waits for %s to be healthy, which has no healthcheck", name, dep)
			case types.ServiceConditionCompletedSuccessfully:
				assert.Contains(t, []string{"", "no"}, target.Restart, "service %s waits for %s to complete, which is restarted", name, dep)
			}
		}
	}
	assert.NoError(t, acyclic(s.p))
}

// acyclic reports a dependency cycle, naming it.
func acyclic(p *types.Project) error {
	const (
		visiting = 1
		done     = 2
	)
	state := map[string]int{}
	var visit func(name string, path []string) error
	visit = func(name string, path []string) error {
		switch state[name] {
		case visiting:
			return fmt.Errorf("dependency cycle: %s", strings.Join(append(path, name), " -> "))
		case done:
			return nil
		}
		state[name] = visiting
		for _, dep := range slices.Sorted(func(yield func(string) bool) {
			for d := range p.Services[name].DependsOn {
				if !yield(d) {
					return
				}
			}
		}) {
			if err := visit(dep, append(path, name)); err != nil {
				return err
			}
		}
		state[name] = done
		return nil
	}
	for _, name := range p.ServiceNames() {
		if err := visit(name, nil); err != nil {
			return err
		}
	}
	return nil
}

func TestAcyclicFindsACycle(t *testing.T) {
	svc := func(name, dep string) types.ServiceConfig {
		s := types.ServiceConfig{Name: name}
		s.DependsOn = types.DependsOnConfig{dep: {Condition: types.ServiceConditionStarted}}
		return s
	}
	p := &types.Project{Services: types.Services{"a": svc("a", "b"), "b": svc("b", "c"), "c": svc("c", "a")}}
	err := acyclic(p)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "a -> b -> c -> a")
	delete(p.Services["c"].DependsOn, "a")
	assert.NoError(t, acyclic(p))
}

func hasHealthcheck(svc types.ServiceConfig) bool {
	h := svc.HealthCheck
	return h != nil && !h.Disable && len(h.Test) > 0 && h.Test[0] != "NONE"
}

func TestComposeHealthchecks(t *testing.T) {
	s := newStack(t, nil)
	for _, svc := range []types.ServiceConfig{s.postgres, s.temporal, s.rabbitmq} {
		assert.True(t, hasHealthcheck(svc), "service %s has no healthcheck", svc.Name)
	}
}

var retentionFlag = regexp.MustCompile(`--retention[ =](\S+)`)

func TestComposeNamespaceRetention(t *testing.T) {
	s := newStack(t, nil)
	script := strings.Join(s.namespaceJob.Command, " ")
	found := retentionFlag.FindAllStringSubmatch(script, -1)
	require.NotEmpty(t, found, "the namespace job sets no --retention: the server's default would delete closed runs, the audit trail, within days")
	for _, m := range found {
		retention, err := config.ParseDuration(m[1])
		require.NoError(t, err, "--retention %s", m[1])
		for _, svc := range s.apps {
			assert.GreaterOrEqual(t, retention, s.appEnv[svc.Name].Retention,
				"namespace retention %s is shorter than service %s's DEAD_LETTER_RETENTION", m[1], svc.Name)
		}
	}
}

func TestComposeStopGracePeriod(t *testing.T) {
	s := newStack(t, nil)
	for _, svc := range s.apps {
		require.NotNil(t, svc.StopGracePeriod, "service %s: no stop_grace_period (docker's default is 10s)", svc.Name)
		grace := time.Duration(*svc.StopGracePeriod)
		assert.Greater(t, grace, s.appEnv[svc.Name].WorkerStopTimeout+5*time.Second,
			"service %s: stop_grace_period %s leaves no room after WORKER_STOP_TIMEOUT for an in-flight publish", svc.Name, grace)
	}
}

func TestComposeCodecWiring(t *testing.T) {
	s := newStack(t, nil)
	assert.Equal(t, "http://localhost:"+s.opsOriginPort+"/codec", envValue(s.ui, "TEMPORAL_CODEC_ENDPOINT"),
		"the Web UI's codec endpoint is the ops service's published port, as the browser reaches it")
	// The endpoint authenticates a browser by the cookie of its login page.
	assert.Equal(t, "true", envValue(s.ui, "TEMPORAL_CODEC_INCLUDE_CREDENTIALS"))
	assert.Contains(t, strings.Split(envValue(s.ui, "TEMPORAL_CORS_ORIGINS"), ","), s.uiOrigin, "the Web UI's own origin")
	assert.Contains(t, s.appEnv[s.opsName].CodecOrigins(), s.uiOrigin, "the ops service's CODEC_CORS_ORIGINS must allow the Web UI")
	assert.Equal(t, s.uiOrigin, s.appEnv[s.opsName].TemporalUIURL, "the ops page links workflows to the Web UI")
}

// mounts are a service's bind mounts of files in the repository, by target.
func mounts(t *testing.T, svc types.ServiceConfig) map[string]string {
	t.Helper()
	dir, err := filepath.Abs(root)
	require.NoError(t, err)
	out := map[string]string{}
	for _, v := range svc.Volumes {
		if v.Type != types.VolumeTypeBind {
			continue
		}
		rel, err := filepath.Rel(dir, v.Source)
		require.NoError(t, err)
		if !strings.HasPrefix(rel, "..") {
			out[v.Target] = v.Source
		}
	}
	return out
}

func TestComposeMountedFilesExist(t *testing.T) {
	s := newStack(t, nil)
	n := 0
	for _, name := range s.p.ServiceNames() {
		for target, source := range mounts(t, s.p.Services[name]) {
			n++
			st, err := os.Stat(source)
			if assert.NoError(t, err, "service %s mounts %s at %s", name, source, target) {
				assert.True(t, st.Mode().IsRegular(), "service %s mounts %s, not a file", name, source)
			}
		}
	}
	assert.Positive(t, n, "no service mounts a file of deploy/compose")
}

func TestComposeTemporalDynamicConfig(t *testing.T) {
	s := newStack(t, nil)
	path := envValue(s.temporal, "DYNAMIC_CONFIG_FILE_PATH")
	require.NotEmpty(t, path, "temporal: DYNAMIC_CONFIG_FILE_PATH")
	source, ok := mounts(t, s.temporal)[path]
	require.True(t, ok, "temporal: nothing is mounted at DYNAMIC_CONFIG_FILE_PATH %s", path)
	b, err := os.ReadFile(source)
	require.NoError(t, err)
	var dc map[string][]struct {
		Value       any            `yaml:"value"`
		Constraints map[string]any `yaml:"constraints"`
	}
	require.NoError(t, yaml.Unmarshal(b, &dc), source)
	// What the tests' Temporal on PostgreSQL runs with, this server runs with too.
	for _, kv := range devserver.PostgresDynamicConfig {
		key, want, _ := strings.Cut(kv, "=")
		values := dc[key]
		if assert.Len(t, values, 1, "%s: %s", source, key) {
			assert.Equal(t, want, fmt.Sprint(values[0].Value), "%s: %s", source, key)
			assert.Empty(t, values[0].Constraints, "%s: %s applies everywhere", source, key)
		}
	}
}

// definitions is the part of a RabbitMQ definitions file checked here.
type definitions struct {
	Users []struct {
		Name         string `json:"name"`
		PasswordHash string `json:"password_hash"`
		Algorithm    string `json:"hashing_algorithm"`
	} `json:"users"`
	Vhosts      []vhost      `json:"vhosts"`
	Permissions []permission `json:"permissions"`
	Policies    []struct {
		Vhost      string         `json:"vhost"`
		Name       string         `json:"name"`
		Pattern    string         `json:"pattern"`
		ApplyTo    string         `json:"apply-to"`
		Definition map[string]any `json:"definition"`
	} `json:"policies"`
}

type vhost struct {
	Name string `json:"name"`
}

type permission struct {
	User      string `json:"user"`
	Vhost     string `json:"vhost"`
	Configure string `json:"configure"`
	Write     string `json:"write"`
	Read      string `json:"read"`
}

// vhostOf is an AMQP URL's virtual host: its path without the leading slash, "/" when empty.
func vhostOf(u *url.URL) string {
	if v := strings.TrimPrefix(u.Path, "/"); v != "" {
		return v
	}
	return "/"
}

// rabbitDefinitions reads the definitions file the broker imports at boot: the one its
// mounted configuration names, mounted from the repository.
func rabbitDefinitions(t *testing.T, s stack) definitions {
	t.Helper()
	m := mounts(t, s.rabbitmq)
	var path string
	for target, source := range m {
		if !strings.HasPrefix(target, "/etc/rabbitmq/conf.d/") {
			continue
		}
		f, err := os.Open(source)
		require.NoError(t, err)
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			k, v, ok := strings.Cut(sc.Text(), "=")
			if k = strings.TrimSpace(k); ok && (k == "load_definitions" || k == "definitions.local.path") {
				path = strings.TrimSpace(v)
			}
		}
		require.NoError(t, sc.Err())
		require.NoError(t, f.Close())
	}
	require.NotEmpty(t, path, "rabbitmq: no mounted conf.d file loads definitions")
	source, ok := m[path]
	require.True(t, ok, "rabbitmq: the definitions file %s is not mounted", path)
	b, err := os.ReadFile(source)
	require.NoError(t, err)
	var d definitions
	require.NoError(t, json.Unmarshal(b, &d), source)
	return d
}

func TestComposeRabbitMQIngressPolicy(t *testing.T) {
	s := newStack(t, nil)
	d := rabbitDefinitions(t, s)
	for _, svc := range s.apps {
		cfg := s.appEnv[svc.Name]
		u, err := url.Parse(cfg.RabbitMQURL)
		require.NoError(t, err)
		vh := vhostOf(u)
		var matched int
		for _, p := range d.Policies {
			re, err := regexp.Compile(p.Pattern)
			require.NoError(t, err, "policy %s", p.Name)
			if p.Vhost != vh || !slices.Contains([]string{"queues", "quorum_queues", "all"}, p.ApplyTo) {
				continue
			}
			// A dead-letter queue that dead-lettered into itself would loop.
			assert.False(t, re.MatchString(cfg.ManualReviewQueue), "policy %s applies to the dead-letter queue %s", p.Name, cfg.ManualReviewQueue)
			if !re.MatchString(cfg.RetryQueue) {
				continue
			}
			matched++
			assert.Contains(t, p.Definition, "delivery-limit", "policy %s", p.Name)
			assert.Contains(t, p.Definition, "dead-letter-exchange", "policy %s", p.Name)
			// A policy fills in what the queue's arguments leave out (a queue declared before
			// the service, which it then accepts as it is): it must say what the service would
			// have declared.
			args := broker.IngressArgs(broker.Config{QueueType: broker.QueueTypeQuorum}, cfg.ManualReviewQueue)
			for k, v := range p.Definition {
				arg, ok := args["x-"+k]
				if assert.True(t, ok, "policy %s sets %s, which the service does not declare on %s", p.Name, k, cfg.RetryQueue) {
					assert.Equal(t, fmt.Sprint(arg), fmt.Sprint(v), "policy %s: %s", p.Name, k)
				}
			}
		}
		assert.Equal(t, 1, matched, "service %s: policies for its ingress queue %q in vhost %q", svc.Name, cfg.RetryQueue, vh)
	}
}

func TestComposeRabbitMQUser(t *testing.T) {
	// A boot-time import skips the broker's default user: the definitions must hold the
	// one the apps connect as, with the password their URL carries.
	s := newStack(t, nil)
	d := rabbitDefinitions(t, s)
	for _, svc := range s.apps {
		u, err := url.Parse(s.appEnv[svc.Name].RabbitMQURL)
		require.NoError(t, err)
		pass, _ := u.User.Password()
		vh := vhostOf(u)
		var user bool
		for _, du := range d.Users {
			if du.Name == u.User.Username() {
				user = true
				assert.Equal(t, "rabbit_password_hashing_sha256", du.Algorithm)
				assert.True(t, passwordMatches(t, du.PasswordHash, pass), "service %s: the password of %s in RABBITMQ_URL does not match definitions.json", svc.Name, du.Name)
			}
		}
		assert.True(t, user, "service %s: user %s is not in definitions.json", svc.Name, u.User.Username())
		assert.True(t, slices.ContainsFunc(d.Vhosts, func(v vhost) bool { return v.Name == vh }), "vhost %s is not in definitions.json", vh)
		assert.True(t, slices.ContainsFunc(d.Permissions, func(p permission) bool {
			return p.User == u.User.Username() && p.Vhost == vh && p.Configure == ".*" && p.Write == ".*" && p.Read == ".*"
		}), "service %s: %s has no full permissions on vhost %s (the service declares queues, publishes and consumes)", svc.Name, u.User.Username(), vh)
	}
}

// passwordMatches checks a RabbitMQ SHA-256 password hash: base64 of a 4-byte salt followed
// by SHA-256(salt ‖ password).
func passwordMatches(t *testing.T, hash, password string) bool {
	t.Helper()
	b, err := base64.StdEncoding.DecodeString(hash)
	require.NoError(t, err)
	require.Len(t, b, 4+sha256.Size, "password hash")
	sum := sha256.Sum256(append(slices.Clone(b[:4]), password...))
	return bytes.Equal(sum[:], b[4:])
}

func TestPasswordMatches(t *testing.T) {
	salt := []byte{1, 2, 3, 4}
	sum := sha256.Sum256(append(slices.Clone(salt), "secret"...))
	hash := base64.StdEncoding.EncodeToString(append(salt, sum[:]...))
	assert.True(t, passwordMatches(t, hash, "secret"))
	assert.False(t, passwordMatches(t, hash, "guest"))
}
