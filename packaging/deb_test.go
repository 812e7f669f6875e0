// Package packaging holds the Debian package's description (nfpm.yaml),
// its maintainer scripts and the test that builds and checks it.
package packaging

import (
	"bytes"
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/pacer/pacer/internal/redisproc"
	"github.com/pacer/pacer/internal/redistest"
)

// TestDebianPackage builds the package with `make deb` and checks it as an
// operator would meet it: its control fields and files (dpkg-deb -I, -c),
// lintian (no error), an install into a scratch root (dpkg --root: the
// maintainer scripts run and create the user pacer there), and the installed
// pacerd on the installed default config, which refuses a stock Debian
// Redis (appendonly no) naming the fix, and serves on one that is set up as
// it says. Building takes minutes from a cold cache: `make deb-check` runs it
// (CI too).
func TestDebianPackage(t *testing.T) {
	if os.Getenv("PACER_DEB_CHECK") == "" {
		t.Skip("builds the .deb (minutes from a cold cache): run `make deb-check` (CI does)")
	}
	for _, tool := range []string{"make", "dpkg-deb", "dpkg", "lintian"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s not found: scripts/deps.sh installs it (Debian packages dpkg, lintian, make)", tool)
		}
	}
	dist := t.TempDir()
	run(t, "..", "make", "deb", "DIST="+dist)
	debs, _ := filepath.Glob(filepath.Join(dist, "pacer_*_*.deb"))
	if len(debs) != 1 || !regexp.MustCompile(`/pacer_[0-9][^_]*_[a-z0-9]+\.deb$`).MatchString(debs[0]) {
		t.Fatalf("make deb made %v, want one pacer_<version>_<arch>.deb", debs)
	}
	deb := debs[0]

	info := run(t, ".", "dpkg-deb", "-I", deb)
	for _, want := range []string{"Package: pacer\n", "Depends: systemd\n", "Architecture: " + goarch(t) + "\n",
		"conffiles", "postinst", "prerm", "postrm"} {
		if !strings.Contains(info, want) {
			t.Errorf("dpkg-deb -I lacks %q:\n%s", want, info)
		}
	}
	conffiles := run(t, ".", "dpkg-deb", "--info", deb, "conffiles")
	for _, want := range []string{"/etc/pacer/pacerd.yaml\n", "/etc/pacer/curves/evening-peak.yaml\n"} {
		if !strings.Contains(conffiles, want) {
			t.Errorf("%q is not a conffile (dpkg would overwrite the operator's changes):\n%s", want, conffiles)
		}
	}
	contents := run(t, ".", "dpkg-deb", "-c", deb)
	for _, want := range []string{
		"-rwxr-xr-x root/root .* ./usr/bin/pacerd\n", "-rwxr-xr-x root/root .* ./usr/bin/pacerctl\n",
		"-rwxr-xr-x root/root .* ./usr/bin/pacer-export\n", " ./lib/systemd/system/pacer-export.service\n",
		" ./lib/systemd/system/pacerd.service\n", " ./lib/systemd/system/pacerd.socket\n",
		" ./usr/lib/sysusers.d/pacer.conf\n", " ./usr/lib/tmpfiles.d/pacer.conf\n",
		" ./etc/pacer/pacerd.yaml\n", " ./etc/pacer/curves/evening-peak.yaml\n",
		"drwxr-x--- root/root .* ./var/lib/pacer/\n", " ./usr/share/doc/pacer/copyright\n",
		" ./usr/share/doc/pacer/pacerd.rules.yaml\n", " ./usr/share/doc/pacer/pacer-export.rules.yaml\n",
	} {
		if !regexp.MustCompile(want).MatchString(contents) {
			t.Errorf("dpkg-deb -c has no line matching %q:\n%s", want, contents)
		}
	}

	lint, _ := exec.Command("lintian", "--tag-display-limit", "0", deb).CombinedOutput()
	for _, line := range strings.Split(string(lint), "\n") {
		if strings.HasPrefix(line, "E: ") {
			t.Errorf("lintian: %s", line)
		}
	}
	t.Logf("lintian:\n%s", lint)

	root := scratchInstall(t, deb)
	unit, err := os.ReadFile(filepath.Join(root, "lib/systemd/system/pacerd.service"))
	if err != nil || !strings.Contains(string(unit), "\nExecStart=/usr/bin/pacerd --config /etc/pacer/pacerd.yaml\n") {
		t.Errorf("installed unit's ExecStart is not /usr/bin/pacerd (%v):\n%s", err, unit)
	}
	if out := run(t, ".", filepath.Join(root, "usr/bin/pacerctl"), "version"); !strings.HasPrefix(out, "pacerctl ") {
		t.Errorf("installed pacerctl version: %q", out)
	}
	exportUnit, err := os.ReadFile(filepath.Join(root, "lib/systemd/system/pacer-export.service"))
	if err != nil || !strings.Contains(string(exportUnit), "\nExecStart=/usr/bin/pacer-export run\n") {
		t.Errorf("installed pacer-export unit's ExecStart is not /usr/bin/pacer-export (%v):\n%s", err, exportUnit)
	}
	if out := run(t, ".", filepath.Join(root, "usr/bin/pacer-export"), "version"); !strings.HasPrefix(out, "pacer-export ") {
		t.Errorf("installed pacer-export version: %q", out)
	}
	checkDefaultConfig(t, root)
}

