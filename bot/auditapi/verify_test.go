package auditapi_test

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/talosbot/talosbot/bot/auditapi"
)

func verifyGet(t *testing.T, f *fixture, query, tok string) (int, auditapi.VerifyResult, string) {
	t.Helper()
	req, _ := http.NewRequest("GET", f.srv.URL+auditapi.VerifyPath+"?"+query, nil)
	if tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var out auditapi.VerifyResult
	_ = json.Unmarshal(raw, &out)
	return resp.StatusCode, out, string(raw)
}

func TestVerifyEndpoint(t *testing.T) {
	f := trail(t)
	if code, _, _ := verifyGet(t, f, "", ""); code != http.StatusUnauthorized {
		t.Fatalf("no token: %d", code)
	}
	code, rep, body := verifyGet(t, f, "", token)
	if code != http.StatusOK || !rep.OK || rep.Records == 0 || rep.HeadSeq != uint64(rep.Records) || len(rep.Head) != 64 {
		t.Fatalf("intact chain: %d %s", code, body)
	}
	if code, again, body := verifyGet(t, f, "expect_head="+rep.Head, token); code != http.StatusOK || !again.OK {
		t.Fatalf("pinned current head: %d %s", code, body)
	}
	// A head that is not in the chain: 409, with the reason.
	code, bad, body := verifyGet(t, f, "expect_head="+strings.Repeat("0", 64), token)
	if code != http.StatusConflict || bad.OK || !strings.Contains(bad.Error, "is not in the chain") {
		t.Fatalf("unknown pinned head: %d %s", code, body)
	}
	for _, q := range []string{"expect_head=abc", "head=x"} {
		if code, _, body := verifyGet(t, f, q, token); code != http.StatusBadRequest {
			t.Errorf("%s: %d %s, want 400", q, code, body)
		}
	}
}
