package alerts_test

import (
	"context"
	"testing"

	"github.com/talosbot/talosbot/bot"
	"github.com/talosbot/talosbot/bot/alerts"
	"github.com/talosbot/talosbot/config"
	"github.com/talosbot/talosbot/plugins/catalog"
	lifecyclev1 "github.com/talosbot/talosbot/plugins/sdk/proto/lifecycle/v1"
)

// builtIns serves the built-in manifests (plugins/catalog) as engine.Plugins.
type builtIns struct{ c *catalog.Catalogue }

func (b builtIns) Manifests(context.Context) ([]*lifecyclev1.Manifest, error) {
	return b.c.Manifests(), nil
}

func (builtIns) Plan(context.Context, string, *lifecyclev1.OperationRequest) (*lifecyclev1.OperationPlan, error) {
	panic("not called")
}

func (builtIns) Run(context.Context, string, *lifecyclev1.OperationRequest, func(*lifecyclev1.Progress) error) (*lifecyclev1.Result, error) {
	panic("not called")
}

// The default rules are data: every command they suggest must be one the
// built-in plugins or the bot serve, checked the way config check checks a
// configured rule, so renaming a plugin command fails here, not in chat.
func TestDefaultRulesNameCatalogueCommands(t *testing.T) {
	c, err := catalog.Load()
	if err != nil {
		t.Fatal(err)
	}
	cat, err := bot.Catalogue(context.Background(), builtIns{c})
	if err != nil {
		t.Fatal(err)
	}
	rules := alerts.DefaultRules()
	if len(rules) == 0 {
		t.Fatal("no default rules")
	}
	cfg := &config.Config{Alerts: config.Alerts{Rules: rules}}
	for _, e := range cfg.CheckCommands(cat) {
		t.Errorf("default rules: %v", e)
	}
	// And the check would notice a command no plugin serves.
	cfg.Alerts.Rules = append(cfg.Alerts.Rules, config.AlertRule{Name: "x", Commands: []string{"/talos healht {{cluster}}"}})
	if errs := cfg.CheckCommands(cat); len(errs) != 1 {
		t.Fatalf("a misspelt command: %v, want one error", errs)
	}
}
