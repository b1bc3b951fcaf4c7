package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/user"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/talosbot/talosbot/bot/auditapi"
	"github.com/talosbot/talosbot/bot/auditview"
	"github.com/talosbot/talosbot/config"
	"github.com/talosbot/talosbot/state"
)

// auditSource is where verify and export read: a database file (the bot
// stopped) or a running bot's audit API.
type auditSource struct {
	db, url, token string
}

func (s *auditSource) flags(c *cobra.Command) {
	c.Flags().StringVar(&s.db, "db", "", "the talosbot database file (DATA_DIR/talosbot.db), while the bot is stopped")
	c.Flags().StringVar(&s.url, "url", "", "a running bot's base URL (its listen address), e.g. http://127.0.0.1:8080")
	c.Flags().StringVar(&s.token, "token", "env:TALOSBOT_AUDIT_TOKEN", "with --url: the audit API token, by reference (env:NAME or file:/path), never the value")
}

func (s *auditSource) check() error {
	if (s.db == "") == (s.url == "") {
		return &exitError{code: 2, err: errors.New("give exactly one of --db FILE (bot stopped) or --url URL (bot running)")}
	}
	return nil
}

// get calls the running bot's audit API.
func (s *auditSource) get(ctx context.Context, path string, q url.Values) (*http.Response, error) {
	tok, err := config.Ref(s.token).Resolve()
	if err != nil {
		return nil, &exitError{code: 2, err: fmt.Errorf("--token: %w", err)}
	}
	u, err := url.Parse(strings.TrimRight(s.url, "/") + path)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, &exitError{code: 2, err: fmt.Errorf("--url %q is not an http(s) URL", s.url)}
	}
	u.RawQuery = q.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+string(tok))
	resp, err := (&http.Client{Timeout: 5 * time.Minute}).Do(req)
	if err != nil {
		return nil, fmt.Errorf("audit API at %s: %w", s.url, err)
	}
	return resp, nil
}

func apiError(resp *http.Response) error {
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	var e struct {
		Error string `json:"error"`
	}
	if json.Unmarshal(body, &e) == nil && e.Error != "" {
		return fmt.Errorf("audit API: HTTP %d: %s", resp.StatusCode, e.Error)
	}
	return fmt.Errorf("audit API: HTTP %d: %s", resp.StatusCode, strings.TrimSpace(string(body)))
}

