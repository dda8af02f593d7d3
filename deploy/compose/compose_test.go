// Package compose checks the container files at the repository's root:
// docker-compose.yml (with `docker compose config` when the Compose plugin
// is installed, else by parsing it), the Dockerfile and .dockerignore. It
// has no code of its own.
package compose

import (
	"bufio"
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/dwara/dwara/node"
)

// root is the repository's root, where the files are.
const root = "../.."

// composeFile is what the checks read of docker-compose.yml, in the shape
// of the file (which `docker compose config --format json` keeps).
type composeFile struct {
	Services map[string]service `json:"services"`
	Volumes  map[string]any     `json:"volumes"`
	Secrets  map[string]struct {
		File        string `json:"file"`
		Environment string `json:"environment"`
	} `json:"secrets"`
}

type service struct {
	Image       string         `json:"image"`
	Build       any            `json:"build"`
	Restart     string         `json:"restart"`
	Command     []string       `json:"command"`
	Environment map[string]any `json:"environment"`
	Ports       []any          `json:"ports"`
	DependsOn   map[string]struct {
		Condition string `json:"condition"`
	} `json:"depends_on"`
	Healthcheck *struct {
		Test []string `json:"test"`
	} `json:"healthcheck"`
	// Secrets are names (short syntax) or {source, target} (long syntax,
	// which docker compose config writes).
	Secrets         []any    `json:"secrets"`
	ReadOnly        bool     `json:"read_only"`
	CapDrop         []string `json:"cap_drop"`
	Tmpfs           any      `json:"tmpfs"`
	StopGracePeriod string   `json:"stop_grace_period"`
}

// secretTargets returns where each secret of s is mounted, by name.
func (s service) secretTargets() map[string]string {
	out := map[string]string{}
	for _, sec := range s.Secrets {
		switch v := sec.(type) {
		case string:
			out[v] = "/run/secrets/" + v
		case map[string]any:
			src, _ := v["source"].(string)
			target, _ := v["target"].(string)
			if target == "" {
				target = src
			}
			if !strings.HasPrefix(target, "/") {
				target = "/run/secrets/" + target
			}
			out[src] = target
		}
	}
	return out
}

// composePlugin reports whether `docker compose` is installed. `docker
// compose config` needs no engine.
func composePlugin() bool {
	if _, err := exec.LookPath("docker"); err != nil {
		return false
	}
	return exec.Command("docker", "compose", "version").Run() == nil
}

// TestCompose checks docker-compose.yml: db and dwara, each restarted and
// health-checked, dwara started once db is healthy, the admin token
// required and passed as a secret file to --admin-token-file (in no
// environment), dwara read-only with no capability and given longer to
// stop than it drains, the demo running with its canary pool published,
// and no image left to a moving "latest" tag.
func TestCompose(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile(filepath.Join(root, "docker-compose.yml"))
	if err != nil {
		t.Fatal(err)
	}
	var f composeFile
	if composePlugin() {
		t.Log("checking `docker compose config`")
		f = composeConfig(t)
	} else {
		t.Log("no docker compose plugin: checking the parsed file")
		if err := yaml.UnmarshalStrict(raw, &map[string]any{}); err != nil {
			t.Fatalf("docker-compose.yml: %v", err)
		}
		if err := yaml.Unmarshal(raw, &f); err != nil {
			t.Fatalf("docker-compose.yml: %v", err)
		}
		// The one interpolation the file relies on: compose refuses to
		// start without a token file.
		if got := f.Secrets[adminSecret].File; got != "${DWARA_ADMIN_TOKEN_FILE:?"+tokenFileMessage+"}" {
			t.Errorf("secret %s's file is %q, want ${DWARA_ADMIN_TOKEN_FILE:?%s}", adminSecret, got, tokenFileMessage)
		}
	}
	checkCompose(t, f)
	// Every variable has a default or is required with a message.
	for _, m := range regexp.MustCompile(`\$\{([A-Z_]+)([^}]*)\}`).FindAllStringSubmatch(string(raw), -1) {
		if !strings.HasPrefix(m[2], ":-") && !strings.HasPrefix(m[2], ":?") {
			t.Errorf("%s neither has a default (:-) nor is required (:?)", m[0])
		}
	}
}

