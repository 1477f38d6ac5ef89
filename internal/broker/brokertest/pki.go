// Package brokertest helps tests of the TLS settings: a throwaway certificate authority that
// issues server and client certificates (PKI), and a private RabbitMQ node with a TLS
// listener signed by it (StartTLSNode). Nothing here is used outside tests.
package brokertest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// CA is a certificate authority made by a test.
type CA struct {
	Cert    *x509.Certificate
	CertPEM []byte
	key     *ecdsa.PrivateKey
}

// NewCA makes a self-signed CA valid for a day.
func NewCA(tb testing.TB, name string) *CA {
	tb.Helper()
	key := newKey(tb, "CA key")
	tmpl := &x509.Certificate{
		SerialNumber:          serial(tb),
		Subject:               pkix.Name{CommonName: name, Organization: []string{"retry-scheduler tests"}},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		tb.Fatalf("CA certificate: %v", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		tb.Fatalf("CA certificate: %v", err)
	}
	return &CA{Cert: cert, CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), key: key}
}

// Leaf is an issued certificate and its private key, PEM-encoded.
type Leaf struct {
	CertPEM, KeyPEM []byte
}

// Server issues a server certificate for hosts (DNS names or IP addresses).
func (ca *CA) Server(tb testing.TB, hosts ...string) Leaf {
	tb.Helper()
	return ca.issue(tb, hosts[0], x509.ExtKeyUsageServerAuth, hosts)
}

// Client issues a client certificate with the common name cn.
func (ca *CA) Client(tb testing.TB, cn string) Leaf {
	tb.Helper()
	return ca.issue(tb, cn, x509.ExtKeyUsageClientAuth, nil)
}

func (ca *CA) issue(tb testing.TB, cn string, usage x509.ExtKeyUsage, hosts []string) Leaf {
	tb.Helper()
	key := newKey(tb, "key")
	tmpl := &x509.Certificate{
		SerialNumber: serial(tb),
		Subject:      pkix.Name{CommonName: cn},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage:  []x509.ExtKeyUsage{usage},
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.key)
	if err != nil {
		tb.Fatalf("certificate %s: %v", cn, err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		tb.Fatalf("key %s: %v", cn, err)
	}
	return Leaf{
		CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		KeyPEM:  pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}),
	}
}

// newKey is a fresh P-256 key; what names it in the failure.
func newKey(tb testing.TB, what string) *ecdsa.PrivateKey {
	tb.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		tb.Fatalf("%s: %v", what, err)
	}
	return key
}

func serial(tb testing.TB) *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		tb.Fatalf("serial: %v", err)
	}
	return n
}

// Files are the PEM files of a CA, a server certificate for localhost and 127.0.0.1, and a
// client certificate, written into one directory.
type Files struct {
	Dir                   string
	CA                    string
	ServerCert, ServerKey string
	ClientCert, ClientKey string
}

// WriteFiles writes ca's certificate and a fresh server and client certificate into dir.
func (ca *CA) WriteFiles(tb testing.TB, dir string) Files {
	tb.Helper()
	server := ca.Server(tb, "localhost", "127.0.0.1")
	client := ca.Client(tb, "retry-scheduler-test-client")
	f := Files{
		Dir:        dir,
		CA:         filepath.Join(dir, "ca.pem"),
		ServerCert: filepath.Join(dir, "server.pem"),
		ServerKey:  filepath.Join(dir, "server.key"),
		ClientCert: filepath.Join(dir, "client.pem"),
		ClientKey:  filepath.Join(dir, "client.key"),
	}
	for path, data := range map[string][]byte{
		f.CA: ca.CertPEM, f.ServerCert: server.CertPEM, f.ServerKey: server.KeyPEM,
		f.ClientCert: client.CertPEM, f.ClientKey: client.KeyPEM,
	} {
		// Readable by the broker, which may run as another user.
		if err := os.WriteFile(path, data, 0o644); err != nil {
			tb.Fatalf("write %s: %v", path, err)
		}
	}
	return f
}
