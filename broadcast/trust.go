package broadcast

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/pacer/pacer"
)

// Trusted broadcasts. With keys, every event is signed by its sender:
// HMAC-SHA256, with the first key, over the subject and the exact payload,
// which carries the sender's clock (AtMillis) and a random nonce. A
// receiver acts on an event only if a key verifies it, it is at most MaxAge
// from the receiver's clock (either way), and its nonce was not seen within
// that window. The signature travels in a message header, so the payload
// signed is the payload received, byte for byte.
//
// Authentication is not authority: even a valid event only makes a daemon
// ask the ledger sooner (see daemon.HandleEvent).

// SignatureHeader is the NATS header that carries an event's signature,
// "v1=" and the base64 (standard, padded) HMAC-SHA256.
const SignatureHeader = "Pacer-Sig"

// MinKeyBytes is the shortest key accepted: 32 bytes, SHA-256's block of
// security.
const MinKeyBytes = 32

// maxPayload bounds an event's payload: real ones are under 300 bytes.
const maxPayload = 4096

// maxNonces bounds the replay memory. Real traffic is a few events per
// campaign-day; only a holder of the key can add entries.
const maxNonces = 1 << 16

// Rejection reasons, as counted in BroadcastStats.Rejected and the
// pacer_broadcast_rejected_total metric.
const (
	RejectUnsigned = "unsigned" // no signature, with keys configured
	RejectForged   = "forged"   // no key verifies the signature
	RejectStale    = "stale"    // AtMillis beyond MaxAge of the receiver's clock
	RejectReplayed = "replayed" // the nonce was seen within MaxAge
	RejectFull     = "replay-full"
)

// RejectReasons lists every rejection reason, for metrics.
var RejectReasons = []string{RejectUnsigned, RejectForged, RejectStale, RejectReplayed, RejectFull}

// ParseKeys parses a broadcast key file's content: one key per line
// (blank lines and # comments skipped), each at least MinKeyBytes bytes as
// written (base64 or hex text is used as is, not decoded). The first key
// signs; every key verifies, so a fleet rotates by adding the new key second,
// then moving it first, then dropping the old one.
func ParseKeys(contents []byte) ([][]byte, error) {
	var keys [][]byte
	for i, line := range splitLines(contents) {
		if len(line) == 0 || line[0] == '#' {
			continue
		}
		if len(line) < MinKeyBytes {
			return nil, fmt.Errorf("line %d: key of %d bytes; at least %d needed (head -c 32 /dev/urandom | base64)", i+1, len(line), MinKeyBytes)
		}
		keys = append(keys, line)
	}
	if len(keys) == 0 {
		return nil, errors.New("no key in the file")
	}
	return keys, nil
}

func splitLines(b []byte) [][]byte {
	var out [][]byte
	for len(b) > 0 {
		i := 0
		for i < len(b) && b[i] != '\n' {
			i++
		}
		line := b[:i]
		for len(line) > 0 && (line[len(line)-1] == '\r' || line[len(line)-1] == ' ' || line[len(line)-1] == '\t') {
			line = line[:len(line)-1]
		}
		out = append(out, line)
		if i < len(b) {
			i++
		}
		b = b[i:]
	}
	return out
}

// trust signs and verifies events; nil means broadcasts are not
// authenticated. Safe for concurrent use.
type trust struct {
	keys   [][]byte
	maxAge time.Duration
	now    func() time.Time

	mu     sync.Mutex
	nonces map[string]int64 // nonce → expiry (unix ms)
	pruned int64
}

func mac(key []byte, subject string, data []byte) []byte {
	h := hmac.New(sha256.New, key)
	h.Write([]byte(subject))
	h.Write([]byte{'\n'})
	h.Write(data)
	return h.Sum(nil)
}

func (t *trust) sign(subject string, data []byte) string {
	return "v1=" + base64.StdEncoding.EncodeToString(mac(t.keys[0], subject, data))
}

func newNonce() string {
	var b [16]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// verify checks the signature of a payload; "" if a key verifies it.
func (t *trust) verify(subject string, data []byte, sig string) string {
	if sig == "" {
		return RejectUnsigned
	}
	if len(sig) < 3 || sig[:3] != "v1=" {
		return RejectForged
	}
	got, err := base64.StdEncoding.DecodeString(sig[3:])
	if err != nil {
		return RejectForged
	}
	for _, k := range t.keys {
		if hmac.Equal(got, mac(k, subject, data)) {
			return ""
		}
	}
	return RejectForged
}

// admit checks a verified event's age and nonce, and remembers the nonce;
// "" if the event may be acted on.
func (t *trust) admit(e pacer.Event) string {
	now := t.now().UnixMilli()
	age := now - e.AtMillis
	if e.AtMillis <= 0 || age > t.maxAge.Milliseconds() || -age > t.maxAge.Milliseconds() {
		return RejectStale
	}
	if len(e.Nonce) < 16 {
		return RejectForged // a signed event without a nonce was not made by Publish
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.nonces == nil {
		t.nonces = map[string]int64{}
	}
	if _, ok := t.nonces[e.Nonce]; ok {
		return RejectReplayed
	}
	if len(t.nonces) >= maxNonces || now-t.pruned > t.maxAge.Milliseconds() {
		for n, exp := range t.nonces {
			if exp < now {
				delete(t.nonces, n)
			}
		}
		t.pruned = now
	}
	if len(t.nonces) >= maxNonces {
		return RejectFull
	}
	t.nonces[e.Nonce] = e.AtMillis + t.maxAge.Milliseconds()
	return ""
}
