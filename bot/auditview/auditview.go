// Package auditview renders audit records for people and programs: JSON lines,
// CSV (for the export command and GET /api/audit) and the compact chat table.
package auditview

import (
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/talosbot/talosbot/state"
)

// CSVHeader is the column order of the CSV export.
func CSVHeader() []string {
	return []string{"seq", "time", "actor", "action", "cluster", "op_id", "command", "result", "detail", "prev_hash", "hash"}
}

// WriteCSV writes records with a header row. Detail is a k=v;k=v list sorted by key.
func WriteCSV(w io.Writer, recs []state.AuditRecord) error {
	cw := csv.NewWriter(w)
	if err := cw.Write(CSVHeader()); err != nil {
		return err
	}
	for _, r := range recs {
		if err := cw.Write([]string{
			strconv.FormatUint(r.Seq, 10), r.Time.UTC().Format(time.RFC3339Nano), r.Actor, r.Action, r.Cluster,
			r.OpID, r.Command, r.Result, detailString(r.Detail), r.PrevHash, r.Hash,
		}); err != nil {
			return err
		}
	}
	cw.Flush()
	return cw.Error()
}

// WriteJSON writes records as one JSON array.
func WriteJSON(w io.Writer, recs []state.AuditRecord) error {
	if recs == nil {
		recs = []state.AuditRecord{}
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(recs)
}

func detailString(d map[string]string) string {
	keys := make([]string, 0, len(d))
	for k := range d {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, k+"="+d[k])
	}
	return strings.Join(parts, ";")
}

// Table renders a compact, newest-first table for chat.
func Table(recs []state.AuditRecord) string {
	if len(recs) == 0 {
		return "no audit records match"
	}
	var b strings.Builder
	for _, r := range recs {
		op := r.OpID
		if op == "" {
			op = "-"
		}
		fmt.Fprintf(&b, "%s  %-10s %-18s %-12s %-10s %s %s\n", r.Time.UTC().Format("2006-01-02 15:04"), r.Cluster, r.Action, r.Actor, r.Result, op, r.Command)
	}
	return strings.TrimRight(b.String(), "\n")
}
