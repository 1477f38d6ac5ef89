package devserver

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"gopkg.in/yaml.v3"
)

func TestParseEngine(t *testing.T) {
	for in, want := range map[string]Engine{"": EngineDev, "dev": EngineDev, "postgres": EnginePostgres} {
		got, err := ParseEngine(in)
		require.NoError(t, err, in)
		assert.Equal(t, want, got, in)
	}
	_, err := ParseEngine("sqlite")
	assert.ErrorContains(t, err, `unknown engine "sqlite"`)
}

func envOf(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

func TestPostgresFromEnv(t *testing.T) {
	pg, err := PostgresFromEnv(envOf(nil))
	require.NoError(t, err)
	assert.Equal(t, "127.0.0.1", pg.Host)
	assert.Equal(t, 5432, pg.Port)
	assert.Equal(t, "postgres", pg.User)
	assert.Empty(t, pg.Password)
	assert.Empty(t, pg.Database, "a temporary pair")

	pg, err = PostgresFromEnv(envOf(map[string]string{
		EnvPostgresHost: "db.example", EnvPostgresPort: "6543", EnvPostgresUser: "temporal", EnvPostgresPassword: "pw",
	}))
	require.NoError(t, err)
	assert.Equal(t, PostgresOptions{Host: "db.example", Port: 6543, User: "temporal", Password: "pw", Dir: DefaultServerDir(), HistoryShards: PostgresHistoryShards}, pg)

	_, err = PostgresFromEnv(envOf(map[string]string{EnvPostgresPort: "x"}))
	assert.ErrorContains(t, err, EnvPostgresPort)
}

func TestOptionsFromEnv(t *testing.T) {
	o, err := OptionsFromEnv(envOf(nil))
	require.NoError(t, err)
	assert.Equal(t, Options{Engine: EngineDev, UIPort: -1}, o)

	o, err = OptionsFromEnv(envOf(map[string]string{EnvEngine: "postgres", EnvPostgresUser: "root"}))
	require.NoError(t, err)
	assert.Equal(t, EnginePostgres, o.Engine)
	assert.Equal(t, "root", o.Postgres.User)

	_, err = OptionsFromEnv(envOf(map[string]string{EnvEngine: "mysql"}))
	assert.ErrorContains(t, err, EnvEngine)
}

// The password is never printed: not by %v, %+v, %#v of the options, nor by slog.
func TestPostgresPasswordNotPrinted(t *testing.T) {
	const pw = "s3cret-pw"
	pg := PostgresOptions{Host: "h", Port: 1, User: "u", Password: pw, Database: "d"}
	for _, format := range []string{"%v", "%+v", "%s"} {
		assert.NotContains(t, fmt.Sprintf(format, pg), pw, format)
	}
	assert.NotContains(t, fmt.Sprintf("%+v", Options{Postgres: pg}), pw)
	var buf bytes.Buffer
	slog.New(slog.NewJSONHandler(&buf, nil)).Info("start", "postgres", pg)
	assert.NotContains(t, buf.String(), pw)
	assert.Contains(t, buf.String(), `"password_set":true`)
}

func TestPostgresValidate(t *testing.T) {
	ok := PostgresOptions{Host: "h", Port: 5432, User: "u"}
	require.NoError(t, ok.validate())
	named := ok
	named.Database = "retry_scheduler_temporal"
	require.NoError(t, named.withDefaults().validate())
	assert.Equal(t, "retry_scheduler_temporal_visibility", named.withDefaults().VisibilityDatabase)

	for name, pg := range map[string]PostgresOptions{
		"no host":         {Port: 5432, User: "u"},
		"port":            {Host: "h", Port: 70000, User: "u"},
		"no user":         {Host: "h", Port: 5432},
		"upper case":      {Host: "h", Port: 5432, User: "u", Database: "Temporal", VisibilityDatabase: "v"},
		"quote":           {Host: "h", Port: 5432, User: "u", Database: `t"x`, VisibilityDatabase: "v"},
		"too long":        {Host: "h", Port: 5432, User: "u", Database: strings.Repeat("a", 64), VisibilityDatabase: "v"},
		"same":            {Host: "h", Port: 5432, User: "u", Database: "t", VisibilityDatabase: "t"},
		"visibility only": {Host: "h", Port: 5432, User: "u", VisibilityDatabase: "v"},
		"metrics port":    {Host: "h", Port: 5432, User: "u", MetricsAddress: "9090"},
		"shards":          {Host: "h", Port: 5432, User: "u", HistoryShards: -1},
	} {
		assert.Error(t, pg.validate(), name)
	}
	// The default visibility name must fit too.
	long := ok
	long.Database = strings.Repeat("a", 60)
	assert.Error(t, long.withDefaults().validate())
}

// fakeServerDir is a directory with bin/server and bin/sql that do nothing.
func fakeServerDir(t *testing.T) string {
	dir := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "bin"), 0o755))
	for _, b := range []string{"server", "sql"} {
		require.NoError(t, os.WriteFile(filepath.Join(dir, "bin", b), []byte("#!/bin/sh\n"), 0o755))
	}
	return dir
}

