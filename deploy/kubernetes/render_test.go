package kubernetes

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"sigs.k8s.io/yaml"
)

// This file renders a kustomization the way `kubectl kustomize` does, for
// the features these manifests use and no others: resources (files and
// directories), components, namespace, images, and patches (strategic merge
// or RFC 6902, by target or by the patch's own kind and name). A
// kustomization that uses anything else fails to decode, so the renderer
// never silently ignores a field. When kubectl is on PATH,
// TestKubectlKustomize checks that both give the same objects.

// object is one Kubernetes object as decoded from JSON (numbers as
// json.Number, so that nothing is rounded).
type object = map[string]any

// kustomization is the part of a kustomization.yaml this renderer knows.
type kustomization struct {
	APIVersion string   `json:"apiVersion"`
	Kind       string   `json:"kind"`
	Namespace  string   `json:"namespace,omitempty"`
	Resources  []string `json:"resources,omitempty"`
	Components []string `json:"components,omitempty"`
	Images     []image  `json:"images,omitempty"`
	Patches    []patch  `json:"patches,omitempty"`
}

type image struct {
	Name    string `json:"name"`
	NewName string `json:"newName,omitempty"`
	NewTag  string `json:"newTag,omitempty"`
	Digest  string `json:"digest,omitempty"`
}

type patch struct {
	Path   string  `json:"path,omitempty"`
	Patch  string  `json:"patch,omitempty"`
	Target *target `json:"target,omitempty"`
}

type target struct {
	Group     string `json:"group,omitempty"`
	Version   string `json:"version,omitempty"`
	Kind      string `json:"kind,omitempty"`
	Name      string `json:"name,omitempty"`
	Namespace string `json:"namespace,omitempty"`
}

// clusterScoped are the kinds the namespace transformer leaves alone.
var clusterScoped = []string{"Namespace", "ClusterRole", "ClusterRoleBinding", "CustomResourceDefinition",
	"PersistentVolume", "StorageClass", "PriorityClass", "ValidatingWebhookConfiguration", "MutatingWebhookConfiguration"}

// render builds the kustomization in dir (a Kustomization, not a
// Component).
func render(dir string) ([]object, error) {
	k, err := loadKustomization(dir)
	if err != nil {
		return nil, err
	}
	if k.Kind != "Kustomization" {
		return nil, fmt.Errorf("%s: kind %s, want Kustomization", dir, k.Kind)
	}
	return build(dir, k, nil)
}

// build adds the resources and components of k (at dir) to acc and runs
// k's transformers over the whole set: kustomize's order for the fields
// used here (resources, then components, then patches, namespace, images).
func build(dir string, k *kustomization, acc []object) ([]object, error) {
	for _, r := range k.Resources {
		p := filepath.Join(dir, r)
		fi, err := os.Stat(p)
		if err != nil {
			return nil, fmt.Errorf("%s: resource %s: %w", dir, r, err)
		}
		var objs []object
		if fi.IsDir() {
			objs, err = render(p)
		} else {
			objs, err = readObjects(p)
		}
		if err != nil {
			return nil, err
		}
		for _, o := range objs {
			if slices.ContainsFunc(acc, func(a object) bool { return sameID(a, o) }) {
				return nil, fmt.Errorf("%s: %s/%s is defined twice", dir, kindOf(o), nameOf(o))
			}
			acc = append(acc, o)
		}
	}
	for _, c := range k.Components {
		p := filepath.Join(dir, c)
		ck, err := loadKustomization(p)
		if err != nil {
			return nil, err
		}
		if ck.Kind != "Component" {
			return nil, fmt.Errorf("%s: component %s is a %s", dir, c, ck.Kind)
		}
		if acc, err = build(p, ck, acc); err != nil {
			return nil, err
		}
	}
	for i, pt := range k.Patches {
		if err := applyPatch(dir, pt, acc); err != nil {
			return nil, fmt.Errorf("%s: patches[%d]: %w", dir, i, err)
		}
	}
	if k.Namespace != "" {
		for _, o := range acc {
			if !slices.Contains(clusterScoped, kindOf(o)) {
				meta(o)["namespace"] = k.Namespace
			}
		}
	}
	for _, img := range k.Images {
		for _, o := range acc {
			setImages(o, img)
		}
	}
	return acc, nil
}

