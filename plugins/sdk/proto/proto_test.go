package proto_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// TestGeneratedCodeIsFresh regenerates lifecycle/v1 with the pinned generators
// (hack/generate.sh) into a temp dir and compares it with the committed code.
func TestGeneratedCodeIsFresh(t *testing.T) {
	if _, err := exec.LookPath("protoc"); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("protoc is required in CI: apt-get install -y protobuf-compiler")
		}
		t.Skip("protoc not installed (apt-get install -y protobuf-compiler)")
	}
	out := t.TempDir()
	cmd := exec.Command("bash", "../../../hack/generate.sh", out)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("hack/generate.sh: %v\n%s\n(run `make tools` to install the pinned generators)", err, b)
	}
	for _, f := range []string{"lifecycle/v1/lifecycle.pb.go", "lifecycle/v1/lifecycle_grpc.pb.go"} {
		want, err := os.ReadFile(filepath.Join(out, f))
		if err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("plugins/sdk/proto/%s is stale: run `make generate` and commit the result", f)
		}
	}
}