func newAuditCmd() *cobra.Command {
	audit := &cobra.Command{
		Use:   "audit",
		Short: "Verify, export or repair the head of the hash-chained audit trail",
		Long: `Every state change of every operation is recorded in an append-only audit
trail; each record carries the sha256 of its canonical bytes and of the record
before it, so editing, deleting or reordering records breaks the chain, and
the head (seq and hash of the last record) kept next to it shows records cut
from the end. Pin the head elsewhere (/talos audit head posts it) and pass
it as --expect-head to detect a chain rewritten as a whole. A head that is
missing or does not match the last record stops every write (serve refuses
to start); repair-head fixes it when the records themselves verify.

A running bot holds an exclusive lock on its database: read it through the
bot's audit API with --url (needs audit.token); use --db when the bot is
stopped, or on a copy.`,
	}
	var (
		src    auditSource
		expect string
	)
	verify := &cobra.Command{
		Use:   "verify (--db FILE | --url URL) [--expect-head HASH]",
		Short: "Check the audit hash chain; exits 1 at the first broken record",
		Example: `  talosbot audit verify --url http://127.0.0.1:8080 --token env:TALOSBOT_AUDIT_TOKEN
  talosbot audit verify --db /var/lib/talosbot/talosbot.db --expect-head 9f2c…(64 hex digits)`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := src.check(); err != nil {
				return err
			}
			if expect != "" {
				if err := state.CheckHead(expect); err != nil {
					return &exitError{code: 2, err: fmt.Errorf("--expect-head: %w", err)}
				}
			}
			var rep auditapi.VerifyResult
			if src.db != "" {
				r, err := state.VerifyFileWith(cmd.Context(), src.db, state.VerifyOptions{ExpectHead: expect})
				var ce *state.ChainError
				if errors.As(err, &ce) {
					return fmt.Errorf("%s: %w", src.db, err)
				}
				if err != nil {
					return err
				}
				rep = auditapi.VerifyResult{OK: true, Records: r.Records, HeadSeq: r.HeadSeq, Head: r.Head}
			} else {
				q := url.Values{}
				if expect != "" {
					q.Set("expect_head", expect)
				}
				resp, err := src.get(cmd.Context(), auditapi.VerifyPath, q)
				if err != nil {
					return err
				}
				defer resp.Body.Close()
				if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusConflict {
					return apiError(resp)
				}
				if err := json.NewDecoder(resp.Body).Decode(&rep); err != nil {
					return fmt.Errorf("audit API: decode the verify result: %w", err)
				}
				if !rep.OK {
					return errors.New(rep.Error)
				}
			}
			msg := fmt.Sprintf("audit chain OK: %d records, head %s (seq %d)", rep.Records, rep.Head, rep.HeadSeq)
			if expect != "" {
				msg += "; the pinned head " + expect[:12] + " is in the chain"
			}
			fmt.Fprintln(cmd.OutOrStdout(), msg)
			return nil
		},
	}
	src.flags(verify)
	verify.Flags().StringVar(&expect, "expect-head", "", "a head hash recorded earlier (from /talos audit head): the chain must still contain it")

	var (
		format, cluster, user, op, result, since string
		limit                                    int
	)
	export := &cobra.Command{
		Use:   "export (--db FILE | --url URL) [--format json|csv] [filters]",
		Short: "Export audit records, newest first",
		Example: `  talosbot audit export --url http://127.0.0.1:8080 --format csv --since 7d > audit.csv
  talosbot audit export --db talosbot.db --cluster production --since 7d`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := src.check(); err != nil {
				return err
			}
			if format != "json" && format != "csv" {
				return &exitError{code: 2, err: fmt.Errorf("--format %q: use json or csv", format)}
			}
			if limit < 1 {
				return &exitError{code: 2, err: fmt.Errorf("--limit %d: must be at least 1", limit)}
			}
			var age time.Duration
			if since != "" {
				d, err := config.ParseDuration(since)
				if err != nil {
					return &exitError{code: 2, err: fmt.Errorf("--since: %w", err)}
				}
				age = d
			}
			var recs []state.AuditRecord
			var err error
			if src.db != "" {
				recs, err = exportFile(cmd.Context(), src.db, state.AuditQuery{Cluster: cluster, Actor: user, Command: op, Result: result, Limit: limit}, age)
			} else {
				q := url.Values{"format": {"json"}}
				for k, v := range map[string]string{"cluster": cluster, "user": user, "op": op, "result": result} {
					if v != "" {
						q.Set(k, v)
					}
				}
				if since != "" {
					q.Set("since", since)
				}
				recs, err = exportAPI(cmd.Context(), &src, q, limit)
			}
			if err != nil {
				return err
			}
			if format == "csv" {
				return auditview.WriteCSV(cmd.OutOrStdout(), recs)
			}
			return auditview.WriteJSON(cmd.OutOrStdout(), recs)
		},
	}
	src.flags(export)
	export.Flags().StringVar(&format, "format", "json", "json or csv")
	export.Flags().StringVar(&cluster, "cluster", "", "only this cluster")
	export.Flags().StringVar(&user, "user", "", "only this actor")
	export.Flags().StringVar(&op, "op", "", "only this command, e.g. \"upgrade talos\"")
	export.Flags().StringVar(&result, "result", "", "only this result, e.g. failed")
	export.Flags().StringVar(&since, "since", "", "only records younger than this, e.g. 7d or 12h (at most 3650d)")
	export.Flags().IntVar(&limit, "limit", 1000000, "at most this many records")
	audit.AddCommand(verify, export, newRepairHeadCmd())
	return audit
}

