package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/retry-scheduler/retry-scheduler/internal/broker"
	"github.com/retry-scheduler/retry-scheduler/internal/broker/brokertest"
	"github.com/retry-scheduler/retry-scheduler/internal/devserver"
	"github.com/retry-scheduler/retry-scheduler/internal/rabbitcluster"
)

// rabbitEnv is the RabbitMQ a run uses: the machine's node (-rabbit-nodes 1), which the
// soak restarts with rabbitmqctl and always leaves running, or a private cluster of its own
// nodes (-rabbit-nodes 3), which it kills node by node and removes at the end.
type rabbitEnv struct {
	// url is what the soak's own clients dial: the node's URL, or every cluster node's.
	url string
	// nodes is each node's host:port, the upstreams of the service's AMQP proxies;
	// nodeURL is one node's URL, whose host:port a proxy's replaces.
	nodes   []string
	nodeURL string
	// local is the machine's node (host:port); "" with a cluster.
	local   string
	cluster *rabbitcluster.Cluster
}

// startRabbit makes sure the machine's node runs, or starts a cluster of o.rabbitNodes.
func startRabbit(o options, logf func(string, ...any)) (*rabbitEnv, error) {
	if o.rabbitNodes > 1 {
		c, err := rabbitcluster.New(o.rabbitNodes, logf)
		if err != nil {
			return nil, fmt.Errorf("start a RabbitMQ cluster of %d nodes: %w", o.rabbitNodes, err)
		}
		r := &rabbitEnv{url: c.URLs(), nodeURL: c.Nodes[0].URL, cluster: c}
		for _, n := range c.Nodes {
			r.nodes = append(r.nodes, fmt.Sprintf("127.0.0.1:%d", n.Port))
		}
		return r, nil
	}
	addr, err := rabbitAddr(o.rabbitURL)
	if err != nil {
		return nil, err
	}
	if _, err := exec.LookPath("rabbitmqctl"); err != nil {
		return nil, errors.New("rabbitmqctl not found: the soak restarts the broker and closes connections with it")
	}
	if err := ensureRabbit(addr); err != nil {
		return nil, err
	}
	return &rabbitEnv{url: o.rabbitURL, nodeURL: o.rabbitURL, nodes: []string{addr}, local: addr}, nil
}

// close leaves the machine's node running for everyone else, whatever happened to the run,
// or removes the cluster.
func (r *rabbitEnv) close() {
	if r.cluster != nil {
		r.cluster.Close()
		return
	}
	if err := ensureRabbit(r.local); err != nil {
		fmt.Fprintln(os.Stderr, "soak: RabbitMQ is NOT running again:", err)
	}
}

// queueType is the type of the run's queues: quorum on a cluster, replicated on its nodes.
func (r *rabbitEnv) queueType() string {
	if r.cluster != nil {
		return broker.QueueTypeQuorum
	}
	return broker.QueueTypeClassic
}

// closeConnections has the broker close every connection whose name starts with prefix.
func (r *rabbitEnv) closeConnections(ctx context.Context, prefix, reason string) (int, error) {
	if r.cluster != nil {
		return r.cluster.CloseConnections(prefix, reason)
	}
	return brokertest.CloseConnections(ctx, prefix, reason)
}

// describe names the broker for the report.
func (r *rabbitEnv) describe() string {
	if r.cluster != nil {
		return fmt.Sprintf("a RabbitMQ cluster of %d nodes, quorum queues", len(r.nodes))
	}
	return "RabbitMQ at " + r.local
}

// temporalEnv is the Temporal cluster a run uses: one server, or several hosts of the
// Temporal server on one pair of PostgreSQL databases, in one membership ring.
type temporalEnv struct {
	hosts []*devserver.Server
}

// startTemporal starts o.temporalHosts servers. Their store is the dev server's file in dir,
// or PostgreSQL databases named after the run, kept (like the file) unless the soak passes.
func startTemporal(ctx context.Context, o options, dir, runID string, logf func(string, ...any)) (*temporalEnv, error) {
	t := &temporalEnv{}
	first := devserver.Options{UIPort: -1, DBFile: filepath.Join(dir, "temporal.db")}
	if o.engine == devserver.EnginePostgres {
		pg := o.postgres
		pg.Database = "retry_scheduler_" + strings.ReplaceAll(runID, "-", "_")
		first = devserver.Options{Engine: o.engine, Postgres: pg, LogFile: filepath.Join(dir, "temporal.log")}
	}
	for i := range o.temporalHosts {
		opts := first
		if i > 0 {
			// The first host's databases: a host started on them joins the ring the first
			// one wrote into their cluster_membership table.
			opts.Postgres.Database, opts.Postgres.VisibilityDatabase = t.hosts[0].Database, t.hosts[0].VisibilityDatabase
			opts.LogFile = filepath.Join(dir, fmt.Sprintf("temporal-%d.log", i+1))
		}
		srv, err := devserver.Start(ctx, opts)
		if err != nil {
			t.stop(false)
			return nil, fmt.Errorf("start the %s (host %d of %d): %w", o.engine.ServerName(), i+1, o.temporalHosts, err)
		}
		t.hosts = append(t.hosts, srv)
		if srv.Engine == devserver.EnginePostgres {
			logf("%s host %d at %s (pid %d), databases %s and %s, log %s", srv.Engine.ServerName(), i+1, srv.Address, srv.Pid(), srv.Database, srv.VisibilityDatabase, srv.LogFile)
		} else {
			logf("Temporal dev server at %s (pid %d), DB %s", srv.Address, srv.Pid(), srv.DBFile)
		}
	}
	return t, nil
}

// addrs is every host's frontend address.
func (t *temporalEnv) addrs() []string {
	out := make([]string, len(t.hosts))
	for i, h := range t.hosts {
		out[i] = h.Address
	}
	return out
}

// namespace is the namespace the servers serve.
func (t *temporalEnv) namespace() string { return t.hosts[0].Namespace }

// stop stops the hosts, the first last (it made the databases), and drops PostgreSQL's
// databases when drop is set.
func (t *temporalEnv) stop(drop bool) {
	for i := len(t.hosts) - 1; i >= 0; i-- {
		_ = t.hosts[i].Stop()
	}
	if len(t.hosts) == 0 || t.hosts[0].Engine != devserver.EnginePostgres {
		return
	}
	first := t.hosts[0]
	if !drop {
		fmt.Printf("Temporal databases kept: %s and %s\n", first.Database, first.VisibilityDatabase)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := first.DropDatabases(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "soak: drop the Temporal databases:", err)
	}
}

// describe names the Temporal side for the report.
func (t *temporalEnv) describe() string {
	name := t.hosts[0].Engine.ServerName()
	if len(t.hosts) > 1 {
		return fmt.Sprintf("%s, %d hosts", name, len(t.hosts))
	}
	return name
}
