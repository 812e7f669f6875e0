package main

import (
	"fmt"
	"os"
	"time"

	"github.com/pacer/pacer"
	"github.com/pacer/pacer/broadcast"
	"github.com/pacer/pacer/config"
	"github.com/pacer/pacer/lease"
)

// flushTimeout bounds how long a broadcast waits for the NATS server.
const flushTimeout = 2 * time.Second

// announce tells the daemons that campaign c changed, with an event of kind
// pacer.EventChanged or pacer.EventRevoked. With --nats it publishes
// the event and waits until the server has it; without, it says on stderr
// that the daemons learn of the change from the ledger instead. The ledger
// was written first: NATS only makes the daemons notice sooner, so a failed
// broadcast is an error the operator sees, but the change stands.
//
// changed is false when the command changed nothing: it then says nothing
// without --nats, and with --nats announces the current state again, so
// re-running a command re-sends a broadcast a daemon may have missed.
func (a *app) announce(kind string, c lease.Campaign, changed bool) error {
	if a.natsURL == "" {
		if changed {
			fmt.Fprintf(a.stderr, "pacerctl: note: no --nats: daemons learn of this from the ledger within a lease window\n")
		}
		return nil
	}
	e := pacer.Event{Kind: kind, Campaign: c.ID, Version: c.Version, From: "pacerctl", AtMillis: a.now().UnixMilli()}
	opt, err := a.natsOptions()
	if err != nil {
		return err
	}
	b, err := broadcast.ConnectWith(a.natsURL, opt)
	if err != nil {
		return fmt.Errorf("broadcast %s: %w (the change is in the ledger: daemons learn of it within a lease window)", broadcast.Subject(e), err)
	}
	defer b.Close()
	if err := b.Publish(e); err != nil {
		return fmt.Errorf("broadcast: %w (the change is in the ledger: daemons learn of it within a lease window)", err)
	}
	if err := b.Flush(flushTimeout); err != nil {
		return fmt.Errorf("broadcast %s to %s: %w (the change is in the ledger: daemons learn of it within a lease window)", broadcast.Subject(e), broadcast.RedactURLs(a.natsURL), err)
	}
	if !a.json {
		fmt.Fprintf(a.stdout, "broadcast %s (version %d)\n", broadcast.Subject(e), e.Version)
	}
	return nil
}

// natsOptions resolves the --nats-* flags: credentials and TLS.
func (a *app) natsOptions() (broadcast.Options, error) {
	t := a.natsTLS
	t.Enabled = t.CAFile != "" || t.CertFile != ""
	if (t.CertFile == "") != (t.KeyFile == "") {
		return broadcast.Options{}, usagef("--nats-cert and --nats-key go together")
	}
	n := 0
	for _, s := range []string{a.natsAuth.CredsFile, a.natsAuth.NkeyFile, a.natsAuth.Username} {
		if s != "" {
			n++
		}
	}
	if n > 1 || (a.natsAuth.Username == "") != (a.natsAuth.PasswordFile == "") {
		return broadcast.Options{}, usagef("give one of --nats-creds, --nats-nkey or --nats-user with --nats-password-file")
	}
	opt, err := config.NATSClientOptions(a.natsAuth, t, config.Secrets{ReadFile: os.ReadFile})
	if err != nil {
		return opt, err
	}
	opt.Name = "pacerctl"
	if a.keyFile != "" {
		b, err := os.ReadFile(a.keyFile)
		if err != nil {
			return opt, fmt.Errorf("--broadcast-key-file: %w", err)
		}
		if opt.Keys, err = broadcast.ParseKeys(b); err != nil {
			return opt, fmt.Errorf("--broadcast-key-file %s: %w", a.keyFile, err)
		}
		// Only signs: pacerctl receives nothing. The daemons' max_age applies.
		opt.MaxAge = time.Minute
		opt.Now = a.now
	}
	return opt, nil
}