func newRepairHeadCmd() *cobra.Command {
	var db string
	cmd := &cobra.Command{
		Use:   "repair-head --db FILE",
		Short: "Set a missing or wrong audit head to the last record, if every record verifies; the repair is audited",
		Long: `The audit head (seq and hash of the last record, kept next to the chain)
numbers the next record. When it is missing or does not match the last record,
serve refuses to start and nothing is appended, so that no record is ever
overwritten. repair-head verifies every record (as audit verify does, except
for the head), then sets the head to the last record and appends an
"audit head repaired" record naming you (your OS user) and the head before and
after. It refuses, changing nothing, when the records themselves do not verify
or when the head names a record past the end of the chain (records were
removed: restore the file from a backup). Run it with the bot stopped; run
audit verify first to see what is wrong.`,
		Example: `  talosbot audit verify --db /var/lib/talosbot/talosbot.db
  talosbot audit repair-head --db /var/lib/talosbot/talosbot.db`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if db == "" {
				return &exitError{code: 2, err: errors.New("--db FILE is required (the bot stopped)")}
			}
			if _, err := os.Stat(db); err != nil {
				return &exitError{code: 2, err: fmt.Errorf("--db: %w", err)}
			}
			actor := osActor()
			rep, err := state.RepairHeadFile(cmd.Context(), db, actor, state.Options{})
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if !rep.Repaired {
				fmt.Fprintf(out, "the audit head of %s matches the chain: nothing to repair\n", db)
				return nil
			}
			fmt.Fprintf(out, "audit head repaired: %s\nthe head now names record %d (%s); the repair is record %d (%s), by %s\n",
				rep.Was, rep.ToSeq, rep.ToHash, rep.Record.Seq, rep.Record.Hash, actor)
			// Check the result as audit verify would.
			v, err := state.VerifyFile(cmd.Context(), db)
			if err != nil {
				return fmt.Errorf("%s after the repair: %w", db, err)
			}
			fmt.Fprintf(out, "audit chain OK: %d records, head %s (seq %d)\n", v.Records, v.Head, v.HeadSeq)
			return nil
		},
	}
	cmd.Flags().StringVar(&db, "db", "", "the talosbot database file (DATA_DIR/talosbot.db), while the bot is stopped")
	return cmd
}

// osActor names who runs a CLI repair in the audit trail: the OS user, with
// a prefix that no chat user id has, or the uid when there is no name.
func osActor() string {
	if u, err := user.Current(); err == nil && u.Username != "" {
		return "os:" + u.Username
	}
	return "os:uid " + strconv.Itoa(os.Getuid())
}

// exportFile reads the records from a database file (the bot stopped).
func exportFile(ctx context.Context, path string, q state.AuditQuery, age time.Duration) ([]state.AuditRecord, error) {
	if age > 0 {
		q.Since = time.Now().Add(-age)
	}
	st, err := state.OpenReadOnly(path, 0)
	if err != nil {
		return nil, err
	}
	defer st.Close()
	var recs []state.AuditRecord
	err = state.Guard(path, func() error {
		var qerr error
		recs, qerr = st.QueryAudit(ctx, q)
		return qerr
	})
	return recs, err
}

// exportAPI pages through GET /api/audit of a running bot (X-Next-Before
// names the next page) until limit records or the end.
func exportAPI(ctx context.Context, src *auditSource, q url.Values, limit int) ([]state.AuditRecord, error) {
	var out []state.AuditRecord
	for len(out) < limit {
		q.Set("limit", strconv.Itoa(min(limit-len(out), auditapi.MaxLimit)))
		resp, err := src.get(ctx, "/api/audit", q)
		if err != nil {
			return nil, err
		}
		if resp.StatusCode != http.StatusOK {
			err := apiError(resp)
			resp.Body.Close()
			return nil, err
		}
		var page []state.AuditRecord
		err = json.NewDecoder(resp.Body).Decode(&page)
		next := resp.Header.Get("X-Next-Before")
		resp.Body.Close()
		if err != nil {
			return nil, fmt.Errorf("audit API: decode records: %w", err)
		}
		out = append(out, page...)
		if next == "" || len(page) == 0 {
			break
		}
		q.Set("before", next)
	}
	return out, nil
}