func resolvedPostgres(t *testing.T, o Options) *Server {
	t.Helper()
	t.Setenv("TMPDIR", t.TempDir())
	o.Engine = EnginePostgres
	if o.Postgres.Dir == "" {
		o.Postgres.Dir = fakeServerDir(t)
	}
	s := &Server{}
	require.NoError(t, s.resolve(o))
	return s
}

func TestResolvePostgres(t *testing.T) {
	s := resolvedPostgres(t, Options{Port: 7400, Binary: "/ignored", DBFile: "/ignored.db", UIPort: 8000})
	assert.Equal(t, EnginePostgres, s.Engine)
	assert.Equal(t, "127.0.0.1:7400", s.Address)
	assert.Empty(t, s.UIAddress)
	assert.Empty(t, s.DBFile)
	assert.Equal(t, "default", s.Namespace)
	assert.Equal(t, filepath.Join(s.tempDir, "temporal.log"), s.LogFile)
	assert.Regexp(t, `^retry_scheduler_tmp_[0-9a-f]{8}$`, s.Database)
	assert.Equal(t, s.Database+"_visibility", s.VisibilityDatabase)
	assert.True(t, s.pg.temporary)
	assert.Equal(t, DefaultRetention, s.pg.retention)
	assert.Equal(t, []string{"--root", s.tempDir, "--config", ".", "--env", "postgres", "--allow-no-auth", "start"}, s.Args())
	assert.Equal(t, filepath.Join(s.pg.pg.Dir, "bin", "server"), s.opts.Binary)

	// The sweep can find and drop the temporary pair whatever happens next.
	b, err := os.ReadFile(filepath.Join(s.tempDir, pgTempFile))
	require.NoError(t, err)
	var rec sweptDatabases
	require.NoError(t, json.Unmarshal(b, &rec))
	assert.Equal(t, sweptDatabases{Host: "127.0.0.1", Port: 5432, User: "postgres", Databases: []string{s.Database, s.VisibilityDatabase}}, rec)

	// Every port distinct; membership ports fit the schema's SMALLINT.
	p := s.pg.ports
	all := []int{p.Frontend, p.FrontendMembership, p.History, p.HistoryMembership, p.Matching, p.MatchingMembership, p.Worker, p.WorkerMembership}
	seen := map[int]bool{}
	for _, port := range all {
		assert.False(t, seen[port], "port %d twice in %v", port, all)
		seen[port] = true
	}
	for _, port := range []int{p.FrontendMembership, p.HistoryMembership, p.MatchingMembership, p.WorkerMembership} {
		assert.LessOrEqual(t, port, 32767)
		assert.GreaterOrEqual(t, port, minMembershipPort)
	}

	// The server's environment carries the password; its command line does not.
	s = resolvedPostgres(t, Options{Postgres: PostgresOptions{Password: "pw", Database: "kept"}, Retention: time.Hour, LogFile: filepath.Join(t.TempDir(), "sub", "t.log")})
	assert.Contains(t, s.pg.env(), EnvPostgresPassword+"=pw")
	assert.NotContains(t, strings.Join(s.Args(), " "), "pw")
	assert.False(t, s.pg.temporary)
	assert.Equal(t, "kept_visibility", s.VisibilityDatabase)
	assert.NoFileExists(t, filepath.Join(s.tempDir, pgTempFile))
	assert.Equal(t, time.Hour, s.pg.retention)
	assert.DirExists(t, filepath.Dir(s.LogFile))
	assert.NotEqual(t, "127.0.0.1:0", s.Address)
}

