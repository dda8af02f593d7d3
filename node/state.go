package node

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sync"

	"github.com/dwara/dwara/gateway/config"
	"github.com/dwara/dwara/gateway/proxy"
)

// The last-known generation on disk: a gateway fed by the database or the
// control plane keeps the last generation it applied, and the canary
// weights in force for it as they change, in its state directory, so that a
// restart while PostgreSQL or the API is away serves at once what it
// served before, and catches up when the source answers (a source's
// generation applies only when newer). The file is written whole to a
// temporary file, synced and renamed over the old one: a crash leaves the
// old one or the new one, never half of either.

// stateFile is the name of the last-known generation in a state directory.
const stateFile = "last-generation.json"

// lastGeneration is the state file's content.
type lastGeneration struct {
	Generation int64           `json:"generation"`
	Spec       json.RawMessage `json:"spec"`
	// Weights are the canary weights set since the apply, by service.
	Weights map[string]int `json:"weights,omitempty"`
}

// stateDir keeps the last-known generation in dir. Safe for concurrent
// use; nil keeps nothing.
type stateDir struct {
	dir  string
	log  *slog.Logger
	mu   sync.Mutex
	last lastGeneration // what the file holds
}

// newStateDir returns the state directory dir, created when missing; ""
// keeps nothing (nil).
func newStateDir(dir string, log *slog.Logger) (*stateDir, error) {
	if dir == "" {
		return nil, nil
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("state directory: %w", err)
	}
	return &stateDir{dir: dir, log: log}, nil
}

// save writes spec, generation's, as the last-known generation. A failure
// is logged: the data plane serves on, it only would not start from it.
func (s *stateDir) save(spec *config.Spec, generation int64) {
	if s == nil {
		return
	}
	js, err := json.Marshal(spec)
	if err == nil {
		s.mu.Lock()
		s.last = lastGeneration{Generation: generation, Spec: js}
		err = s.writeLocked()
		s.mu.Unlock()
	}
	if err != nil {
		s.log.Warn("state directory: the applied generation was not saved; a restart without the source would not serve it", "generation", generation, "err", err)
	}
}

// saveWeight records service's canary weight in force for generation,
// when that is the generation saved.
func (s *stateDir) saveWeight(generation int64, service string, weight int) {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.last.Generation != generation || s.last.Weights[service] == weight && s.last.Weights != nil {
		return
	}
	if s.last.Weights == nil {
		s.last.Weights = map[string]int{}
	}
	s.last.Weights[service] = weight
	if err := s.writeLocked(); err != nil {
		s.log.Warn("state directory: a canary weight was not saved", "generation", generation, "service", service, "err", err)
	}
}

// writeLocked writes s.last to the file; s.mu is held.
func (s *stateDir) writeLocked() error {
	js, err := json.Marshal(s.last)
	if err != nil {
		return err
	}
	return writeAtomic(filepath.Join(s.dir, stateFile), js)
}

// load returns the last-known generation and the canary weights saved
// for it, or nil when there is none. A file that does not decode, or a
// spec the config refuses, is an error.
func (s *stateDir) load() (*config.Spec, int64, map[string]int, error) {
	if s == nil {
		return nil, 0, nil, nil
	}
	b, err := os.ReadFile(filepath.Join(s.dir, stateFile))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, 0, nil, nil
	}
	if err != nil {
		return nil, 0, nil, fmt.Errorf("state directory: %w", err)
	}
	var last lastGeneration
	if err := json.Unmarshal(b, &last); err != nil || last.Generation <= 0 {
		return nil, 0, nil, fmt.Errorf("state directory: %s is not a saved generation", filepath.Join(s.dir, stateFile))
	}
	spec, err := config.ParseAs(last.Spec, config.FormatJSON)
	if err != nil {
		return nil, 0, nil, fmt.Errorf("state directory: generation %d: %w", last.Generation, err)
	}
	s.mu.Lock()
	s.last = last
	s.mu.Unlock()
	return spec, last.Generation, last.Weights, nil
}

// keptWeights is the data plane's canary side as the sources and the
// follower change it, each weight set also saved in the state directory.
type keptWeights struct {
	px    *proxy.Proxy
	state *stateDir
}

func (k keptWeights) Generation() int64 { return k.px.Generation() }

func (k keptWeights) CanaryWeight(service string) (int, bool) { return k.px.CanaryWeight(service) }

func (k keptWeights) SetCanaryWeight(generation int64, service string, weight int) (bool, error) {
	ok, err := k.px.SetCanaryWeight(generation, service, weight)
	if ok {
		k.state.saveWeight(generation, service, weight)
	}
	return ok, err
}

// writeAtomic replaces path with data: a temporary file beside it,
// synced, renamed over it, and the directory synced.
func writeAtomic(path string, data []byte) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		_ = os.Remove(tmp)
		return err
	}
	if d, err := os.Open(filepath.Dir(path)); err == nil {
		_ = d.Sync()
		_ = d.Close()
	}
	return nil
}