// scratchInstall installs deb into a new root with dpkg --root; the
// maintainer scripts run outside it with DPKG_ROOT set.
func scratchInstall(t *testing.T, deb string) string {
	t.Helper()
	root := t.TempDir()
	for _, d := range []string{"var/lib/dpkg/info", "var/lib/dpkg/updates", "var/lib/dpkg/triggers"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(root, "var/lib/dpkg/status"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	// systemd is the host's, not the scratch root's.
	out := run(t, ".", "dpkg", "--root="+root, "--force-script-chrootless", "--force-depends", "--log=/dev/null", "-i", deb)
	if !strings.Contains(out, "Stock Debian Redis has\n    `appendonly no`") {
		t.Errorf("the install does not say how to set up Redis:\n%s", out)
	}
	passwd, err := os.ReadFile(filepath.Join(root, "etc/passwd"))
	if err != nil || !regexp.MustCompile(`(?m)^pacer:x:\d+:\d+:.*:/var/lib/pacer:`).Match(passwd) {
		t.Errorf("no system user pacer in the scratch root (%v):\n%s", err, passwd)
	}
	if st := run(t, ".", "dpkg", "--root="+root, "-s", "pacer"); !strings.Contains(st, "Status: install ok installed") {
		t.Errorf("dpkg -s pacer:\n%s", st)
	}
	return root
}

// checkDefaultConfig runs the installed pacerd on the installed
// /etc/pacer/pacerd.yaml: against a stock Debian Redis (no AOF) it must stop
// and say what to change; against one set up as that says, it serves.
func checkDefaultConfig(t *testing.T, root string) {
	t.Helper()
	pacerd := filepath.Join(root, "usr/bin/pacerd")
	cfg := filepath.Join(root, "etc/pacer/pacerd.yaml")
	start := func(redisSock string) (*exec.Cmd, *bytes.Buffer, string) {
		dir := t.TempDir()
		sock := filepath.Join(dir, "pacer.sock")
		var stderr bytes.Buffer
		cmd := exec.Command(pacerd, "--config", cfg, "--redis", redisSock, "--socket", sock, "--state-dir", dir,
			"--admin", "", "--curves", filepath.Join(root, "etc/pacer/curves"), "--holder", "pkg-test")
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		return cmd, &stderr, sock
	}

	stock := redistest.StartWith(t, redisproc.Options{}) // Debian's redis.conf: appendonly no
	cmd, stderr, _ := start(stock.Socket)
	err := cmd.Wait()
	if err == nil || !strings.Contains(stderr.String(), "appendonly yes") || !strings.Contains(stderr.String(), "appendfsync always") {
		t.Errorf("pacerd on the default config with a stock Redis: %v, want a refusal naming appendonly yes and appendfsync always:\n%s", err, stderr)
	}

	durable := redistest.Start(t) // appendonly yes, appendfsync always
	cmd, stderr, sock := start(durable.Socket)
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	deadline := time.Now().Add(2 * time.Minute) // milliseconds when idle
	for {
		if c, err := net.Dial("unix", sock); err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("pacerd on the default config with a durable Redis did not serve within 2 minutes:\n%s", stderr)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func run(t *testing.T, dir, name string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

func goarch(t *testing.T) string {
	t.Helper()
	return strings.TrimSpace(run(t, ".", "go", "env", "GOARCH"))
}
