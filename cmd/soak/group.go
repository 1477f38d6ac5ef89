package main

import (
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"time"
)

// proxyGroup is the proxies of one kind of service connection (the workers' AMQP, the
// bridges' Temporal gRPC, ...), one per upstream: each node of the RabbitMQ cluster, each
// Temporal host; one proxy on a single node or server. A fault acts on the whole group.
type proxyGroup struct {
	name    string
	proxies []*proxy
	cuts    atomic.Int64 // armed confirm cuts, shared by the group's proxies
}

// startGroup starts a proxy to each upstream.
func startGroup(name string, upstreams []string, amqp bool, log *slog.Logger) (*proxyGroup, error) {
	g := &proxyGroup{name: name}
	for i, up := range upstreams {
		pname := name
		if len(upstreams) > 1 {
			pname = fmt.Sprintf("%s-%d", name, i+1)
		}
		p, err := startProxy(pname, up, amqp, &g.cuts, log)
		if err != nil {
			g.Close()
			return nil, err
		}
		g.proxies = append(g.proxies, p)
	}
	return g, nil
}

// addrs is the group's listening addresses, in the order of its upstreams.
func (g *proxyGroup) addrs() []string {
	out := make([]string, len(g.proxies))
	for i, p := range g.proxies {
		out[i] = p.Addr()
	}
	return out
}

// temporalAddress is the group as a TEMPORAL_ADDRESS: its addresses, comma-separated.
func (g *proxyGroup) temporalAddress() string { return strings.Join(g.addrs(), ",") }

// rabbitURLs is the group as a RABBITMQ_URL: url once per proxy, with the proxy's
// host:port, comma-separated.
func (g *proxyGroup) rabbitURLs(url string) string {
	out := make([]string, len(g.proxies))
	for i, a := range g.addrs() {
		out[i] = viaProxy(url, a)
	}
	return strings.Join(out, ",")
}

func (g *proxyGroup) setLatency(d time.Duration) {
	for _, p := range g.proxies {
		p.setLatency(d)
	}
}

// cutAll resets every connection of the group; it returns how many.
func (g *proxyGroup) cutAll() int {
	n := 0
	for _, p := range g.proxies {
		n += p.cutAll()
	}
	return n
}

// partition cuts every connection of the group and refuses new ones until heal.
func (g *proxyGroup) partition() int {
	n := 0
	for _, p := range g.proxies {
		n += p.partition()
	}
	return n
}

func (g *proxyGroup) heal() {
	for _, p := range g.proxies {
		p.heal()
	}
}

// confirmsDropped is how many publisher confirms the group's proxies dropped so far.
func (g *proxyGroup) confirmsDropped() int64 {
	var n int64
	for _, p := range g.proxies {
		n += p.confirmsDropped.Load()
	}
	return n
}

// armConfirmCuts makes the next n connections of the group on which the broker sends a
// publisher confirm be cut before the confirm arrives (the broker has the message; the
// client does not know). It returns how many were left unused (disarmed) after wait.
func (g *proxyGroup) armConfirmCuts(n int, wait time.Duration, stop <-chan struct{}) int {
	g.cuts.Store(int64(n))
	deadline := time.NewTimer(wait)
	defer deadline.Stop()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
wait:
	for g.cuts.Load() > 0 {
		select {
		case <-stop:
			break wait
		case <-deadline.C:
			break wait
		case <-tick.C:
		}
	}
	return int(g.cuts.Swap(0))
}

// Close closes every proxy of the group.
func (g *proxyGroup) Close() {
	for _, p := range g.proxies {
		p.Close()
	}
}
