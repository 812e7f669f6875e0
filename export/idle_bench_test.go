package export_test

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pacer/pacer/export"
	"github.com/pacer/pacer/internal/pgtest"
	"github.com/redis/go-redis/v9"
)

// idleConfigs are the settings BenchmarkExportIdle and
// BenchmarkExportLagAtRate compare: the defaults (a pass every 500 ms, 8
// streams at once), passes every second with 2 streams at once, and every
// 250 ms with 8.
var idleConfigs = []export.Config{{}, {Interval: time.Second, Streams: 2}, {Interval: 250 * time.Millisecond, Streams: 8}}

// configName names a Config by its interval and streams (0: the defaults).
func configName(c export.Config) string {
	if c.Interval == 0 && c.Streams == 0 {
		return "defaults"
	}
	return "interval=" + c.Interval.String() + ",streams=" + strconv.Itoa(c.Streams)
}

// BenchmarkExportIdle measures what an exporter costs while the ledger writes
// nothing: the default day's 134 streams opened (one entry each) in a real
// redis-server and exported, then 20 s of passes with nothing new. It
// reports the Redis commands a second the exporter sends (INFO stats), and
// the CPU time a second of redis-server, of PostgreSQL (every server
// process) and of the exporter (this process), and logs the load average.
//
//	go test -run '^$' -bench ExportIdle -benchtime 1x ./export/
func BenchmarkExportIdle(b *testing.B) {
	pgSrv := pgtest.OwnDurable(b)
	for _, cfg := range idleConfigs {
		b.Run(configName(cfg), func(b *testing.B) {
			for range b.N {
				exportIdle(b, pgSrv, cfg)
			}
		})
	}
}

func exportIdle(b *testing.B, pgSrv *pgtest.Server, cfg export.Config) {
	const d = 20 * time.Second
	f, streams, m := runDefaultDay(b, pgSrv, cfg)
	rowsCaughtUp(b, f, m, int64(len(streams)))
	b.Logf("load average %s", loadAverage(b))
	cmd0, cpu0, pg0, redis0 := redisCommands(b, f.rdb), export.SelfCPU(b), export.ServerCPU(b, pgSrv), export.RedisCPU(b, f.rdb)
	time.Sleep(d) // the exporter's passes, in real time, are what is measured
	// INFO stats and INFO cpu are two commands of the measurement's own.
	cmds := redisCommands(b, f.rdb) - cmd0 - 2
	perSecond := func(x time.Duration) float64 { return float64(x.Microseconds()) / d.Seconds() }
	b.ReportMetric(float64(cmds)/d.Seconds(), "redis-cmds/s")
	b.ReportMetric(perSecond(export.RedisCPU(b, f.rdb)-redis0), "redis-cpu-µs/s")
	b.ReportMetric(perSecond(export.ServerCPU(b, pgSrv)-pg0), "pg-cpu-µs/s")
	b.ReportMetric(perSecond(export.SelfCPU(b)-cpu0), "cpu-µs/s")
	b.Logf("load average %s", loadAverage(b))
}

// redisCommands is INFO stats' total_commands_processed.
func redisCommands(b *testing.B, rdb *redis.Client) int64 {
	info, err := rdb.Info(ctx, "stats").Result()
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, "total_commands_processed:"); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				b.Fatal(err)
			}
			return n
		}
	}
	b.Fatal("INFO stats has no total_commands_processed")
	return 0
}
