package etcd

import "golang.org/x/sys/unix"

// freeSpace is the space available to an unprivileged writer in dir.
func freeSpace(dir string) (uint64, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return 0, err
	}
	return uint64(st.Bavail) * uint64(st.Bsize), nil //nolint:gosec // block size is positive
}
