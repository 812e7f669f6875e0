package systemd_test

import (
	"path/filepath"
	"testing"
)

// pacer-export.service runs the exporter as a notify service under the pacer
// user, with its settings from an EnvironmentFile (no DSN or address on the
// command line) and the same sandbox as pacerd's.
func TestExportUnit(t *testing.T) {
	u := parseUnitFile(t, filepath.Join(repoRoot, "systemd/pacer-export.service"))
	u.check(t, "pacer-export.service", map[string]map[string]string{
		"Unit": {"After": "network-online.target postgresql.service"},
		"Service": {
			"Type": "notify", "ExecStart": "/usr/local/bin/pacer-export run", "EnvironmentFile": "/etc/pacer/pacer-export.env",
			"User": "pacer", "Group": "pacer", "KillSignal": "SIGTERM", "Restart": "on-failure",
			"ProtectSystem": "strict", "NoNewPrivileges": "yes", "CapabilityBoundingSet": "",
			"RestrictAddressFamilies": "AF_UNIX AF_INET AF_INET6", "SystemCallFilter": "@system-service",
		},
		"Install": {"WantedBy": "multi-user.target"},
	})
}
