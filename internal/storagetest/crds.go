// Package storagetest plays Longhorn's and CloudNativePG's controllers for
// tests: their real CRDs (../shared/fixtures/crds) installed as they are in
// the real kube-apiserver of internal/testenv, objects that validate against
// them, and the status transitions their controllers make, on an injected
// clock. Nothing of Longhorn or CNPG runs in a test; this package stands in
// for exactly the fields the bot reads (docs/SIMULATOR.md, "Storage
// operators"). Linked only into tests and the demo.
package storagetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/dynamic"
)

// Fixture file names under the shared fixtures' crds/ directory (its README).
const (
	LonghornCRDs = "longhorn-v1.12.1.yaml"
	CNPGCRDs     = "cnpg-v1.30.0-clusters.yaml"
)

var crdGVR = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// FixturesDir finds ../shared/fixtures/crds from this source file's module
// root (a worktree or the main checkout), or TALOSBOT_FIXTURES when set. An
// error says the fixtures are absent: a user's clone has no ../shared.
func FixturesDir() (string, error) {
	if d := os.Getenv("TALOSBOT_FIXTURES"); d != "" {
		return filepath.Join(d, "crds"), nil
	}
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		return "", errors.New("storagetest: cannot locate the source tree")
	}
	root := filepath.Dir(filepath.Dir(filepath.Dir(file))) // internal/storagetest/crds.go -> module root
	for _, d := range []string{filepath.Join(root, "..", "shared", "fixtures", "crds"), "/work/shared/fixtures/crds"} {
		if _, err := os.Stat(filepath.Join(d, LonghornCRDs)); err == nil {
			return d, nil
		}
	}
	return "", fmt.Errorf("storagetest: the shared CRD fixtures (%s, %s) are absent; set TALOSBOT_FIXTURES to the fixtures directory", LonghornCRDs, CNPGCRDs)
}

// InstallCRDs creates every CustomResourceDefinition of the given fixture
// files, unchanged, and waits until each is Established.
func InstallCRDs(ctx context.Context, dyn dynamic.Interface, dir string, files ...string) error {
	var names []string
	for _, f := range files {
		raw, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil {
			return fmt.Errorf("read CRD fixture: %w", err)
		}
		dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(raw), 1<<16)
		for {
			var obj map[string]any
			if err := dec.Decode(&obj); err != nil {
				if errors.Is(err, io.EOF) {
					break
				}
				return fmt.Errorf("decode %s: %w", f, err)
			}
			if obj == nil {
				continue
			}
			u := &unstructured.Unstructured{Object: obj}
			if u.GetKind() != "CustomResourceDefinition" {
				continue
			}
			if _, err := dyn.Resource(crdGVR).Create(ctx, u, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
				return fmt.Errorf("create CRD %s from %s: %w", u.GetName(), f, err)
			}
			names = append(names, u.GetName())
		}
	}
	for _, n := range names {
		err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			crd, err := dyn.Resource(crdGVR).Get(ctx, n, metav1.GetOptions{})
			if err != nil {
				return false, nil //nolint:nilerr // not there yet: poll again
			}
			conds, _, _ := unstructured.NestedSlice(crd.Object, "status", "conditions")
			for _, c := range conds {
				m, _ := c.(map[string]any)
				if m["type"] == "Established" && m["status"] == "True" {
					return true, nil
				}
			}
			return false, nil
		})
		if err != nil {
			return fmt.Errorf("CRD %s not established: %w", n, err)
		}
	}
	return nil
}
