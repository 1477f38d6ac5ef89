package broker

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/url"
	"strings"
)

// A Config's URL may list several brokers, the nodes of one RabbitMQ cluster, separated by
// commas: each (re)connect tries them in a new random order, so that clients spread over the
// nodes and a lost node only costs a reconnect to the next one.

// SplitURLs splits a comma-separated list of broker URLs and checks each: no empty element, an
// amqp or amqps scheme, a host. Errors name an element by its position and host:port only,
// never its password.
func SplitURLs(raw string) ([]string, error) {
	parts := strings.Split(raw, ",")
	urls := make([]string, 0, len(parts))
	var errs []error
	for i, p := range parts {
		p = strings.TrimSpace(p)
		if err := checkURL(p); err != nil {
			if len(parts) > 1 {
				err = fmt.Errorf("URL %d of %d: %w", i+1, len(parts), err)
			}
			errs = append(errs, err)
			continue
		}
		urls = append(urls, p)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return urls, nil
}

// checkURL checks one broker URL; its errors never quote the URL's password.
func checkURL(raw string) error {
	if raw == "" {
		return errors.New("empty URL")
	}
	u, err := url.Parse(raw)
	if err != nil {
		// url.Parse quotes the whole URL in its error: keep only the reason.
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return fmt.Errorf("not a URL (%v)", err)
	}
	switch {
	case u.Scheme != "amqp" && u.Scheme != "amqps":
		return fmt.Errorf("scheme %q is not amqp or amqps (%s)", u.Scheme, Addr(raw))
	case u.Hostname() == "":
		return fmt.Errorf("no host (%s)", u.Redacted())
	}
	return nil
}

// Addr is the host:port of a broker URL, with the scheme's default port when the URL has
// none: how logs and errors name a broker (never with its credentials).
func Addr(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return UnparseableURL
	}
	if u.Port() != "" {
		return u.Host
	}
	port := "5672"
	if u.Scheme == "amqps" {
		port = "5671"
	}
	return net.JoinHostPort(u.Hostname(), port)
}

// Addrs is Addr of each URL in a comma-separated list, joined with commas.
func Addrs(raw string) string {
	parts := strings.Split(raw, ",")
	for i, p := range parts {
		parts[i] = Addr(strings.TrimSpace(p))
	}
	return strings.Join(parts, ",")
}

// shuffled returns urls in a random order (a new slice).
func shuffled(urls []string) []string {
	out := make([]string, len(urls))
	for i, j := range rand.Perm(len(urls)) {
		out[i] = urls[j]
	}
	return out
}
