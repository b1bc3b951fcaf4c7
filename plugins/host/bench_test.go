package host

import (
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-plugin"
	"google.golang.org/grpc/health/grpc_health_v1"
)

// The plugin-cost benchmarks (issue 30, docs/BENCHMARKS.md). Besides wall
// time (ns/op, the goal), each reports the CPU time spent per operation by
// the bot and the plugin process together (cpu-µs/op): on the shared 2-core
// machine wall time swings with the load, CPU time much less, so it is the
// figure to compare changes by.

func BenchmarkColdStart(b *testing.B) {
	// The bot gets the sum from its build (Options.ExecutableSHA256), so
	// computing it is not part of a start.
	sum := sha256File(b, testPluginPath)
	cpu := startCPU()
	for b.Loop() {
		m, err := New(Options{Executable: testPluginPath, ExecutableSHA256: sum, BuiltIn: []string{"alpha"}})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := m.Manifest(b.Context(), "alpha"); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		m.Close()
		b.StartTimer()
	}
	// The plugin processes are reaped by Close, so RUSAGE_CHILDREN has them.
	cpu.report(b, 0)
}

func BenchmarkPlanCall(b *testing.B) {
	m := newManager(b, Options{BuiltIn: []string{"alpha"}})
	r := req("noop")
	if _, err := m.Plan(b.Context(), "alpha", r); err != nil {
		b.Fatal(err)
	}
	pid := m.plugins["alpha"].cur.pid
	cpu := startCPU()
	cpu.plugin = procCPU(b, pid)
	for b.Loop() {
		if _, err := m.Plan(b.Context(), "alpha", r); err != nil {
			b.Fatal(err)
		}
	}
	cpu.report(b, pid)
}

// cpuMark is the CPU time used so far by this process, its reaped children
// and (for a running plugin) the plugin process.
type cpuMark struct{ self, children, plugin time.Duration }

func startCPU() cpuMark {
	return cpuMark{self: rusage(syscall.RUSAGE_SELF), children: rusage(syscall.RUSAGE_CHILDREN)}
}

// report adds cpu-µs/op: this process, its reaped children and the running
// plugin pid (if not 0), since the mark.
func (c cpuMark) report(b *testing.B, pid int) {
	used := rusage(syscall.RUSAGE_SELF) - c.self + rusage(syscall.RUSAGE_CHILDREN) - c.children
	if pid != 0 {
		used += procCPU(b, pid) - c.plugin
	}
	b.ReportMetric(float64(used.Microseconds())/float64(b.N), "cpu-µs/op")
}

func rusage(who int) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(who, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// procCPU reads utime+stime of a running process from /proc (clock ticks;
// USER_HZ is 100 on Linux).
func procCPU(b *testing.B, pid int) time.Duration {
	raw, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		b.Fatal(err)
	}
	// Fields after the command name, which is in parentheses and may hold spaces.
	f := strings.Fields(string(raw[strings.LastIndexByte(string(raw), ')')+2:]))
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(ut+st) * 10 * time.Millisecond
}

// BenchmarkGRPCFloor is the floor under BenchmarkPlanCall: a gRPC health
// check (an empty unary call go-plugin serves) to the same plugin process
// on the same connection, without the host's call wrapper or the SDK's
// adapter. What PlanCall costs above it is this package's and the SDK's.
func BenchmarkGRPCFloor(b *testing.B) {
	m := newManager(b, Options{BuiltIn: []string{"alpha"}})
	if _, err := m.Plan(b.Context(), "alpha", req("noop")); err != nil {
		b.Fatal(err)
	}
	inst := m.plugins["alpha"].cur
	health := grpc_health_v1.NewHealthClient(inst.conn)
	hreq := &grpc_health_v1.HealthCheckRequest{Service: plugin.GRPCServiceName}
	cpu := startCPU()
	cpu.plugin = procCPU(b, inst.pid)
	for b.Loop() {
		if _, err := health.Check(b.Context(), hreq); err != nil {
			b.Fatal(err)
		}
	}
	cpu.report(b, inst.pid)
}

// BenchmarkColdStartBuiltIn starts real built-ins from the talosbot-plugins
// binary named by TALOSBOT_PLUGINS_BIN (skipped without it): "first" is a
// Manager's first start (it hashes the ~90 MB binary), "next" another
// built-in of the same binary in the same Manager (remembered, not hashed).
// Informational: the goal is on BenchmarkColdStart's small plugin, which
// measures the host's part; this shows what a large plugin binary adds.
func BenchmarkColdStartBuiltIn(b *testing.B) {
	bin := os.Getenv("TALOSBOT_PLUGINS_BIN")
	if bin == "" {
		b.Skip("TALOSBOT_PLUGINS_BIN is not set")
	}
	sum := sha256File(b, bin)
	names := []string{"healthgate", "drift"}
	start := func(b *testing.B, second bool) {
		cpu := startCPU()
		for b.Loop() {
			b.StopTimer()
			m, err := New(Options{Executable: bin, ExecutableSHA256: sum, BuiltIn: names})
			if err != nil {
				b.Fatal(err)
			}
			if second {
				if _, err := m.Manifest(b.Context(), names[0]); err != nil {
					b.Fatal(err)
				}
			}
			b.StartTimer()
			if _, err := m.Manifest(b.Context(), names[1]); err != nil {
				b.Fatal(err)
			}
			b.StopTimer()
			m.Close()
			b.StartTimer()
		}
		// With "next" this counts both starts: an upper bound.
		cpu.report(b, 0)
	}
	b.Run("first", func(b *testing.B) { start(b, false) })
	b.Run("next", func(b *testing.B) { start(b, true) })
}
