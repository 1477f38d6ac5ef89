package devserver

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	mathrand "math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"text/template"
	"time"

	"github.com/retry-scheduler/retry-scheduler/internal/freeport"
	"github.com/retry-scheduler/retry-scheduler/internal/proc"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/operatorservice/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"google.golang.org/protobuf/types/known/durationpb"
	"gopkg.in/yaml.v3"
)

// ServerVersion is the Temporal server EnginePostgres runs: the version the Temporal
// CLI v1.5.1's dev server embeds. `make temporal-server` installs it (the Makefile's
// TEMPORAL_SERVER_VERSION; a unit test keeps the two in step).
const ServerVersion = "v1.29.1"

// EnginePostgres's settings.
const (
	// PostgresReadyTimeout is how long Start waits for EnginePostgres's frontend, the
	// namespace and the search attributes (a cold start of the four services on a loaded
	// 2-core machine takes 10-20 s).
	PostgresReadyTimeout = 2 * time.Minute
	// SchemaTimeout bounds creating or upgrading the two databases.
	SchemaTimeout = 3 * time.Minute
	// DefaultRetention is the retention of a namespace EnginePostgres registers: the
	// service's DEAD_LETTER_RETENTION default, so a parked workflow outlives its wait.
	DefaultRetention = 720 * time.Hour
	// PostgresHistoryShards is the history shard count of the databases EnginePostgres
	// creates, as in the Temporal server's own development-postgres12.yaml. It is fixed
	// when a database is first used: a database created with another count does not start.
	PostgresHistoryShards = 4

	// DefaultPostgresHost, DefaultPostgresPort and DefaultPostgresUser are the local
	// PostgreSQL (trust authentication).
	DefaultPostgresHost = "127.0.0.1"
	DefaultPostgresPort = 5432
	DefaultPostgresUser = "postgres"
)

// The environment variables that choose the engine of StartForTest and StartOwnedForTest
// and its PostgreSQL (read by PostgresFromEnv, in tests and in the commands' main).
const (
	// EnvEngine is "dev" (the default) or "postgres".
	EnvEngine = "TEMPORAL_ENGINE"
	// EnvPostgresHost, EnvPostgresPort, EnvPostgresUser and EnvPostgresPassword say
	// where EnginePostgres's PostgreSQL is (defaults: 127.0.0.1, 5432, postgres, none).
	EnvPostgresHost     = "TEMPORAL_POSTGRES_HOST"
	EnvPostgresPort     = "TEMPORAL_POSTGRES_PORT"
	EnvPostgresUser     = "TEMPORAL_POSTGRES_USER"
	EnvPostgresPassword = "TEMPORAL_POSTGRES_PASSWORD"
	// EnvServerDir is where `make temporal-server` installed bin/server and bin/sql.
	EnvServerDir = "TEMPORAL_SERVER_DIR"
)

// ErrEngineUnavailable wraps a start that failed for want of what the engine needs on
// this machine (the server binaries, a PostgreSQL answering), not because the server
// misbehaved. Tests skip on it outside CI.
var ErrEngineUnavailable = errors.New("devserver: the engine is not available here")

// PostgresOptions says where EnginePostgres keeps its data. The zero value is the local
// PostgreSQL with a temporary pair of databases.
type PostgresOptions struct {
	// Host is PostgreSQL's host. Defaults to DefaultPostgresHost.
	Host string
	// Port is PostgreSQL's port. Defaults to DefaultPostgresPort.
	Port int
	// User is the PostgreSQL role; it must be able to create databases. Defaults to
	// DefaultPostgresUser.
	User string
	// Password is the role's password; "" for trust authentication. It reaches the server
	// and the schema tool through their environment only: never a command line, a file
	// or a log.
	Password string
	// Database is the main store, created when missing and its schema upgraded in place at
	// every start. Defaults to a new temporary database that Stop drops (with its
	// visibility database).
	Database string
	// VisibilityDatabase is the SQL visibility store. Defaults to Database+"_visibility".
	VisibilityDatabase string
	// Dir holds bin/server and bin/sql (cmd/server and cmd/tools/sql of ServerVersion).
	// Defaults to DefaultServerDir().
	Dir string
	// MetricsAddress, host:port, is where the server serves its Prometheus /metrics
	// (global.metrics.prometheus.listenAddress), as start-dev's --metrics-port does for the
	// dev server. "" serves none.
	MetricsAddress string
	// HistoryShards is the history shard count of new databases. Defaults to
	// PostgresHistoryShards. Databases keep the count they were created with: a server
	// given another one does not start on them.
	HistoryShards int
}

