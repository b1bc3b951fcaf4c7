//go:build tools

// Package tools pins the versions of the binaries that integration tests
// need but that cannot be "go install"ed directly: k8s.io/kubernetes carries
// replace directives for its staging modules and opentofu carries one for
// its hcl fork, and the go command ignores replace directives of
// dependencies. This module re-declares them; build.sh builds from here.
package tools

import (
	_ "github.com/opentofu/opentofu/cmd/tofu"
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
)
