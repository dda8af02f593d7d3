package proxy

import (
	"io"
	"testing"

	"github.com/dwara/dwara/demo"
	"github.com/dwara/dwara/gateway/config/spectest"
)

// BenchmarkProxyParallel drives the proxy from many concurrent clients, as a
// load generator would.
func BenchmarkProxyParallel(b *testing.B) {
	stable := startPool(b, "stable", 2)
	canary := startPool(b, "canary", 2)
	g := startGateway(b, *benchFront)
	g.apply(b, 1, spectest.SplitOver([]*demo.Pool{stable, canary}, 95, 5).YAML())
	b.SetParallelism(16)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			resp, err := client.Get(g.URL + "/bench")
			if err != nil {
				b.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	})
}
