//go:build !linux

package cluster

import "os"

// newWriteback is f itself where sync_file_range does not exist.
func newWriteback(f *os.File) *os.File { return f }
