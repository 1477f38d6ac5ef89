package brokertest

import (
	"context"
	"fmt"
	"os/exec"
	"regexp"
	"strings"
	"time"
)

// CloseConnections closes, with rabbitmqctl, every connection to the local broker whose
// client-provided name starts with prefix (a test's or a soak's own, never anyone else's on a
// shared broker), and returns how many it closed. The table output is read because its pids
// are the form close_connection accepts.
func CloseConnections(ctx context.Context, prefix, reason string) (int, error) {
	if prefix == "" {
		return 0, fmt.Errorf("close connections: an empty prefix would close everyone's")
	}
	out, err := rabbitmqctl(ctx, "list_connections", "pid", "client_properties", "-q")
	if err != nil {
		return 0, err
	}
	closed := 0
	var errs []string
	for _, line := range strings.Split(out, "\n") {
		pid, props, ok := strings.Cut(line, "\t")
		if !ok || !strings.HasPrefix(pid, "<") {
			continue // the header, or a blank line
		}
		m := connectionNameRE.FindStringSubmatch(props)
		if m == nil || !strings.HasPrefix(m[1], prefix) {
			continue
		}
		if _, err := rabbitmqctl(ctx, "close_connection", pid, reason); err != nil {
			errs = append(errs, err.Error())
			continue
		}
		closed++
	}
	if len(errs) > 0 {
		return closed, fmt.Errorf("close_connection: %s", strings.Join(errs, "; "))
	}
	return closed, nil
}

// connectionNameRE finds connection_name in rabbitmqctl's table rendering of client properties.
var connectionNameRE = regexp.MustCompile(`\{"connection_name","([^"]*)"\}`)

// rabbitmqctl runs rabbitmqctl with a 30 s bound and returns its combined output.
func rabbitmqctl(ctx context.Context, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "rabbitmqctl", args...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("rabbitmqctl %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}