func TestResolvePostgresErrors(t *testing.T) {
	t.Setenv("TMPDIR", t.TempDir())
	dir := fakeServerDir(t)
	err := (&Server{}).resolve(Options{Engine: EnginePostgres, Postgres: PostgresOptions{Dir: t.TempDir()}})
	assert.ErrorIs(t, err, ErrEngineUnavailable, "no binaries")
	assert.ErrorContains(t, err, "make temporal-server")
	for _, o := range []Options{
		{Engine: "mysql"},
		{Engine: EnginePostgres, Port: 70000, Postgres: PostgresOptions{Dir: dir}},
		{Engine: EnginePostgres, Retention: -time.Hour, Postgres: PostgresOptions{Dir: dir}},
		{Engine: EnginePostgres, Postgres: PostgresOptions{Dir: dir, Database: "Bad-Name"}},
		{Engine: EnginePostgres, ExtraArgs: []string{"--headless"}, Postgres: PostgresOptions{Dir: dir}},
	} {
		assert.Error(t, (&Server{}).resolve(o), "%+v", o)
	}
}

// A PostgreSQL that does not answer is "unavailable" (tests skip outside CI), reported
// at once, and leaves nothing behind.
func TestStartPostgresUnavailable(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	_, err = Start(t.Context(), Options{Engine: EnginePostgres, Postgres: PostgresOptions{Port: port, Dir: fakeServerDir(t)}})
	require.ErrorIs(t, err, ErrEngineUnavailable)
	assert.ErrorContains(t, err, "PostgreSQL does not answer")
	left, _ := filepath.Glob(filepath.Join(tmp, tempDirPrefix+"*"))
	assert.Empty(t, left)
}

