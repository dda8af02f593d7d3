package affinity

import (
	"net/http"
	"regexp"
	"sync"
	"testing"
)

var handleRE = regexp.MustCompile(`^[0-9a-f]{24}$`)

func TestMintInto(t *testing.T) {
	t.Parallel()
	const per, workers = 2000, 4
	var mu sync.Mutex
	seen := make(map[string]bool, per*workers)
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			local := make([]string, per)
			var b [IDLen]byte
			for i := range local {
				MintInto(&b)
				local[i] = string(b[:])
			}
			mu.Lock()
			defer mu.Unlock()
			for _, id := range local {
				if !handleRE.MatchString(id) || !Valid(id) {
					t.Errorf("bad handle %q", id)
				}
				if seen[id] {
					t.Errorf("duplicate handle %q", id)
				}
				seen[id] = true
			}
		}()
	}
	wg.Wait()
	for _, bad := range []string{"", "0123456789abcdef0123456", "0123456789ABCDEF01234567", "0123456789abcdef0123456g", "0123456789abcdef012345678"} {
		if Valid(bad) {
			t.Errorf("Valid(%q) = true", bad)
		}
	}
}

func TestReadCookie(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		lines  []string
		want   string
		wantOK bool
	}{
		{"absent header", nil, "", false},
		{"single", []string{"sid=abc"}, "abc", true},
		{"among others", []string{"a=1; sid=abc; b=2"}, "abc", true},
		{"first of duplicates wins", []string{"sid=first; sid=second"}, "first", true},
		{"first across lines", []string{"a=1", "sid=one", "sid=two"}, "one", true},
		{"malformed pairs skipped", []string{"garbage; =x; ;; sid=ok"}, "ok", true},
		{"quoted value", []string{`sid="abc"`}, "abc", true},
		{"lone quote kept", []string{`sid="`}, `"`, true},
		{"empty value", []string{"sid="}, "", true},
		{"spaces trimmed", []string{"a=1;   sid =  abc  ;b=2"}, "abc", true},
		{"tabs trimmed", []string{"\tsid\t=\tabc\t"}, "abc", true},
		{"prefix name is not a match", []string{"sidx=1; xsid=2"}, "", false},
		{"case sensitive name", []string{"SID=1"}, "", false},
		{"value with equals", []string{"sid=a=b"}, "a=b", true},
		{"empty line then match", []string{"", "sid=z"}, "z", true},
		{"many lines", []string{"a=1", "b=2", "c=3", "d=4", "e=5; sid=deep"}, "deep", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			h := http.Header{}
			if tt.lines != nil {
				h["Cookie"] = tt.lines
			}
			got, ok := ReadCookie(h, "sid")
			if got != tt.want || ok != tt.wantOK {
				t.Errorf("ReadCookie(%q) = %q, %v; want %q, %v", tt.lines, got, ok, tt.want, tt.wantOK)
			}
		})
	}
}

func TestReadCookieAllocs(t *testing.T) {
	h := http.Header{"Cookie": {"a=b; dwara_affinity=0123456789abcdef01234567"}}
	if a := testing.AllocsPerRun(1000, func() { ReadCookie(h, "dwara_affinity") }); a != 0 {
		t.Errorf("ReadCookie allocates %.1f times", a)
	}
	valid := false
	if a := testing.AllocsPerRun(1000, func() { valid = Valid("0123456789abcdef01234567") }); a != 0 || !valid {
		t.Errorf("Valid allocates %.1f times (valid %t)", a, valid)
	}
}

func BenchmarkReadCookie(b *testing.B) {
	h := http.Header{"Cookie": {"_ga=GA1.2.3; theme=dark; dwara_affinity=0123456789abcdef01234567"}}
	b.ReportAllocs()
	for b.Loop() {
		ReadCookie(h, "dwara_affinity")
	}
}
