package main

import (
	"context"
	"errors"
	"io"
)

func runDemo(ctx context.Context, out io.Writer, listen, dataDir string) error {
	return errors.New("demo: not wired yet")
}
