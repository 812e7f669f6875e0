package config

import (
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/pacer/pacer/bucket"
	"github.com/pacer/pacer/daemon"
)

func TestDefaultDaemonIsValid(t *testing.T) {
	if err := DefaultDaemon().Validate(); err != nil {
		t.Fatal(err)
	}
	for _, empty := range []string{"", "# only a comment\n", "---\n"} {
		d, err := ParseDaemon([]byte(empty))
		if err != nil {
			t.Fatalf("ParseDaemon(%q): %v", empty, err)
		}
		if !reflect.DeepEqual(d, DefaultDaemon()) {
			t.Errorf("ParseDaemon(%q) = %+v, want the defaults", empty, d)
		}
	}
}

func TestParseDaemon(t *testing.T) {
	full := `
socket: /tmp/p.sock
socket_mode: 0600
max_clients: 500
client_idle_timeout: 0s
client_read_timeout: 2s
client_write_timeout: 3s
max_buffered_bytes: 33554432
allowed_uids: [1000, 0]
allowed_gids: [998]
admin_max_conns: 8
admin_idle_timeout: 20s
unknown_campaign_ttl: 1m
max_campaign_loads: 16
redis: [10.0.0.1:7000, 10.0.0.2:7000]
etcd: [https://10.0.0.5:2379, 10.0.0.6:2379]
election:
  ttl: 30s
nats: nats://10.0.0.7:4222, tls://10.0.0.8:4222
admin: "[::1]:9000"
holder: bidder-17
curves_dir: /srv/curves
state_dir: /srv/state
max_amount_micros: 5_000_000
dedup_memory_bytes: 268435456
lease:
  window: 1m
  skew_bound: 2s
  grace: 5s
  cap_window: 10m
  burst_window: 500ms
  max_catch_up: 2
  standing_window: 2m
  standing_idle: 0s
tick_interval: 50ms
campaign_refresh: 1m
campaign_reread: 10m
campaign_idle: 0s
ledger_timeout: 750ms
log:
  format: console
  level: debug
ledger:
  durability: replicas:1
  durability_assume: replicas:2
  check_interval: 3s
redis_auth:
  username: pacerd
  password_file: /etc/pacer/redis.password
redis_tls:
  enabled: true
  ca_file: /etc/pacer/ca.pem
  cert_file: /etc/pacer/client.pem
  key_file: /etc/pacer/client.key
  server_name: redis.internal
etcd_auth:
  username: pacerd
  password_file: /etc/pacer/etcd.password
etcd_tls:
  enabled: true
  ca_file: /etc/pacer/ca.pem
nats_auth:
  creds_file: /etc/pacer/pacerd.creds
nats_tls:
  enabled: true
broadcast:
  key_file: /etc/pacer/broadcast.key
  max_age: 5s
`
	want := Daemon{
		Socket:             "/tmp/p.sock",
		SocketMode:         0o600,
		MaxClients:         500,
		ClientIdleTimeout:  0,
		ClientReadTimeout:  2 * time.Second,
		ClientWriteTimeout: 3 * time.Second,
		MaxBufferedBytes:   32 << 20,
		AllowedUIDs:        []int64{1000, 0},
		AllowedGIDs:        []int64{998},
		AdminMaxConns:      8,
		AdminIdleTimeout:   20 * time.Second,
		Redis:              []string{"10.0.0.1:7000", "10.0.0.2:7000"},
		Etcd:               []string{"https://10.0.0.5:2379", "10.0.0.6:2379"},
		Election:           Election{TTL: 30 * time.Second},
		NATS:               "nats://10.0.0.7:4222, tls://10.0.0.8:4222",
		Admin:              "[::1]:9000",
		CurvesDir:          "/srv/curves",
		StateDir:           "/srv/state",
		MaxAmountMicros:    5_000_000,
		Config: daemon.Config{
			Holder: "bidder-17",
			LeaseTiming: daemon.LeaseTiming{LeaseWindow: time.Minute, SkewBound: 2 * time.Second, Grace: 5 * time.Second,
				CapWindow: 10 * time.Minute, BurstWindow: 500 * time.Millisecond,
				CatchUp: 2, StandingWindow: 2 * time.Minute, StandingIdle: daemon.Never, SparseWait: 5 * time.Millisecond},
			TickInterval:       50 * time.Millisecond,
			CampaignRefresh:    time.Minute,
			CampaignReread:     10 * time.Minute,
			CampaignIdle:       daemon.Never,
			LedgerTimeout:      750 * time.Millisecond,
			DedupMemoryBytes:   256 << 20,
			UnknownCampaignTTL: time.Minute,
			MaxCampaignLoads:   16,
		},
		Log:       Log{Format: "console", Level: "debug"},
		Ledger:    Ledger{Durability: "replicas:1", DurabilityAssume: "replicas:2", CheckInterval: 3 * time.Second},
		RedisAuth: RedisAuth{Username: "pacerd", PasswordFile: "/etc/pacer/redis.password"},
		RedisTLS: TLS{Enabled: true, CAFile: "/etc/pacer/ca.pem", CertFile: "/etc/pacer/client.pem",
			KeyFile: "/etc/pacer/client.key", ServerName: "redis.internal"},
		EtcdAuth:  EtcdAuth{Username: "pacerd", PasswordFile: "/etc/pacer/etcd.password"},
		EtcdTLS:   TLS{Enabled: true, CAFile: "/etc/pacer/ca.pem"},
		NATSAuth:  NATSAuth{CredsFile: "/etc/pacer/pacerd.creds"},
		NATSTLS:   TLS{Enabled: true},
		Broadcast: Broadcast{KeyFile: "/etc/pacer/broadcast.key", MaxAge: 5 * time.Second},
	}
	got, err := ParseDaemon([]byte(full))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got  %+v\nwant %+v", got, want)
	}

	// A partial section keeps the defaults of the keys it leaves out.
	got, err = ParseDaemon([]byte("lease:\n  window: 10s\nredis: [/run/redis/redis.sock]\nadmin: \"\"\n"))
	if err != nil {
		t.Fatal(err)
	}
	want = DefaultDaemon()
	want.LeaseWindow = 10 * time.Second
	want.Redis = []string{"/run/redis/redis.sock"}
	want.Admin = ""
	if !reflect.DeepEqual(got, want) {
		t.Errorf("partial: got  %+v\nwant %+v", got, want)
	}
}