// LogValue leaves the password out of logs.
func (p PostgresOptions) LogValue() slog.Value {
	return slog.GroupValue(
		slog.String("host", p.Host), slog.Int("port", p.Port), slog.String("user", p.User),
		slog.Bool("password_set", p.Password != ""),
		slog.String("database", p.Database), slog.String("visibility_database", p.VisibilityDatabase),
	)
}

// String leaves the password out, so that %v and %+v cannot print it.
func (p PostgresOptions) String() string {
	pw := ""
	if p.Password != "" {
		pw = " password=(set)"
	}
	return fmt.Sprintf("postgres://%s@%s/%s (visibility %s)%s", p.User, p.addr(), p.Database, p.VisibilityDatabase, pw)
}

func (p PostgresOptions) addr() string {
	return net.JoinHostPort(p.Host, strconv.Itoa(p.Port))
}

// PostgresFromEnv reads EnvPostgresHost, EnvPostgresPort, EnvPostgresUser and
// EnvPostgresPassword through getenv (os.Getenv in a main or a test); unset ones keep the
// defaults.
func PostgresFromEnv(getenv func(string) string) (PostgresOptions, error) {
	p := PostgresOptions{
		Host:     getenv(EnvPostgresHost),
		User:     getenv(EnvPostgresUser),
		Password: getenv(EnvPostgresPassword),
	}
	if v := getenv(EnvPostgresPort); v != "" {
		port, err := strconv.Atoi(v)
		if err != nil || port <= 0 || port > 65535 {
			return p, fmt.Errorf("devserver: %s=%q is not a port", EnvPostgresPort, v)
		}
		p.Port = port
	}
	return p.withDefaults(), nil
}

func (p PostgresOptions) withDefaults() PostgresOptions {
	if p.Host == "" {
		p.Host = DefaultPostgresHost
	}
	if p.Port == 0 {
		p.Port = DefaultPostgresPort
	}
	if p.User == "" {
		p.User = DefaultPostgresUser
	}
	if p.Database != "" && p.VisibilityDatabase == "" {
		p.VisibilityDatabase = p.Database + "_visibility"
	}
	if p.Dir == "" {
		p.Dir = DefaultServerDir()
	}
	if p.HistoryShards == 0 {
		p.HistoryShards = PostgresHistoryShards
	}
	return p
}