// adminSecret is the secret holding the admin token; compose refuses to
// start without its file, with tokenFileMessage.
const (
	adminSecret      = "dwara_admin_token"
	tokenFileMessage = "set DWARA_ADMIN_TOKEN_FILE to a file holding the admin token"
)

// composeConfig runs `docker compose config` on the file with a token
// file, and checks that it refuses to without one.
func composeConfig(t *testing.T) composeFile {
	t.Helper()
	run := func(env ...string) ([]byte, []byte, error) {
		cmd := exec.CommandContext(t.Context(), "docker", "compose", "-f", filepath.Join(root, "docker-compose.yml"), "config", "--format", "json")
		cmd.Env = append(os.Environ(), env...)
		var out, errOut bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errOut
		err := cmd.Run()
		return out.Bytes(), errOut.Bytes(), err
	}
	if _, errOut, err := run("DWARA_ADMIN_TOKEN_FILE="); err == nil || !bytes.Contains(errOut, []byte(tokenFileMessage)) {
		t.Errorf("docker compose config without a token file: %v, %s; want it refused with %q", err, errOut, tokenFileMessage)
	}
	token := filepath.Join(t.TempDir(), "admin-token")
	if err := os.WriteFile(token, []byte("compose-test-token\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, errOut, err := run("DWARA_ADMIN_TOKEN_FILE=" + token)
	if err != nil {
		t.Fatalf("docker compose config: %v\n%s", err, errOut)
	}
	var f composeFile
	if err := json.Unmarshal(out, &f); err != nil {
		t.Fatalf("docker compose config: %v\n%s", err, out)
	}
	if got := f.Secrets[adminSecret].File; got != token {
		t.Errorf("secret %s's file is %q after interpolation, want %s", adminSecret, got, token)
	}
	return f
}

// checkCompose checks the structure both ways of reading the file share.
func checkCompose(t *testing.T, f composeFile) {
	t.Helper()
	if names := slices.Sorted(func(yield func(string) bool) {
		for n := range f.Services {
			if !yield(n) {
				return
			}
		}
	}); !slices.Equal(names, []string{"db", "dwara"}) {
		t.Fatalf("services %v, want db and dwara", names)
	}
	for name, s := range f.Services {
		if !slices.Contains([]string{"always", "unless-stopped", "on-failure"}, s.Restart) {
			t.Errorf("%s: restart %q, want always, unless-stopped or on-failure", name, s.Restart)
		}
		if s.Healthcheck == nil || len(s.Healthcheck.Test) < 2 || s.Healthcheck.Test[0] != "CMD" {
			t.Errorf("%s: healthcheck %+v, want a CMD test", name, s.Healthcheck)
		}
		if s.Image != "" {
			checkImageRef(t, name, s.Image)
		}
	}
	db, dwara := f.Services["db"], f.Services["dwara"]
	if db.Healthcheck != nil && !slices.Contains(db.Healthcheck.Test, "pg_isready") {
		t.Errorf("db: healthcheck %v, want pg_isready", db.Healthcheck.Test)
	}
	if dwara.Healthcheck != nil && !slices.Equal(dwara.Healthcheck.Test[:3], []string{"CMD", "/usr/local/bin/dwara", "health"}) {
		t.Errorf("dwara: healthcheck %v, want dwara health (the image has no shell)", dwara.Healthcheck.Test)
	}
	if dwara.DependsOn["db"].Condition != "service_healthy" {
		t.Errorf("dwara: depends_on db %+v, want condition service_healthy", dwara.DependsOn)
	}
	if dwara.Build == nil {
		t.Error("dwara: not built from the Dockerfile")
	}
	cmd := strings.Join(dwara.Command, " ")
	for _, want := range []string{"serve ", "--listen 0.0.0.0:8080", "--admin-listen 0.0.0.0:9090", "--demo"} {
		if !strings.Contains(cmd, want) {
			t.Errorf("dwara: command %q lacks %q", cmd, want)
		}
	}
	ports := fmt.Sprint(dwara.Ports)
	for _, p := range []string{"8080", "9090", "9101"} {
		if !strings.Contains(ports, p) {
			t.Errorf("dwara: port %s is not published (%s)", p, ports)
		}
	}
	if url, _ := dwara.Environment["DWARA_DATABASE_URL"].(string); !strings.Contains(url, "@db:5432/") {
		t.Errorf("dwara: DWARA_DATABASE_URL %q does not name the db service", url)
	}
	checkDwaraHardened(t, f, dwara)
}

// checkDwaraHardened: dwara's tokens are in no environment variable
// (docker inspect shows the environment): the admin token is a secret
// file given to --admin-token-file; its root file system is read-only,
// it has no capability, and compose waits longer than its drain before
// SIGKILL.
func checkDwaraHardened(t *testing.T, f composeFile, dwara service) {
	t.Helper()
	for _, env := range []string{"DWARA_ADMIN_TOKEN", "DWARA_READ_TOKEN"} {
		if _, ok := dwara.Environment[env]; ok {
			t.Errorf("dwara: %s is in the environment, which docker inspect shows; pass it as a secret file", env)
		}
	}
	i := slices.Index(dwara.Command, "--admin-token-file")
	if i < 0 || i+1 == len(dwara.Command) {
		t.Errorf("dwara: command %v has no --admin-token-file", dwara.Command)
	} else if target, ok := dwara.secretTargets()[adminSecret]; !ok || target != dwara.Command[i+1] {
		t.Errorf("dwara: --admin-token-file %s, but secret %s is mounted at %q (secrets %v)", dwara.Command[i+1], adminSecret, target, dwara.Secrets)
	}
	if sec, ok := f.Secrets[adminSecret]; !ok || sec.File == "" {
		t.Errorf("no top-level secret %s read from a file: %+v", adminSecret, f.Secrets)
	}
	if !dwara.ReadOnly {
		t.Error("dwara: read_only is not set (dwara writes nothing to disk)")
	}
	if !slices.Contains(dwara.CapDrop, "ALL") {
		t.Errorf("dwara: cap_drop %v, want ALL", dwara.CapDrop)
	}
	drain := node.DefaultShutdownTimeout
	if i := slices.Index(dwara.Command, "--shutdown-timeout"); i >= 0 && i+1 < len(dwara.Command) {
		d, err := time.ParseDuration(dwara.Command[i+1])
		if err != nil {
			t.Fatalf("dwara: --shutdown-timeout %q: %v", dwara.Command[i+1], err)
		}
		drain = d
	}
	grace, err := time.ParseDuration(cmp.Or(dwara.StopGracePeriod, "10s")) // compose's default
	if err != nil {
		t.Fatalf("dwara: stop_grace_period %q: %v", dwara.StopGracePeriod, err)
	}
	// The drain, then closing the database pool and the listeners.
	if want := drain + 5*time.Second; grace < want {
		t.Errorf("dwara: stop_grace_period %v, want at least %v: the drain (--shutdown-timeout %v) and the rest of a graceful stop", grace, want, drain)
	}
}

// imageRef matches NAME[:TAG][@sha256:DIGEST].
var imageRef = regexp.MustCompile(`^([a-z0-9./_-]+)(?::([A-Za-z0-9._-]+))?(?:@sha256:([0-9a-f]{64}))?$`)

// checkImageRef checks that ref names an exact tag (not latest), or a
// digest.
func checkImageRef(t *testing.T, where, ref string) {
	t.Helper()
	m := imageRef.FindStringSubmatch(ref)
	switch {
	case m == nil:
		t.Errorf("%s: image %q is not NAME:TAG[@sha256:DIGEST]", where, ref)
	case m[3] != "":
	case m[2] == "" || m[2] == "latest":
		t.Errorf("%s: image %q floats with latest; pin a tag or a digest", where, ref)
	}
}

// TestDockerfile checks the Dockerfile: every base image pinned (a tag
// other than latest; a digest, or the comment that says why there is
// none), the Go toolchain of go.mod's go version, an explicit non-root
// USER, a HEALTHCHECK that needs no shell, and the version linked in.
func TestDockerfile(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile(filepath.Join(root, "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	gomod, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	goVersion := regexp.MustCompile(`(?m)^go (\S+)$`).FindSubmatch(gomod)
	if goVersion == nil {
		t.Fatal("go.mod has no go directive")
	}
	text := string(raw)
	var froms []string
	user := "" // the runtime stage's last USER
	sc := bufio.NewScanner(bytes.NewReader(raw))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		switch {
		case len(f) >= 2 && strings.EqualFold(f[0], "FROM"):
			froms = append(froms, f[1])
			user = ""
		case len(f) == 2 && strings.EqualFold(f[0], "USER"):
			user = f[1]
		}
	}
	// An explicit numeric non-root user (kubelet's runAsNonRoot can check
	// only a numeric one).
	if m := regexp.MustCompile(`^([0-9]+)(?::([0-9]+))?$`).FindStringSubmatch(user); m == nil || m[1] == "0" || m[2] == "0" {
		t.Errorf("the runtime stage's USER is %q, want an explicit numeric non-root UID:GID (65532:65532, distroless's nonroot)", user)
	}
	if len(froms) != 2 {
		t.Fatalf("FROM lines %v, want a build stage and the runtime image", froms)
	}
	digestless := false
	for _, ref := range froms {
		checkImageRef(t, "Dockerfile", ref)
		digestless = digestless || !strings.Contains(ref, "@sha256:")
	}
	if digestless && !strings.Contains(text, "no digest could be looked up") {
		t.Error("a base image is pinned by tag only, and the Dockerfile does not say why")
	}
	if want := "golang:" + string(goVersion[1]) + "-"; !strings.HasPrefix(froms[0], want) {
		t.Errorf("the build stage is %s, want %s... (go.mod's go %s)", froms[0], want, goVersion[1])
	}
	if !strings.HasPrefix(froms[1], "gcr.io/distroless/static-debian12:nonroot") {
		t.Errorf("the runtime image is %s, want distroless static, nonroot", froms[1])
	}
	hc := regexp.MustCompile(`(?m)^HEALTHCHECK .*\\\n\s*CMD \["/usr/local/bin/dwara", "health", "--url", "http://127\.0\.0\.1:9090/healthz"`)
	if !hc.MatchString(text) {
		t.Error(`no HEALTHCHECK running ["/usr/local/bin/dwara", "health", "--url", ...] (exec form: the image has no shell)`)
	}
	for _, want := range []string{"ARG VERSION=", "-X main.version=${VERSION}", "CGO_ENABLED=0", `ENTRYPOINT ["/usr/local/bin/dwara"]`} {
		if !strings.Contains(text, want) {
			t.Errorf("the Dockerfile lacks %q", want)
		}
	}
}

// TestDockerignore checks that the build context leaves out what the image
// does not need and must not carry: .git, the binaries of make build, the
// live PostgreSQL data directory of make run, compose's token file and the
// OpenAPI linters' node_modules.
func TestDockerignore(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile(filepath.Join(root, ".dockerignore"))
	if err != nil {
		t.Fatal(err)
	}
	var patterns []string
	for line := range strings.Lines(string(raw)) {
		if line = strings.TrimSpace(line); line != "" && !strings.HasPrefix(line, "#") {
			patterns = append(patterns, line)
		}
	}
	excluded := func(path string) bool {
		out := false
		for _, p := range patterns {
			neg := strings.HasPrefix(p, "!")
			p = strings.TrimPrefix(strings.TrimPrefix(p, "!"), "/")
			p = strings.TrimSuffix(p, "/")
			// A pattern excludes the path itself or a directory above it.
			for dir := path; dir != "."; dir = filepath.Dir(dir) {
				if ok, _ := filepath.Match(p, dir); ok {
					out = !neg
					break
				}
			}
			if strings.HasPrefix(p, "**/") {
				if ok, _ := filepath.Match(strings.TrimPrefix(p, "**/"), filepath.Base(path)); ok {
					out = !neg
				}
			}
		}
		return out
	}
	for _, path := range []string{".git/HEAD", "bin/dwara", ".dwara/pg/PG_VERSION", ".dwara/admin-token", "api/api.test", "cpu.prof",
		"tools/openapi-lint/node_modules/.bin/redocly"} {
		if !excluded(path) {
			t.Errorf(".dockerignore lets %s into the build context", path)
		}
	}
	for _, path := range []string{"go.mod", "go.sum", "cmd/dwara/main.go", "web/ui/index.html", "migrations/000001_init.up.sql", "openapi/openapi.yaml"} {
		if excluded(path) {
			t.Errorf(".dockerignore leaves out %s, which the build needs", path)
		}
	}
}
