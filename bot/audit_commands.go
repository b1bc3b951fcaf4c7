package bot

// auditCommands are the audit-trail commands (/talos audit, /talos op).
func auditCommands() []botCommand { return nil }
