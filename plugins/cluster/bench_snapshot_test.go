package cluster

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"sync"
	"testing"
	"time"
)

// BenchmarkSnapshotWrite streams a file-backed snapshot through the plugin's
// write+verify path (WriteVerified: stream, sha256 trailer, fsync, etcdutl
// status, rename) and, for comparison, `cat` of the same bytes with and
// without an fsync. Metrics: MB/s; peak-rss-MiB (VmHWM of the whole test
// process, reset before each run; it includes the file-backed pages that
// bolt's read-only mmap maps in while etcdutl verifies the file); and
// anon-growth-MiB (peak anonymous RSS above the baseline, sampled every
// 2 ms: the memory the write path itself allocates). cat's RSS is not
// reported: a Go child's maxrss includes the parent's at fork time.
//
// Goals: write+verify ≥ 0.8 of cat's throughput; memory flat from 64 MiB
// to 512 MiB. The 512 MiB fixture takes about 600 MB of disk; set
// TALOSBOT_BENCH_SNAPSHOT_MIB to change the sizes (comma-free, one size).
func BenchmarkSnapshotWrite(b *testing.B) {
	sizes := []int{64, 512}
	if s := os.Getenv("TALOSBOT_BENCH_SNAPSHOT_MIB"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil {
			b.Fatal(err)
		}
		sizes = []int{n}
	}
	for _, mib := range sizes {
		dir := b.TempDir()
		src := filepath.Join(dir, "fixture.db")
		const valueSize = 60 << 10
		writeSnapshotFixture(b, src, mib<<20/valueSize, valueSize)
		fi, err := os.Stat(src)
		if err != nil {
			b.Fatal(err)
		}
		out := filepath.Join(dir, "out")

		b.Run(fmt.Sprintf("size=%dMiB/plugin", mib), func(b *testing.B) {
			b.SetBytes(fi.Size())
			var hwm, anon float64
			for i := 0; b.Loop(); i++ {
				must(b, os.MkdirAll(out, 0o700))
				f, err := os.Open(src)
				must(b, err)
				b.StopTimer()
				debug.FreeOSMemory() // drop the fixture generator's heap from the baseline
				base := statusKiB("RssAnon:") / 1024
				resetPeakRSS()
				b.StartTimer()
				stop := sampleAnon()
				_, err = WriteVerified(context.Background(), f, out, fmt.Sprintf("snap-%d", i))
				anon = max(anon, stop()-base)
				hwm = max(hwm, vmHWM())
				_ = f.Close()
				must(b, err)
				b.StopTimer()
				must(b, os.RemoveAll(out))
				b.StartTimer()
			}
			b.ReportMetric(hwm, "peak-rss-MiB")
			b.ReportMetric(anon, "anon-growth-MiB")
		})
		for _, sync := range []bool{false, true} {
			name := "cat"
			if sync {
				name = "cat+fsync"
			}
			b.Run(fmt.Sprintf("size=%dMiB/%s", mib, name), func(b *testing.B) {
				b.SetBytes(fi.Size())
				for b.Loop() {
					dst, err := os.OpenFile(filepath.Join(dir, "cat.out"), os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
					must(b, err)
					cmd := exec.Command("cat", src)
					cmd.Stdout = dst
					must(b, cmd.Run())
					if sync {
						must(b, dst.Sync())
					}
					must(b, dst.Close())
				}
			})
		}
	}
}

func must(b *testing.B, err error) {
	b.Helper()
	if err != nil {
		b.Fatal(err)
	}
}

// resetPeakRSS resets VmHWM (Linux ≥ 4.0).
func resetPeakRSS() { _ = os.WriteFile("/proc/self/clear_refs", []byte("5"), 0) }

func vmHWM() float64 { return statusKiB("VmHWM:") / 1024 }

func statusKiB(field string) float64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		var kib float64
		if bytes.HasPrefix(sc.Bytes(), []byte(field)) {
			_, _ = fmt.Sscanf(sc.Text()[len(field):], "%f", &kib)
			return kib
		}
	}
	return 0
}

// sampleAnon samples RssAnon every 2 ms until the returned stop is called,
// which returns the peak in MiB. Sampling is measurement, not synchronisation.
func sampleAnon() func() float64 {
	var (
		mu   sync.Mutex
		peak float64
		wg   sync.WaitGroup
	)
	done := make(chan struct{})
	wg.Go(func() {
		t := time.NewTicker(2 * time.Millisecond)
		defer t.Stop()
		for {
			v := statusKiB("RssAnon:") / 1024
			mu.Lock()
			peak = max(peak, v)
			mu.Unlock()
			select {
			case <-done:
				return
			case <-t.C:
			}
		}
	})
	return func() float64 {
		close(done)
		wg.Wait()
		return peak
	}
}
