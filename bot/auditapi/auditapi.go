// Package auditapi serves the audit trail over HTTP (GET /api/audit, bearer
// token) and prunes verbose operation logs by age. Audit records are kept
// forever; logs live outside the hash chain, so pruning never breaks it.
package auditapi

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/talosbot/talosbot/bot/auditview"
	"github.com/talosbot/talosbot/state"
)

// Limits of GET /api/audit.
const (
	DefaultLimit = 100
	MaxLimit     = 100000
)

// Options configure the audit API.
type Options struct {
	Store *state.Store
	// Token is required as "Authorization: Bearer TOKEN". An empty token
	// refuses every request (the API is off without a configured token).
	Token string
	Clock func() time.Time
}

// Handler serves
//
//	GET /api/audit?cluster=&user=&op=&result=&action=&op_id=&since=&until=&limit=&before=&format=json|csv
//	GET /api/audit/verify?expect_head=HASH
//
// newest first. since/until take a duration back ("7d") or a time. The
// response carries X-Next-Before with the seq to pass as before= for the
// next page when the page is full.
func Handler(o Options) http.Handler {
	if o.Clock == nil {
		o.Clock = time.Now
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /api/audit", func(w http.ResponseWriter, r *http.Request) {
		if !Authorized(r, o.Token) {
			w.Header().Set("WWW-Authenticate", `Bearer realm="talosbot audit"`)
			httpError(w, http.StatusUnauthorized, "missing or wrong bearer token: send Authorization: Bearer <audit.token>")
			return
		}
		vals := r.URL.Query()
		for k := range vals {
			if k != "format" && !known(k) {
				httpError(w, http.StatusBadRequest, fmt.Sprintf("unknown parameter %q; use format and %s", k, strings.Join(auditview.FilterKeys(), ", ")))
				return
			}
		}
		format := vals.Get("format")
		if format == "" {
			format = "json"
		}
		if format != "json" && format != "csv" {
			httpError(w, http.StatusBadRequest, fmt.Sprintf("format %q: use json or csv", format))
			return
		}
		q, err := auditview.ParseFilter(vals.Get, o.Clock(), DefaultLimit, MaxLimit)
		if err != nil {
			httpError(w, http.StatusBadRequest, err.Error())
			return
		}
		recs, err := o.Store.QueryAudit(r.Context(), q)
		if err != nil {
			httpError(w, http.StatusInternalServerError, "query audit: "+err.Error())
			return
		}
		if len(recs) == q.Limit && len(recs) > 0 {
			w.Header().Set("X-Next-Before", strconv.FormatUint(recs[len(recs)-1].Seq, 10))
		}
		w.Header().Set("Cache-Control", "no-store")
		if format == "csv" {
			w.Header().Set("Content-Type", "text/csv; charset=utf-8")
			w.Header().Set("Content-Disposition", `attachment; filename="talosbot-audit.csv"`)
			_ = auditview.WriteCSV(w, recs)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = auditview.WriteJSON(w, recs)
	})
	mux.HandleFunc("GET "+VerifyPath, func(w http.ResponseWriter, r *http.Request) {
		if !Authorized(r, o.Token) {
			w.Header().Set("WWW-Authenticate", `Bearer realm="talosbot audit"`)
			httpError(w, http.StatusUnauthorized, "missing or wrong bearer token: send Authorization: Bearer <audit.token>")
			return
		}
		for k := range r.URL.Query() {
			if k != "expect_head" {
				httpError(w, http.StatusBadRequest, fmt.Sprintf("unknown parameter %q; use expect_head", k))
				return
			}
		}
		expect := r.URL.Query().Get("expect_head")
		if expect != "" {
			if err := state.CheckHead(expect); err != nil {
				httpError(w, http.StatusBadRequest, err.Error())
				return
			}
		}
		rep, err := o.Store.VerifyAuditWith(r.Context(), state.VerifyOptions{ExpectHead: expect})
		out := VerifyResult{OK: err == nil, Records: rep.Records, HeadSeq: rep.HeadSeq, Head: rep.Head}
		code := http.StatusOK
		if err != nil {
			out.Error = err.Error()
			code = http.StatusInternalServerError
			if errors.Is(err, state.ErrChainBroken) {
				code = http.StatusConflict
			}
		}
		w.Header().Set("Cache-Control", "no-store")
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		_ = json.NewEncoder(w).Encode(out)
	})
	return mux
}

// VerifyPath verifies the running bot's audit chain in one consistent read
// (GET, bearer token, optional expect_head=HASH). It answers 200 with a
// VerifyResult for an intact chain, 409 for a broken one.
const VerifyPath = "/api/audit/verify"

// VerifyResult is the JSON body of GET /api/audit/verify.
type VerifyResult struct {
	OK      bool   `json:"ok"`
	Records int    `json:"records"`
	HeadSeq uint64 `json:"head_seq"`
	Head    string `json:"head"`
	Error   string `json:"error,omitempty"`
}

func known(k string) bool {
	for _, f := range auditview.FilterKeys() {
		if f == k {
			return true
		}
	}
	return false
}

// Authorized checks "Authorization: Bearer TOKEN" in constant time. An empty
// token authorizes nothing.
func Authorized(r *http.Request, token string) bool {
	if token == "" {
		return false
	}
	got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	return ok && subtle.ConstantTimeCompare([]byte(strings.TrimSpace(got)), []byte(token)) == 1
}

func httpError(w http.ResponseWriter, code int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(map[string]string{"error": msg})
}

// DefaultLogRetention applies when audit.log_retention is not set.
const DefaultLogRetention = 30 * 24 * time.Hour

// LogPruner deletes operation log lines older than Retention.
type LogPruner struct {
	Store     *state.Store
	Retention time.Duration
	// Now is the clock the age is measured with (injected in tests).
	Now    func() time.Time
	Logger *slog.Logger
	// OnPrune, when set, is called after every pass (tests wait on it).
	OnPrune func(pruned int, err error)
}

// PruneOnce deletes the lines written before Now()-Retention.
func (p *LogPruner) PruneOnce(ctx context.Context) (int, error) {
	ret := p.Retention
	if ret <= 0 {
		ret = DefaultLogRetention
	}
	n, err := p.Store.PruneLogs(ctx, p.Now().Add(-ret))
	if err != nil {
		err = fmt.Errorf("prune operation logs older than %s: %w", ret, err)
	}
	return n, err
}

// Run prunes once at once and then on every tick until ctx ends. The caller
// owns the ticker (time.NewTicker(time.Hour).C in production, a channel it
// feeds in tests).
func (p *LogPruner) Run(ctx context.Context, ticks <-chan time.Time) error {
	log := p.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	pass := func() {
		n, err := p.PruneOnce(ctx)
		switch {
		case err != nil:
			log.Warn("log pruning failed", "err", err)
		case n > 0:
			log.Info("pruned operation logs", "lines", n)
		}
		if p.OnPrune != nil {
			p.OnPrune(n, err)
		}
	}
	pass()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-ticks:
			pass()
		}
	}
}
