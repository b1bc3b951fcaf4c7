package host

import (
	"bytes"
	"context"
	"io"
	"log"
	"log/slog"
	"sync"

	"github.com/hashicorp/go-hclog"
)

// hclogAdapter sends go-plugin's log, which includes every line the plugin
// writes to its real stderr, to slog at debug level. Plugin output is the
// plugin author's diagnostics, not the operator's; warnings that matter to
// operators (unexpected exits) are logged by the Manager itself.
type hclogAdapter struct {
	l       *slog.Logger
	name    string
	implied []any
}

var _ hclog.Logger = (*hclogAdapter)(nil)

func newHCLogger(l *slog.Logger) hclog.Logger { return &hclogAdapter{l: l} }

func (h *hclogAdapter) enabled() bool { return h.l.Enabled(context.Background(), slog.LevelDebug) }

func (h *hclogAdapter) emit(msg string, args []any) {
	if !h.enabled() {
		return
	}
	attrs := make([]any, 0, len(h.implied)+len(args)+2)
	attrs = append(attrs, h.implied...)
	for i, a := range args {
		// go-plugin uses "plugin" for the executable path; the Manager's
		// logger already carries "plugin" as the plugin name.
		if i%2 == 0 && a == "plugin" {
			a = "path"
		}
		attrs = append(attrs, a)
	}
	if h.name != "" {
		attrs = append(attrs, "logger", h.name)
	}
	h.l.Debug(msg, attrs...)
}

func (h *hclogAdapter) Log(_ hclog.Level, msg string, args ...any) { h.emit(msg, args) }
func (h *hclogAdapter) Trace(msg string, args ...any)              { h.emit(msg, args) }
func (h *hclogAdapter) Debug(msg string, args ...any)              { h.emit(msg, args) }
func (h *hclogAdapter) Info(msg string, args ...any)               { h.emit(msg, args) }
func (h *hclogAdapter) Warn(msg string, args ...any)               { h.emit(msg, args) }
func (h *hclogAdapter) Error(msg string, args ...any)              { h.emit(msg, args) }
func (h *hclogAdapter) IsTrace() bool                              { return false }
func (h *hclogAdapter) IsDebug() bool                              { return h.enabled() }
func (h *hclogAdapter) IsInfo() bool                               { return h.enabled() }
func (h *hclogAdapter) IsWarn() bool                               { return h.enabled() }
func (h *hclogAdapter) IsError() bool                              { return h.enabled() }
func (h *hclogAdapter) ImpliedArgs() []any                         { return h.implied }
func (h *hclogAdapter) Name() string                               { return h.name }
func (h *hclogAdapter) SetLevel(hclog.Level)                       {}

// GetLevel lets go-plugin skip parsing plugin output nobody will see.
func (h *hclogAdapter) GetLevel() hclog.Level {
	if h.enabled() {
		return hclog.Debug
	}
	return hclog.Off
}

func (h *hclogAdapter) With(args ...any) hclog.Logger {
	return &hclogAdapter{l: h.l, name: h.name, implied: append(append([]any(nil), h.implied...), args...)}
}

func (h *hclogAdapter) Named(name string) hclog.Logger {
	if h.name != "" {
		name = h.name + "." + name
	}
	return &hclogAdapter{l: h.l, name: name, implied: h.implied}
}

func (h *hclogAdapter) ResetNamed(name string) hclog.Logger {
	return &hclogAdapter{l: h.l, name: name, implied: h.implied}
}

func (h *hclogAdapter) StandardLogger(opts *hclog.StandardLoggerOptions) *log.Logger {
	return log.New(h.StandardWriter(opts), "", 0)
}

func (h *hclogAdapter) StandardWriter(*hclog.StandardLoggerOptions) io.Writer {
	return newLineLogger(h.l, h.name)
}

// lineLogger logs each complete line written to it at debug level. It
// receives the plugin's os.Stdout/os.Stderr, forwarded by go-plugin.
type lineLogger struct {
	l      *slog.Logger
	stream string
	mu     sync.Mutex
	buf    []byte
}

// maxLine bounds buffered output without a newline.
const maxLine = 64 << 10

func newLineLogger(l *slog.Logger, stream string) *lineLogger {
	return &lineLogger{l: l, stream: stream}
}

func (w *lineLogger) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf = append(w.buf, p...)
	for {
		i := bytes.IndexByte(w.buf, '\n')
		if i < 0 {
			if len(w.buf) >= maxLine {
				w.flush(w.buf)
				w.buf = w.buf[:0]
			}
			return len(p), nil
		}
		w.flush(w.buf[:i])
		w.buf = w.buf[i+1:]
	}
}

func (w *lineLogger) flush(line []byte) {
	line = bytes.TrimRight(line, "\r")
	if len(line) > 0 {
		w.l.Debug(string(line), "stream", w.stream)
	}
}
