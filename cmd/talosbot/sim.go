package main

import (
	"errors"

	"github.com/spf13/cobra"
)

func newSimCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "sim --dir DIR --control-planes N --workers M",
		Short: "Run a simulated Talos cluster as its own process",
		RunE:  func(*cobra.Command, []string) error { return errors.New("sim: not wired yet") },
	}
}
