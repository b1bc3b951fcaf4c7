package sim

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/siderolabs/talos/pkg/machinery/api/common"
	machineapi "github.com/siderolabs/talos/pkg/machinery/api/machine"
	storageapi "github.com/siderolabs/talos/pkg/machinery/api/storage"
)

// nodeLogs holds a node's kernel ring buffer (Dmesg) and its service logs (Logs). Both live in
// memory and start over with every boot, as /dev/kmsg and machined's circular log buffers do.
type nodeLogs struct {
	now func() time.Time

	mu       sync.Mutex
	kmsg     [][]byte
	services map[string][][]byte
	subs     map[chan struct{}]struct{}
}

func newNodeLogs(now func() time.Time) *nodeLogs {
	return &nodeLogs{now: now, services: map[string][][]byte{}, subs: map[chan struct{}]struct{}{}}
}

func (l *nodeLogs) reset() {
	l.mu.Lock()
	defer l.mu.Unlock()

	l.kmsg = nil
	l.services = map[string][][]byte{}

	for ch := range l.subs {
		close(ch)
		delete(l.subs, ch)
	}
}

func (l *nodeLogs) kernel(msg string) {
	l.mu.Lock()
	defer l.mu.Unlock()

	// Dmesg's line format: facility, priority, RFC 3339 timestamp, message.
	l.kmsg = append(l.kmsg, fmt.Appendf(nil, "%s: %7s: [%s]: %s\n", "kern", "info", l.now().UTC().Format(time.RFC3339Nano), msg))
	l.notify()
}

func (l *nodeLogs) service(id, msg string) {
	l.mu.Lock()
	defer l.mu.Unlock()

	l.services[id] = append(l.services[id], fmt.Appendf(nil, "%s [talos] %s\n", l.now().UTC().Format("2006/01/02 15:04:05"), msg))
	l.notify()
}

