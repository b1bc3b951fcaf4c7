package bot

// policyCommands are the policy commands (/talos freeze, /talos unfreeze).
func policyCommands() []botCommand { return nil }