// loadKustomization decodes dir/kustomization.yaml strictly: a field this
// renderer does not implement is an error.
func loadKustomization(dir string) (*kustomization, error) {
	b, err := os.ReadFile(filepath.Join(dir, "kustomization.yaml"))
	if err != nil {
		return nil, err
	}
	var k kustomization
	if err := yaml.UnmarshalStrict(b, &k); err != nil {
		return nil, fmt.Errorf("%s/kustomization.yaml (a field the test's renderer does not implement?): %w", dir, err)
	}
	want := map[string]string{"Kustomization": "kustomize.config.k8s.io/v1beta1", "Component": "kustomize.config.k8s.io/v1alpha1"}
	if want[k.Kind] == "" || want[k.Kind] != k.APIVersion {
		return nil, fmt.Errorf("%s/kustomization.yaml: %s %s", dir, k.APIVersion, k.Kind)
	}
	return &k, nil
}

// readObjects reads the YAML documents of a file.
func readObjects(path string) ([]object, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	objs, err := parseObjects(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return objs, nil
}

// parseObjects decodes a multi-document YAML stream (documents separated
// by "---" lines), skipping empty documents. Keys are checked for
// duplicates; YAML is read as kubectl reads it (YAML 1.1 scalars).
func parseObjects(b []byte) ([]object, error) {
	var objs []object
	for i, doc := range splitDocuments(b) {
		js, err := yaml.YAMLToJSONStrict(doc)
		if err != nil {
			return nil, fmt.Errorf("document %d: %w", i+1, err)
		}
		if string(js) == "null" {
			continue
		}
		o, err := decodeJSON(js)
		if err != nil {
			return nil, fmt.Errorf("document %d: %w", i+1, err)
		}
		m, ok := o.(object)
		if !ok {
			return nil, fmt.Errorf("document %d is not an object", i+1)
		}
		objs = append(objs, m)
	}
	return objs, nil
}

func splitDocuments(b []byte) [][]byte {
	var docs [][]byte
	var cur []byte
	for line := range bytes.Lines(b) {
		t := bytes.TrimRight(line, "\r\n")
		if bytes.Equal(t, []byte("---")) || bytes.HasPrefix(t, []byte("--- ")) {
			docs = append(docs, cur)
			cur = nil
			continue
		}
		cur = append(cur, line...)
	}
	return append(docs, cur)
}

func decodeJSON(js []byte) (any, error) {
	d := json.NewDecoder(bytes.NewReader(js))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		return nil, err
	}
	return v, nil
}

// meta returns o's metadata, adding an empty one when it has none.
func meta(o object) object {
	m, _ := o["metadata"].(object)
	if m == nil {
		m = object{}
		o["metadata"] = m
	}
	return m
}

// metaOf reads o's metadata (nil when it has none).
func metaOf(o object) object {
	m, _ := o["metadata"].(object)
	return m
}

func kindOf(o object) string       { s, _ := o["kind"].(string); return s }
func apiVersionOf(o object) string { s, _ := o["apiVersion"].(string); return s }
func nameOf(o object) string       { s, _ := metaOf(o)["name"].(string); return s }
func namespaceOf(o object) string  { s, _ := metaOf(o)["namespace"].(string); return s }

func sameID(a, b object) bool {
	return apiVersionOf(a) == apiVersionOf(b) && kindOf(a) == kindOf(b) && nameOf(a) == nameOf(b) && namespaceOf(a) == namespaceOf(b)
}

// matches reports whether o is a target of t.
func (t target) matches(o object) bool {
	group, version := "", apiVersionOf(o)
	if g, v, ok := strings.Cut(version, "/"); ok {
		group, version = g, v
	}
	return (t.Group == "" || t.Group == group) && (t.Version == "" || t.Version == version) &&
		(t.Kind == "" || t.Kind == kindOf(o)) && (t.Name == "" || t.Name == nameOf(o)) &&
		(t.Namespace == "" || t.Namespace == namespaceOf(o))
}

