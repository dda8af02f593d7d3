package source

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/dwara/dwara/gateway/config"
)

// debounce is how long File waits for a burst of file events (an editor's
// write, rename and chmod) to settle before reloading once.
const debounce = 100 * time.Millisecond

// File serves a data plane from a spec file: it loads the file at start,
// then reloads it when it changes on disk (the directory is watched, so a
// file replaced by rename is seen) and on every receive from Reload. A file
// that fails to read, decode (config.Parse), validate or apply is refused
// with every error logged, and the generation already applied keeps serving.
//
// Set the fields before Run, which reads them; a File must not be copied or
// changed once Run has started, and Run must be called at most once.
type File struct {
	// Path is the YAML or JSON spec file. Required.
	Path string
	// Apply makes a loaded spec the serving generation; generations count
	// 1, 2, 3 over the successful loads of this process. Required.
	Apply ApplyFunc
	// Reload, when non-nil, triggers a reload on every receive, even of
	// unchanged content (main feeds it from SIGHUP). nil means the file is
	// reloaded only when it changes.
	Reload <-chan struct{}
	// Loaded, when non-nil, is called from Run's goroutine after every load
	// attempt with the generation it applied and its error. The generation
	// is 0 when the file was refused (err non-nil) and when its content was
	// unchanged and nothing was applied (err nil). Tests wait on it.
	Loaded func(generation int64, err error)
	// Logger receives loads and refusals; nil means slog.Default().
	Logger *slog.Logger

	log        *slog.Logger
	generation int64
	last       []byte
}

// Run loads the file, then watches it until ctx is done and returns nil. It
// fails at once when File is misconfigured or the first load fails, since
// there is nothing to serve; later failures are logged and keep the old
// generation.
func (s *File) Run(ctx context.Context) error {
	if s.Path == "" || s.Apply == nil {
		return errors.New("file source: Path and Apply are required")
	}
	s.log = s.Logger
	if s.log == nil {
		s.log = slog.Default()
	}
	// Watch first, then load: a change made between the first read and the
	// start of the watch would otherwise go unnoticed until the next one.
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("watch %s: %w", s.Path, err)
	}
	defer w.Close()
	// Watch the directory: editors and config managers replace files by
	// rename, which a watch on the file itself would lose.
	dir := filepath.Dir(s.Path)
	if err := w.Add(dir); err != nil {
		return fmt.Errorf("watch %s: %w", dir, err)
	}
	abs, _ := filepath.Abs(s.Path)
	if err := s.load(ctx, false); err != nil {
		return err
	}
	var timer <-chan time.Time
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-s.Reload:
			s.log.Info("reload requested", "file", s.Path)
			_ = s.load(ctx, true)
		case ev, ok := <-w.Events:
			if !ok {
				return fmt.Errorf("watch %s: watcher closed", dir)
			}
			if p, _ := filepath.Abs(ev.Name); p == abs && ev.Op&(fsnotify.Write|fsnotify.Create|fsnotify.Rename) != 0 {
				timer = time.After(debounce)
			}
		case err, ok := <-w.Errors:
			if !ok {
				return fmt.Errorf("watch %s: watcher closed", dir)
			}
			// Events may have been lost (an inotify queue overflow): reload,
			// which costs nothing when the content has not changed.
			s.log.Warn("file watcher error", "file", s.Path, "err", err)
			timer = time.After(debounce)
		case <-timer:
			timer = nil
			_ = s.load(ctx, false)
		}
	}
}

// load reads, decodes and applies the file. Unless force is set, content
// identical to the last applied file is not applied again.
func (s *File) load(ctx context.Context, force bool) (err error) {
	var gen int64
	defer func() {
		if s.Loaded != nil {
			s.Loaded(gen, err)
		}
	}()
	data, err := os.ReadFile(s.Path)
	if err != nil {
		s.log.Error("spec file refused: cannot read it; the current generation keeps serving", "file", s.Path, "err", err)
		return fmt.Errorf("read %s: %w", s.Path, err)
	}
	if !force && s.last != nil && bytes.Equal(data, s.last) {
		return nil
	}
	spec, err := config.Parse(data)
	if err == nil {
		err = s.Apply(ctx, spec, s.generation+1)
	}
	if err != nil {
		var ve *config.ValidationError
		if errors.As(err, &ve) {
			for _, fe := range ve.Errors {
				s.log.Error("spec file error", "file", s.Path, "path", fe.Path, "error", fe.Message)
			}
		}
		s.log.Error("spec file refused; the current generation keeps serving", "file", s.Path, "err", err)
		return fmt.Errorf("load %s: %w", s.Path, err)
	}
	s.generation++
	gen = s.generation
	s.last = data
	s.log.Info("generation applied", "file", s.Path, "generation", gen)
	return nil
}