func (l *nodeLogs) notify() {
	for ch := range l.subs {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

// booted writes what a fresh boot leaves in the logs.
func (l *nodeLogs) booted(n *node) {
	l.kernel("Linux version 6.12.0-talos (sim) #1 SMP")
	l.kernel(fmt.Sprintf("Memory: %dK/%dK available", n.c.opts.MemoryBytes>>10, n.c.opts.MemoryBytes>>10))
	l.kernel("[talos] Talos " + n.talosVersion() + " booting")

	for _, svc := range n.serviceIDs() {
		l.service(svc, "service["+svc+"](Running): Started task "+svc)
	}

	l.service("machined", "machined logger initialized")
}

// lines returns a copy of one log (kernel when id is "") and a channel that fires on new lines.
func (l *nodeLogs) lines(id string) ([][]byte, chan struct{}, func()) {
	l.mu.Lock()
	defer l.mu.Unlock()

	src := l.kmsg
	if id != "" {
		src = l.services[id]
	}

	ch := make(chan struct{}, 1)
	l.subs[ch] = struct{}{}

	return append([][]byte(nil), src...), ch, func() {
		l.mu.Lock()
		defer l.mu.Unlock()

		if _, ok := l.subs[ch]; ok {
			delete(l.subs, ch)
			close(ch)
		}
	}
}

func (l *nodeLogs) since(id string, from int) [][]byte {
	l.mu.Lock()
	defer l.mu.Unlock()

	src := l.kmsg
	if id != "" {
		src = l.services[id]
	}

	if from >= len(src) {
		return nil
	}

	return append([][]byte(nil), src[from:]...)
}

// streamLog sends a log (tail, follow) as Talos streams logs and dmesg.
func streamLog(ctx context.Context, l *nodeLogs, id string, tail int, follow bool, send func([]byte) error) error {
	all, ch, cancel := l.lines(id)
	defer cancel()

	sent := len(all)
	if tail >= 0 && tail < len(all) {
		all = all[len(all)-tail:]
	}

	if len(all) > 0 {
		if err := send(bytes.Join(all, nil)); err != nil {
			return err
		}
	}

	if !follow {
		return nil
	}

	for {
		select {
		case <-ctx.Done():
			return nil
		case _, ok := <-ch:
			if !ok {
				return status.Error(codes.Unavailable, "log stream closed: node is going down")
			}

			more := l.since(id, sent)
			sent += len(more)

			if len(more) > 0 {
				if err := send(bytes.Join(more, nil)); err != nil {
					return err
				}
			}
		}
	}
}

// Dmesg is the kernel log (v1alpha1_server.go Dmesg): tail and follow as requested.
func (s *machined) Dmesg(req *machineapi.DmesgRequest, srv grpc.ServerStreamingServer[common.Data]) error {
	tail := -1
	if req.Tail {
		tail = 0
	}

	if !req.Tail {
		tail = -1
	}

	return streamLog(srv.Context(), s.n.logs, "", tail, req.Follow, func(b []byte) error {
		return srv.Send(&common.Data{Bytes: b})
	})
}

// Logs is a service's log (system namespace or kubelet); containers of the CRI are not simulated.
func (s *machined) Logs(req *machineapi.LogsRequest, srv grpc.ServerStreamingServer[common.Data]) error {
	if req.Namespace != nsSystem && req.Id != "kubelet" {
		return status.Errorf(codes.NotFound, "container %q not found in namespace %q (the sim has no CRI containers)", req.Id, req.Namespace)
	}

	known := false

	for _, id := range s.n.serviceIDs() {
		if id == req.Id {
			known = true
		}
	}

	if !known {
		return status.Errorf(codes.NotFound, "log %q not found", req.Id)
	}

	return streamLog(srv.Context(), s.n.logs, req.Id, int(req.TailLines), req.Follow, func(b []byte) error {
		return srv.Send(&common.Data{Bytes: b})
	})
}

// LogsContainers lists the system services whose logs Logs serves.
func (s *machined) LogsContainers(context.Context, *emptypb.Empty) (*machineapi.LogsContainersResponse, error) {
	return &machineapi.LogsContainersResponse{Messages: []*machineapi.LogsContainer{{Ids: s.n.serviceIDs()}}}, nil
}

// Memory reports /proc/meminfo (Options.MemoryBytes), in KiB as the kernel does.
func (s *machined) Memory(context.Context, *emptypb.Empty) (*machineapi.MemoryResponse, error) {
	kib := s.n.c.opts.MemoryBytes >> 10

	return &machineapi.MemoryResponse{Messages: []*machineapi.Memory{{Meminfo: &machineapi.MemInfo{
		Memtotal:     kib,
		Memfree:      kib / 2,
		Memavailable: kib * 3 / 4,
		Cached:       kib / 8,
		Buffers:      kib / 64,
		Hugepagesize: 2048,
	}}}}, nil
}

// storageService is the StorageService: Disks lists the node's one system disk.
type storageService struct {
	storageapi.UnimplementedStorageServiceServer

	n *node
}

func (s *storageService) Disks(context.Context, *emptypb.Empty) (*storageapi.DisksResponse, error) {
	size := s.n.c.opts.EphemeralBytes + 10<<30

	return &storageapi.DisksResponse{Messages: []*storageapi.Disks{{Disks: []*storageapi.Disk{{
		Size:       size,
		Model:      "QEMU HARDDISK",
		DeviceName: "/dev/sda",
		Name:       "sda",
		Serial:     "sim-" + strings.ReplaceAll(s.n.info.IP, ".", "-"),
		Type:       storageapi.Disk_HDD,
		BusPath:    "/pci0000:00/0000:00:05.0/virtio2/host2/target2:0:0/2:0:0:0/",
		SystemDisk: true,
		Subsystem:  "/sys/class/block",
	}}}}}, nil
}

// serviceIDs are the services the node runs (ServiceList order).
func (n *node) serviceIDs() []string {
	ids := []string{"apid", "containerd", "cri", "etcd", "kubelet", "machined", "syslogd", "trustd", "udevd"}
	if n.info.Role == RoleControlPlane {
		return ids
	}

	out := ids[:0:0]

	for _, id := range ids {
		if id != "etcd" && id != "trustd" {
			out = append(out, id)
		}
	}

	return out
}
