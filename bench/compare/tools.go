package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"time"
)

// Bounds of the package manager's steps.
const (
	aptInstallTimeout = 10 * time.Minute
	aptUpdateTimeout  = 5 * time.Minute
)

// lookTool finds an executable by name in PATH, then in /usr/sbin and
// /sbin, where Debian puts nginx and haproxy and where a non-root PATH may
// not look.
func lookTool(name string) (string, error) {
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	for _, dir := range []string{"/usr/sbin", "/sbin"} {
		p := filepath.Join(dir, name)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s not found in PATH, /usr/sbin or /sbin", name)
}

// toolPackages names the Debian package of a tool whose package has
// another name; the others are packaged under their own name.
var toolPackages = map[string]string{"h2load": "nghttp2-client"}

// debianPackage returns the Debian package that installs tool.
func debianPackage(tool string) string {
	if p, ok := toolPackages[tool]; ok {
		return p
	}
	return tool
}

// ensureTools returns the path of each tool in names. Missing ones are
// installed with `apt-get install -y` (their Debian packages, see
// debianPackage); only when that fails is `apt-get update` run, then the
// install once more. Each step is bounded; installing needs root.
func ensureTools(ctx context.Context, ps *procs, logf func(string, ...any), names []string) (map[string]string, error) {
	found := map[string]string{}
	var missing, pkgs []string
	for _, n := range names {
		if p, err := lookTool(n); err == nil {
			found[n] = p
		} else {
			missing = append(missing, n)
			pkgs = append(pkgs, debianPackage(n))
		}
	}
	if len(missing) == 0 {
		return found, nil
	}
	if os.Geteuid() != 0 {
		return nil, fmt.Errorf("missing %s; install with: sudo apt-get install -y %s",
			strings.Join(missing, ", "), strings.Join(pkgs, " "))
	}
	apt, err := lookTool("apt-get")
	if err != nil {
		return nil, fmt.Errorf("missing %s and no apt-get to install them: %w", strings.Join(missing, ", "), err)
	}
	env := []string{"DEBIAN_FRONTEND=noninteractive"}
	install := append([]string{apt, "install", "-y"}, pkgs...)
	logf("installing %s: %s", strings.Join(missing, ", "), strings.Join(install, " "))
	out, err := ps.run(ctx, aptInstallTimeout, "apt-get install", env, install...)
	if err != nil {
		if ctx.Err() != nil {
			return nil, err
		}
		logf("apt-get install failed (%v)%s\nrunning apt-get update and trying again", err, lastLines(out, 5))
		if out, err := ps.run(ctx, aptUpdateTimeout, "apt-get update", env, apt, "update"); err != nil {
			return nil, fmt.Errorf("install %s: %w%s", strings.Join(pkgs, " "), err, lastLines(out, 10))
		}
		if out, err = ps.run(ctx, aptInstallTimeout, "apt-get install", env, install...); err != nil {
			return nil, fmt.Errorf("install %s: %w%s", strings.Join(pkgs, " "), err, lastLines(out, 10))
		}
	}
	for _, n := range missing {
		p, err := lookTool(n)
		if err != nil {
			return nil, fmt.Errorf("after apt-get install: %w", err)
		}
		found[n] = p
	}
	return found, nil
}

var versionRE = regexp.MustCompile(`\d+\.\d+(\.\d+)?`)

// toolVersion runs bin with args (for at most 5 s) and returns the first
// version number in its output, or "?".
func toolVersion(ctx context.Context, ps *procs, bin string, args ...string) string {
	out, err := ps.run(ctx, 5*time.Second, filepath.Base(bin)+" version", nil, append([]string{bin}, args...)...)
	if err != nil && len(out) == 0 {
		return "?"
	}
	if v := versionRE.Find(out); v != nil {
		return string(v)
	}
	return "?"
}

// errNotExecutable is returned by checkExecutable.
var errNotExecutable = errors.New("not an executable file")

// checkExecutable reports whether path is an executable regular file.
func checkExecutable(path string) error {
	fi, err := os.Stat(path)
	if err != nil {
		return err
	}
	if !fi.Mode().IsRegular() || fi.Mode()&0o111 == 0 {
		return fmt.Errorf("%s: %w", path, errNotExecutable)
	}
	return nil
}
