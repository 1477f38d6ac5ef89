package service

import (
	"google.golang.org/grpc"
	"google.golang.org/grpc/resolver"
)

// frontendsScheme names the resolver of a TEMPORAL_ADDRESS list in the client's target.
const frontendsScheme = "retry-scheduler-frontends"

// frontends resolves to a fixed list of Temporal frontends. The SDK balances a connection's
// calls round-robin over the addresses its resolver gives and leaves out one that does not
// answer until it does again, so a client given every frontend of a cluster goes on when a
// host is lost, without a load balancer in front. One value serves any number of
// connections (grpc's manual resolver serves one).
type frontends []string

// dialOption makes a client's target resolve to f.
func (f frontends) dialOption() grpc.DialOption { return grpc.WithResolvers(f) }

// target is the client's target: the scheme, then the first frontend, which names the
// connection's authority (and so the name TLS verifies), as a single address would.
func (f frontends) target() string { return frontendsScheme + ":///" + f[0] }

func (f frontends) Scheme() string { return frontendsScheme }

func (f frontends) Build(_ resolver.Target, cc resolver.ClientConn, _ resolver.BuildOptions) (resolver.Resolver, error) {
	st := resolver.State{}
	for _, a := range f {
		st.Endpoints = append(st.Endpoints, resolver.Endpoint{Addresses: []resolver.Address{{Addr: a}}})
	}
	if err := cc.UpdateState(st); err != nil {
		return nil, err
	}
	return staticResolver{}, nil
}

// staticResolver has nothing to re-resolve: the list is the operator's.
type staticResolver struct{}

func (staticResolver) ResolveNow(resolver.ResolveNowOptions) {}
func (staticResolver) Close()                                {}
