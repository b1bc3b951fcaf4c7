package storage_test

import (
	"strings"
	"testing"
	"time"

	"github.com/talosbot/talosbot/plugins/cluster/storage"
	"github.com/talosbot/talosbot/plugins/sdk"
)

// section is how a plugin embeds the storage key in its own section.
type section struct {
	Storage storage.Config `json:"storage"`
}

func decode(raw string) (storage.Settings, error) {
	c := section{Storage: storage.DefaultConfig()}
	if err := sdk.DecodeConfig([]byte(raw), &c); err != nil {
		return storage.Settings{}, err
	}
	return c.Storage.Settings(), c.Storage.Validate("storage")
}

// An absent key gives the defaults; each key set changes only itself.
func TestConfigDefaultsAndKeys(t *testing.T) {
	for _, raw := range []string{``, `{}`, `{"storage": {}}`, `{"storage": null}`} {
		got, err := decode(raw)
		if err != nil || got != storage.Defaults() {
			t.Errorf("%q: %+v %v, want the defaults", raw, got, err)
		}
	}
	got, err := decode(`{"storage": {"longhorn": false, "cnpg": false, "rebuild_wait": "6h", "last_replica": "refuse", "switchover": "refuse", "switchover_wait": "90s"}}`)
	want := storage.Settings{Longhorn: false, CNPG: false, RebuildWait: 6 * time.Hour, LastReplica: storage.LastReplicaRefuse,
		Switchover: storage.SwitchoverRefuse, SwitchoverWait: 90 * time.Second}
	if err != nil || got != want {
		t.Fatalf("got %+v %v, want %+v", got, err, want)
	}
	if got, _ := decode(`{"storage": {"rebuild_wait": "1d"}}`); got.RebuildWait != 24*time.Hour || got.LastReplica != storage.LastReplicaWait {
		t.Fatalf("a day's rebuild wait: %+v", got)
	}
}

// Every bad value is named by its path, all at once, with what to write.
func TestConfigRefusesBadValues(t *testing.T) {
	for raw, wants := range map[string][]string{
		`{"storage": {"rebuild_wat": "1h"}}`:       {`storage.rebuild_wat: unknown key "rebuild_wat"; did you mean "rebuild_wait"?`},
		`{"storage": {"longhorn": "yes"}}`:         {`storage.longhorn: is a string, want true or false`},
		`{"storage": {"rebuild_wait": "forever"}}`: {`storage.rebuild_wait:`},
		`{"storage": {"last_replica": "maybe", "switchover": "kill", "rebuild_wait": "30s", "switchover_wait": "2h"}}`: {
			`storage.last_replica: is "maybe": use "wait" or "refuse"`,
			`storage.switchover: is "kill": use "switchover" or "refuse"`,
			`storage.rebuild_wait: is 30s: use 1m0s to 168h0m0s`,
			`storage.switchover_wait: is 2h0m0s: use 10s to 1h0m0s`},
	} {
		_, err := decode(raw)
		for _, want := range wants {
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("%s: got %v, want %q", raw, err, want)
			}
		}
	}
}

// DecodeSection reads a section that holds only the storage key: keys it
// leaves out keep their defaults, and an unknown or bad key is an error
// named under plugins.PLUGIN.
func TestDecodeSection(t *testing.T) {
	set, err := storage.DecodeSection("rollback", []byte(`{"storage": {"rebuild_wait": "2h"}}`))
	if err != nil || set.RebuildWait != 2*time.Hour || set.Switchover != storage.Defaults().Switchover {
		t.Fatalf("%+v %v", set, err)
	}
	if _, err := storage.DecodeSection("rollback", []byte(`{"storage": {"last_replica": "maybe"}}`)); err == nil ||
		!strings.Contains(err.Error(), "plugins.rollback: ") || !strings.Contains(err.Error(), "storage.last_replica") {
		t.Fatalf("a bad value: %v", err)
	}
	if _, err := storage.DecodeSection("noderemove", []byte(`{"drain": {}}`)); err == nil || !strings.Contains(err.Error(), "plugins.noderemove: ") {
		t.Fatalf("an unknown key: %v", err)
	}
}
