package sdk

import (
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	pb "github.com/talosbot/talosbot/plugins/sdk/proto/lifecycle/v1"
)

// fill sets every field of m, recursively, to a non-zero value, so a
// round trip through the Go types shows any field the adapter drops. Of a
// oneof only the field named by pick is set.
func fill(m protoreflect.Message, pick string) {
	fields := m.Descriptor().Fields()
	for i := range fields.Len() {
		fd := fields.Get(i)
		if o := fd.ContainingOneof(); o != nil && string(fd.Name()) != pick {
			continue
		}
		switch {
		case fd.IsMap():
			mp := m.Mutable(fd).Map()
			mp.Set(protoreflect.ValueOfString("k").MapKey(), protoreflect.ValueOfString("v"))
		case fd.IsList():
			l := m.Mutable(fd).List()
			if fd.Kind() == protoreflect.MessageKind {
				e := l.NewElement()
				fill(e.Message(), "")
				l.Append(e)
			} else {
				l.Append(scalar(fd))
			}
		case fd.Kind() == protoreflect.MessageKind:
			fill(m.Mutable(fd).Message(), "")
		default:
			m.Set(fd, scalar(fd))
		}
	}
}

func scalar(fd protoreflect.FieldDescriptor) protoreflect.Value {
	switch fd.Kind() {
	case protoreflect.StringKind:
		return protoreflect.ValueOfString("x-" + string(fd.Name()))
	case protoreflect.BytesKind:
		return protoreflect.ValueOfBytes([]byte(fd.Name()))
	case protoreflect.BoolKind:
		return protoreflect.ValueOfBool(true)
	case protoreflect.Int32Kind:
		return protoreflect.ValueOfInt32(7)
	case protoreflect.Int64Kind:
		return protoreflect.ValueOfInt64(1 << 40)
	case protoreflect.EnumKind:
		vs := fd.Enum().Values()
		return protoreflect.ValueOfEnum(vs.Get(vs.Len() - 1).Number())
	}
	panic("unhandled kind " + fd.Kind().String() + ": extend scalar")
}

// TestConvertCarriesEveryWireField: every field of every message a plugin
// sends or receives survives wire → Go → wire. A field added to
// lifecycle.proto without a Go field and a conversion fails here.
func TestConvertCarriesEveryWireField(t *testing.T) {
	check := func(name string, in proto.Message, round func() proto.Message) {
		t.Helper()
		if out := round(); !proto.Equal(in, out) {
			t.Errorf("%s does not survive the round trip through the Go types:\n in: %v\nout: %v", name, in, out)
		}
	}
	m := &pb.Manifest{}
	fill(m.ProtoReflect(), "")
	check("Manifest", m, func() proto.Message { return ManifestToWire(ManifestFromWire(m)) })
	r := &pb.OperationRequest{}
	fill(r.ProtoReflect(), "")
	check("OperationRequest", r, func() proto.Message { return RequestToWire(RequestFromWire(r)) })
	p := &pb.OperationPlan{}
	fill(p.ProtoReflect(), "")
	check("OperationPlan", p, func() proto.Message { return PlanToWire(PlanFromWire(p)) })
	for _, part := range []string{"step", "log", "artifact", "result"} {
		e := &pb.Progress{}
		fill(e.ProtoReflect(), part)
		check("Progress."+part, e, func() proto.Message { return EventToWire(EventFromWire(e)) })
	}
}

// TestRequestFromWireNeverNil: a request with no cluster, credentials, settings or
// evidence still gives the plugin zero values to read, not nil pointers.
func TestRequestFromWireNeverNil(t *testing.T) {
	req := RequestFromWire(nil)
	if req == nil || req.Evidence.Releases != nil || req.Cluster.Name != "" || req.Evidence.Backups.GetLocal() != nil || req.Evidence.Terraform.GetRoot() != "" || req.Evidence.PauseMark != "" {
		t.Fatalf("RequestFromWire(nil) = %+v", req)
	}
}

// TestEnumNamesMatchTheWire: the Go enums print as the wire enums do
// (plans put Drill names into their canonical inputs).
func TestEnumNamesMatchTheWire(t *testing.T) {
	for v := range int32(6) {
		if got, want := Drill(v).String(), pb.Drill(v).String(); got != want {
			t.Errorf("Drill(%d) = %q, wire %q", v, got, want)
		}
		if got, want := StepStatus(v).String(), pb.StepStatus(v).String(); got != want {
			t.Errorf("StepStatus(%d) = %q, wire %q", v, got, want)
		}
		if got, want := Effect(v).String(), pb.Effect(v).String(); got != want {
			t.Errorf("Effect(%d) = %q, wire %q", v, got, want)
		}
		if got, want := Need(v).String(), pb.Need(v).String(); got != want {
			t.Errorf("Need(%d) = %q, wire %q", v, got, want)
		}
	}
}

// TestReleaseNotes: the bot's release evidence reads back as versions
// (pre-releases dropped); without it ok is false and nothing is known.
func TestReleaseNotes(t *testing.T) {
	if n, ok := ReleaseNotes(nil); ok || n.Versions != nil {
		t.Fatalf("no release data read as some: %+v", n)
	}
	n, ok := ReleaseNotes(&Releases{Versions: []string{"v1.13.9", "v1.14.0-rc.1"}, Targets: []string{"v1.13.9"}, Kubernetes: []string{"1.36.3"}, ListedOnly: true})
	if !ok || len(n.Versions) != 1 || n.Targets[0].Tag() != "v1.13.9" || n.Kubernetes[0].Plain() != "1.36.3" || !n.ListedOnly {
		t.Fatalf("ReleaseNotes = %+v, %v", n, ok)
	}
}
