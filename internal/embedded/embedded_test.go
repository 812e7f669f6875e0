package embedded

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	clientv3 "go.etcd.io/etcd/client/v3"
)

func TestEtcdAndNATS(t *testing.T) {
	e, err := StartEtcd(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	c, err := clientv3.New(clientv3.Config{Endpoints: []string{e.Endpoint}, DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := c.Put(ctx, "k", "v"); err != nil {
		t.Fatal(err)
	}

	n, err := StartNATS()
	if err != nil {
		t.Fatal(err)
	}
	url := n.URL
	nc, err := nats.Connect(url, nats.MaxReconnects(-1), nats.ReconnectWait(20*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	n.Close()
	if err := n.Start(); err != nil {
		t.Fatal(err)
	}
	if n.URL != url {
		t.Fatalf("restarted on %s, want %s", n.URL, url)
	}
	defer n.Close()
	deadline := time.Now().Add(5 * time.Second)
	for !nc.IsConnected() {
		if time.Now().After(deadline) {
			t.Fatal("client did not reconnect after a NATS restart")
		}
		time.Sleep(10 * time.Millisecond)
	}
}
