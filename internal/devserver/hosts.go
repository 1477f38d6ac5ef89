package devserver

import (
	"os"
	"testing"
)

// StartHostsForTest starts n Temporal server processes (all four services each) on one pair
// of temporary PostgreSQL databases: one cluster of n hosts in one membership ring, the
// PostgresHistoryShards history shards spread over them, as Temporal runs on several
// machines. Each host has its own ports; hosts[i].Address is its frontend. The first host
// made the databases and drops them when it stops, after the others (tb.Cleanup runs last
// registered first). A machine without the server binaries or PostgreSQL skips the test, or
// fails it under CI=true.
func StartHostsForTest(tb testing.TB, n int) []*Server {
	tb.Helper()
	pg, err := PostgresFromEnv(os.Getenv)
	if err != nil {
		tb.Fatal(err)
	}
	o := Options{Engine: EnginePostgres, UIPort: -1, Postgres: pg}
	hosts := []*Server{startOwnedForTest(tb, o)}
	for len(hosts) < n {
		// The same databases, named: a host started on them joins the ring the first one
		// wrote into their cluster_membership table.
		oi := o
		oi.Postgres.Database, oi.Postgres.VisibilityDatabase = hosts[0].Database, hosts[0].VisibilityDatabase
		hosts = append(hosts, startOwnedForTest(tb, oi))
	}
	return hosts
}
