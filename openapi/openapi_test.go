package openapi_test

import (
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"

	"github.com/dwara/dwara/api/apiv1"
	"github.com/dwara/dwara/gateway/config"
	"github.com/dwara/dwara/openapi"
)

func load(t *testing.T) *openapi3.T {
	t.Helper()
	doc, err := openapi3.NewLoader().LoadFromData(openapi.Spec)
	if err != nil {
		t.Fatalf("load: %v", err)
	}
	if err := doc.Validate(t.Context()); err != nil {
		t.Fatalf("validate: %v", err)
	}
	return doc
}

func TestSpecIsValidOpenAPI303(t *testing.T) {
	t.Parallel()
	doc := load(t)
	if doc.OpenAPI != "3.0.3" {
		t.Errorf("openapi %q, want 3.0.3", doc.OpenAPI)
	}
	ids := map[string]string{}
	for path, item := range doc.Paths.Map() {
		for method, op := range item.Operations() {
			where := method + " " + path
			if op.OperationID == "" || op.Summary == "" {
				t.Errorf("%s lacks an operationId or a summary", where)
			}
			if other, dup := ids[op.OperationID]; dup {
				t.Errorf("operationId %s used by %s and %s", op.OperationID, where, other)
			}
			ids[op.OperationID] = where
		}
	}
	if _, ok := doc.Components.SecuritySchemes["bearerAuth"]; !ok {
		t.Error("no bearerAuth security scheme")
	}
}

// The schemas mirror the Go types field by field: every JSON field of the Go
// type is a property of the schema and vice versa, recursively.
func TestSchemasMirrorGoTypes(t *testing.T) {
	t.Parallel()
	doc := load(t)
	tests := []struct {
		schema string
		typ    reflect.Type
	}{
		{"Spec", reflect.TypeFor[config.Spec]()},
		{"Generation", reflect.TypeFor[apiv1.Generation]()},
		{"AuditEntry", reflect.TypeFor[apiv1.AuditEntry]()},
		{"GatewayInstance", reflect.TypeFor[apiv1.GatewayInstance]()},
		{"FieldError", reflect.TypeFor[config.FieldError]()},
	}
	for _, tt := range tests {
		t.Run(tt.schema, func(t *testing.T) {
			t.Parallel()
			ref := doc.Components.Schemas[tt.schema]
			if ref == nil {
				t.Fatalf("no schema %s", tt.schema)
			}
			mirror(t, tt.schema, ref.Value, tt.typ)
		})
	}
}

// mirror compares the object schema s with the struct type typ.
func mirror(t *testing.T, where string, s *openapi3.Schema, typ reflect.Type) {
	t.Helper()
	for typ.Kind() == reflect.Pointer || typ.Kind() == reflect.Slice {
		if typ == reflect.TypeFor[[]byte]() || typ.Kind() == reflect.Slice && typ.Elem().Kind() == reflect.Uint8 {
			return // raw JSON
		}
		if typ.Kind() == reflect.Slice {
			if s.Items == nil {
				t.Errorf("%s: schema is not an array", where)
				return
			}
			s = s.Items.Value
			where += "[]"
		}
		typ = typ.Elem()
	}
	if typ.Kind() != reflect.Struct || typ == reflect.TypeFor[struct{}]() || typ.PkgPath() == "time" {
		return
	}
	// A $ref with a description of its own is an allOf of that one ref.
	for len(s.Properties) == 0 && len(s.AllOf) == 1 && s.AllOf[0].Value != nil {
		s = s.AllOf[0].Value
	}
	var goFields []string
	for f := range typ.Fields() {
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" || !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		goFields = append(goFields, name)
		prop := s.Properties[name]
		if prop == nil {
			t.Errorf("%s: Go field %s.%s (%q) is not in the schema", where, typ.Name(), f.Name, name)
			continue
		}
		mirror(t, where+"."+name, prop.Value, f.Type)
	}
	for name := range s.Properties {
		if !slices.Contains(goFields, name) {
			t.Errorf("%s: schema property %q has no Go field in %s", where, name, typ.Name())
		}
	}
}

// Every error answer of the API is documented as problem+json with the
// request id header.
func TestProblemResponses(t *testing.T) {
	t.Parallel()
	doc := load(t)
	for name, resp := range doc.Components.Responses {
		if resp.Value.Content.Get("application/problem+json") == nil {
			continue
		}
		if resp.Value.Headers["X-Request-Id"] == nil {
			t.Errorf("response %s lacks the X-Request-Id header", name)
		}
	}
	for path, item := range doc.Paths.Map() {
		for method, op := range item.Operations() {
			for code, resp := range op.Responses.Map() {
				if code >= "400" && resp.Value.Content.Get("application/problem+json") == nil && strings.HasPrefix(path, "/api/") {
					t.Errorf("%s %s %s is not problem+json", method, path, code)
				}
			}
		}
	}
}