func TestParseDaemonErrors(t *testing.T) {
	for _, tc := range []struct {
		yaml, want string
	}{
		{"sockt: /x", `line 1: unknown key "sockt" (known keys: socket, socket_mode, socket_server, socket_loops, max_clients, client_idle_timeout, client_read_timeout, client_write_timeout, max_buffered_bytes, allowed_uids, allowed_gids, redis, etcd, election, nats, admin, admin_max_conns, admin_idle_timeout, curves_dir, state_dir, max_amount_micros, holder, lease, tick_interval, campaign_refresh, campaign_reread, campaign_idle, ledger_timeout, dedup_memory_bytes, unknown_campaign_ttl, max_campaign_loads, log, ledger, redis_auth, redis_tls, etcd_auth, etcd_tls, nats_auth, nats_tls, broadcast)`},
		{"lease:\n  windw: 3s", `line 2: unknown key "lease.windw" (known keys in lease: window, skew_bound, grace, cap_window, burst_window, max_catch_up, standing_window, standing_idle, sparse_wait)`},
		{"socket: /a\nsocket: /b", `line 2: socket: key appears twice (first at line 1)`},
		{"tick_interval: 100", `line 1: tick_interval: "100" is not a duration such as 30s or 100ms (a unit is required)`},
		{"lease:\n  window: 30x", `line 2: lease.window: "30x" is not a duration such as 30s or 100ms (a unit is required)`},
		{"lease:\n  window: -30s", `lease.window: -30s: must be positive`},
		{"ledger_timeout: 0s", `ledger_timeout: 0s: must be positive`},
		{"lease:\n  grace: 1s", `lease.grace: 1s must exceed lease.skew_bound 1s, or the reconciler could settle a lease its holder may still spend`},
		{"lease:\n  window: 4s", `lease.window: 4s must exceed 4 x lease.skew_bound (4s), or little of each lease is spendable`},
		{"tick_interval: 30s", `tick_interval: 30s must be shorter than lease.window 30s`},
		{"lease:\n  max_catch_up: 0", `lease.max_catch_up: 0: want 1 to 8 (a multiple of the curve's pace; 1 spreads a deficit over the rest of the day)`},
		{"lease:\n  max_catch_up: 9", `lease.max_catch_up: 9: want 1 to 8 (a multiple of the curve's pace; 1 spreads a deficit over the rest of the day)`},
		{"lease:\n  standing_window: 10s", `lease.standing_window: 10s must be at least lease.window 30s`},
		{"lease:\n  standing_idle: -1s", `lease.standing_idle: -1s: must be 0 (no standing leases) or positive`},
		{"lease:\n  sparse_wait: 2s", `lease.sparse_wait: 2s: at most 1s (a SPEND waits this long for the ledger)`},
		{"max_amount_micros: 1.5", `line 1: max_amount_micros: "1.5" is not an integer`},
		{"max_amount_micros: 0", `max_amount_micros: 0: want 1 to 1000000000000000`},
		{"dedup_memory_bytes: 65536", `dedup_memory_bytes: 65536: want 1048576 (1 MiB) to 68719476736 (64 GiB)`},
		{"dedup_memory_bytes: -1", `dedup_memory_bytes: -1: want 1048576 (1 MiB) to 68719476736 (64 GiB)`},
		{"max_amount_micros: 99999999999999999999", `line 1: max_amount_micros: "99999999999999999999" is not an integer`},
		{"socket_mode: 0999", `line 1: socket_mode: "0999" is not an octal mode such as "0660" (at most 0777)`},
		{"socket_mode: \"0440\"", `socket_mode: 0440 must give the owner read and write (at least 0600) and stay within 0777`},
		{"socket: \"\"", `socket: must not be empty`},
		{"socket: /" + strings.Repeat("s", 110), `socket: path is 111 bytes; Unix socket paths are limited to 107`},
		{"redis: []", `redis: at least one address is needed`},
		{"redis: localhost", `line 1: redis: want a list, such as [a, b]`},
		{"redis: [localhost]", `redis: "localhost": want host:port, a URL (redis://, rediss://, unix://) or a Unix socket path starting with / or .`},
		{"redis: [\"h:0\"]", `redis: "h:0": port "0": want 1 to 65535`},
		{"redis: [/run/r.sock, h:1]", `redis: "/run/r.sock": a Unix socket path must be the only address (several addresses are Cluster seeds, host:port)`},
		{"redis: [h:1, h:1]", `redis: "h:1" is listed twice`},
		{"etcd: [\"ftp://e:1\"]", `etcd[0]: "ftp://e:1": scheme "ftp": want one of http, https`},
		{"nats: http://n:4222", `nats: "http://n:4222": scheme "http": want one of nats, tls, ws, wss`},
		{"admin: 0.0.0.0:9464", `admin: "0.0.0.0:9464": host must be a loopback address (127.0.0.1, ::1 or localhost)`},
		{"admin: :9464", `admin: ":9464": want host:port or a Unix socket path starting with / or .`},
		{"admin: unix:run/admin.sock", `admin: "unix:run/admin.sock": a Unix socket path must be absolute`},
		{"admin: /" + strings.Repeat("a", 110), `admin: path is 111 bytes; Unix socket paths are limited to 107`},
		{"max_clients: 0", `max_clients: 0: want 1 to 1000000`},
		{"max_buffered_bytes: 65536", `max_buffered_bytes: 65536: want 1048576 (1 MiB) to 68719476736 (64 GiB)`},
		{"max_buffered_bytes: 0", `max_buffered_bytes: 0: want 1048576 (1 MiB) to 68719476736 (64 GiB)`},
		{"socket_server: threads", `socket_server: unknown socket_server "threads" (want goroutines, epoll or hybrid)`},
		{"socket_server: uring", `socket_server: socket_server uring was removed; use hybrid (the default on Linux), epoll or goroutines`},
		{"socket_loops: -1", `socket_loops: -1: want 0 (the default) to 1024`},
		{"admin_max_conns: 0", `admin_max_conns: 0: want 1 to 10000`},
		{"client_read_timeout: -1s", `client_read_timeout: -1s: want 0 (never) or a positive duration`},
		{"client_idle_timeout: 5", `line 1: client_idle_timeout: "5" is not a duration such as 30s or 100ms (a unit is required)`},
		{"allowed_uids: [-1, 4294967295]", "allowed_uids[0]: -1 is not a uid or gid\nallowed_uids[1]: 4294967295 is not a uid or gid"},
		{"allowed_gids: [wheel]", `line 1: allowed_gids[0]: "wheel" is not an integer`},
		{"unknown_campaign_ttl: 0s", `unknown_campaign_ttl: 0s: want more than 0 and at most 1h`},
		{"max_campaign_loads: 0", `max_campaign_loads: 0: want 1 to 10000`},
		{"etcd: [\"http://e:1\"]\netcd_tls:\n  enabled: true", `etcd[0]: "http://e:1" is http:// but etcd_tls is enabled: write https://`},
		{"etcd: [\"http://u:p@e:1\"]", `etcd[0]: no credentials in an endpoint: use etcd_auth`},
		{"etcd_auth:\n  username: u", `etcd_auth: username and password_file go together`},
		{"election:\n  ttl: 2s", `election.ttl: 2s: must be whole seconds from 3s to 5m0s`},
		{"election:\n  ttl: 10m", `election.ttl: 10m0s: must be whole seconds from 3s to 5m0s`},
		{"election:\n  ttl: 4500ms", `election.ttl: 4.5s: must be whole seconds from 3s to 5m0s`},
		{"redis: [\"redis://u:s3cret@h:1\"]\nredis_auth:\n  password_file: /p", `redis_auth: a redis URL carries credentials too; give them once`},
		{"redis: [\"redis://u:s3cret@h\"]", `redis: "redis://u:xxxxx@h": "h": want host:port, a URL (redis://, rediss://, unix://) or a Unix socket path starting with / or .`},
		{"redis_auth:\n  sentinel_password_file: /p", `redis_auth.sentinel_password_file: only for a sentinel:// address`},
		{"redis_tls:\n  ca_file: /ca.pem", `redis_tls: files or server_name given but enabled is false: set enabled: true (or remove them)`},
		{"redis_tls:\n  enabled: true\n  cert_file: /c.pem", `redis_tls: cert_file and key_file go together (the client's certificate and its key)`},
		{"redis_tls:\n  enabled: yes please", `line 2: redis_tls.enabled: "yes please" is not true or false`},
		{"nats_auth:\n  creds_file: /c\n  nkey_file: /n", `nats_auth: give one of creds_file, nkey_file or username (with password_file)`},
		{"nats_auth:\n  username: u", `nats_auth: username and password_file go together`},
		{"broadcast:\n  max_age: 0s", `broadcast.max_age: 0s: must be positive`},
		{"holder: a|b", `holder: "a|b" must not contain '|', spaces or control characters`},
		{"curves_dir: ~", `line 1: curves_dir: no value; write one (such as "" or []) or leave the key out`},
		{"curves_dir: \"\"", `curves_dir: must not be empty`},
		{"etcd:", `line 1: etcd: no value; write one (such as "" or []) or leave the key out`},
		{"log:\n  level: verbose", `log.level: "verbose": want debug, info, warn or error`},
		{"log: json", `line 1: log: want a mapping of keys, got "json"`},
		{"- a\n- b", `line 1: the file: want a mapping of keys, got a list`},
		{"socket: /a\n---\nsocket: /b", `line 2: a second YAML document; want exactly one`},
		{"socket: [/a", `yaml: line 1: did not find expected ',' or ']'`},
		// Every problem is reported, one per line.
		{"log:\n  format: xml\n  level: loud", "log.format: \"xml\": want json or console\nlog.level: \"loud\": want debug, info, warn or error"},
		{"a: 1\nb: 2", "line 1: unknown key \"a\" (known keys: socket, socket_mode, socket_server, socket_loops, max_clients, client_idle_timeout, client_read_timeout, client_write_timeout, max_buffered_bytes, allowed_uids, allowed_gids, redis, etcd, election, nats, admin, admin_max_conns, admin_idle_timeout, curves_dir, state_dir, max_amount_micros, holder, lease, tick_interval, campaign_refresh, campaign_reread, campaign_idle, ledger_timeout, dedup_memory_bytes, unknown_campaign_ttl, max_campaign_loads, log, ledger, redis_auth, redis_tls, etcd_auth, etcd_tls, nats_auth, nats_tls, broadcast)\nline 2: unknown key \"b\" (known keys: socket, socket_mode, socket_server, socket_loops, max_clients, client_idle_timeout, client_read_timeout, client_write_timeout, max_buffered_bytes, allowed_uids, allowed_gids, redis, etcd, election, nats, admin, admin_max_conns, admin_idle_timeout, curves_dir, state_dir, max_amount_micros, holder, lease, tick_interval, campaign_refresh, campaign_reread, campaign_idle, ledger_timeout, dedup_memory_bytes, unknown_campaign_ttl, max_campaign_loads, log, ledger, redis_auth, redis_tls, etcd_auth, etcd_tls, nats_auth, nats_tls, broadcast)"},
	} {
		_, err := ParseDaemon([]byte(tc.yaml))
		if err == nil || err.Error() != tc.want {
			t.Errorf("ParseDaemon(%q):\n got: %v\nwant: %s", tc.yaml, err, tc.want)
		}
	}
}

