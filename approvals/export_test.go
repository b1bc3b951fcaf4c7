package approvals

// Clusters is the test clusters document, for the external matrix test
// (package approvals_test: it imports bot, which imports approvals).
const Clusters = clusters
