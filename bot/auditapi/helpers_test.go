package auditapi_test

import (
	"fmt"
	"os"
	"testing"
)

var tmpDir string

func osMkdirTemp() (string, error) { return tmpDir, nil }

func TestMain(m *testing.M) {
	d, err := os.MkdirTemp("", "auditapi-test")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	tmpDir = d
	code := m.Run()
	if shared != nil {
		shared.srv.Close()
		_ = shared.store.Close()
	}
	_ = os.RemoveAll(d)
	os.Exit(code)
}
