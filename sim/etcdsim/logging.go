package etcdsim

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"google.golang.org/grpc"
)

// newZapLogger returns the zap logger handed to every embedded etcd server and
// every client this package creates. etcd logs a lot at info level (a full
// config dump per member, every raft state change); routing it through slog at
// a high threshold keeps test output readable while still surfacing errors.
//
// It is handed to embed.Config through ZapLoggerBuilder, never installed as
// zap's or grpc's global logger: embed only touches globals when
// Config.SetupGlobalLoggers is called, which this package never does.
func newZapLogger(lg *slog.Logger, level string) (*zap.Logger, error) {
	lvl, err := parseZapLevel(level)
	if err != nil {
		return nil, err
	}
	return zap.New(&slogCore{lg: lg, level: lvl}), nil
}

func parseZapLevel(level string) (zapcore.Level, error) {
	if level == "" {
		return zapcore.ErrorLevel, nil
	}
	var lvl zapcore.Level
	if err := lvl.Set(strings.ToLower(level)); err != nil {
		return 0, fmt.Errorf("etcdsim: EtcdLogLevel %q: %w (use debug, info, warn or error)", level, err)
	}
	return lvl, nil
}

// slogCore is a zapcore.Core that forwards entries to an slog.Logger.
type slogCore struct {
	lg    *slog.Logger
	level zapcore.Level
	attrs []slog.Attr
}

func (c *slogCore) Enabled(l zapcore.Level) bool { return l >= c.level }

func (c *slogCore) With(fields []zapcore.Field) zapcore.Core {
	attrs := make([]slog.Attr, 0, len(c.attrs)+len(fields))
	attrs = append(attrs, c.attrs...)
	attrs = append(attrs, fieldsToAttrs(fields)...)
	return &slogCore{lg: c.lg, level: c.level, attrs: attrs}
}

func (c *slogCore) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if c.Enabled(e.Level) {
		return ce.AddCore(e, c)
	}
	return ce
}

func (c *slogCore) Write(e zapcore.Entry, fields []zapcore.Field) error {
	if e.Level >= zapcore.ErrorLevel && benign(e.Message, fields) {
		e.Level = zapcore.DebugLevel
		if !c.Enabled(e.Level) {
			return nil
		}
	}
	attrs := make([]slog.Attr, 0, len(c.attrs)+len(fields)+1)
	attrs = append(attrs, slog.String("component", "etcd"))
	attrs = append(attrs, c.attrs...)
	attrs = append(attrs, fieldsToAttrs(fields)...)
	msg := e.Message
	if e.LoggerName != "" {
		msg = e.LoggerName + ": " + msg
	}
	c.lg.LogAttrs(context.Background(), slogLevel(e.Level), msg, attrs...)
	return nil
}

func (c *slogCore) Sync() error { return nil }

// benign reports whether an error-level etcd entry is routine noise that
// would otherwise show up on every start or stop of a member:
//   - each listener's serve loop "fails" with a closed-listener error when
//     the member is closed on purpose;
//   - etcd's storage-version monitor races the first raft term being saved
//     and logs "missing term information" once, then succeeds.
func benign(msg string, fields []zapcore.Field) bool {
	for _, f := range fields {
		err, ok := f.Interface.(error)
		if f.Type != zapcore.ErrorType || !ok {
			continue
		}
		switch {
		case strings.HasPrefix(msg, "setting up serving from embedded etcd failed"):
			return errors.Is(err, net.ErrClosed) || errors.Is(err, http.ErrServerClosed) ||
				errors.Is(err, grpc.ErrServerStopped) || strings.Contains(err.Error(), "mux: server closed")
		case msg == "failed to update storage version":
			return strings.Contains(err.Error(), "missing term information")
		}
	}
	return false
}

func fieldsToAttrs(fields []zapcore.Field) []slog.Attr {
	if len(fields) == 0 {
		return nil
	}
	enc := zapcore.NewMapObjectEncoder()
	for _, f := range fields {
		f.AddTo(enc)
	}
	attrs := make([]slog.Attr, 0, len(enc.Fields))
	for k, v := range enc.Fields {
		attrs = append(attrs, slog.Any(k, v))
	}
	return attrs
}

func slogLevel(l zapcore.Level) slog.Level {
	switch {
	case l <= zapcore.DebugLevel:
		return slog.LevelDebug
	case l == zapcore.InfoLevel:
		return slog.LevelInfo
	case l == zapcore.WarnLevel:
		return slog.LevelWarn
	default:
		return slog.LevelError
	}
}