func TestFileMode(t *testing.T) {
	for in, want := range map[string]FileMode{
		`"0660"`: 0o660, `0660`: 0o660, `660`: 0o660, `"0o640"`: 0o640, `0777`: 0o777, `"0600"`: 0o600,
	} {
		d, err := ParseDaemon([]byte("socket_mode: " + in))
		if err != nil || d.SocketMode != want {
			t.Errorf("socket_mode: %s = %v, %v; want %v", in, d.SocketMode, err, want)
		}
	}
	if s := FileMode(0o660).String(); s != "0660" {
		t.Errorf("String = %q", s)
	}
}

func weightsYAML(w []float64) string {
	s := make([]string, len(w))
	for i, v := range w {
		s[i] = strconv.FormatFloat(v, 'g', -1, 64)
	}
	return "[" + strings.Join(s, ", ") + "]"
}

func ones(n int) []float64 {
	w := make([]float64, n)
	for i := range w {
		w[i] = 1
	}
	return w
}

func TestParseCurve(t *testing.T) {
	w := ones(24)
	w[20] = 5
	c, err := ParseCurve([]byte("name: peak\nslots: 24\ndescription: evening\nweights: " + weightsYAML(w)))
	if err != nil {
		t.Fatal(err)
	}
	want, _ := bucket.NewCurve("peak", w)
	if c.Name() != "peak" || !slices.Equal(c.Cumulative(), want.Cumulative()) {
		t.Errorf("got %s %v, want %v", c.Name(), c.Cumulative(), want.Cumulative())
	}
	// slots is optional.
	if _, err := ParseCurve([]byte("name: a\nweights: " + weightsYAML(ones(48)))); err != nil {
		t.Error(err)
	}
}

