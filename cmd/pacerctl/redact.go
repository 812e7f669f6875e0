package main

import (
	"io"
	"net/url"
	"strings"
)

// redacted is what a URL's password (or a NATS token) reads as in
// pacerctl's output.
const redacted = "xxxxx"

// redact hides the passwords of the --redis, --nats and --etcd addresses
// wherever s shows them: in the addresses pacerctl prints itself and in
// the errors of the clients and parsers it calls, which quote an address
// whole. What it replaces is the user info as written ("u:pw@"), and as
// decoded where the URL parses, so a short password cannot garble
// unrelated text.
func (a *app) redact(s string) string {
	lists := []struct {
		addrs      string
		bareSecret bool // userinfo without ':' is a secret (a NATS token)
	}{{a.redisAddrs, false}, {a.natsURL, true}, {a.etcdURLs, false}}
	for _, l := range lists {
		for _, addr := range strings.Split(l.addrs, ",") {
			for _, ui := range userInfos(strings.TrimSpace(addr)) {
				user, _, hasPassword := strings.Cut(ui, ":")
				switch {
				case hasPassword:
					s = strings.ReplaceAll(s, ui+"@", user+":"+redacted+"@")
				case l.bareSecret:
					s = strings.ReplaceAll(s, ui+"@", redacted+"@")
				}
			}
		}
	}
	return s
}

// userInfos returns the user info of addr ("user:password" before the
// host's '@'), as written and, if the URL parses, as decoded.
func userInfos(addr string) []string {
	_, rest, ok := strings.Cut(addr, "://")
	if !ok {
		return nil
	}
	at := strings.LastIndexByte(rest, '@')
	if at <= 0 {
		return nil
	}
	out := []string{rest[:at]}
	if u, err := url.Parse(addr); err == nil && u.User != nil {
		decoded := u.User.Username()
		if pw, ok := u.User.Password(); ok {
			decoded += ":" + pw
		}
		if decoded != out[0] {
			out = append(out, decoded)
		}
	}
	return out
}

// redactingWriter is an output of pacerctl: every write goes through
// app.redact.
type redactingWriter struct {
	w io.Writer
	a *app
}

func (r redactingWriter) Write(p []byte) (int, error) {
	if _, err := io.WriteString(r.w, r.a.redact(string(p))); err != nil {
		return 0, err
	}
	return len(p), nil
}