// applyPatch applies one entry of patches to every object it targets; a
// patch that targets nothing is an error (kustomize ignores it, but here it
// is a mistake).
func applyPatch(dir string, pt patch, objs []object) error {
	body := []byte(pt.Patch)
	if pt.Path != "" {
		if pt.Patch != "" {
			return fmt.Errorf("both path and patch")
		}
		var err error
		if body, err = os.ReadFile(filepath.Join(dir, pt.Path)); err != nil {
			return err
		}
	}
	js, err := yaml.YAMLToJSONStrict(body)
	if err != nil {
		return err
	}
	v, err := decodeJSON(js)
	if err != nil {
		return err
	}
	var apply func(o object) error
	var t target
	switch p := v.(type) {
	case []any: // RFC 6902
		if pt.Target == nil {
			return fmt.Errorf("a JSON patch needs a target")
		}
		t = *pt.Target
		apply = func(o object) error { return jsonPatch(o, p) }
	case object: // strategic merge
		t = target{Kind: kindOf(p), Name: nameOf(p), Namespace: namespaceOf(p)}
		if g, v, ok := strings.Cut(apiVersionOf(p), "/"); ok {
			t.Group, t.Version = g, v
		} else {
			t.Version = apiVersionOf(p)
		}
		if pt.Target != nil {
			t = *pt.Target
		}
		apply = func(o object) error {
			m, err := strategicMerge(o, deepCopy(p), "")
			if err != nil {
				return err
			}
			// The patch's identity never renames the target.
			mo := m.(object)
			meta(mo)["name"], meta(mo)["namespace"] = nameOf(o), meta(o)["namespace"]
			if meta(mo)["namespace"] == nil {
				delete(meta(mo), "namespace")
			}
			clear(o)
			maps(o, mo)
			return nil
		}
	default:
		return fmt.Errorf("a patch is a list (RFC 6902) or an object (strategic merge)")
	}
	n := 0
	for _, o := range objs {
		if t.matches(o) {
			n++
			if err := apply(o); err != nil {
				return fmt.Errorf("%s/%s: %w", kindOf(o), nameOf(o), err)
			}
		}
	}
	if n == 0 {
		return fmt.Errorf("target %+v matches no object", t)
	}
	return nil
}

func maps(dst, src object) {
	for k, v := range src {
		dst[k] = v
	}
}

// mergeKeys are the keys by which a strategic merge patch merges the items
// of these lists (from the Kubernetes API types); any other list is
// replaced.
var mergeKeys = map[string]string{
	"containers": "name", "initContainers": "name", "ephemeralContainers": "name",
	"env": "name", "volumes": "name", "imagePullSecrets": "name",
	"volumeMounts": "mountPath",
}

// strategicMerge merges patch into dst as kustomize does: objects key by
// key (null deletes), lists with a merge key item by item (the patch's
// items first, in its order, each merged with the item of the same key,
// then dst's other items), other lists and scalars replaced.
func strategicMerge(dst, patch any, field string) (any, error) {
	switch p := patch.(type) {
	case object:
		d, ok := dst.(object)
		if !ok {
			d = object{}
		}
		out := deepCopy(d).(object)
		for k, pv := range p {
			if strings.HasPrefix(k, "$") {
				return nil, fmt.Errorf("directive %s is not implemented by the test's renderer", k)
			}
			if pv == nil {
				delete(out, k)
				continue
			}
			m, err := strategicMerge(out[k], pv, k)
			if err != nil {
				return nil, err
			}
			out[k] = m
		}
		return out, nil
	case []any:
		key := mergeKeys[field]
		d, ok := dst.([]any)
		if key == "" || !ok {
			return deepCopy(p), nil
		}
		keyOf := func(v any) (string, bool) {
			m, ok := v.(object)
			if !ok {
				return "", false
			}
			s, ok := m[key].(string)
			return s, ok
		}
		var out []any
		used := map[string]bool{}
		for _, pv := range p {
			pk, ok := keyOf(pv)
			if !ok {
				return nil, fmt.Errorf("%s: an item without %s", field, key)
			}
			used[pk] = true
			var base any
			for _, dv := range d {
				if dk, _ := keyOf(dv); dk == pk {
					base = dv
				}
			}
			m, err := strategicMerge(base, pv, "")
			if err != nil {
				return nil, err
			}
			out = append(out, m)
		}
		for _, dv := range d {
			if dk, _ := keyOf(dv); !used[dk] {
				out = append(out, deepCopy(dv))
			}
		}
		return out, nil
	default:
		return p, nil
	}
}

func deepCopy(v any) any {
	switch t := v.(type) {
	case object:
		m := make(object, len(t))
		for k, x := range t {
			m[k] = deepCopy(x)
		}
		return m
	case []any:
		s := make([]any, len(t))
		for i, x := range t {
			s[i] = deepCopy(x)
		}
		return s
	default:
		return v
	}
}

