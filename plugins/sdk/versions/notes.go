package versions

// Notes is the bot's release data as a plugin reads it: the host sends it
// as typed evidence (sdk.Evidence.Releases; sdk.ReleaseNotes parses it).
type Notes struct {
	Versions, Targets, Kubernetes []Version
	Origin, FactoryURL            string
	// ListedOnly is releases.listed_only: Targets is the allow-list.
	ListedOnly bool
}
