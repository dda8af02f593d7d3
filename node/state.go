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
)

// The last-known generation on disk: a gateway fed by the database or the
// control plane keeps the last generation it applied (with the canary
// weights in force when it applied it) in its state directory, so that a
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
}

// stateDir keeps the last-known generation in dir. Safe for concurrent
// use; nil keeps nothing.
type stateDir struct {
	dir string
	log *slog.Logger
	mu  sync.Mutex
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
		js, err = json.Marshal(lastGeneration{Generation: generation, Spec: js})
	}
	if err == nil {
		s.mu.Lock()
		err = writeAtomic(filepath.Join(s.dir, stateFile), js)
		s.mu.Unlock()
	}
	if err != nil {
		s.log.Warn("state directory: the applied generation was not saved; a restart without the source would not serve it", "generation", generation, "err", err)
	}
}

// load returns the last-known generation, or nil when there is none. A
// file that does not decode, or a spec the config refuses, is an error.
func (s *stateDir) load() (*config.Spec, int64, error) {
	if s == nil {
		return nil, 0, nil
	}
	b, err := os.ReadFile(filepath.Join(s.dir, stateFile))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, 0, nil
	}
	if err != nil {
		return nil, 0, fmt.Errorf("state directory: %w", err)
	}
	var last lastGeneration
	if err := json.Unmarshal(b, &last); err != nil || last.Generation <= 0 {
		return nil, 0, fmt.Errorf("state directory: %s is not a saved generation", filepath.Join(s.dir, stateFile))
	}
	spec, err := config.ParseAs(last.Spec, config.FormatJSON)
	if err != nil {
		return nil, 0, fmt.Errorf("state directory: generation %d: %w", last.Generation, err)
	}
	return spec, last.Generation, nil
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
