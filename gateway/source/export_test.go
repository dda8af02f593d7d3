package source

import "context"

// Sync runs one load of the newest generation, as Run does on a trigger,
// with no Run loop around it; Run must not be running.
func (s *Database) Sync(ctx context.Context) error {
	s.init()
	inst := s.Instance
	var dec decoded
	_, err := s.sync(ctx, &inst, &dec)
	return err
}