// jsonPatch applies RFC 6902 operations add, remove, replace and test.
func jsonPatch(o object, ops []any) error {
	for i, raw := range ops {
		op, ok := raw.(object)
		if !ok {
			return fmt.Errorf("operation %d is not an object", i)
		}
		name, _ := op["op"].(string)
		path, _ := op["path"].(string)
		for k := range op {
			if k != "op" && k != "path" && k != "value" {
				return fmt.Errorf("operation %d: field %q is not implemented by the test's renderer", i, k)
			}
		}
		value, hasValue := op["value"]
		if (name == "add" || name == "replace" || name == "test") && !hasValue {
			return fmt.Errorf("operation %d (%s %s): no value", i, name, path)
		}
		if !strings.HasPrefix(path, "/") {
			return fmt.Errorf("operation %d: path %q", i, path)
		}
		var tokens []string
		for _, t := range strings.Split(path[1:], "/") {
			tokens = append(tokens, strings.ReplaceAll(strings.ReplaceAll(t, "~1", "/"), "~0", "~"))
		}
		if err := pointerOp(o, tokens, name, deepCopy(value)); err != nil {
			return fmt.Errorf("operation %d (%s %s): %w", i, name, path, err)
		}
	}
	return nil
}

// pointerOp runs op at the location tokens names under container, a map
// or a list; it returns the container to store when a list changed size.
func pointerOp(root object, tokens []string, op string, value any) error {
	parent := any(root)
	var setParent func(any) = func(any) {}
	for _, t := range tokens[:len(tokens)-1] {
		switch c := parent.(type) {
		case object:
			next, ok := c[t]
			if !ok {
				return fmt.Errorf("no member %q", t)
			}
			parent, setParent = next, func(v any) { c[t] = v }
		case []any:
			i, err := strconv.Atoi(t)
			if err != nil || i < 0 || i >= len(c) {
				return fmt.Errorf("no index %q", t)
			}
			parent, setParent = c[i], func(v any) { c[i] = v }
		default:
			return fmt.Errorf("%q is under a scalar", t)
		}
	}
	last := tokens[len(tokens)-1]
	switch c := parent.(type) {
	case object:
		_, exists := c[last]
		switch op {
		case "add":
			c[last] = value
		case "replace":
			if !exists {
				return fmt.Errorf("no member %q to replace", last)
			}
			c[last] = value
		case "remove":
			if !exists {
				return fmt.Errorf("no member %q to remove", last)
			}
			delete(c, last)
		case "test":
			if !reflect.DeepEqual(c[last], value) {
				return fmt.Errorf("test failed: %v", c[last])
			}
		default:
			return fmt.Errorf("op %q is not implemented by the test's renderer", op)
		}
	case []any:
		i := len(c)
		if last != "-" {
			var err error
			if i, err = strconv.Atoi(last); err != nil || i < 0 || i > len(c) {
				return fmt.Errorf("bad index %q", last)
			}
		}
		if op != "add" && i == len(c) {
			return fmt.Errorf("no index %q", last)
		}
		switch op {
		case "add":
			setParent(slices.Insert(slices.Clone(c), i, value))
		case "replace":
			c[i] = value
		case "remove":
			setParent(slices.Delete(slices.Clone(c), i, i+1))
		case "test":
			if !reflect.DeepEqual(c[i], value) {
				return fmt.Errorf("test failed: %v", c[i])
			}
		default:
			return fmt.Errorf("op %q is not implemented by the test's renderer", op)
		}
	default:
		return fmt.Errorf("%q is under a scalar", last)
	}
	return nil
}

// setImages rewrites the image of every container and init container under
// o whose image name is img.Name.
func setImages(v any, img image) {
	switch t := v.(type) {
	case object:
		for k, x := range t {
			if k == "containers" || k == "initContainers" {
				if list, ok := x.([]any); ok {
					for _, c := range list {
						if cm, ok := c.(object); ok {
							if s, ok := cm["image"].(string); ok {
								cm["image"] = rewriteImage(s, img)
							}
						}
					}
				}
			}
			setImages(x, img)
		}
	case []any:
		for _, x := range t {
			setImages(x, img)
		}
	}
}

// rewriteImage applies img to ref when ref names img.Name.
func rewriteImage(ref string, img image) string {
	name, tag, digest := splitImage(ref)
	if name != img.Name {
		return ref
	}
	if img.NewName != "" {
		name = img.NewName
	}
	switch {
	case img.Digest != "":
		return name + "@" + img.Digest
	case img.NewTag != "":
		return name + ":" + img.NewTag
	case digest != "":
		return name + "@" + digest
	case tag != "":
		return name + ":" + tag
	}
	return name
}

// splitImage splits an image reference into its name, tag and digest.
func splitImage(ref string) (name, tag, digest string) {
	name, digest, _ = strings.Cut(ref, "@")
	if i := strings.LastIndexByte(name, ':'); i > strings.LastIndexByte(name, '/') {
		name, tag = name[:i], name[i+1:]
	}
	return name, tag, digest
}
