package api

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dwara/dwara/api/apiv1"
	"github.com/dwara/dwara/db"
)

// TestExposures: the list is filtered by service, generation, branch and
// reason and paginated like the audit log; the summary counts per
// generation and branch and per reason; bad parameters are 400 naming
// them. Every call is checked against openapi.yaml.
func TestExposures(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Options{})
	var rows []db.ExposureRow
	at := time.Now().Add(-time.Minute)
	add := func(n int, gen int64, service, branch string, share float64, reason string) {
		for i := range n {
			rows = append(rows, db.ExposureRow{At: at, Generation: gen, Service: service, Branch: branch, Share: share,
				KeyHash: fmt.Sprintf("%016x", len(rows)+i), Reason: reason})
		}
	}
	add(5, 1, "web", "a", 0.9, apiv1.ExposureSticky)
	add(3, 1, "web", "b", 0.1, apiv1.ExposureSticky)
	add(2, 2, "web", "b", 0.2, apiv1.ExposureForced)
	add(4, 2, "web", "a", 0.8, apiv1.ExposureRequest)
	add(6, 1, "api", "x", 1, apiv1.ExposureSticky)
	if err := e.store.InsertExposures(context.Background(), "i-1", rows); err != nil {
		t.Fatal(err)
	}

	list := func(query string) apiv1.ExposureList {
		t.Helper()
		var l apiv1.ExposureList
		e.do(call{method: "GET", path: "/api/v1/exposures" + query}).want(t, http.StatusOK).decode(t, &l)
		return l
	}
	for _, tt := range []struct {
		query string
		n     int
	}{
		{"", 20},
		{"?service=web", 14},
		{"?service=web&generation=2", 6},
		{"?service=web&branch=b", 5},
		{"?reason=forced", 2},
		{"?service=api&reason=request", 0},
		{"?service=nope", 0},
	} {
		if l := list(tt.query + map[bool]string{true: "?", false: "&"}[tt.query == ""] + "limit=500"); len(l.Items) != tt.n || l.NextCursor != "" {
			t.Errorf("%q: %d items, cursor %q; want %d", tt.query, len(l.Items), l.NextCursor, tt.n)
		}
	}
	if r := e.do(call{method: "GET", path: "/api/v1/exposures?service=nope"}); !strings.Contains(string(r.body), `"items":[]`) {
		t.Errorf("an empty page is %s; want an empty items array", r.body)
	}
	// Pages of 6 over web's 14: 6, 6, 2, newest first, no overlap.
	var ids []int64
	cursor := ""
	for page := 0; ; page++ {
		q := "?service=web&limit=6"
		if cursor != "" {
			q += "&cursor=" + cursor
		}
		l := list(q)
		for _, x := range l.Items {
			ids = append(ids, x.ID)
			if x.Service != "web" || x.InstanceID != "i-1" || len(x.KeyHash) != 16 {
				t.Errorf("item %+v", x)
			}
		}
		if cursor = l.NextCursor; cursor == "" {
			if page != 2 || len(l.Items) != 2 {
				t.Errorf("last page %d has %d items, want page 2 with 2", page, len(l.Items))
			}
			break
		}
	}
	if len(ids) != 14 || !slices.IsSortedFunc(ids, func(a, b int64) int { return int(b - a) }) {
		t.Errorf("ids %v: want 14, newest first", ids)
	}
	if l := list("?limit=50"); len(l.Items) != 20 {
		t.Errorf("default page: %d items", len(l.Items))
	}

	var sum apiv1.ExposureSummary
	e.do(call{method: "GET", path: "/api/v1/exposures/summary?service=web"}).want(t, http.StatusOK).decode(t, &sum)
	want := []apiv1.ExposureCount{{GenerationID: 2, Branch: "a", Count: 4}, {GenerationID: 2, Branch: "b", Count: 2},
		{GenerationID: 1, Branch: "a", Count: 5}, {GenerationID: 1, Branch: "b", Count: 3}}
	if sum.Service != "web" || sum.Total != 14 || !slices.Equal(sum.Items, want) ||
		sum.Reasons[apiv1.ExposureSticky] != 8 || sum.Reasons[apiv1.ExposureRequest] != 4 || sum.Reasons[apiv1.ExposureForced] != 2 {
		t.Errorf("summary %+v", sum)
	}
	e.do(call{method: "GET", path: "/api/v1/exposures/summary?service=nope"}).want(t, http.StatusOK).decode(t, &sum)
	if sum.Total != 0 || len(sum.Items) != 0 || len(sum.Reasons) != 3 {
		t.Errorf("summary of nothing %+v", sum)
	}

	for _, tt := range []struct{ path, param string }{
		{"/api/v1/exposures?limit=0", "limit"},
		{"/api/v1/exposures?limit=501", "limit"},
		{"/api/v1/exposures?cursor=x", "cursor"},
		{"/api/v1/exposures?generation=0", "generation"},
		{"/api/v1/exposures?reason=other", "reason"},
		{"/api/v1/exposures?service=%ff", "service"},
		{"/api/v1/exposures/summary", "service"},
	} {
		p := e.do(call{method: "GET", path: tt.path, violates: true}).want(t, http.StatusBadRequest).problem(t)
		if len(p.Errors) != 1 || p.Errors[0].Path != tt.param {
			t.Errorf("%s: errors %v, want one at %s", tt.path, p.Errors, tt.param)
		}
	}
}