func TestRenderConfig(t *testing.T) {
	s := resolvedPostgres(t, Options{Port: 7401, Postgres: PostgresOptions{Host: "db.example", Port: 6543, User: "temporal", Password: "s3cret", Database: "main_db"}})
	b, err := s.pg.renderConfig()
	require.NoError(t, err)
	text := string(b)
	assert.NotContains(t, text, "s3cret", "the password stays in the environment")
	assert.True(t, strings.HasPrefix(text, "# enable-template\n"), "the server renders the password from its environment")
	assert.Contains(t, text, `password: {{ env "`+EnvPostgresPassword+`" | toJson }}`)

	// What the server reads once its own template is rendered.
	var cfg struct {
		Persistence struct {
			DefaultStore     string `yaml:"defaultStore"`
			VisibilityStore  string `yaml:"visibilityStore"`
			NumHistoryShards int    `yaml:"numHistoryShards"`
			DataStores       map[string]struct {
				SQL struct {
					PluginName   string `yaml:"pluginName"`
					DatabaseName string `yaml:"databaseName"`
					ConnectAddr  string `yaml:"connectAddr"`
					User         string `yaml:"user"`
					Password     string `yaml:"password"`
					MaxConns     int    `yaml:"maxConns"`
				} `yaml:"sql"`
			} `yaml:"datastores"`
		} `yaml:"persistence"`
		Services map[string]struct {
			RPC struct {
				GRPCPort       int  `yaml:"grpcPort"`
				MembershipPort int  `yaml:"membershipPort"`
				BindOnLocal    bool `yaml:"bindOnLocalHost"`
			} `yaml:"rpc"`
		} `yaml:"services"`
		ClusterMetadata struct {
			ClusterInformation map[string]struct {
				RPCAddress string `yaml:"rpcAddress"`
			} `yaml:"clusterInformation"`
		} `yaml:"clusterMetadata"`
		DynamicConfigClient struct {
			Filepath string `yaml:"filepath"`
		} `yaml:"dynamicConfigClient"`
	}
	rendered := regexp.MustCompile(`\{\{.*?\}\}`).ReplaceAllString(text, `"pw"`)
	require.NoError(t, yaml.Unmarshal([]byte(rendered), &cfg), rendered)
	p := cfg.Persistence
	assert.Equal(t, PostgresHistoryShards, p.NumHistoryShards)
	for store, db := range map[string]string{p.DefaultStore: "main_db", p.VisibilityStore: "main_db_visibility"} {
		sql := p.DataStores[store].SQL
		assert.Equal(t, PostgresPlugin, sql.PluginName, store)
		assert.Equal(t, db, sql.DatabaseName, store)
		assert.Equal(t, "db.example:6543", sql.ConnectAddr, store)
		assert.Equal(t, "temporal", sql.User, store)
		assert.Equal(t, "pw", sql.Password, store)
		assert.Positive(t, sql.MaxConns, store)
	}
	ports := s.pg.ports
	for name, want := range map[string][2]int{
		"frontend": {7401, ports.FrontendMembership},
		"history":  {ports.History, ports.HistoryMembership},
		"matching": {ports.Matching, ports.MatchingMembership},
		"worker":   {ports.Worker, ports.WorkerMembership},
	} {
		rpc := cfg.Services[name].RPC
		assert.Equal(t, want, [2]int{rpc.GRPCPort, rpc.MembershipPort}, name)
		assert.True(t, rpc.BindOnLocal, name)
	}
	assert.Equal(t, "127.0.0.1:7401", cfg.ClusterMetadata.ClusterInformation["active"].RPCAddress)
	assert.Equal(t, filepath.Join(s.tempDir, pgDynamicFile), cfg.DynamicConfigClient.Filepath)
	assert.NotContains(t, text, "prometheus", "no metrics endpoint unless asked for")

	require.NoError(t, s.pg.writeConfig())
	fi, err := os.Stat(filepath.Join(s.tempDir, "postgres.yaml"))
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), fi.Mode().Perm())
	assert.FileExists(t, filepath.Join(s.tempDir, pgDynamicFile))
}

// A shard count given becomes the new databases' numHistoryShards; none is the default.
func TestRenderConfigHistoryShards(t *testing.T) {
	shards := func(pg PostgresOptions) int {
		b, err := resolvedPostgres(t, Options{Postgres: pg}).pg.renderConfig()
		require.NoError(t, err)
		var cfg struct {
			Persistence struct {
				NumHistoryShards int `yaml:"numHistoryShards"`
			} `yaml:"persistence"`
		}
		rendered := regexp.MustCompile(`\{\{.*?\}\}`).ReplaceAllString(string(b), `"pw"`)
		require.NoError(t, yaml.Unmarshal([]byte(rendered), &cfg), rendered)
		return cfg.Persistence.NumHistoryShards
	}
	assert.Equal(t, PostgresHistoryShards, shards(PostgresOptions{}))
	assert.Equal(t, 1, shards(PostgresOptions{HistoryShards: 1}))
}

