package main

import (
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/talosbot/talosbot/bot/auditview"
	"github.com/talosbot/talosbot/config"
	"github.com/talosbot/talosbot/state"
)

func newAuditCmd() *cobra.Command {
	audit := &cobra.Command{
		Use:   "audit",
		Short: "Verify or export the hash-chained audit trail",
		Long: `Every state change of every operation is recorded in an append-only audit
trail; each record carries the sha256 of its canonical bytes and of the record
before it, so editing, deleting or reordering records breaks the chain.
These commands open the database read-only and work while the bot runs.`,
	}
	var db string
	verify := &cobra.Command{
		Use:     "verify --db FILE",
		Short:   "Check the audit hash chain; exits 1 at the first broken record",
		Example: "  talosbot audit verify --db /var/lib/talosbot/talosbot.db",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			rep, err := state.VerifyFile(cmd.Context(), db)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "audit chain OK: %d records, head %s\n", rep.Records, rep.Head)
			return nil
		},
	}
	verify.Flags().StringVar(&db, "db", "", "the talosbot database file (DATA_DIR/talosbot.db)")
	_ = verify.MarkFlagRequired("db")

	var (
		format, cluster, user, op, result, since string
		limit                                    int
	)
	export := &cobra.Command{
		Use:   "export --db FILE [--format json|csv] [filters]",
		Short: "Export audit records, newest first",
		Example: `  talosbot audit export --db /var/lib/talosbot/talosbot.db --format csv > audit.csv
  talosbot audit export --db talosbot.db --cluster production --since 7d`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			q := state.AuditQuery{Cluster: cluster, Actor: user, Command: op, Result: result, Limit: limit}
			if since != "" {
				d, err := config.ParseDuration(since)
				if err != nil {
					return &exitError{code: 2, err: fmt.Errorf("--since: %w", err)}
				}
				q.Since = time.Now().Add(-d)
			}
			if format != "json" && format != "csv" {
				return &exitError{code: 2, err: fmt.Errorf("--format %q: use json or csv", format)}
			}
			st, err := state.Open(db, state.Options{ReadOnly: true})
			if err != nil {
				return err
			}
			defer st.Close()
			recs, err := st.QueryAudit(cmd.Context(), q)
			if err != nil {
				return err
			}
			if format == "csv" {
				return auditview.WriteCSV(os.Stdout, recs)
			}
			return auditview.WriteJSON(os.Stdout, recs)
		},
	}
	export.Flags().StringVar(&db, "db", "", "the talosbot database file")
	export.Flags().StringVar(&format, "format", "json", "json or csv")
	export.Flags().StringVar(&cluster, "cluster", "", "only this cluster")
	export.Flags().StringVar(&user, "user", "", "only this actor")
	export.Flags().StringVar(&op, "op", "", "only this command, e.g. \"upgrade talos\"")
	export.Flags().StringVar(&result, "result", "", "only this result, e.g. failed")
	export.Flags().StringVar(&since, "since", "", "only records younger than this, e.g. 7d or 12h")
	export.Flags().IntVar(&limit, "limit", 1000000, "at most this many records")
	_ = export.MarkFlagRequired("db")
	audit.AddCommand(verify, export)
	return audit
}
