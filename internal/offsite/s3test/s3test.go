// Package s3test runs gofakes3, an S3 server we did not write, on loopback
// for the tests of the packages that keep snapshots off-site.
package s3test

import (
	"net/http/httptest"
	"net/url"
	"testing"

	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"
)

// Start serves an in-memory S3 with one bucket until the test ends. It
// returns the endpoint as offsite.Config wants it (host:port, plain HTTP)
// and the backend, for tests that look behind the API.
func Start(t testing.TB, bucket string) (string, *s3mem.Backend) {
	t.Helper()
	be := s3mem.New()
	if err := be.CreateBucket(bucket); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(gofakes3.New(be).Server())
	t.Cleanup(srv.Close)
	u, err := url.Parse(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	return u.Host, be
}
