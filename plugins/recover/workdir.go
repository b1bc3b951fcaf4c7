package recover

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// workDirPrefix names the private work dirs under <snapshot_dir>/<cluster>
// that hold a clear snapshot (the decrypted one, a stale member's data).
const workDirPrefix = ".recover-"

// workDir is a private work dir this process holds: an exclusive flock on
// the directory itself, released by release or by the process's death
// (SIGKILL included, the kernel drops it), so that a later call can tell a
// crash's leftover (unlocked) from a dir another call is using (locked).
type workDir struct {
	path string
	f    *os.File
}

// newWorkDir creates and locks a work dir under base. A sweep that locked
// the new dir before this call could is told apart by the dir being gone
// (or another one at its path) once the lock is taken: then it tries again.
func newWorkDir(base string) (*workDir, error) {
	for range 5 {
		p, err := os.MkdirTemp(base, workDirPrefix)
		if err != nil {
			return nil, err
		}
		f, err := os.Open(p)
		if err != nil {
			continue // swept before it was opened
		}
		if held, err := tryLock(f); err != nil || !held {
			f.Close()
			if err != nil {
				return nil, fmt.Errorf("lock %s: %w", p, err)
			}
			continue // a sweep holds it and removes it
		}
		fi, serr := os.Stat(p)
		li, lerr := f.Stat()
		if serr == nil && lerr == nil && os.SameFile(fi, li) {
			return &workDir{path: p, f: f}, nil
		}
		f.Close() // swept between MkdirTemp and the lock
	}
	return nil, errors.New("could not create a work dir: removed by a concurrent sweep five times")
}

// release removes the dir, then drops the lock.
func (w *workDir) release() {
	if w == nil {
		return
	}
	_ = os.RemoveAll(w.path)
	_ = w.f.Close()
}

// sweepWorkDirs removes the work dirs under base that no live call holds:
// what a call killed before its cleanup (SIGKILL, a crash, power loss)
// left, clear etcd data included. A dir held by another call is kept.
func sweepWorkDirs(base string) error {
	ents, err := os.ReadDir(base)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		return err
	}
	var errs []error
	for _, e := range ents {
		if !strings.HasPrefix(e.Name(), workDirPrefix) {
			continue
		}
		p := filepath.Join(base, e.Name())
		if !e.IsDir() {
			errs = append(errs, os.Remove(p))
			continue
		}
		f, err := os.Open(p)
		if err != nil {
			if !errors.Is(err, os.ErrNotExist) {
				errs = append(errs, err)
			}
			continue
		}
		held, err := tryLock(f)
		if err == nil && held {
			err = os.RemoveAll(p)
		}
		f.Close()
		if err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// tryLock takes an exclusive flock (unix, as the module already needs) on f without waiting: held is false
// when another open file (this process's or another's) holds it.
func tryLock(f *os.File) (held bool, err error) {
	for {
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		switch {
		case err == nil:
			return true, nil
		case errors.Is(err, syscall.EWOULDBLOCK):
			return false, nil
		case errors.Is(err, syscall.EINTR):
			continue
		default:
			return false, err
		}
	}
}
