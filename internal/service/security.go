package service

import (
	"context"
	"fmt"
	"net/http"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"

	"github.com/retry-scheduler/retry-scheduler/internal/codec"
	"github.com/retry-scheduler/retry-scheduler/internal/config"
)

// CodecPath is where the codec endpoint is mounted on the ops HTTP server: the Web UI and the
// CLI take http://<ops>/codec as their codec endpoint and append /encode or /decode.
const CodecPath = "/codec/"

// TemporalOptions are the client options of cfg's Temporal connection: address, namespace,
// TLS or mTLS, API key, :authority and gRPC metadata (Temporal's standard client settings,
// internal/config/temporalenv.go), and the payload codec when PAYLOAD_KEYS is set. The caller adds its
// logger and metrics handler. Errors name the setting at fault.
func TemporalOptions(cfg config.Config) (client.Options, error) {
	opts := client.Options{HostPort: cfg.TemporalAddress, Namespace: cfg.Namespace}
	switch addrs := cfg.TemporalAddresses(); {
	case len(addrs) == 1:
		opts.HostPort = addrs[0]
	case len(addrs) > 1:
		f := frontends(addrs)
		opts.HostPort = f.target()
		opts.ConnectionOptions.DialOptions = append(opts.ConnectionOptions.DialOptions, f.dialOption())
	}
	opts.ConnectionOptions.Authority = cfg.TemporalAuthority
	if len(cfg.TemporalGRPCMeta) > 0 {
		opts.HeadersProvider = grpcMeta(cfg.TemporalGRPCMeta)
	}
	tlsConfig, err := cfg.TemporalTLSConfig()
	if err != nil {
		return client.Options{}, err
	}
	if tlsConfig != nil {
		opts.ConnectionOptions.TLS = tlsConfig
	}
	if cfg.TemporalAPIKey != "" {
		opts.Credentials = client.NewAPIKeyStaticCredentials(cfg.TemporalAPIKey.Reveal())
		if tlsConfig == nil {
			// TEMPORAL_TLS=false on a loopback address (Validate refuses it elsewhere): without
			// this the SDK would switch TLS on by itself for an API key.
			opts.ConnectionOptions.TLSDisabled = true
		}
	}
	pc, err := cfg.PayloadCodec()
	if err != nil {
		return client.Options{}, err
	}
	if pc != nil {
		opts.DataConverter = converter.NewCodecDataConverter(converter.GetDefaultDataConverter(), pc)
	}
	return opts, nil
}

// grpcMeta sends a Temporal profile's grpc_meta on every call.
type grpcMeta map[string]config.Secret

func (m grpcMeta) GetHeaders(context.Context) (map[string]string, error) {
	h := make(map[string]string, len(m))
	for k, v := range m {
		h[k] = v.Reveal()
	}
	return h, nil
}

// codecHandler is the codec endpoint, nil unless both PAYLOAD_KEYS and CODEC_TOKEN are set.
func codecHandler(cfg config.Config) (http.Handler, error) {
	if cfg.CodecToken == "" {
		return nil, nil
	}
	pc, err := cfg.PayloadCodec()
	if err != nil {
		return nil, err
	}
	if pc == nil {
		return nil, fmt.Errorf("CODEC_TOKEN: set, but PAYLOAD_KEYS is empty")
	}
	return codec.Handler(pc, codec.HandlerOptions{Token: cfg.CodecToken.Reveal(), AllowedOrigins: cfg.CodecOrigins()})
}