func TestParseCurveErrors(t *testing.T) {
	w24 := weightsYAML(ones(24))
	neg := ones(24)
	neg[3] = -1
	zero := make([]float64, 24)
	for _, tc := range []struct{ yaml, want string }{
		{"weights: " + w24, `name: missing; every curve file names its curve`},
		{"name: a", `curve "a": weights: missing`},
		{"name: Peak\nweights: " + w24, `curve "Peak": name byte 0 is 'P'; only a-z, 0-9, '_' and '-' allowed`},
		{"name: a\nslots: 48\nweights: " + w24, `curve "a": slots is 48 but there are 24 weights`},
		{"name: a\nweights: [1, 2, 3]", `curve "a": 3 weights; want 24, 48, 96 or 1440`},
		{"name: a\nweights: " + weightsYAML(neg), `curve "a": weights[3]: weight -1 is negative`},
		{"name: a\nweights: " + weightsYAML(zero), `curve "a": weights sum to 0; at least one must be positive`},
		{"name: a\nweights: [.nan" + strings.Repeat(", 1", 23) + "]", `curve "a": weights[0]: weight is NaN`},
		{"name: a\nweights: [1, x" + strings.Repeat(", 1", 22) + "]", `line 2: weights[1]: "x" is not a number`},
		{"name: a\nweight: " + w24, `line 2: unknown key "weight" (known keys: name, slots, description, weights)`},
		{"name: a\nslots: many\nweights: " + w24, `line 2: slots: "many" is not an integer`},
	} {
		_, err := ParseCurve([]byte(tc.yaml))
		if err == nil || err.Error() != tc.want {
			t.Errorf("ParseCurve(%.40q):\n got: %v\nwant: %s", tc.yaml, err, tc.want)
		}
	}
}