// databaseName is what the schema tool's unquoted DROP DATABASE and the server accept.
var databaseName = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,62}$`)

func (p PostgresOptions) validate() error {
	var errs []error
	if p.Host == "" || strings.ContainsAny(p.Host, " /\n") {
		errs = append(errs, fmt.Errorf("PostgreSQL host %q", p.Host))
	}
	if p.Port <= 0 || p.Port > 65535 {
		errs = append(errs, fmt.Errorf("PostgreSQL port %d out of range", p.Port))
	}
	if p.User == "" {
		errs = append(errs, errors.New("no PostgreSQL user"))
	}
	if p.Database != "" || p.VisibilityDatabase != "" {
		for _, db := range []string{p.Database, p.VisibilityDatabase} {
			if !databaseName.MatchString(db) {
				errs = append(errs, fmt.Errorf("database name %q (want lower-case letters, digits and _, at most 63)", db))
			}
		}
		if p.Database == p.VisibilityDatabase {
			errs = append(errs, fmt.Errorf("the visibility database must differ from the main one (%s)", p.Database))
		}
	}
	if p.HistoryShards < 0 {
		errs = append(errs, fmt.Errorf("history shards %d (want at least 1, or 0 for the default)", p.HistoryShards))
	}
	if p.MetricsAddress != "" {
		if _, port, err := net.SplitHostPort(p.MetricsAddress); err != nil || port == "" {
			errs = append(errs, fmt.Errorf("metrics address %q (want host:port)", p.MetricsAddress))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("devserver: %w", err)
	}
	return nil
}

// DefaultServerDir is where EnginePostgres looks for bin/server and bin/sql:
// $TEMPORAL_SERVER_DIR, else $XDG_CACHE_HOME (or ~/.cache) +
// /retry-scheduler/temporal-server-ServerVersion (where `make temporal-server` installs
// them).
func DefaultServerDir() string {
	if d := os.Getenv(EnvServerDir); d != "" {
		return d
	}
	return filepath.Join(cacheDir(), "temporal-server-"+ServerVersion)
}

// PostgresDynamicConfig is what EnginePostgres is started with beyond DynamicConfig:
//   - IDs of at most 255 bytes, the width of the schema's workflow_id and Keyword columns,
//     so that a longer one is refused with InvalidArgument rather than failing in the
//     database (the Temporal server's own development-sql.yaml does the same).
var PostgresDynamicConfig = []string{
	"limit.maxIDLength=255",
}

// pgState is what EnginePostgres keeps between starts.
type pgState struct {
	pg        PostgresOptions // resolved
	temporary bool            // the databases were made for this server; Stop drops them
	touched   bool            // the schema tool has run on them (there may be something to drop)
	dir       string          // the config directory (the server's temporary directory)
	serverBin string
	sqlBin    string
	ports     pgPorts
	retention time.Duration
	dynamic   []string // key=value, later ones win
}

// pgPorts are the gRPC and membership ports of the four services.
type pgPorts struct {
	Frontend, FrontendMembership int
	History, HistoryMembership   int
	Matching, MatchingMembership int
	Worker, WorkerMembership     int
}

const (
	pgConfigEnv   = "postgres"                 // --env: the config file is postgres.yaml
	pgDynamicFile = "dynamicconfig.yaml"       // in the config directory
	pgTempFile    = "temporary-databases.json" // in the temporary directory: what a sweep drops
)

func (s *Server) resolvePostgres(o Options) error {
	pg := o.Postgres.withDefaults()
	if err := pg.validate(); err != nil {
		return err
	}
	st := &pgState{
		pg:        pg,
		serverBin: filepath.Join(pg.Dir, "bin", "server"),
		sqlBin:    filepath.Join(pg.Dir, "bin", "sql"),
		retention: o.Retention,
	}
	for _, bin := range []string{st.serverBin, st.sqlBin} {
		if fi, err := os.Stat(bin); err != nil || fi.IsDir() {
			return fmt.Errorf("%w: Temporal server %s not found at %s (run `make temporal-server`, or set %s)", ErrEngineUnavailable, ServerVersion, bin, EnvServerDir)
		}
	}
	if st.retention == 0 {
		st.retention = DefaultRetention
	}
	if st.retention < 0 {
		return fmt.Errorf("devserver: retention %s is negative", st.retention)
	}
	extra, err := dynamicConfigArgs(o.ExtraArgs)
	if err != nil {
		return err
	}
	st.dynamic = append(append(append([]string{}, DynamicConfig...), PostgresDynamicConfig...), extra...)
	if o.Namespace == "" {
		o.Namespace = "default"
	}
	if o.Port, err = resolvePort(o.Port); err != nil {
		return err
	}
	if st.ports, err = freePorts(o.Port); err != nil {
		return err
	}

	sweepTempDirs(func(dir string) bool { return dropSwept(dir, pg, st.sqlBin) })
	dir, err := os.MkdirTemp("", tempDirPrefix)
	if err != nil {
		return fmt.Errorf("devserver: temp dir: %w", err)
	}
	s.tempDir, st.dir = dir, dir
	if err := os.WriteFile(filepath.Join(dir, ownerFile), []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
		return fmt.Errorf("devserver: %w", err)
	}
	if pg.Database == "" {
		id := make([]byte, 4)
		_, _ = rand.Read(id)
		pg.Database = "retry_scheduler_tmp_" + hex.EncodeToString(id)
		pg.VisibilityDatabase = pg.Database + "_visibility"
		st.pg, st.temporary = pg, true
		// Written before the databases exist, so that a sweep finds them whatever happens.
		rec, _ := json.Marshal(sweptDatabases{Host: pg.Host, Port: pg.Port, User: pg.User, Databases: []string{pg.Database, pg.VisibilityDatabase}})
		if err := os.WriteFile(filepath.Join(dir, pgTempFile), rec, 0o644); err != nil {
			return fmt.Errorf("devserver: %w", err)
		}
	}
	if o.LogFile == "" {
		o.LogFile = filepath.Join(dir, "temporal.log")
	} else if err := os.MkdirAll(filepath.Dir(o.LogFile), 0o755); err != nil {
		return fmt.Errorf("devserver: %w", err)
	}
	o.Engine, o.Binary, o.UIPort, o.DBFile, o.Postgres = EnginePostgres, st.serverBin, -1, "", pg
	s.opts, s.pg = o, st
	s.Address = net.JoinHostPort("127.0.0.1", strconv.Itoa(o.Port))
	s.Namespace = o.Namespace
	s.LogFile = o.LogFile
	s.Database, s.VisibilityDatabase = pg.Database, pg.VisibilityDatabase
	return nil
}

// dynamicConfigArgs takes the key=value pairs out of start-dev's --dynamic-config-value
// flags, the only ExtraArgs EnginePostgres understands.
func dynamicConfigArgs(args []string) ([]string, error) {
	var out []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--dynamic-config-value" && i+1 < len(args):
			out = append(out, args[i+1])
			i++
		case strings.HasPrefix(a, "--dynamic-config-value="):
			out = append(out, strings.TrimPrefix(a, "--dynamic-config-value="))
		default:
			return nil, fmt.Errorf("devserver: the postgres engine accepts only --dynamic-config-value in ExtraArgs, not %q", a)
		}
	}
	return out, nil
}

// freePorts picks the services' ports: frontend on the given one, the others free and
// distinct. The membership ports are below 32768: the schema keeps them in a SMALLINT
// column (cluster_membership.rpc_port), and Linux hands out ephemeral ports above.
func freePorts(frontend int) (pgPorts, error) {
	seen := map[int]bool{frontend: true}
	pick := func(p *int, free func() (int, error)) error {
		for range 50 {
			port, err := free()
			if err != nil {
				return err
			}
			if !seen[port] {
				seen[port], *p = true, port
				return nil
			}
		}
		return errors.New("devserver: no distinct free port")
	}
	ps := pgPorts{Frontend: frontend}
	for _, p := range []*int{&ps.History, &ps.Matching, &ps.Worker} {
		if err := pick(p, freeport.Get); err != nil {
			return ps, err
		}
	}
	for _, p := range []*int{&ps.FrontendMembership, &ps.HistoryMembership, &ps.MatchingMembership, &ps.WorkerMembership} {
		if err := pick(p, freeMembershipPort); err != nil {
			return ps, err
		}
	}
	return ps, nil
}

// Membership ports are drawn from [minMembershipPort, maxMembershipPort].
const (
	minMembershipPort = 10000
	maxMembershipPort = 32767
)

// freeMembershipPort returns a port in the membership range on 127.0.0.1 that was free
// a moment ago.
func freeMembershipPort() (int, error) {
	var last error
	for range 100 {
		port := minMembershipPort + mathrand.IntN(maxMembershipPort-minMembershipPort+1)
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err != nil {
			last = err
			continue
		}
		l.Close()
		return port, nil
	}
	return 0, fmt.Errorf("devserver: no free port in %d-%d: %w", minMembershipPort, maxMembershipPort, last)
}

// args is the server's command line: the config directory, and start (all four services).
func (st *pgState) args() []string {
	return []string{"--root", st.dir, "--config", ".", "--env", pgConfigEnv, "--allow-no-auth", "start"}
}

// env is the server's environment: ours, plus the password its config reads.
func (st *pgState) env() []string {
	return append(os.Environ(), EnvPostgresPassword+"="+st.pg.Password)
}

// preparePostgres creates or upgrades the databases and writes the server's config.
func (s *Server) preparePostgres(ctx context.Context) error {
	st := s.pg
	conn, err := (&net.Dialer{Timeout: 5 * time.Second}).DialContext(ctx, "tcp", st.pg.addr())
	if err != nil {
		return fmt.Errorf("%w: PostgreSQL does not answer at %s: %v", ErrEngineUnavailable, st.pg.addr(), err)
	}
	conn.Close()
	logf, err := os.OpenFile(s.LogFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("devserver: log file: %w", err)
	}
	defer logf.Close()
	ctx, cancel := context.WithTimeout(ctx, SchemaTimeout)
	defer cancel()
	began := time.Now()
	st.touched = true
	tool := newSchemaTool(st.sqlBin, st.pg, logf)
	if err := tool.ensureBoth(ctx, st.pg.Database, st.pg.VisibilityDatabase); err != nil {
		return fmt.Errorf("%w\n%s", err, proc.Tail(s.LogFile, 20))
	}
	fmt.Fprintf(logf, "==== %s devserver: databases %s and %s on %s ready in %s\n", time.Now().Format(time.RFC3339),
		st.pg.Database, st.pg.VisibilityDatabase, st.pg.addr(), time.Since(began).Round(time.Millisecond))
	return st.writeConfig()
}

// dropTemporaryDatabases drops the databases made for this server (it has stopped).
func (s *Server) dropTemporaryDatabases() error {
	st := s.pg
	if st == nil || !st.temporary || !st.touched {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), SchemaTimeout)
	defer cancel()
	var logw io.Writer
	if f, err := os.OpenFile(s.LogFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644); err == nil {
		logw = f
		defer f.Close()
	}
	return st.dropDatabases(ctx, logw)
}

// DropDatabases drops EnginePostgres's databases, named or temporary, once the server has
// stopped (for a caller that keeps named databases only when something went wrong).
func (s *Server) DropDatabases(ctx context.Context) error {
	if s.pg == nil {
		return fmt.Errorf("devserver: the %s has no databases", s.Engine.ServerName())
	}
	if done := s.Done(); done != nil {
		select {
		case <-done:
		default:
			return errors.New("devserver: stop the server before dropping its databases")
		}
	}
	return s.pg.dropDatabases(ctx, nil)
}

// dropDatabases drops the two databases; log gets the schema tool's output.
func (st *pgState) dropDatabases(ctx context.Context, log io.Writer) error {
	tool := newSchemaTool(st.sqlBin, st.pg, log)
	if err := errors.Join(tool.drop(ctx, st.pg.Database), tool.drop(ctx, st.pg.VisibilityDatabase)); err != nil {
		return err
	}
	st.temporary = false
	_ = os.Remove(filepath.Join(st.dir, pgTempFile))
	return nil
}

// sweptDatabases is pgTempFile: the temporary databases of one server, for the sweep.
type sweptDatabases struct {
	Host      string   `json:"host"`
	Port      int      `json:"port"`
	User      string   `json:"user"`
	Databases []string `json:"databases"`
}

// dropSwept drops the temporary databases a dead process left in dir, when they are on
// the PostgreSQL pg names (the only one whose password is at hand).
func dropSwept(dir string, pg PostgresOptions, sqlBin string) bool {
	b, err := os.ReadFile(filepath.Join(dir, pgTempFile))
	if err != nil {
		return false
	}
	var rec sweptDatabases
	if json.Unmarshal(b, &rec) != nil || rec.Host != pg.Host || rec.Port != pg.Port || rec.User != pg.User {
		return false
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tool := newSchemaTool(sqlBin, pg, nil)
	for _, db := range rec.Databases {
		if !databaseName.MatchString(db) || tool.drop(ctx, db) != nil {
			return false
		}
	}
	return true
}

// writeConfig writes the server's config and dynamic config into its directory.
func (st *pgState) writeConfig() error {
	cfg, err := st.renderConfig()
	if err != nil {
		return err
	}
	dyn, err := renderDynamicConfig(st.dynamic)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(st.dir, pgConfigEnv+".yaml"), cfg, 0o600); err != nil {
		return fmt.Errorf("devserver: write the server config: %w", err)
	}
	if err := os.WriteFile(filepath.Join(st.dir, pgDynamicFile), dyn, 0o600); err != nil {
		return fmt.Errorf("devserver: write the dynamic config: %w", err)
	}
	return nil
}

// pgConfigTemplate is the server's config (rendered with [[ ]]; the {{ }} part is the
// server's own template, which reads the password from its environment). Connection pools
// are small: the four services each have their own, and a local PostgreSQL allows 100
// connections in all.
var pgConfigTemplate = template.Must(template.New("config").Delims("[[", "]]").Funcs(template.FuncMap{
	"q": func(s string) string { b, _ := json.Marshal(s); return string(b) },
}).Parse(`# enable-template
# Temporal server [[ .Version ]] on PostgreSQL, written by retry-scheduler's devserver
# package at every start. The password is read from the environment ([[ .PasswordEnv ]]).
log:
  stdout: true
  level: warn

