package deploy

import (
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

type composeFile struct {
	Services map[string]composeService `yaml:"services"`
	Volumes  map[string]any            `yaml:"volumes"`
}

type composeService struct {
	Image       string            `yaml:"image"`
	Build       any               `yaml:"build"`
	Command     []string          `yaml:"command"`
	Environment map[string]string `yaml:"environment"`
	Ports       []string          `yaml:"ports"`
	Volumes     []string          `yaml:"volumes"`
	DependsOn   map[string]struct {
		Condition string `yaml:"condition"`
	} `yaml:"depends_on"`
	Healthcheck *struct {
		Test []string `yaml:"test"`
	} `yaml:"healthcheck"`
}

func readCompose(t *testing.T) composeFile {
	t.Helper()
	var c composeFile
	if err := yaml.Unmarshal(readFile(t, "compose.yaml"), &c); err != nil {
		t.Fatalf("compose.yaml: %v", err)
	}
	return c
}

// lookoutServices are the services that run the image's binaries.
func lookoutServices(c composeFile) map[string]composeService {
	out := map[string]composeService{}
	for name, s := range c.Services {
		if s.Build != nil {
			out[name] = s
		}
	}
	return out
}

// composeConfigDir lays out the files compose mounts into the lookout
// services (./examples/config, compose's lookout.yaml over it, the data)
// under a temporary root, and returns the configuration directory in it.
func composeConfigDir(t *testing.T) string {
	t.Helper()
	svc := lookoutServices(readCompose(t))["syncer"]
	tmp := t.TempDir()
	for _, v := range svc.Volumes {
		parts := strings.Split(v, ":")
		if len(parts) < 2 || !strings.HasPrefix(parts[0], "./") {
			t.Fatalf("compose.yaml: syncer volume %q is not a ./host:container bind mount", v)
		}
		if err := copyTree(filepath.Join(root, parts[0]), filepath.Join(tmp, parts[1])); err != nil {
			t.Fatalf("compose.yaml: volume %q: %v", v, err)
		}
	}
	return filepath.Join(tmp, svc.Environment["LOOKOUT_CONFIG"])
}

func copyTree(src, dst string) error {
	return filepath.WalkDir(src, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		r, err := filepath.Rel(src, path)
		if err != nil {
			return err
		}
		target := filepath.Join(dst, r)
		if d.IsDir() {
			return os.MkdirAll(target, 0o755)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
			return err
		}
		return os.WriteFile(target, b, 0o644)
	})
}

// TestCompose checks compose.yaml against the binaries: PostgreSQL,
// Ollama and a service per binary of the image, migrate once before the
// daemons, commands and flags that exist, published ports that are the
// --listen ports, the environment the code reads, and the example
// configuration valid for each binary as compose mounts it.
func TestCompose(t *testing.T) {
	c := readCompose(t)
	for _, want := range []string{"postgres", "ollama", "migrate"} {
		if _, ok := c.Services[want]; !ok {
			t.Errorf("compose.yaml has no %s service", want)
		}
	}
	if pg := c.Services["postgres"]; pg.Healthcheck == nil {
		t.Errorf("compose.yaml: postgres has no healthcheck (migrate waits for service_healthy)")
	}
	cfg := composeConfigDir(t)
	daemons := map[string]bool{}
	for name, s := range lookoutServices(c) {
		where := "compose.yaml: service " + name
		inv := checkInvocation(t, where, s.Command)
		var env []string
		for k, v := range s.Environment {
			env = append(env, k+"="+os.Expand(v, func(string) string { return "" }))
		}
		ctr := container{Command: s.Command}
		for k, v := range s.Environment {
			ctr.Env = append(ctr.Env, envVar{Name: k, Value: v})
		}
		checkEnv(t, where, inv, ctr)
		checkDatabaseURL(t, where, s.Environment["DATABASE_URL"], c.Services["postgres"])
		switch inv.command {
		case "migrate":
			if s.DependsOn["postgres"].Condition != "service_healthy" {
				t.Errorf("%s: migrate must wait for postgres: service_healthy", where)
			}
		case "run":
			daemons[inv.bin] = true
			port := listenPort(t, where, inv, s.Environment)
			published := false
			for _, p := range s.Ports {
				if strings.HasSuffix(p, ":"+strconv.Itoa(port)) {
					published = true
				}
			}
			if !published {
				t.Errorf("%s: ports %v do not publish the --listen port %d", where, s.Ports, port)
			}
			if s.DependsOn["migrate"].Condition != "service_completed_successfully" {
				t.Errorf("%s: a daemon must wait for migrate: service_completed_successfully", where)
			}
			out := runCheck(t, inv.bin, cfg, env)
			t.Logf("%s check: %s", inv.bin, strings.TrimSpace(out))
		default:
			t.Errorf("%s: runs %s %s; want migrate or run", where, inv.bin, inv.command)
		}
	}
	for _, b := range readDockerfile(t).binaries {
		if !daemons[b] {
			t.Errorf("compose.yaml runs no %s daemon", b)
		}
	}

	// compose's lookout.yaml is the example's, plus the Ollama service.
	var example, compose map[string]any
	if err := yaml.Unmarshal(readFile(t, "examples/config/lookout.yaml"), &example); err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(readFile(t, "deploy/compose/lookout.yaml"), &compose); err != nil {
		t.Fatal(err)
	}
	ollama, _ := compose["ollama"].(map[string]any)
	if host, _ := ollama["host"].(string); !strings.Contains(host, "//ollama:") {
		t.Errorf("deploy/compose/lookout.yaml: ollama.host %q is not the compose service", host)
	}
	delete(compose, "ollama")
	if !reflect.DeepEqual(example, compose) {
		a, _ := yaml.Marshal(example)
		b, _ := yaml.Marshal(compose)
		t.Errorf("deploy/compose/lookout.yaml differs from examples/config/lookout.yaml beyond ollama:\nexample:\n%s\ncompose:\n%s", a, b)
	}
}

// checkDatabaseURL checks that a service's DATABASE_URL reaches the
// postgres service with its user, password and database.
func checkDatabaseURL(t *testing.T, where, raw string, pg composeService) {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatalf("%s: DATABASE_URL: %v", where, err)
	}
	pw, _ := u.User.Password()
	got := fmt.Sprintf("%s %s %s %s", u.Hostname(), u.User.Username(), pw, strings.TrimPrefix(u.Path, "/"))
	want := fmt.Sprintf("postgres %s %s %s", pg.Environment["POSTGRES_USER"], pg.Environment["POSTGRES_PASSWORD"], pg.Environment["POSTGRES_DB"])
	if got != want {
		t.Errorf("%s: DATABASE_URL reaches %q (host user password db), the postgres service is %q", where, got, want)
	}
}