// A metrics address becomes the server's Prometheus listener, as start-dev's --metrics-port.
func TestRenderConfigMetrics(t *testing.T) {
	s := resolvedPostgres(t, Options{Postgres: PostgresOptions{MetricsAddress: "127.0.0.1:9464"}})
	b, err := s.pg.renderConfig()
	require.NoError(t, err)
	var cfg struct {
		Global struct {
			Membership struct {
				BroadcastAddress string `yaml:"broadcastAddress"`
			} `yaml:"membership"`
			Metrics struct {
				Prometheus struct {
					Framework     string `yaml:"framework"`
					ListenAddress string `yaml:"listenAddress"`
				} `yaml:"prometheus"`
			} `yaml:"metrics"`
		} `yaml:"global"`
	}
	rendered := regexp.MustCompile(`\{\{.*?\}\}`).ReplaceAllString(string(b), `"pw"`)
	require.NoError(t, yaml.Unmarshal([]byte(rendered), &cfg), rendered)
	assert.Equal(t, "127.0.0.1:9464", cfg.Global.Metrics.Prometheus.ListenAddress)
	assert.Equal(t, "tally", cfg.Global.Metrics.Prometheus.Framework, "counters named as the dev server names them")
	assert.Equal(t, "127.0.0.1", cfg.Global.Membership.BroadcastAddress, "the metrics block stays inside global")
}

func TestRenderDynamicConfig(t *testing.T) {
	s := resolvedPostgres(t, Options{ExtraArgs: []string{
		"--dynamic-config-value", "matching.numTaskqueueReadPartitions=4",
		"--dynamic-config-value=frontend.namespaceRPS=\"x\"",
	}})
	b, err := renderDynamicConfig(s.pg.dynamic)
	require.NoError(t, err)
	var got map[string][]map[string]any
	require.NoError(t, yaml.Unmarshal(b, &got), string(b))
	value := func(k string) any {
		require.Len(t, got[k], 1, k)
		return got[k][0]["value"]
	}
	assert.Equal(t, 4, value("matching.numTaskqueueReadPartitions"), "ExtraArgs override DynamicConfig")
	assert.Equal(t, 1, value("matching.numTaskqueueWritePartitions"), "DynamicConfig applies")
	assert.Equal(t, false, value("system.forceSearchAttributesCacheRefreshOnRead"))
	assert.Equal(t, 255, value("limit.maxIDLength"), "PostgresDynamicConfig: the schema's VARCHAR(255)")
	assert.Equal(t, "x", value("frontend.namespaceRPS"))

	_, err = renderDynamicConfig([]string{"novalue"})
	assert.Error(t, err)
}

func TestSearchAttributesProbe(t *testing.T) {
	q := searchAttributesProbe()
	for _, k := range SearchAttributeKeys {
		assert.Contains(t, q, k.GetName()+" = ")
	}
	assert.Equal(t, len(SearchAttributeKeys)-1, strings.Count(q, " AND "))
}

func TestDefaultServerDir(t *testing.T) {
	t.Setenv(EnvServerDir, "/opt/ts")
	assert.Equal(t, "/opt/ts", DefaultServerDir())
	t.Setenv(EnvServerDir, "")
	t.Setenv("XDG_CACHE_HOME", "/xdg")
	assert.Equal(t, "/xdg/retry-scheduler/temporal-server-"+ServerVersion, DefaultServerDir())
}

// The Makefile installs the version the code expects.
func TestMakefileServerVersion(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "Makefile"))
	require.NoError(t, err)
	m := regexp.MustCompile(`(?m)^TEMPORAL_SERVER_VERSION\s*:=\s*(\S+)`).FindSubmatch(b)
	require.NotNil(t, m, "Makefile: TEMPORAL_SERVER_VERSION := ...")
	assert.Equal(t, ServerVersion, string(m[1]))
}

func TestSweepKeepsUndroppedDatabases(t *testing.T) {
	t.Setenv("TMPDIR", t.TempDir())
	dir, err := os.MkdirTemp("", tempDirPrefix)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, ownerFile), []byte("2147483646"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, pgTempFile), []byte(`{}`), 0o644))
	old := time.Now().Add(-2 * time.Minute)
	require.NoError(t, os.Chtimes(dir, old, old))

	sweepTempDirs(nil)
	assert.DirExists(t, dir, "the dev engine does not drop databases")
	sweepTempDirs(func(string) bool { return false })
	assert.DirExists(t, dir, "a failed drop keeps the record")
	sweepTempDirs(func(d string) bool { return d == dir })
	assert.NoDirExists(t, dir)
}