persistence:
  defaultStore: postgres-default
  visibilityStore: postgres-visibility
  numHistoryShards: [[ .Shards ]]
  datastores:
[[- range .Stores ]]
    [[ .Name ]]:
      sql:
        pluginName: [[ $.Plugin ]]
        databaseName: [[ q .Database ]]
        connectAddr: [[ q $.Addr ]]
        connectProtocol: tcp
        user: [[ q $.User ]]
        password: {{ env [[ q $.PasswordEnv ]] | toJson }}
        maxConns: [[ .MaxConns ]]
        maxIdleConns: [[ .MaxConns ]]
        maxConnLifetime: 1h
[[- end ]]

global:
  membership:
    maxJoinDuration: 30s
    broadcastAddress: 127.0.0.1
[[- if .MetricsAddress ]]
  metrics:
    prometheus:
      framework: tally
      timerType: histogram
      listenAddress: [[ q .MetricsAddress ]]
[[- end ]]

services:
[[- range .Services ]]
  [[ .Name ]]:
    rpc:
      grpcPort: [[ .GRPC ]]
      membershipPort: [[ .Membership ]]
      bindOnLocalHost: true
[[- end ]]

clusterMetadata:
  enableGlobalNamespace: false
  failoverVersionIncrement: 10
  masterClusterName: active
  currentClusterName: active
  clusterInformation:
    active:
      enabled: true
      initialFailoverVersion: 1
      rpcName: frontend
      rpcAddress: [[ q .Frontend ]]

