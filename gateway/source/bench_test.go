package source_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/dwara/dwara/db/dbtest"
	"github.com/dwara/dwara/gateway/config"
	"github.com/dwara/dwara/gateway/config/spectest"
	"github.com/dwara/dwara/gateway/source"
)

// BenchmarkNotify measures what the Database does on one notification,
// for a 20-service generation: "applied" when the newest generation is the
// one it applied last (every notification of a `dwara serve` publish,
// which the API applied before its 201), "new" when a newer one waits
// (stored outside the timer).
func BenchmarkNotify(b *testing.B) {
	ctx := context.Background()
	big := func(n int) []byte {
		sb := spectest.New()
		for i := range n {
			sb.Upstream(fmt.Sprintf("u%d", i), fmt.Sprintf("10.0.%d.1:8080", i), fmt.Sprintf("10.0.%d.2:8080", i), fmt.Sprintf("10.0.%d.3:8080", i))
		}
		for i := range n {
			sb.Split(fmt.Sprintf("s%d", i), fmt.Sprintf("/s%d", i), spectest.T(fmt.Sprintf("u%d", i), 90), spectest.T(fmt.Sprintf("u%d", (i+1)%n), 10))
		}
		return sb.JSON()
	}
	apply := func(context.Context, *config.Spec, int64) error { return nil }
	b.Run("applied", func(b *testing.B) {
		store, _ := dbtest.NewStore(b)
		publishSpec(b, store, big(20))
		src := &source.Database{Store: store, Apply: apply}
		if err := src.Sync(ctx); err != nil || src.Applied() != 1 {
			b.Fatalf("first sync: %v, applied %d", err, src.Applied())
		}
		b.ReportAllocs()
		for b.Loop() {
			if err := src.Sync(ctx); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("new", func(b *testing.B) {
		store, _ := dbtest.NewStore(b)
		specs := [2][]byte{big(20), big(21)}
		src := &source.Database{Store: store, Apply: apply}
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			b.StopTimer()
			publishSpec(b, store, specs[i%2])
			i++
			b.StartTimer()
			if err := src.Sync(ctx); err != nil {
				b.Fatal(err)
			}
		}
		if src.Applied() != int64(i) {
			b.Fatalf("applied %d, want %d", src.Applied(), i)
		}
	})
}
