package etcd

import (
	"errors"

	"golang.org/x/sys/unix"
)

// renameNoReplace renames part to final in one step unless final exists
// (fs.ErrExist then). supported is false where the file system does not
// offer RENAME_NOREPLACE; publish then falls back to a hard link.
func renameNoReplace(part, final string) (supported bool, err error) {
	err = unix.Renameat2(unix.AT_FDCWD, part, unix.AT_FDCWD, final, unix.RENAME_NOREPLACE)
	if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.EOPNOTSUPP) {
		return false, nil
	}
	return true, err
}
