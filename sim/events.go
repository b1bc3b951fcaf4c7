package sim

import (
	"crypto/rand"
	"encoding/base32"
	"encoding/binary"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	machineapi "github.com/siderolabs/talos/pkg/machinery/api/machine"
)

// historySize bounds each node's in-memory event history (Talos keeps a ring buffer too).
const historySize = 1000

// idGen makes xid-format ids (20 chars, base32hex, time-sortable) like Talos's event ids.
type idGen struct {
	machine [5]byte
	counter atomic.Uint32
	now     func() time.Time
}

var xidEncoding = base32.NewEncoding("0123456789abcdefghijklmnopqrstuv").WithPadding(base32.NoPadding)

func newIDGen(now func() time.Time) *idGen {
	g := &idGen{now: now}
	_, _ = rand.Read(g.machine[:])

	return g
}

func (g *idGen) next() string {
	var b [12]byte

	binary.BigEndian.PutUint32(b[0:4], uint32(g.now().Unix()))
	copy(b[4:9], g.machine[:])

	c := g.counter.Add(1)
	b[9], b[10], b[11] = byte(c>>16), byte(c>>8), byte(c)

	return xidEncoding.EncodeToString(b[:])
}

type simEvent struct {
	id      string
	at      time.Time
	actorID string
	payload proto.Message
}

func (e simEvent) toMachine() (*machineapi.Event, error) {
	ev := &machineapi.Event{Id: e.id, ActorId: e.actorID, Data: &anypb.Any{}}

	if e.payload != nil {
		v, err := proto.Marshal(e.payload)
		if err != nil {
			return nil, fmt.Errorf("marshal event: %w", err)
		}

		ev.Data = &anypb.Any{
			TypeUrl: "talos/runtime/" + string(e.payload.ProtoReflect().Descriptor().FullName()),
			Value:   v,
		}
	}

	return ev, nil
}

// eventLog is one node's runtime event stream: history for tail replay plus live subscribers.
// Like machined's, it lives in memory and is emptied by a reboot.
type eventLog struct {
	ids *idGen
	now func() time.Time

	mu      sync.Mutex
	history []simEvent
	subs    map[chan simEvent]struct{}
}

func newEventLog(ids *idGen, now func() time.Time) *eventLog {
	return &eventLog{ids: ids, now: now, subs: map[chan simEvent]struct{}{}}
}

func (l *eventLog) publish(actorID string, payload proto.Message) {
	ev := simEvent{id: l.ids.next(), at: l.now(), actorID: actorID, payload: payload}

	l.mu.Lock()
	defer l.mu.Unlock()

	l.history = append(l.history, ev)
	if len(l.history) > historySize {
		l.history = l.history[len(l.history)-historySize:]
	}

	for ch := range l.subs {
		select {
		case ch <- ev:
		default:
			// A subscriber that cannot keep up loses its stream rather than blocking the node.
			delete(l.subs, ch)
			close(ch)
		}
	}
}

// reset drops history and disconnects subscribers (a reboot).
func (l *eventLog) reset() {
	l.mu.Lock()
	defer l.mu.Unlock()

	l.history = nil

	for ch := range l.subs {
		delete(l.subs, ch)
		close(ch)
	}
}

// subscribe returns the replayed history selected by req and a channel of live events.
func (l *eventLog) subscribe(req *machineapi.EventsRequest) ([]simEvent, chan simEvent, func(), error) {
	set := 0
	if req.TailEvents != 0 {
		set++
	}

	if req.TailId != "" {
		set++
	}

	if req.TailSeconds != 0 {
		set++
	}

	if set > 1 {
		return nil, nil, nil, fmt.Errorf("only one of tail_events, tail_id and tail_seconds may be set")
	}

	l.mu.Lock()
	defer l.mu.Unlock()

	var replay []simEvent

	switch {
	case req.TailEvents < 0:
		replay = append(replay, l.history...)
	case req.TailEvents > 0:
		start := max(0, len(l.history)-int(req.TailEvents))
		replay = append(replay, l.history[start:]...)
	case req.TailId != "":
		found := false

		for i, ev := range l.history {
			if ev.id == req.TailId {
				replay = append(replay, l.history[i+1:]...)
				found = true

				break
			}
		}

		if !found {
			// Unknown (e.g. pre-reboot) id: replay everything, as the id is older than the buffer.
			replay = append(replay, l.history...)
		}
	case req.TailSeconds > 0:
		since := l.now().Add(-time.Duration(req.TailSeconds) * time.Second)

		for _, ev := range l.history {
			if !ev.at.Before(since) {
				replay = append(replay, ev)
			}
		}
	}

	ch := make(chan simEvent, historySize)
	l.subs[ch] = struct{}{}

	cancel := func() {
		l.mu.Lock()
		defer l.mu.Unlock()

		if _, ok := l.subs[ch]; ok {
			delete(l.subs, ch)
			close(ch)
		}
	}

	return replay, ch, cancel, nil
}
