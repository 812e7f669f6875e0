// Package systemd_test checks what `make install` lays out and the systemd
// units it installs, without systemd running as PID 1: the install tree is
// inspected file by file, the units are checked by `systemd-analyze verify`
// against that tree, and their hardening keys are read back as INI.
package systemd_test

import (
	"bufio"
	"bytes"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/pacer/pacer/config"
)

// repoRoot is where the Makefile lives; go test runs in the package dir.
const repoRoot = ".."

// makeInstall runs `make install` into destdir. The first call in the test
// binary lets install build bin/ (make install depends on build); later calls
// pass -o build so the binaries are not relinked for every tree.
func makeInstall(t *testing.T, destdir, prefix string) {
	t.Helper()
	buildOnce.Do(func() { buildErr = runMake(t, "install", destdir, prefix) })
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	if err := runMake(t, "install", destdir, prefix, "-o", "build"); err != nil {
		t.Fatal(err)
	}
}

var (
	buildOnce sync.Once
	buildErr  error
)

func runMake(t *testing.T, target, destdir, prefix string, extra ...string) error {
	t.Helper()
	args := append([]string{"-C", repoRoot, "--no-print-directory"}, extra...)
	args = append(args, target, "DESTDIR="+destdir, "PREFIX="+prefix)
	cmd := exec.Command("make", args...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("make %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	t.Logf("make %s:\n%s", target, out)
	return nil
}

// Where `make install` puts things (Makefile defaults).
const (
	unitDir     = "lib/systemd/system"
	sysusersDir = "usr/lib/sysusers.d"
	tmpfilesDir = "usr/lib/tmpfiles.d"
)

func TestInstallLayout(t *testing.T) {
	for _, prefix := range []string{"/usr/local", "/opt/pacer"} {
		t.Run(strings.Trim(prefix, "/"), func(t *testing.T) {
			dest := t.TempDir()
			makeInstall(t, dest, prefix)
			bin := strings.TrimPrefix(prefix, "/") + "/bin"

			want := map[string]fs.FileMode{
				bin + "/pacerd":                       0o755,
				bin + "/pacerctl":                     0o755,
				bin + "/pacer-export":                 0o755,
				unitDir + "/pacerd.service":           0o644,
				unitDir + "/pacer-export.service":     0o644,
				unitDir + "/pacerd.socket":            0o644,
				sysusersDir + "/pacer.conf":           0o644,
				tmpfilesDir + "/pacer.conf":           0o644,
				"etc/pacer/pacerd.yaml":               0o644,
				"etc/pacer/curves/daytime.yaml":       0o644,
				"etc/pacer/curves/evening-peak.yaml":  0o644,
				"etc/pacer/curves/overnight-low.yaml": 0o644,
			}
			curves, _ := filepath.Glob(filepath.Join(repoRoot, "configs/curves/*.yaml"))
			for _, c := range curves {
				want["etc/pacer/curves/"+filepath.Base(c)] = 0o644
			}
			got := map[string]fs.FileMode{}
			err := filepath.WalkDir(dest, func(p string, d fs.DirEntry, err error) error {
				if err != nil || d.IsDir() {
					return err
				}
				info, err := d.Info()
				if err != nil {
					return err
				}
				rel, _ := filepath.Rel(dest, p)
				got[rel] = info.Mode()
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			for name, mode := range want {
				m, ok := got[name]
				switch {
				case !ok:
					t.Errorf("%s: not installed", name)
				case m != mode:
					t.Errorf("%s: mode %v, want %v", name, m, mode)
				}
			}
			for name := range got {
				if _, ok := want[name]; !ok {
					t.Errorf("%s: installed but not expected (only pacerd, pacerctl and pacer-export are installed)", name)
				}
			}
			for _, d := range []string{"etc/pacer", "etc/pacer/curves", unitDir} {
				if info, err := os.Stat(filepath.Join(dest, d)); err != nil {
					t.Error(err)
				} else if info.Mode().Perm() != 0o755 {
					t.Errorf("%s: mode %v, want 0755", d, info.Mode().Perm())
				}
			}

			// The installed unit starts the installed binary.
			svc := parseUnitFile(t, filepath.Join(dest, unitDir, "pacerd.service"))
			wantExec := prefix + "/bin/pacerd --config /etc/pacer/pacerd.yaml"
			if got := svc.get("Service", "ExecStart"); got != wantExec {
				t.Errorf("installed ExecStart=%q, want %q", got, wantExec)
			}
			exp := parseUnitFile(t, filepath.Join(dest, unitDir, "pacer-export.service"))
			if got, want := exp.get("Service", "ExecStart"), prefix+"/bin/pacer-export run"; got != want {
				t.Errorf("installed pacer-export ExecStart=%q, want %q", got, want)
			}
			// Apart from ExecStart, the installed units are the repo's.
			for _, u := range []string{"pacerd.service", "pacerd.socket", "pacer-export.service"} {
				src, _ := os.ReadFile(filepath.Join(repoRoot, "systemd", u))
				inst, _ := os.ReadFile(filepath.Join(dest, unitDir, u))
				if !bytes.Equal(dropExecStart(src), dropExecStart(inst)) {
					t.Errorf("installed %s differs from systemd/%s beyond ExecStart=", u, u)
				}
			}
			if got, _ := os.ReadFile(filepath.Join(dest, sysusersDir, "pacer.conf")); !bytes.Equal(got, readRepo(t, "systemd/pacer.sysusers.conf")) {
				t.Error("installed sysusers.d/pacer.conf differs from systemd/pacer.sysusers.conf")
			}

			// The installed binary runs and reports a version.
			out, err := exec.Command(filepath.Join(dest, bin, "pacerd"), "--version").CombinedOutput()
			if err != nil || len(bytes.TrimSpace(out)) == 0 {
				t.Errorf("pacerd --version: %v, output %q", err, out)
			}

			// The installed config and curves load with pacerd's own parsers
			// and agree with the units.
			data, err := os.ReadFile(filepath.Join(dest, "etc/pacer/pacerd.yaml"))
			if err != nil {
				t.Fatal(err)
			}
			cfg, err := config.ParseDaemon(data)
			if err != nil {
				t.Fatalf("installed pacerd.yaml does not parse: %v", err)
			}
			if _, err := config.LoadCurves(os.DirFS(filepath.Join(dest, "etc/pacer/curves"))); err != nil {
				t.Errorf("installed curves do not load: %v", err)
			}
			sock := parseUnitFile(t, filepath.Join(dest, unitDir, "pacerd.socket"))
			if l := sock.get("Socket", "ListenStream"); cfg.Socket != l {
				t.Errorf("pacerd.yaml socket %q, pacerd.socket ListenStream=%q", cfg.Socket, l)
			}
			if m := sock.get("Socket", "SocketMode"); fmt.Sprintf("%04o", uint32(cfg.SocketMode)) != m {
				t.Errorf("pacerd.yaml socket_mode %v, pacerd.socket SocketMode=%s", cfg.SocketMode, m)
			}
			if want := "/run/" + svc.get("Service", "RuntimeDirectory"); filepath.Dir(cfg.Socket) != want {
				t.Errorf("socket %q is not in RuntimeDirectory %s", cfg.Socket, want)
			}
			if want := "/var/lib/" + svc.get("Service", "StateDirectory"); cfg.StateDir != want {
				t.Errorf("pacerd.yaml state_dir %q, StateDirectory= gives %s", cfg.StateDir, want)
			}
			if want := "/etc/" + svc.get("Service", "ConfigurationDirectory") + "/curves"; cfg.CurvesDir != want {
				t.Errorf("pacerd.yaml curves_dir %q, want %s", cfg.CurvesDir, want)
			}
		})
	}
}

func TestInstallKeepsOperatorConfig(t *testing.T) {
	dest := t.TempDir()
	makeInstall(t, dest, "/usr/local")
	conf := filepath.Join(dest, "etc/pacer/pacerd.yaml")
	curve := filepath.Join(dest, "etc/pacer/curves/daytime.yaml")
	mine := []byte("# the operator's config\nsocket: /run/pacer/pacer.sock\nadmin: 127.0.0.1:9999\n")
	myCurve := []byte("# the operator's curve\n")
	if err := os.WriteFile(conf, mine, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(curve, myCurve, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{conf, curve} { // WriteFile keeps an existing file's mode
		if err := os.Chmod(p, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	// A binary that changed since: reinstall must replace it.
	pacerd := filepath.Join(dest, "usr/local/bin/pacerd")
	if err := os.WriteFile(pacerd, []byte("old"), 0o755); err != nil {
		t.Fatal(err)
	}
	makeInstall(t, dest, "/usr/local")

	for path, want := range map[string][]byte{conf: mine, curve: myCurve} {
		got, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("second make install overwrote %s", path)
		}
		if info, _ := os.Stat(path); info.Mode().Perm() != 0o600 {
			t.Errorf("second make install changed the mode of %s to %v", path, info.Mode().Perm())
		}
	}
	if got, _ := os.ReadFile(pacerd); string(got) == "old" {
		t.Error("second make install did not replace the pacerd binary")
	}
}

func TestUninstall(t *testing.T) {
	dest := t.TempDir()
	makeInstall(t, dest, "/usr/local")
	if err := runMake(t, "uninstall", dest, "/usr/local"); err != nil {
		t.Fatal(err)
	}
	for _, gone := range []string{
		"usr/local/bin/pacerd", "usr/local/bin/pacerctl",
		unitDir + "/pacerd.service", unitDir + "/pacerd.socket",
		sysusersDir + "/pacer.conf", tmpfilesDir + "/pacer.conf",
	} {
		if _, err := os.Lstat(filepath.Join(dest, gone)); !os.IsNotExist(err) {
			t.Errorf("%s still there after make uninstall (err %v)", gone, err)
		}
	}
	for _, kept := range []string{"etc/pacer/pacerd.yaml", "etc/pacer/curves/daytime.yaml"} {
		if _, err := os.Stat(filepath.Join(dest, kept)); err != nil {
			t.Errorf("make uninstall must keep %s: %v", kept, err)
		}
	}
}

// TestSystemdAnalyzeVerify runs `systemd-analyze verify --root=` on the units
// in an installed tree, so ExecStart= names a binary that exists. The tree
// gets a copy of the host's own unit files (sysinit.target, sockets.target,
// ...), which the verifier needs to load the dependencies.
func TestSystemdAnalyzeVerify(t *testing.T) {
	sa, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skip("systemd-analyze is not installed (Debian: apt-get install systemd); units not verified")
	}
	hostUnits := ""
	for _, d := range []string{"/usr/lib/systemd/system", "/lib/systemd/system"} {
		if _, err := os.Stat(filepath.Join(d, "sysinit.target")); err == nil {
			hostUnits = d
			break
		}
	}
	if hostUnits == "" {
		t.Skip("systemd-analyze is installed but the host has no systemd unit files (sysinit.target) for it to resolve dependencies against; units not verified")
	}

	dest := t.TempDir()
	makeInstall(t, dest, "/usr/local")
	if err := copyUnits(hostUnits, filepath.Join(dest, "usr/lib/systemd/system")); err != nil {
		t.Fatal(err)
	}

	// Canary: a trivial, correct unit in the same root. If the tool cannot
	// verify that, it cannot run here, and that says nothing about our units.
	canary := "[Unit]\nDescription=canary\n[Service]\nType=oneshot\nExecStart=/usr/local/bin/pacerd --version\n"
	canaryPath := filepath.Join(dest, "etc/systemd/system/sa-canary.service")
	if err := os.MkdirAll(filepath.Dir(canaryPath), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(canaryPath, []byte(canary), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(sa, "verify", "--man=no", "--root="+dest, canaryPath).CombinedOutput(); err != nil || len(bytes.TrimSpace(out)) > 0 {
		t.Skipf("systemd-analyze cannot verify even a trivial unit in this environment (%v): %s", err, out)
	}
	os.Remove(canaryPath)

	units := []string{filepath.Join(dest, unitDir, "pacerd.service"), filepath.Join(dest, unitDir, "pacerd.socket")}
	cmd := exec.Command(sa, append([]string{"verify", "--man=no", "--root=" + dest}, units...)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Errorf("systemd-analyze verify failed: %v\n%s", err, out)
	}
	// verify exits 0 on warnings such as unknown keys: any line about our
	// units is a failure; other lines (the host's units) are only logged.
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		switch {
		case line == "":
		case strings.Contains(line, "pacer"):
			t.Errorf("systemd-analyze verify: %s", line)
		default:
			t.Logf("systemd-analyze verify (not about our units): %s", line)
		}
	}

	// The exposure score of the hardening, offline (systemd >= 250).
	sec := exec.Command(sa, "security", "--offline=yes", "--threshold=25", "--root="+dest, units[0])
	out, err = sec.CombinedOutput()
	switch {
	case err != nil && bytes.Contains(out, []byte("unrecognized option")):
		t.Logf("systemd-analyze security --offline is not supported by this systemd; exposure not checked")
	case err != nil:
		t.Errorf("systemd-analyze security: exposure above 2.5 or error: %v\n%s", err, out)
	default:
		if i := bytes.Index(out, []byte("Overall exposure level")); i >= 0 {
			t.Logf("%s", bytes.TrimSpace(out[i:]))
		}
	}
}

// TestSysusersTmpfiles applies the sysusers.d and tmpfiles.d snippets to the
// installed tree (--root), which proves they parse and that /run/pacer comes
// out 0750 pacer:pacer — what pacerd.service's RuntimeDirectory= makes too.
func TestSysusersTmpfiles(t *testing.T) {
	sysusers, err1 := exec.LookPath("systemd-sysusers")
	tmpfiles, err2 := exec.LookPath("systemd-tmpfiles")
	if err1 != nil || err2 != nil {
		t.Skip("systemd-sysusers or systemd-tmpfiles is not installed (Debian: apt-get install systemd); snippets not applied")
	}
	dest := t.TempDir()
	makeInstall(t, dest, "/usr/local")
	if out, err := exec.Command(sysusers, "--root="+dest, filepath.Join(dest, sysusersDir, "pacer.conf")).CombinedOutput(); err != nil {
		t.Fatalf("systemd-sysusers: %v\n%s", err, out)
	} else if strings.Contains(string(out), "pacer.conf") {
		t.Errorf("systemd-sysusers complained about pacer.conf: %s", out)
	}
	uid, gid := -1, -1
	passwd := readFile(t, filepath.Join(dest, "etc/passwd"))
	for _, l := range strings.Split(passwd, "\n") {
		if f := strings.Split(l, ":"); len(f) >= 7 && f[0] == "pacer" {
			uid, _ = strconv.Atoi(f[2])
			gid, _ = strconv.Atoi(f[3])
			if f[5] != "/var/lib/pacer" || !strings.HasSuffix(f[6], "nologin") {
				t.Errorf("user pacer: home %q shell %q, want /var/lib/pacer and nologin", f[5], f[6])
			}
		}
	}
	if uid < 0 || !strings.Contains(readFile(t, filepath.Join(dest, "etc/group")), "\npacer:") && !strings.HasPrefix(readFile(t, filepath.Join(dest, "etc/group")), "pacer:") {
		t.Fatalf("systemd-sysusers did not create user and group pacer:\n%s", passwd)
	}
	if os.Geteuid() != 0 {
		t.Skip("systemd-tmpfiles --create must chown to pacer: needs root; tmpfiles.d snippet not applied")
	}
	if out, err := exec.Command(tmpfiles, "--root="+dest, "--create", filepath.Join(dest, tmpfilesDir, "pacer.conf")).CombinedOutput(); err != nil || len(bytes.TrimSpace(out)) > 0 {
		t.Fatalf("systemd-tmpfiles --create: %v\n%s", err, out)
	}
	info, err := os.Stat(filepath.Join(dest, "run/pacer"))
	if err != nil {
		t.Fatal(err)
	}
	if info.Mode().Perm() != 0o750 {
		t.Errorf("/run/pacer mode %v, want 0750", info.Mode().Perm())
	}
	if o, g := ownerOf(info); o != uid || g != gid {
		t.Errorf("/run/pacer owned by %d:%d, want pacer %d:%d", o, g, uid, gid)
	}
	svc := parseUnitFile(t, filepath.Join(repoRoot, "systemd/pacerd.service"))
	if m := svc.get("Service", "RuntimeDirectoryMode"); m != "0750" {
		t.Errorf("RuntimeDirectoryMode=%s, but tmpfiles.d makes /run/pacer 0750", m)
	}
}

// TestUnitKeys reads the repo's units as INI and checks the keys issue 5
// asks for, hardening included.
func TestUnitKeys(t *testing.T) {
	svc := parseUnitFile(t, filepath.Join(repoRoot, "systemd/pacerd.service"))
	want := map[string]map[string]string{
		"Unit": {
			"Requires": "pacerd.socket",
			"After":    "pacerd.socket network-online.target",
			"Wants":    "network-online.target",
		},
		"Service": {
			"Type":                     "notify",
			"NotifyAccess":             "main",
			"WatchdogSec":              "10s",
			"Restart":                  "on-failure",
			"RestartSec":               "1s",
			"ExecStart":                "/usr/local/bin/pacerd --config /etc/pacer/pacerd.yaml",
			"User":                     "pacer",
			"Group":                    "pacer",
			"RuntimeDirectory":         "pacer",
			"RuntimeDirectoryPreserve": "yes",
			"StateDirectory":           "pacer",
			"ConfigurationDirectory":   "pacer",
			"ProtectSystem":            "strict",
			"ProtectHome":              "yes",
			"PrivateTmp":               "yes",
			"PrivateDevices":           "yes",
			"NoNewPrivileges":          "yes",
			"CapabilityBoundingSet":    "",
			"AmbientCapabilities":      "",
			"RestrictAddressFamilies":  "AF_UNIX AF_INET AF_INET6",
			"SystemCallFilter":         "@system-service",
			"SystemCallArchitectures":  "native",
			"LockPersonality":          "yes",
			"MemoryDenyWriteExecute":   "yes",
			"RestrictRealtime":         "yes",
			"RestrictNamespaces":       "yes",
			"ProtectKernelTunables":    "yes",
			"ProtectKernelModules":     "yes",
			"ProtectKernelLogs":        "yes",
			"ProtectControlGroups":     "yes",
			"ProtectClock":             "yes",
			"ProtectHostname":          "yes",
			"UMask":                    "0007",
			"TimeoutStopSec":           "30s",
			"KillSignal":               "SIGTERM",
			"LimitNOFILE":              "65536",
		},
		"Install": {"WantedBy": "multi-user.target"},
	}
	svc.check(t, "pacerd.service", want)
	// Keys that must not be there: they would undo the above.
	for _, k := range []string{"DynamicUser", "PermissionsStartOnly", "ReadWritePaths", "KillMode"} {
		if v, ok := svc.lookup("Service", k); ok {
			t.Errorf("pacerd.service: %s=%s set; it weakens the sandbox or the graceful stop", k, v)
		}
	}

	sock := parseUnitFile(t, filepath.Join(repoRoot, "systemd/pacerd.socket"))
	sock.check(t, "pacerd.socket", map[string]map[string]string{
		"Socket": {
			"ListenStream":  "/run/pacer/pacer.sock",
			"SocketMode":    "0660",
			"SocketUser":    "pacer",
			"SocketGroup":   "pacer",
			"DirectoryMode": "0750",
			"Accept":        "no",
			"Service":       "pacerd.service",
		},
		"Install": {"WantedBy": "sockets.target"},
	})

	users := readFile(t, filepath.Join(repoRoot, "systemd/pacer.sysusers.conf"))
	if !slices.ContainsFunc(strings.Split(users, "\n"), func(l string) bool {
		f := strings.Fields(l)
		return len(f) >= 3 && f[0] == "u" && f[1] == "pacer" && f[2] == "-"
	}) {
		t.Error("pacer.sysusers.conf does not create user pacer (u pacer - ...)")
	}
}

// unitFile is a parsed systemd unit: section -> key -> values in order. An
// empty assignment resets the list, as in systemd, but is remembered as "".
type unitFile map[string]map[string][]string

func parseUnitFile(t *testing.T, path string) unitFile {
	t.Helper()
	u, err := parseUnit(readFile(t, path))
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return u
}

func parseUnit(text string) (unitFile, error) {
	u := unitFile{}
	section := ""
	sc := bufio.NewScanner(strings.NewReader(text))
	n := 0
	for sc.Scan() {
		n++
		line := strings.TrimSpace(sc.Text())
		for strings.HasSuffix(line, "\\") && sc.Scan() {
			n++
			line = strings.TrimSuffix(line, "\\") + " " + strings.TrimSpace(sc.Text())
		}
		switch {
		case line == "" || line[0] == '#' || line[0] == ';':
		case line[0] == '[' && line[len(line)-1] == ']':
			section = line[1 : len(line)-1]
			if _, dup := u[section]; dup {
				return nil, fmt.Errorf("line %d: section [%s] twice", n, section)
			}
			u[section] = map[string][]string{}
		default:
			k, v, ok := strings.Cut(line, "=")
			if !ok || section == "" {
				return nil, fmt.Errorf("line %d: not key=value in a section: %q", n, line)
			}
			k, v = strings.TrimSpace(k), strings.TrimSpace(v)
			if v == "" {
				u[section][k] = []string{""}
			} else {
				u[section][k] = append(slices.DeleteFunc(u[section][k], func(s string) bool { return s == "" }), v)
			}
		}
	}
	return u, sc.Err()
}

func (u unitFile) lookup(section, key string) (string, bool) {
	v, ok := u[section][key]
	return strings.Join(v, " "), ok
}

func (u unitFile) get(section, key string) string {
	v, _ := u.lookup(section, key)
	return v
}

func (u unitFile) check(t *testing.T, name string, want map[string]map[string]string) {
	t.Helper()
	for section, keys := range want {
		for k, w := range keys {
			got, ok := u.lookup(section, k)
			switch {
			case !ok:
				t.Errorf("%s: [%s] %s= missing (want %q)", name, section, k, w)
			case got != w:
				t.Errorf("%s: [%s] %s=%q, want %q", name, section, k, got, w)
			}
		}
	}
}

func dropExecStart(b []byte) []byte {
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		if !strings.HasPrefix(l, "ExecStart=") {
			out = append(out, l)
		}
	}
	return []byte(strings.Join(out, "\n"))
}

func copyUnits(from, to string) error {
	if err := os.MkdirAll(to, 0o755); err != nil {
		return err
	}
	entries, err := os.ReadDir(from)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if !e.Type().IsRegular() || strings.HasPrefix(e.Name(), "pacerd.") {
			continue // a host install of pacer must not shadow the tree's
		}
		b, err := os.ReadFile(filepath.Join(from, e.Name()))
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(to, e.Name()), b, 0o644); err != nil {
			return err
		}
	}
	return nil
}

func ownerOf(info fs.FileInfo) (uid, gid int) {
	st, ok := info.Sys().(*syscall.Stat_t)
	if !ok {
		return -1, -1
	}
	return int(st.Uid), int(st.Gid)
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func readRepo(t *testing.T, rel string) []byte {
	t.Helper()
	return []byte(readFile(t, filepath.Join(repoRoot, rel)))
}

// The units never carry a secret: no password, URL with user info or
// credential flag on a command line or in the environment (ps and
// `systemctl show` show both to every local user). Secrets live in files
// pacerd.yaml names.
func TestUnitsCarryNoSecrets(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(repoRoot, "systemd", "*"))
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	for _, f := range files {
		if strings.HasSuffix(f, ".go") || strings.HasSuffix(f, ".md") {
			continue
		}
		checked++
		for i, line := range strings.Split(readFile(t, f), "\n") {
			line = strings.TrimSpace(line)
			if line == "" || strings.HasPrefix(line, "#") || strings.HasPrefix(line, ";") {
				continue
			}
			lower := strings.ToLower(line)
			for _, bad := range []string{"password", "redis_auth", "rediscli_auth", "passwd", "secret", "token", "--redis", "--nats", "--etcd", "--broadcast-key"} {
				if strings.Contains(lower, bad) {
					t.Errorf("%s:%d: %q mentions %q: secrets belong in files pacerd.yaml names", filepath.Base(f), i+1, line, bad)
				}
			}
			if strings.Contains(line, "://") && strings.Contains(line, "@") {
				t.Errorf("%s:%d: %q: a URL with user info", filepath.Base(f), i+1, line)
			}
			if k, _, ok := strings.Cut(line, "="); ok && (k == "Environment" || k == "PassEnvironment") {
				t.Errorf("%s:%d: %s= set: environment values are visible to every local user", filepath.Base(f), i+1, k)
			}
		}
	}
	if checked < 4 {
		t.Fatalf("checked %d unit files; want pacerd.service, pacerd.socket and the sysusers/tmpfiles files", checked)
	}
}
