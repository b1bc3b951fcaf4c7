//go:build !linux

package etcd

// renameNoReplace is Linux's renameat2(RENAME_NOREPLACE); elsewhere publish
// uses a hard link.
func renameNoReplace(string, string) (bool, error) { return false, nil }
