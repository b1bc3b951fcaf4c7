# Filters `go build -v` (stdout and stderr) for `make build`: a cold build
# downloads modules and compiles about a thousand packages, which takes
# minutes (twenty under load) and would otherwise print nothing, or a wall
# of package names. This prints a progress line every 25 downloads and
# every 100 packages, and every other line (compiler errors) unchanged.
/^go: downloading / {
	d++
	if (d % 25 == 1) { print "  … downloading modules (" d " so far)"; fflush() }
	next
}
/^[A-Za-z0-9._~\/+-]+$/ {
	n++
	if (n % 100 == 0) { print "  … " n " packages compiled"; fflush() }
	next
}
{ print; fflush() }