func TestMarshalCurveRoundTrip(t *testing.T) {
	for _, slots := range []int{24, 48, 96, 1440} {
		w := make([]float64, slots)
		for i := range w {
			w[i] = float64((i*7919)%13) + 0.1*float64(i%3) // irregular, some near-ties
		}
		w[slots/2] = 0
		c, err := bucket.NewCurve("fit-test", w)
		if err != nil {
			t.Fatal(err)
		}
		data, err := MarshalCurve(c, "fitted: \"quoted\"\nsecond line")
		if err != nil {
			t.Fatal(err)
		}
		back, err := ParseCurve(data)
		if err != nil {
			t.Fatalf("%d slots: %v\n%s", slots, err, data)
		}
		if back.Name() != c.Name() || !slices.Equal(back.Cumulative(), c.Cumulative()) {
			t.Errorf("%d slots: round trip changed the curve", slots)
		}
	}
	if _, err := MarshalCurve(bucket.Flat(24), "\xff"); err == nil {
		t.Error("invalid UTF-8 description accepted")
	}
}

func TestLoadCurves(t *testing.T) {
	w := weightsYAML(ones(24))
	good := fstest.MapFS{
		"a.yaml":        {Data: []byte("name: a\nweights: " + w)},
		"b-2.yaml":      {Data: []byte("name: b-2\nweights: " + w)},
		"README.md":     {Data: []byte("not a curve")},
		".a.yaml.swp":   {Data: []byte("junk")},
		".hidden.yaml":  {Data: []byte("junk")},
		"sub/c.yaml":    {Data: []byte("junk")},
		"old.yaml.bak":  {Data: []byte("junk")},
		"nested.d/x.md": {Data: []byte("junk")},
	}
	curves, err := LoadCurves(good)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for n := range curves {
		names = append(names, n)
	}
	slices.Sort(names)
	if !slices.Equal(names, []string{"a", "b-2", "flat"}) {
		t.Errorf("names = %v", names)
	}
	if !slices.Equal(curves["flat"].Cumulative(), bucket.Flat(24).Cumulative()) {
		t.Error("flat is not bucket.Flat(24)")
	}

	bad := fstest.MapFS{
		"a.yaml":    {Data: []byte("name: b\nweights: " + w)},
		"flat.yaml": {Data: []byte("name: flat\nweights: " + w)},
		"c.yml":     {Data: []byte("name: c\nweights: " + w)},
		"d.yaml":    {Data: []byte("name: d\nweights: [1]")},
		"e.yaml":    {Data: []byte("name: e\nweights: " + w)},
	}
	_, err = LoadCurves(bad)
	want := strings.Join([]string{
		`curves: a.yaml: names curve "b"; the name must match the file name (b.yaml)`,
		`curves: c.yml: curve files must end in .yaml`,
		`curves: d.yaml: curve "d": 1 weights; want 24, 48, 96 or 1440`,
		`curves: flat.yaml: "flat" is the built-in constant-rate curve and cannot be redefined; give this curve another name`,
	}, "\n")
	if err == nil || err.Error() != want {
		t.Errorf("LoadCurves(bad):\n got: %v\nwant: %s", err, want)
	}

	if _, err := LoadCurves(os.DirFS(filepath.Join(t.TempDir(), "missing"))); err == nil {
		t.Error("missing directory: no error")
	}
}

