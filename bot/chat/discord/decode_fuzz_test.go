package discord

import (
	"strings"
	"testing"
)

// FuzzDecodeInteraction: decoding any payload and deciding what it means
// never panics, and accepted inputs are well-formed.
func FuzzDecodeInteraction(f *testing.F) {
	f.Add([]byte(`{"id":"1","type":1,"token":"t"}`))
	f.Add([]byte(`{"id":"1","type":2,"channel_id":"6","member":{"user":{"id":"5"}},"data":{"name":"talos","options":[{"name":"command","type":3,"value":"health staging"}]}}`))
	f.Add([]byte(`{"id":"1","type":2,"channel_id":"6","user":{"id":"5"},"data":{"name":"talos","options":[{"name":"command","type":3,"value":7}]}}`))
	f.Add([]byte(`{"id":"1","type":3,"channel_id":"6","member":{"user":{"id":"5"}},"message":{"id":"9"},"data":{"custom_id":"tok","component_type":2}}`))
	f.Add([]byte(`{"type":3,"data":null,"message":null}`))
	f.Add([]byte(`{"type":2,"data":{"options":[null]}}`))
	f.Add([]byte(`{"type":4,"data":{}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		i, err := decodeInteraction(b)
		if err != nil {
			return
		}
		in, err := inputOf(i)
		if err != nil {
			return
		}
		switch in.kind {
		case inputCommand:
			if in.cmd.User == "" || in.cmd.Text == "" || !strings.HasPrefix(in.cmd.Channel, "discord:") {
				t.Fatalf("command %+v", in.cmd)
			}
		case inputAction:
			if in.act.User == "" || in.act.ActionID == "" || len(in.act.ActionID) > MaxCustomID || in.act.MessageRef == "" {
				t.Fatalf("action %+v", in.act)
			}
		}
		_ = ackResponse(in)
	})
}