dcRedirectionPolicy:
  policy: noop

archival:
  history:
    state: disabled
  visibility:
    state: disabled

namespaceDefaults:
  archival:
    history:
      state: disabled
    visibility:
      state: disabled

dynamicConfigClient:
  filepath: [[ q .DynamicConfig ]]
  pollInterval: 10s
`))

func (st *pgState) renderConfig() ([]byte, error) {
	type store struct {
		Name, Database string
		MaxConns       int
	}
	type service struct {
		Name             string
		GRPC, Membership int
	}
	p := st.ports
	data := map[string]any{
		"Version":     ServerVersion,
		"Plugin":      PostgresPlugin,
		"PasswordEnv": EnvPostgresPassword,
		"Shards":      st.pg.HistoryShards,
		"Addr":        st.pg.addr(),
		"User":        st.pg.User,
		"Stores": []store{
			{"postgres-default", st.pg.Database, 10},
			{"postgres-visibility", st.pg.VisibilityDatabase, 3},
		},
		"Services": []service{
			{"frontend", p.Frontend, p.FrontendMembership},
			{"history", p.History, p.HistoryMembership},
			{"matching", p.Matching, p.MatchingMembership},
			{"worker", p.Worker, p.WorkerMembership},
		},
		"Frontend":       net.JoinHostPort("127.0.0.1", strconv.Itoa(p.Frontend)),
		"DynamicConfig":  filepath.Join(st.dir, pgDynamicFile),
		"MetricsAddress": st.pg.MetricsAddress,
	}
	var b bytes.Buffer
	if err := pgConfigTemplate.Execute(&b, data); err != nil {
		return nil, fmt.Errorf("devserver: render the server config: %w", err)
	}
	return b.Bytes(), nil
}

// renderDynamicConfig turns key=value pairs (start-dev's --dynamic-config-value form, the
// value in YAML) into the server's dynamic config file; a later pair wins.
func renderDynamicConfig(kvs []string) ([]byte, error) {
	type constrained struct {
		Value any `yaml:"value"`
	}
	out := map[string][]constrained{}
	for _, kv := range kvs {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("devserver: dynamic config %q is not key=value", kv)
		}
		var val any
		if err := yaml.Unmarshal([]byte(v), &val); err != nil {
			return nil, fmt.Errorf("devserver: dynamic config %s: %w", k, err)
		}
		out[k] = []constrained{{val}}
	}
	b, err := yaml.Marshal(out)
	if err != nil {
		return nil, fmt.Errorf("devserver: render the dynamic config: %w", err)
	}
	return b, nil
}

// pgReady is EnginePostgres's readiness probe: the frontend answers, the namespace and
// the search attributes are there (registered when missing), and the frontend's
// namespace cache has them (a visibility query naming every attribute is accepted).
func (s *Server) pgReady(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	c, err := client.DialContext(ctx, client.Options{HostPort: s.Address, Namespace: s.Namespace, Logger: quietLogger()})
	if err != nil {
		return err
	}
	defer c.Close()
	if _, err := c.CheckHealth(ctx, &client.CheckHealthRequest{}); err != nil {
		return err
	}
	if err := ensureNamespace(ctx, c.WorkflowService(), s.Namespace, s.pg.retention); err != nil {
		return err
	}
	if err := ensureSearchAttributes(ctx, c.OperatorService(), s.Namespace); err != nil {
		return err
	}
	_, err = c.CountWorkflow(ctx, &workflowservice.CountWorkflowExecutionsRequest{Namespace: s.Namespace, Query: searchAttributesProbe()})
	if err != nil {
		return fmt.Errorf("devserver: the search attributes are not usable yet: %w", err)
	}
	// The frontend answers before the history service has joined the membership ring (after
	// a restart, until the old run's entries expire): describing a workflow that never
	// exists reaches history, and NotFound says it serves.
	_, err = c.DescribeWorkflow(ctx, historyProbeWorkflowID, "")
	var notFound *serviceerror.NotFound
	if err != nil && !errors.As(err, &notFound) {
		return fmt.Errorf("devserver: the history service does not serve yet: %w", err)
	}
	return nil
}

// historyProbeWorkflowID names a workflow that never exists (pgReady's history check).
const historyProbeWorkflowID = "devserver-probe/never-started"

// ensureNamespace registers the namespace with the retention when it does not exist.
func ensureNamespace(ctx context.Context, ws workflowservice.WorkflowServiceClient, ns string, retention time.Duration) error {
	_, err := ws.DescribeNamespace(ctx, &workflowservice.DescribeNamespaceRequest{Namespace: ns})
	var notFound *serviceerror.NamespaceNotFound
	if err == nil || !errors.As(err, &notFound) {
		return err
	}
	_, err = ws.RegisterNamespace(ctx, &workflowservice.RegisterNamespaceRequest{
		Namespace:                        ns,
		Description:                      "registered by retry-scheduler's devserver",
		WorkflowExecutionRetentionPeriod: durationpb.New(retention),
	})
	var exists *serviceerror.NamespaceAlreadyExists
	if err != nil && !errors.As(err, &exists) {
		return fmt.Errorf("devserver: register namespace %s: %w", ns, err)
	}
	return nil
}

// ensureSearchAttributes adds the SearchAttributeKeys the namespace lacks; one that
// exists with another type is an error no retry mends.
func ensureSearchAttributes(ctx context.Context, ops operatorservice.OperatorServiceClient, ns string) error {
	resp, err := ops.ListSearchAttributes(ctx, &operatorservice.ListSearchAttributesRequest{Namespace: ns})
	if err != nil {
		return fmt.Errorf("devserver: list search attributes of %s: %w", ns, err)
	}
	missing := map[string]enumspb.IndexedValueType{}
	for _, k := range SearchAttributeKeys {
		have, ok := resp.GetCustomAttributes()[k.GetName()]
		switch {
		case !ok:
			missing[k.GetName()] = k.GetValueType()
		case have != k.GetValueType():
			return proc.Permanent(fmt.Errorf("devserver: search attribute %s of namespace %s is a %s, not a %s", k.GetName(), ns, have, k.GetValueType()))
		}
	}
	if len(missing) == 0 {
		return nil
	}
	_, err = ops.AddSearchAttributes(ctx, &operatorservice.AddSearchAttributesRequest{Namespace: ns, SearchAttributes: missing})
	if err != nil {
		return fmt.Errorf("devserver: add search attributes to %s: %w", ns, err)
	}
	return nil
}

// searchAttributesProbe is a visibility query that names every SearchAttributeKeys entry:
// the frontend refuses it until its namespace cache knows them all.
func searchAttributesProbe() string {
	zero := map[enumspb.IndexedValueType]string{
		enumspb.INDEXED_VALUE_TYPE_TEXT:         "''",
		enumspb.INDEXED_VALUE_TYPE_KEYWORD:      "''",
		enumspb.INDEXED_VALUE_TYPE_KEYWORD_LIST: "''",
		enumspb.INDEXED_VALUE_TYPE_INT:          "0",
		enumspb.INDEXED_VALUE_TYPE_DOUBLE:       "0",
		enumspb.INDEXED_VALUE_TYPE_BOOL:         "false",
		enumspb.INDEXED_VALUE_TYPE_DATETIME:     "'2000-01-01T00:00:00Z'",
	}
	terms := make([]string, 0, len(SearchAttributeKeys))
	for _, k := range SearchAttributeKeys {
		terms = append(terms, k.GetName()+" = "+zero[k.GetValueType()])
	}
	return strings.Join(terms, " AND ")
}