// The shipped examples must parse: a config that does not load is worse
// than none.
func TestShippedConfigs(t *testing.T) {
	data, err := os.ReadFile("../configs/pacerd.example.yaml")
	if err != nil {
		t.Fatal(err)
	}
	d, err := ParseDaemon(data)
	if err != nil {
		t.Fatal(err)
	}
	// The example documents the defaults, so it must equal them.
	if !reflect.DeepEqual(d, DefaultDaemon()) {
		t.Errorf("example config differs from the defaults:\n got  %+v\nwant %+v", d, DefaultDaemon())
	}
	// And it must mention every key, so it stays the complete reference.
	for _, key := range allKeys(reflect.TypeFor[Daemon](), "") {
		last := key[strings.LastIndex(key, ".")+1:]
		if !strings.Contains(string(data), "\n"+strings.Repeat(" ", 2*strings.Count(key, "."))+last+":") {
			t.Errorf("example config does not document %s", key)
		}
	}

	curves, err := LoadCurves(os.DirFS("../configs/curves"))
	if err != nil {
		t.Fatal(err)
	}
	files, _ := filepath.Glob("../configs/curves/*.yaml")
	if len(files) < 3 || len(curves) != len(files)+1 {
		t.Fatalf("%d curve files, %d curves loaded", len(files), len(curves))
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		c, err := ParseCurve(data)
		if err != nil {
			t.Errorf("%s: %v", f, err)
			continue
		}
		if c.Slots() != 24 {
			t.Errorf("%s: %d slots, want 24", f, c.Slots())
		}
	}
}

