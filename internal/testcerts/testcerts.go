// Package testcerts makes a private certificate authority and certificates
// signed by it, written as PEM files into a directory, so that tests can run
// redis-server, etcd and nats-server with TLS and client certificates without
// any file checked in (a checked-in key would expire, and would teach people
// to commit keys).
package testcerts

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// Set is the PEM files of one CA, a server certificate for 127.0.0.1, ::1
// and localhost, and a client certificate, all signed by the CA.
type Set struct {
	CA                    string // the CA's certificate
	ServerCert, ServerKey string
	ClientCert, ClientKey string
	// ClientName is the client certificate's common name (etcd maps it to
	// a user when a request carries no password).
	ClientName string
}

// New writes a fresh CA and its certificates into dir, with name as the
// files' prefix ("ca.pem" becomes name+"-ca.pem") and clientName as the
// client certificate's common name. Certificates are valid from an hour ago
// for a day.
func New(dir, name, clientName string) (Set, error) {
	now := time.Now()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return Set{}, err
	}
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: name + " test CA"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return Set{}, err
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return Set{}, err
	}
	s := Set{
		CA:         filepath.Join(dir, name+"-ca.pem"),
		ServerCert: filepath.Join(dir, name+"-server.pem"), ServerKey: filepath.Join(dir, name+"-server.key"),
		ClientCert: filepath.Join(dir, name+"-client.pem"), ClientKey: filepath.Join(dir, name+"-client.key"),
		ClientName: clientName,
	}
	if err := writePEM(s.CA, "CERTIFICATE", caDER); err != nil {
		return Set{}, err
	}
	leaf := func(serial int64, cn string, usage x509.ExtKeyUsage, certPath, keyPath string) error {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return err
		}
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(serial),
			Subject:      pkix.Name{CommonName: cn},
			NotBefore:    now.Add(-time.Hour),
			NotAfter:     now.Add(24 * time.Hour),
			KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
			ExtKeyUsage:  []x509.ExtKeyUsage{usage},
		}
		if usage == x509.ExtKeyUsageServerAuth {
			tmpl.DNSNames = []string{"localhost"}
			tmpl.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}
			// etcd's embedded server also uses its server certificate as a
			// client to itself (the gRPC gateway).
			tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageClientAuth)
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
		if err != nil {
			return err
		}
		keyDER, err := x509.MarshalECPrivateKey(key)
		if err != nil {
			return err
		}
		if err := writePEM(certPath, "CERTIFICATE", der); err != nil {
			return err
		}
		return writePEM(keyPath, "EC PRIVATE KEY", keyDER)
	}
	if err := leaf(2, "localhost", x509.ExtKeyUsageServerAuth, s.ServerCert, s.ServerKey); err != nil {
		return Set{}, fmt.Errorf("server certificate: %w", err)
	}
	if err := leaf(3, clientName, x509.ExtKeyUsageClientAuth, s.ClientCert, s.ClientKey); err != nil {
		return Set{}, fmt.Errorf("client certificate: %w", err)
	}
	return s, nil
}

func writePEM(path, typ string, der []byte) error {
	return os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600)
}
