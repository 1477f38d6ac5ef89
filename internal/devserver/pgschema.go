package devserver

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"
)

// PostgresPlugin is the Temporal server's SQL plugin (and persistence store name) for
// PostgreSQL. The schemas EnginePostgres's databases get are the ones embedded in the
// schema tool of ServerVersion (its source's schema/postgresql/v12/{temporal,visibility}/
// versioned), so no schema directory has to be found at run time.
const (
	PostgresPlugin     = "postgres12"
	pgMainSchema       = "postgresql/v12/temporal"
	pgVisibilitySchema = "postgresql/v12/visibility"
)

// schemaTool runs the Temporal server's SQL schema tool (cmd/tools/sql) on one
// PostgreSQL. The password goes through the tool's environment (SQL_PASSWORD).
type schemaTool struct {
	bin string
	pg  PostgresOptions
	mu  *sync.Mutex // guards log
	log io.Writer   // gets the tool's output; nil discards it
}

func newSchemaTool(bin string, pg PostgresOptions, log io.Writer) schemaTool {
	if log == nil {
		log = io.Discard
	}
	return schemaTool{bin: bin, pg: pg, mu: &sync.Mutex{}, log: log}
}

// run runs one command of the tool on database db; ctx bounds it.
func (t schemaTool) run(ctx context.Context, db string, args ...string) error {
	argv := append([]string{
		"--plugin", PostgresPlugin, "--endpoint", t.pg.Host, "--port", strconv.Itoa(t.pg.Port),
		"--user", t.pg.User, "--database", db,
	}, args...)
	cmd := exec.CommandContext(ctx, t.bin, argv...)
	cmd.Env = append(os.Environ(), "SQL_PASSWORD="+t.pg.Password)
	cmd.WaitDelay = 5 * time.Second
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	began := time.Now()
	err := cmd.Run()
	// The tool logs every statement at DEBUG: its output goes to the log only on failure.
	status := "ok"
	if err != nil {
		status = err.Error()
	}
	t.mu.Lock()
	fmt.Fprintf(t.log, "==== %s devserver: sql %s: %s in %s\n", began.Format(time.RFC3339), strings.Join(argv, " "), status, time.Since(began).Round(time.Millisecond))
	if err != nil {
		_, _ = t.log.Write(out.Bytes())
	}
	t.mu.Unlock()
	if err != nil {
		return fmt.Errorf("devserver: schema tool %s on database %s at %s: %w\n%s", args[0], db, t.pg.addr(), err, lastLines(out.String(), 8))
	}
	return nil
}

// ensure creates the database when it is missing and brings its schema to the tool's
// latest version (a database already there is upgraded in place).
func (t schemaTool) ensure(ctx context.Context, db, schema string) error {
	if err := t.run(ctx, db, "create-database", "--defaultdb", "postgres"); err != nil {
		return err
	}
	// Version tables and 0.0 on a new database; nothing on one already set up.
	if err := t.run(ctx, db, "setup-schema", "--version", "0.0"); err != nil {
		return err
	}
	return t.run(ctx, db, "update-schema", "--schema-name", schema)
}

// ensureBoth ensures the main and the visibility databases side by side.
func (t schemaTool) ensureBoth(ctx context.Context, main, visibility string) error {
	g, ctx := errgroup.WithContext(ctx)
	g.Go(func() error { return t.ensure(ctx, main, pgMainSchema) })
	g.Go(func() error { return t.ensure(ctx, visibility, pgVisibilitySchema) })
	return g.Wait()
}

// drop drops the database if it exists. The server's connections end with its process,
// but PostgreSQL may not have noticed yet: a drop refused for sessions still open is
// tried again until ctx ends.
func (t schemaTool) drop(ctx context.Context, db string) error {
	for {
		err := t.run(ctx, db, "drop-database", "--defaultdb", "postgres", "--force")
		if err == nil || !strings.Contains(err.Error(), "being accessed by other users") {
			return err
		}
		select {
		case <-ctx.Done():
			return errors.Join(err, ctx.Err())
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// lastLines is the last n lines of s, for error messages.
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
