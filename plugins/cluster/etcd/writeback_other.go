//go:build !linux

package etcd

import "os"

// newWriteback is f itself where sync_file_range does not exist.
func newWriteback(f *os.File) *os.File { return f }

// directAlign aligns the copy buffers (O_DIRECT is used on Linux only).
const directAlign = 4096
