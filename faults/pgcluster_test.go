package faults

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dwara/dwara/internal/testnet"
)

// cluster is a private PostgreSQL cluster of one test: its own data
// directory in a temporary directory and its own port on 127.0.0.1, so the
// test may stop it, start it again or freeze it without touching the
// shared server. As root its binaries run as the postgres user (runuser),
// as scripts/postgres.sh does.
type cluster struct {
	t    testing.TB
	bin  string // the directory of initdb, pg_ctl and postgres
	dir  string // the temporary directory: data/ and the socket
	data string
	port int
}

// pgBinDir returns the directory of the machine's PostgreSQL server
// binaries: DWARA_PG_BIN, else the newest /usr/lib/postgresql/*/bin, else
// the directory of an initdb on PATH.
func pgBinDir(t testing.TB) string {
	t.Helper()
	if d := os.Getenv("DWARA_PG_BIN"); d != "" {
		return d
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool { return pgMajor(dirs[i]) < pgMajor(dirs[j]) })
	for i := len(dirs) - 1; i >= 0; i-- {
		if _, err := os.Stat(filepath.Join(dirs[i], "initdb")); err == nil {
			return dirs[i]
		}
	}
	if p, err := exec.LookPath("initdb"); err == nil {
		return filepath.Dir(p)
	}
	t.Fatalf("no PostgreSQL server binaries (initdb, pg_ctl, postgres) under /usr/lib/postgresql/*/bin or on PATH: " +
		"install them (apt-get install postgresql) or set DWARA_PG_BIN; the tests that stop the database need a private cluster")
	return ""
}

func pgMajor(dir string) int {
	n, _ := strconv.Atoi(filepath.Base(filepath.Dir(dir)))
	return n
}

// startCluster creates and starts a private cluster, stopped and removed
// when the test ends (after every cleanup registered later, such as the
// processes that use it).
func startCluster(t testing.TB) *cluster {
	t.Helper()
	c := &cluster{t: t, bin: pgBinDir(t)}
	dir, err := os.MkdirTemp("", "dwara-faults-pg-")
	if err != nil {
		t.Fatal(err)
	}
	c.dir, c.data = dir, filepath.Join(dir, "data")
	// Registered first, so it runs last: a frozen cluster is thawed, a
	// running one stopped, and the directory removed.
	t.Cleanup(func() {
		c.signalAll(syscall.SIGCONT)
		if c.running() {
			if out, err := c.pgCtl("stop", "-m", "immediate", "-w", "-t", "60"); err != nil {
				t.Logf("private cluster: stop at the end: %v\n%s", err, out)
			}
		}
		if t.Failed() {
			if log, err := os.ReadFile(filepath.Join(c.dir, "server.log")); err == nil {
				t.Logf("private cluster server.log (last 4 KiB):\n%s", tail(log, 4096))
			}
		}
		_ = os.RemoveAll(c.dir)
	})
	// The postgres user must reach its directory.
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(c.data, 0o700); err != nil {
		t.Fatal(err)
	}
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			t.Fatalf("running as root, the private cluster needs the postgres user: %v", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		for _, p := range []string{dir, c.data} {
			if err := os.Chown(p, uid, gid); err != nil {
				t.Fatal(err)
			}
		}
	}
	if out, err := c.run(filepath.Join(c.bin, "initdb"), "-D", c.data, "-U", "postgres", "--auth=trust",
		"-E", "UTF8", "--locale=C", "--no-sync"); err != nil {
		t.Fatalf("initdb of the private cluster: %v\n%s", err, out)
	}
	c.port = testnet.FreePort(t)
	c.start()
	return c
}

// URL is the URL of database name on the cluster.
func (c *cluster) URL(name string) string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable", c.port, name)
}

// start starts the cluster and waits until it accepts connections.
func (c *cluster) start() {
	c.t.Helper()
	opts := fmt.Sprintf("-c listen_addresses=127.0.0.1 -p %d -k %s -c max_connections=200", c.port, c.dir)
	if out, err := c.pgCtl("start", "-w", "-t", "60", "-l", filepath.Join(c.dir, "server.log"), "-o", opts); err != nil {
		c.t.Fatalf("start the private cluster on port %d: %v\n%s", c.port, err, out)
	}
}

// stop stops the cluster the way an operator's fast shutdown does: every
// session is disconnected, then the server exits.
func (c *cluster) stop() {
	c.t.Helper()
	if out, err := c.pgCtl("stop", "-m", "fast", "-w", "-t", "60"); err != nil {
		c.t.Fatalf("stop the private cluster: %v\n%s", err, out)
	}
}

// crash stops the cluster the way a power cut or an OOM kill of the
// postmaster does (pg_ctl stop -m immediate): no checkpoint, every session
// cut; the next start runs crash recovery.
func (c *cluster) crash() {
	c.t.Helper()
	if out, err := c.pgCtl("stop", "-m", "immediate", "-w", "-t", "60"); err != nil {
		c.t.Fatalf("stop the private cluster (immediate): %v\n%s", err, out)
	}
}

func (c *cluster) running() bool {
	_, err := c.pgCtl("status")
	return err == nil
}

func (c *cluster) pgCtl(args ...string) ([]byte, error) {
	return c.run(filepath.Join(c.bin, "pg_ctl"), append([]string{"-D", c.data}, args...)...)
}

// run runs a PostgreSQL binary, as the postgres user when we are root,
// bounded to two minutes.
func (c *cluster) run(name string, args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var cmd *exec.Cmd
	if os.Geteuid() == 0 {
		cmd = exec.CommandContext(ctx, "runuser", append([]string{"-u", "postgres", "--", name}, args...)...)
	} else {
		cmd = exec.CommandContext(ctx, name, args...)
	}
	cmd.Dir = c.dir
	cmd.Env = append(os.Environ(), "LC_ALL=C")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.Bytes(), err
}

// pids returns the postmaster's pid and its children's, postmaster first;
// none when the cluster is not running.
func (c *cluster) pids() []int {
	b, err := os.ReadFile(filepath.Join(c.data, "postmaster.pid"))
	if err != nil {
		return nil
	}
	first, _, _ := strings.Cut(string(b), "\n")
	pm, err := strconv.Atoi(strings.TrimSpace(first))
	if err != nil || pm <= 0 {
		return nil
	}
	return append([]int{pm}, children(pm)...)
}

// children returns the pids whose parent is pid, from /proc.
func children(pid int) []int {
	entries, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range entries {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces and parentheses.
		s := string(stat)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(s[i+1:])
		if len(f) >= 2 {
			if ppid, _ := strconv.Atoi(f[1]); ppid == pid {
				out = append(out, p)
			}
		}
	}
	return out
}

// signalAll sends sig to the postmaster and every child, postmaster first
// (so it forks no new child after the children were signalled), and
// returns how many processes it signalled.
func (c *cluster) signalAll(sig syscall.Signal) int {
	n := 0
	for _, pid := range c.pids() {
		if syscall.Kill(pid, sig) == nil {
			n++
		}
	}
	return n
}

// freeze stops every process of the cluster with SIGSTOP: connections
// stay open and new ones are accepted by the kernel, but nothing answers.
// thaw (SIGCONT) is also called when the test ends, whatever happens.
func (c *cluster) freeze() int {
	c.t.Helper()
	n := c.signalAll(syscall.SIGSTOP)
	if n == 0 {
		c.t.Fatal("freeze: no process of the private cluster found")
	}
	return n
}

func (c *cluster) thaw() int { return c.signalAll(syscall.SIGCONT) }

func tail(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}
