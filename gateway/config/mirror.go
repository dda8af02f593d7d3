package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// UnmarshalJSON decodes a service's mirror. An absent (or null)
// max_body_bytes means DefaultMirrorMaxBodyBytes, an explicit 0 stays 0
// (only requests without a body are mirrored). Unknown fields are refused
// even when the caller's decoder does not disallow them, because a custom
// unmarshaler does not inherit that setting.
func (m *Mirror) UnmarshalJSON(data []byte) error {
	if string(bytes.TrimSpace(data)) == "null" {
		return nil
	}
	type plain Mirror // no methods, so no recursion
	p := plain{MaxBodyBytes: DefaultMirrorMaxBodyBytes}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		return fmt.Errorf("decode mirror: %w", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return errors.New("decode mirror: unexpected data after the mirror")
	}
	*m = Mirror(p)
	return nil
}
