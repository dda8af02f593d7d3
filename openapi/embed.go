// Package openapi holds openapi.yaml, the source of truth for Dwara's REST API.
// The api package implements it, and its tests check every route and every
// response against it.
package openapi

import _ "embed"

// Spec is the OpenAPI 3.0 document of the control-plane REST API, as served at
// GET /openapi.yaml. It is read-only: callers must not modify the slice.
//
//go:embed openapi.yaml
var Spec []byte