func allKeys(t reflect.Type, prefix string) []string {
	var keys []string
	for _, f := range yamlFields(t) {
		name := yamlName(f)
		if f.Type.Kind() == reflect.Struct && f.Type != reflect.TypeFor[time.Duration]() {
			keys = append(keys, allKeys(f.Type, prefix+name+".")...)
			continue
		}
		keys = append(keys, prefix+name)
	}
	return keys
}

// Every key pacerd's config file has documented keeps its name, and each of
// the daemon's keys reaches the daemon.Config field the daemon runs with,
// with the file's meaning (0s for "never" included); an empty file means the
// daemon's own defaults.
func TestEveryDocumentedKeyMaps(t *testing.T) {
	// The keys as documented before daemon.Config became the file's daemon
	// section: none may be lost or renamed.
	documented := []string{"socket", "socket_mode", "socket_server", "socket_loops", "max_clients", "client_idle_timeout",
		"client_read_timeout", "client_write_timeout", "max_buffered_bytes", "allowed_uids", "allowed_gids", "redis", "etcd", "election.ttl", "nats",
		"admin", "admin_max_conns", "admin_idle_timeout", "unknown_campaign_ttl", "max_campaign_loads", "holder",
		"curves_dir", "state_dir", "max_amount_micros", "dedup_memory_bytes",
		"lease.window", "lease.skew_bound", "lease.grace", "lease.cap_window", "lease.burst_window",
		"lease.max_catch_up", "lease.standing_window", "lease.standing_idle", "lease.sparse_wait",
		"tick_interval", "campaign_refresh", "campaign_reread", "campaign_idle", "ledger_timeout",
		"log.format", "log.level", "ledger.durability", "ledger.durability_assume", "ledger.check_interval", "ledger.packed_counters",
		"redis_auth.username", "redis_auth.password_file", "redis_auth.sentinel_username",
		"redis_auth.sentinel_password_file", "redis_tls.enabled", "redis_tls.ca_file", "redis_tls.cert_file",
		"redis_tls.key_file", "redis_tls.server_name", "etcd_auth.username", "etcd_auth.password_file",
		"etcd_tls.enabled", "etcd_tls.ca_file", "etcd_tls.cert_file", "etcd_tls.key_file", "etcd_tls.server_name",
		"nats_auth.creds_file", "nats_auth.nkey_file", "nats_auth.username", "nats_auth.password_file",
		"nats_tls.enabled", "nats_tls.ca_file", "nats_tls.cert_file", "nats_tls.key_file", "nats_tls.server_name",
		"broadcast.key_file", "broadcast.max_age"}
	got := allKeys(reflect.TypeFor[Daemon](), "")
	slices.Sort(got)
	want := slices.Sorted(slices.Values(documented))
	if !slices.Equal(got, want) {
		t.Errorf("config keys changed:\n got  %v\nwant %v", got, want)
	}

	// Each daemon key, set to a value other than its default, is what the
	// daemon runs with.
	for _, tc := range []struct {
		yaml  string
		field func(daemon.Config) any
		want  any
	}{
		{"holder: bidder-9", func(c daemon.Config) any { return c.Holder }, "bidder-9"},
		{"lease:\n  window: 1m", func(c daemon.Config) any { return c.LeaseWindow }, time.Minute},
		{"lease:\n  skew_bound: 2s\n  grace: 6s", func(c daemon.Config) any { return c.SkewBound }, 2 * time.Second},
		{"lease:\n  grace: 9s", func(c daemon.Config) any { return c.Grace }, 9 * time.Second},
		{"lease:\n  cap_window: 7m", func(c daemon.Config) any { return c.CapWindow }, 7 * time.Minute},
		{"lease:\n  burst_window: 3s", func(c daemon.Config) any { return c.BurstWindow }, 3 * time.Second},
		{"lease:\n  max_catch_up: 5", func(c daemon.Config) any { return c.CatchUp }, int64(5)},
		{"lease:\n  standing_window: 9m", func(c daemon.Config) any { return c.StandingWindow }, 9 * time.Minute},
		{"lease:\n  standing_idle: 2h", func(c daemon.Config) any { return c.StandingIdle }, 2 * time.Hour},
		{"lease:\n  standing_idle: 0s", func(c daemon.Config) any { return c.StandingIdle }, daemon.Never},
		{"lease:\n  sparse_wait: 0s", func(c daemon.Config) any { return c.SparseWait }, daemon.Never},
		{"lease:\n  sparse_wait: 20ms", func(c daemon.Config) any { return c.SparseWait }, 20 * time.Millisecond},
		{"tick_interval: 250ms", func(c daemon.Config) any { return c.TickInterval }, 250 * time.Millisecond},
		{"campaign_refresh: 45s", func(c daemon.Config) any { return c.CampaignRefresh }, 45 * time.Second},
		{"campaign_reread: 20m", func(c daemon.Config) any { return c.CampaignReread }, 20 * time.Minute},
		{"campaign_idle: 1h", func(c daemon.Config) any { return c.CampaignIdle }, time.Hour},
		{"campaign_idle: 0s", func(c daemon.Config) any { return c.CampaignIdle }, daemon.Never},
		{"ledger_timeout: 3s", func(c daemon.Config) any { return c.LedgerTimeout }, 3 * time.Second},
		{"dedup_memory_bytes: 2097152", func(c daemon.Config) any { return c.DedupMemoryBytes }, int64(2 << 20)},
		{"unknown_campaign_ttl: 30s", func(c daemon.Config) any { return c.UnknownCampaignTTL }, 30 * time.Second},
		{"max_campaign_loads: 8", func(c daemon.Config) any { return c.MaxCampaignLoads }, 8},
	} {
		d, err := ParseDaemon([]byte(tc.yaml))
		if err != nil {
			t.Errorf("%q: %v", tc.yaml, err)
			continue
		}
		run, err := d.Config.WithDefaults()
		if err != nil {
			t.Errorf("%q: daemon config: %v", tc.yaml, err)
			continue
		}
		if got := tc.field(run); got != tc.want {
			t.Errorf("%q: the daemon runs with %v, want %v", tc.yaml, got, tc.want)
		}
	}

	// An empty file means the daemon's defaults, key by key (holder aside:
	// pacerd names it after the host, the daemon "pacerd").
	d, err := ParseDaemon(nil)
	if err != nil {
		t.Fatal(err)
	}
	def, err := daemon.Config{}.WithDefaults()
	if err != nil {
		t.Fatal(err)
	}
	var compare func(file, dflt reflect.Value, prefix string)
	compare = func(file, dflt reflect.Value, prefix string) {
		for _, f := range yamlFields(file.Type()) {
			key := prefix + yamlName(f)
			fv, dv := file.FieldByIndex(f.Index), dflt.FieldByIndex(f.Index)
			switch {
			case key == "holder":
			case f.Type.Kind() == reflect.Struct:
				compare(fv, dv, key+".")
			case !fv.Equal(dv):
				t.Errorf("%s: an empty file gives %v, the daemon's default is %v", key, fv, dv)
			}
		}
	}
	compare(reflect.ValueOf(d.Config), reflect.ValueOf(def), "")
}
