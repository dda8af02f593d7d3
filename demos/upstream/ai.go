package main

import (
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/dwara/dwara/internal/fakeai"
)

// aiSpec is one -ai flag: a fake OpenAI-compatible upstream.
type aiSpec struct {
	name string
	addr string
	o    fakeai.Options
}

// aiFlags collects the repeated -ai flag.
type aiFlags []aiSpec

func (a *aiFlags) String() string { return fmt.Sprint(len(*a), " fake model upstreams") }

func (a *aiFlags) Set(v string) error {
	s, err := parseAI(v)
	if err != nil {
		return err
	}
	*a = append(*a, s)
	return nil
}

// parseAI parses NAME=ADDR[?KEY=VALUE&...], the keys those of aiUsage.
func parseAI(v string) (aiSpec, error) {
	name, rest, ok := strings.Cut(v, "=")
	if !ok || name == "" || rest == "" {
		return aiSpec{}, fmt.Errorf("%q: want NAME=ADDR[?fail=RATE&ratelimit=RATE&ttft=DURATION&seed=N]", v)
	}
	addr, query, _ := strings.Cut(rest, "?")
	if err := checkLoopback(addr); err != nil {
		return aiSpec{}, fmt.Errorf("%q: %w", v, err)
	}
	q, err := url.ParseQuery(query)
	if err != nil {
		return aiSpec{}, fmt.Errorf("%q: %w", v, err)
	}
	s := aiSpec{name: name, addr: addr, o: fakeai.Options{Name: name, Seed: 1}}
	for k, vs := range q {
		val := vs[len(vs)-1]
		switch k {
		case "fail", "ratelimit":
			r, err := strconv.ParseFloat(val, 64)
			if err != nil || r < 0 || r > 1 {
				return aiSpec{}, fmt.Errorf("%q: %s=%q must be a rate in [0, 1]", v, k, val)
			}
			if k == "fail" {
				s.o.FailRate = r
			} else {
				s.o.RateLimitRate = r
			}
		case "ttft":
			d, err := time.ParseDuration(val)
			if err != nil || d < 0 || d > time.Minute {
				return aiSpec{}, fmt.Errorf("%q: ttft=%q must be a duration in [0, 1m], e.g. 300ms", v, val)
			}
			s.o.TTFT = d
		case "seed":
			n, err := strconv.ParseUint(val, 10, 64)
			if err != nil {
				return aiSpec{}, fmt.Errorf("%q: seed=%q must be a whole number", v, val)
			}
			s.o.Seed = n
		default:
			return aiSpec{}, fmt.Errorf("%q: unknown option %q (fail, ratelimit, ttft, seed)", v, k)
		}
	}
	if s.o.FailRate+s.o.RateLimitRate > 1 {
		return aiSpec{}, fmt.Errorf("%q: fail and ratelimit add up to more than 1", v)
	}
	return s, nil
}

// startAI starts one fake model upstream and returns its address and how
// to stop it.
func startAI(s aiSpec) (string, func(), error) {
	ln, err := net.Listen("tcp", s.addr)
	if err != nil {
		return "", nil, fmt.Errorf("start fake model upstream %s: %w", s.name, err)
	}
	srv := &http.Server{Handler: fakeai.New(s.o), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	return ln.Addr().String(), func() { _ = srv.Close() }, nil
}
