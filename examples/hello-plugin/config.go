package main

import (
	"context"

	"github.com/talosbot/talosbot/plugins/sdk"
)

// Config is this plugin's own section of the bot's config, plugins.hello
// (docs/CONFIG.md):
//
//	plugins:
//	  hello:
//	    greeting: Moin
type Config struct {
	// Greeting starts the reply (default "hello").
	Greeting string `json:"greeting"`
}

// decodeConfig reads the section strictly, over the defaults.
func decodeConfig(raw []byte) (Config, error) {
	c := Config{Greeting: "hello"}
	if err := sdk.DecodeConfig(raw, &c); err != nil {
		return c, err
	}
	var errs sdk.ConfigErrors
	if c.Greeting == "" || len(c.Greeting) > 40 {
		errs.Add("greeting", "must be 1 to 40 characters")
	}
	return c, errs.Err()
}

// ValidateConfig implements sdk.ConfigValidator: `talosbot config check`
// and serve ask it before anything runs.
func (hello) ValidateConfig(_ context.Context, raw []byte, _ []string) error {
	_, err := decodeConfig(raw)
	return err
}
