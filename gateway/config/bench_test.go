package config_test

import (
	"encoding/json"
	"fmt"
	"testing"

	"github.com/dwara/dwara/gateway/config"
	"github.com/dwara/dwara/gateway/config/spectest"
)

// BenchmarkParseEnvelope measures the one strict decoder on a publish body
// of 20 upstreams (three endpoints each) and 20 split services.
func BenchmarkParseEnvelope(b *testing.B) {
	sb := spectest.New()
	const n = 20
	for i := range n {
		sb.Upstream(fmt.Sprintf("u%d", i), fmt.Sprintf("10.0.%d.1:8080", i), fmt.Sprintf("10.0.%d.2:8080", i), fmt.Sprintf("10.0.%d.3:8080", i))
	}
	for i := range n {
		sb.Split(fmt.Sprintf("s%d", i), fmt.Sprintf("/s%d", i), spectest.T(fmt.Sprintf("u%d", i), 90), spectest.T(fmt.Sprintf("u%d", (i+1)%n), 10))
	}
	body, err := json.Marshal(map[string]any{"message": "bench", "spec": sb})
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := config.ParseEnvelope(body, config.FormatJSON); err != nil {
			b.Fatal(err)
		}
	}
}
