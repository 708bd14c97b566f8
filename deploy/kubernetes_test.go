package deploy

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/lookout-dev/lookout/internal/pgtest"
	"github.com/lookout-dev/lookout/internal/testsignal"
)

// object is the part of a Kubernetes object the tests read.
type object struct {
	APIVersion string            `yaml:"apiVersion"`
	Kind       string            `yaml:"kind"`
	Metadata   meta              `yaml:"metadata"`
	Spec       spec              `yaml:"spec"`
	Data       map[string]string `yaml:"data"`
	StringData map[string]string `yaml:"stringData"`
	// file is where the object was read.
	file string
}

type meta struct {
	Name        string            `yaml:"name"`
	Labels      map[string]string `yaml:"labels"`
	Annotations map[string]string `yaml:"annotations"`
}

type spec struct {
	// Deployment, Job
	Replicas *int     `yaml:"replicas"`
	Selector selector `yaml:"selector"`
	Template struct {
		Metadata meta    `yaml:"metadata"`
		Spec     podSpec `yaml:"spec"`
	} `yaml:"template"`
	// Service
	Ports []struct {
		Name       string `yaml:"name"`
		Port       int    `yaml:"port"`
		TargetPort any    `yaml:"targetPort"`
	} `yaml:"ports"`
	// PodDisruptionBudget
	MaxUnavailable any `yaml:"maxUnavailable"`
	MinAvailable   any `yaml:"minAvailable"`
	// ServiceMonitor
	JobLabel  string `yaml:"jobLabel"`
	Endpoints []struct {
		Port string `yaml:"port"`
		Path string `yaml:"path"`
	} `yaml:"endpoints"`
	// PrometheusRule
	Groups []ruleGroup `yaml:"groups"`
}

type podSpec struct {
	Containers     []container `yaml:"containers"`
	InitContainers []container `yaml:"initContainers"`
	Volumes        []struct {
		Name      string `yaml:"name"`
		ConfigMap *struct {
			Name  string `yaml:"name"`
			Items []struct {
				Key  string `yaml:"key"`
				Path string `yaml:"path"`
			} `yaml:"items"`
		} `yaml:"configMap"`
	} `yaml:"volumes"`
	SecurityContext struct {
		RunAsNonRoot *bool `yaml:"runAsNonRoot"`
	} `yaml:"securityContext"`
}

type container struct {
	Name    string   `yaml:"name"`
	Image   string   `yaml:"image"`
	Command []string `yaml:"command"`
	Args    []string `yaml:"args"`
	Ports   []struct {
		Name          string `yaml:"name"`
		ContainerPort int    `yaml:"containerPort"`
	} `yaml:"ports"`
	Env            []envVar `yaml:"env"`
	LivenessProbe  *probe   `yaml:"livenessProbe"`
	ReadinessProbe *probe   `yaml:"readinessProbe"`
	Resources      struct {
		Requests map[string]string `yaml:"requests"`
	} `yaml:"resources"`
	VolumeMounts []struct {
		Name      string `yaml:"name"`
		MountPath string `yaml:"mountPath"`
	} `yaml:"volumeMounts"`
}

type envVar struct {
	Name      string `yaml:"name"`
	Value     string `yaml:"value"`
	ValueFrom *struct {
		SecretKeyRef *struct {
			Name     string `yaml:"name"`
			Key      string `yaml:"key"`
			Optional bool   `yaml:"optional"`
		} `yaml:"secretKeyRef"`
	} `yaml:"valueFrom"`
}

type probe struct {
	HTTPGet *struct {
		Path string `yaml:"path"`
		Port any    `yaml:"port"`
	} `yaml:"httpGet"`
}

// decodeObjects reads every YAML document of r.
func decodeObjects(t *testing.T, name string, r io.Reader) []object {
	t.Helper()
	var objs []object
	dec := yaml.NewDecoder(r)
	for {
		var raw map[string]any
		err := dec.Decode(&raw)
		if errors.Is(err, io.EOF) {
			return objs
		}
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if raw == nil {
			continue
		}
		b, _ := yaml.Marshal(raw)
		var o object
		if err := yaml.Unmarshal(b, &o); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if o.Kind == "" || o.Metadata.Name == "" {
			t.Fatalf("%s: a document without kind or metadata.name", name)
		}
		o.file = name
		objs = append(objs, o)
	}
}

// selector is a Deployment's or PodDisruptionBudget's selector
// (matchLabels) or a Service's (a plain map).
type selector struct {
	MatchLabels map[string]string
}

// UnmarshalYAML reads either form.
func (s *selector) UnmarshalYAML(n *yaml.Node) error {
	var raw map[string]any
	if err := n.Decode(&raw); err != nil {
		return err
	}
	if ml, ok := raw["matchLabels"].(map[string]any); ok {
		raw = ml
	}
	s.MatchLabels = map[string]string{}
	for k, v := range raw {
		if str, ok := v.(string); ok {
			s.MatchLabels[k] = str
		}
	}
	return nil
}

const (
	baseDir      = "deploy/kubernetes/base"
	overlayDir   = "deploy/kubernetes/overlays/example"
	builtOverlay = "kubectl kustomize " + overlayDir
)

// baseObjects reads the resources the base's kustomization lists, and
// checks that it lists every manifest of the folder.
func baseObjects(t *testing.T) []object {
	t.Helper()
	var k struct {
		Resources []string `yaml:"resources"`
	}
	if err := yaml.Unmarshal(readFile(t, baseDir+"/kustomization.yaml"), &k); err != nil {
		t.Fatal(err)
	}
	files, err := filepath.Glob(filepath.Join(root, baseDir, "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if n := filepath.Base(f); n != "kustomization.yaml" && !slices.Contains(k.Resources, n) {
			t.Errorf("%s/%s is not in the base's resources", baseDir, n)
		}
	}
	var objs []object
	for _, r := range k.Resources {
		objs = append(objs, decodeObjects(t, baseDir+"/"+r, bytes.NewReader(readFile(t, baseDir+"/"+r)))...)
	}
	return objs
}

var (
	kustomizeOnce sync.Once
	kustomized    string
	kustomizeErr  error
)

// kustomizeOutput is `kubectl kustomize` of the example overlay: what
// `kubectl apply -k` sends. Tests that need it skip when kubectl is absent.
func kustomizeOutput(t *testing.T) string {
	t.Helper()
	if _, err := exec.LookPath("kubectl"); err != nil {
		t.Skip("kubectl is not installed: the built overlay is not checked (the base's files are)")
	}
	kustomizeOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, "kubectl", "kustomize", overlayDir)
		cmd.Dir = root
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			kustomizeErr = fmt.Errorf("kubectl kustomize %s: %w\n%s", overlayDir, err, stderr.String())
		}
		kustomized = string(out)
	})
	if kustomizeErr != nil {
		t.Fatal(kustomizeErr)
	}
	return kustomized
}

func overlayObjects(t *testing.T) []object {
	t.Helper()
	return decodeObjects(t, builtOverlay, strings.NewReader(kustomizeOutput(t)))
}

func byKind(objs []object, kind string) []object {
	var out []object
	for _, o := range objs {
		if o.Kind == kind {
			out = append(out, o)
		}
	}
	return out
}

func matches(selector, labels map[string]string) bool {
	if len(selector) == 0 {
		return false
	}
	for k, v := range selector {
		if labels[k] != v {
			return false
		}
	}
	return true
}

// listenPort is the port of run's --listen address (the flag, else
// LOOKOUT_LISTEN).
func listenPort(t *testing.T, where string, inv invocation, env map[string]string) int {
	t.Helper()
	addr, ok := inv.flags["listen"]
	if !ok {
		addr, ok = env["LOOKOUT_LISTEN"]
	}
	if !ok || addr == "" || addr == "off" {
		t.Fatalf("%s: %s run serves nothing (no --listen or LOOKOUT_LISTEN); probes and Prometheus need it", where, inv.bin)
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatalf("%s: --listen %q: %v", where, addr, err)
	}
	if host != "" && host != "0.0.0.0" && host != "::" {
		t.Errorf("%s: --listen %q listens on %s only: the kubelet and Prometheus cannot reach it", where, addr, host)
	}
	n, err := strconv.Atoi(port)
	if err != nil {
		t.Fatalf("%s: --listen %q: %v", where, addr, err)
	}
	return n
}

// checkWorkloads checks the Deployments and Jobs of objs against the
// binaries: commands, flags, ports, probes, environment, resources, and
// the Services, PodDisruptionBudgets and ServiceMonitor around them.
func checkWorkloads(t *testing.T, objs []object) {
	t.Helper()
	deployments := byKind(objs, "Deployment")
	var bins []string
	for _, d := range deployments {
		where := d.file + ": Deployment " + d.Metadata.Name
		ps := d.Spec.Template.Spec
		if !matches(d.Spec.Selector.MatchLabels, d.Spec.Template.Metadata.Labels) {
			t.Errorf("%s: selector %v does not match its pods' labels %v", where, d.Spec.Selector.MatchLabels, d.Spec.Template.Metadata.Labels)
		}
		if ps.SecurityContext.RunAsNonRoot == nil || !*ps.SecurityContext.RunAsNonRoot {
			t.Errorf("%s: runAsNonRoot is not set", where)
		}
		if len(ps.Containers) != 1 {
			t.Fatalf("%s: want one container, got %d", where, len(ps.Containers))
		}
		c := ps.Containers[0]
		inv := checkInvocation(t, where, append(append([]string{}, c.Command...), c.Args...))
		bins = append(bins, inv.bin)
		if inv.command != "run" {
			t.Errorf("%s: runs %s %s, want the daemon (run)", where, inv.bin, inv.command)
		}
		env := checkEnv(t, where, inv, c)
		port := listenPort(t, where, inv, env)
		named := map[string]int{}
		for _, p := range c.Ports {
			named[p.Name] = p.ContainerPort
		}
		if named["http"] != port {
			t.Errorf("%s: containerPort http is %d, --listen says %d", where, named["http"], port)
		}
		probePort := func(p *probe) int {
			switch v := p.HTTPGet.Port.(type) {
			case string:
				return named[v]
			case int:
				return v
			}
			return 0
		}
		for _, pr := range []struct {
			name string
			p    *probe
			path string
		}{{"livenessProbe", c.LivenessProbe, "/healthz"}, {"readinessProbe", c.ReadinessProbe, "/readyz"}} {
			switch {
			case pr.p == nil || pr.p.HTTPGet == nil:
				t.Errorf("%s: no %s httpGet", where, pr.name)
			case pr.p.HTTPGet.Path != pr.path:
				t.Errorf("%s: %s path %s, want %s", where, pr.name, pr.p.HTTPGet.Path, pr.path)
			case probePort(pr.p) != port:
				t.Errorf("%s: %s port %v is not the --listen port %d", where, pr.name, pr.p.HTTPGet.Port, port)
			}
		}
		if c.Resources.Requests["cpu"] == "" || c.Resources.Requests["memory"] == "" {
			t.Errorf("%s: no cpu and memory requests", where)
		}
		checkConfigMount(t, where, inv, env, c, ps)

		// A Service and a PodDisruptionBudget select its pods.
		var svc *object
		for _, s := range byKind(objs, "Service") {
			if matches(s.Spec.Selector.MatchLabels, d.Spec.Template.Metadata.Labels) {
				svc = &s
			}
		}
		if svc == nil {
			t.Errorf("%s: no Service selects its pods", where)
		} else {
			found := false
			for _, p := range svc.Spec.Ports {
				if p.Name == "http" && (p.TargetPort == "http" || p.TargetPort == port) {
					found = true
				}
			}
			if !found {
				t.Errorf("%s: Service %s has no port http to the container's %d", where, svc.Metadata.Name, port)
			}
		}
		pdb := false
		for _, p := range byKind(objs, "PodDisruptionBudget") {
			if matches(p.Spec.Selector.MatchLabels, d.Spec.Template.Metadata.Labels) && (p.Spec.MaxUnavailable != nil || p.Spec.MinAvailable != nil) {
				pdb = true
			}
		}
		if !pdb {
			t.Errorf("%s: no PodDisruptionBudget selects its pods", where)
		}
	}
	if want := readDockerfile(t).binaries; !slices.Equal(slices.Sorted(slices.Values(bins)), slices.Sorted(slices.Values(want))) {
		t.Errorf("the Deployments run %v; want one per binary of the image %v", bins, want)
	}

	// migrate runs as a Job, with the database only.
	jobs := byKind(objs, "Job")
	if len(jobs) != 1 {
		t.Fatalf("want one Job (migrate), got %d", len(jobs))
	}
	for _, j := range jobs {
		where := j.file + ": Job " + j.Metadata.Name
		c := j.Spec.Template.Spec.Containers[0]
		inv := checkInvocation(t, where, append(append([]string{}, c.Command...), c.Args...))
		if inv.command != "migrate" {
			t.Errorf("%s: runs %s, want migrate", where, inv.command)
		}
		checkEnv(t, where, inv, c)
	}

	// The ServiceMonitor scrapes /metrics on the http port of every Service.
	sms := byKind(objs, "ServiceMonitor")
	if len(sms) != 1 {
		t.Fatalf("want one ServiceMonitor, got %d", len(sms))
	}
	sm := sms[0]
	for _, s := range byKind(objs, "Service") {
		if !matches(sm.Spec.Selector.MatchLabels, s.Metadata.Labels) {
			t.Errorf("ServiceMonitor %v does not select Service %s (labels %v)", sm.Spec.Selector.MatchLabels, s.Metadata.Name, s.Metadata.Labels)
		}
		if sm.Spec.JobLabel != "" && s.Metadata.Labels[sm.Spec.JobLabel] != "lookout" {
			t.Errorf("Service %s: label %s is %q; the rules' up{job=\"lookout\"} needs \"lookout\"", s.Metadata.Name, sm.Spec.JobLabel, s.Metadata.Labels[sm.Spec.JobLabel])
		}
	}
	for _, e := range sm.Spec.Endpoints {
		if e.Port != "http" || e.Path != "/metrics" {
			t.Errorf("ServiceMonitor endpoint %s %s, want port http path /metrics", e.Port, e.Path)
		}
	}
}

// checkEnv checks a container's environment against what its binary's
// code reads, both ways, and returns the plain values.
func checkEnv(t *testing.T, where string, inv invocation, c container) map[string]string {
	t.Helper()
	reads := envReads(t, inv.bin)
	values := map[string]string{}
	set := map[string]bool{}
	for _, e := range c.Env {
		set[e.Name] = true
		values[e.Name] = e.Value
		if !reads[e.Name] && !configRef(t, e.Name) {
			t.Errorf("%s: sets %s, which %s does not read (and no ${%s} of the configuration)", where, e.Name, inv.bin, e.Name)
		}
	}
	for name := range reads {
		if set[name] || unsetEnv[name] != "" {
			continue
		}
		switch {
		case inv.command != "run" && name != "DATABASE_URL":
			// Only the daemon reads its configuration and listens.
		case name == "LOOKOUT_CONFIG" && inv.global["config"] != "":
		case name == "LOOKOUT_LISTEN" && inv.flags["listen"] != "":
		default:
			t.Errorf("%s: %s reads %s, which the container does not set", where, inv.bin, name)
		}
	}
	return values
}

var configRefRE = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)\}`)

// configRef reports whether a configuration directory this repository
// deploys references ${name}.
func configRef(t *testing.T, name string) bool {
	t.Helper()
	for _, dir := range []string{"examples/config", "deploy/compose", baseDir + "/config", overlayDir + "/config"} {
		err := filepath.WalkDir(filepath.Join(root, dir), func(path string, d os.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			for _, m := range configRefRE.FindAllStringSubmatch(string(b), -1) {
				if m[1] == name {
					return errFound
				}
			}
			return nil
		})
		if errors.Is(err, errFound) {
			return true
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	return false
}

var errFound = errors.New("found")

// checkConfigMount checks that --config names the mounted ConfigMap.
func checkConfigMount(t *testing.T, where string, inv invocation, env map[string]string, c container, ps podSpec) {
	t.Helper()
	dir := inv.global["config"]
	if dir == "" {
		dir = env["LOOKOUT_CONFIG"]
	}
	for _, m := range c.VolumeMounts {
		if m.MountPath != dir {
			continue
		}
		for _, v := range ps.Volumes {
			if v.Name == m.Name && v.ConfigMap != nil {
				return
			}
		}
	}
	t.Errorf("%s: the configuration directory %q is not a mounted ConfigMap", where, dir)
}

// TestKubernetesBase checks the base's manifests, file by file.
func TestKubernetesBase(t *testing.T) {
	checkWorkloads(t, baseObjects(t))
}

// TestKubernetesOverlay checks what `kubectl apply -k` of the example
// overlay sends, and runs each binary's check on the configuration
// directory as its pods see it, with their environment from the Secret.
func TestKubernetesOverlay(t *testing.T) {
	objs := overlayObjects(t)
	checkWorkloads(t, objs)

	secrets := map[string]map[string]string{}
	for _, s := range byKind(objs, "Secret") {
		secrets[s.Metadata.Name] = map[string]string{}
		for k, v := range s.Data {
			b, err := base64.StdEncoding.DecodeString(v)
			if err != nil {
				t.Fatalf("Secret %s: %s: %v", s.Metadata.Name, k, err)
			}
			secrets[s.Metadata.Name][k] = string(b)
		}
	}
	configMaps := map[string]object{}
	for _, c := range byKind(objs, "ConfigMap") {
		configMaps[c.Metadata.Name] = c
	}
	for _, d := range byKind(objs, "Deployment") {
		where := "Deployment " + d.Metadata.Name
		ps := d.Spec.Template.Spec
		c := ps.Containers[0]
		var env []string
		for _, e := range c.Env {
			switch {
			case e.ValueFrom == nil:
				env = append(env, e.Name+"="+e.Value)
			case e.ValueFrom.SecretKeyRef != nil:
				ref := e.ValueFrom.SecretKeyRef
				v, ok := secrets[ref.Name][ref.Key]
				if !ok && !ref.Optional {
					t.Errorf("%s: %s comes from key %s of Secret %s, which has none", where, e.Name, ref.Key, ref.Name)
				}
				env = append(env, e.Name+"="+v)
			}
		}
		inv := checkInvocation(t, where, append(append([]string{}, c.Command...), c.Args...))
		for _, v := range ps.Volumes {
			if v.ConfigMap == nil {
				continue
			}
			cm, ok := configMaps[v.ConfigMap.Name]
			if !ok {
				t.Fatalf("%s: volume %s names ConfigMap %s, which the overlay does not make", where, v.Name, v.ConfigMap.Name)
			}
			files := map[string]string{}
			used := map[string]bool{}
			for _, it := range v.ConfigMap.Items {
				data, ok := cm.Data[it.Key]
				if !ok {
					t.Errorf("%s: volume item %s is not a key of ConfigMap %s", where, it.Key, cm.Metadata.Name)
				}
				files[it.Path] = data
				used[it.Key] = true
			}
			for k := range cm.Data {
				if len(v.ConfigMap.Items) > 0 && !used[k] {
					t.Errorf("%s: ConfigMap %s has %s, which no item of volume %s puts in the directory", where, cm.Metadata.Name, k, v.Name)
				}
			}
			dir := t.TempDir()
			writeAtomic(t, dir, files)
			out := runCheck(t, inv.bin, filepath.Join(dir, "config"), env)
			t.Logf("%s check: %s", inv.bin, strings.TrimSpace(out))
		}
	}
}

// writeAtomic lays files out the way the kubelet writes a ConfigMap
// volume: a timestamped folder, a ..data symlink to it, and a symlink per
// top-level name. A second call swaps ..data (a ConfigMap update).
func writeAtomic(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	vol := filepath.Join(dir, "config")
	if err := os.MkdirAll(vol, 0o755); err != nil {
		t.Fatal(err)
	}
	ts := fmt.Sprintf("..%d", time.Now().UnixNano())
	top := map[string]bool{}
	for path, data := range files {
		p := filepath.Join(vol, ts, path)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
		top[strings.SplitN(path, "/", 2)[0]] = true
	}
	tmp := filepath.Join(vol, "..data_tmp")
	if err := os.Symlink(ts, tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(vol, "..data")); err != nil {
		t.Fatal(err)
	}
	for name := range top {
		link := filepath.Join(vol, name)
		if _, err := os.Lstat(link); err == nil {
			continue
		}
		if err := os.Symlink(filepath.Join("..data", name), link); err != nil {
			t.Fatal(err)
		}
	}
}

// TestConfigMapUpdateIsSeen loads the overlay's configuration from the
// kubelet's layout, swaps ..data the way a ConfigMap update does, and loads
// it again: the new source file is what the binaries read (what a reload
// on file change must follow: the watched names are symlinks whose target
// changes, not files written in place).
func TestConfigMapUpdateIsSeen(t *testing.T) {
	files := map[string]string{
		"lookout.yaml":        string(readFile(t, overlayDir+"/config/lookout.yaml")),
		"sources/issues.yaml": string(readFile(t, overlayDir+"/config/sources/lookout-issues.yaml")),
	}
	env := []string{"GITHUB_TOKEN=t", "LOOKOUT_WEBHOOK_SECRET=whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"}
	dir := t.TempDir()
	writeAtomic(t, dir, files)
	before := runCheck(t, "evaluator", filepath.Join(dir, "config"), env)
	files["sources/issues.yaml"] += "  - name: added-by-update\n    when: change.kind == \"deleted\"\n"
	writeAtomic(t, dir, files)
	after := runCheck(t, "evaluator", filepath.Join(dir, "config"), env)
	if !strings.Contains(before, "1 sources, 2 watches") || !strings.Contains(after, "1 sources, 3 watches") {
		t.Errorf("check before the swap said %q, after %q; want 2 then 3 watches", before, after)
	}
}

// runCheck runs `bin --config dir check` with exactly env and fails the
// test unless the configuration is valid.
func runCheck(t *testing.T, bin, dir string, env []string) string {
	t.Helper()
	path := filepath.Join(binaries(t), bin) // built before the minute starts
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, path, "--config", dir, "check")
	cmd.Env = env
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s --config %s check with %v: %v\n%s", bin, dir, envNames(env), err, out)
	}
	return string(out)
}

func envNames(env []string) []string {
	var n []string
	for _, e := range env {
		k, _, _ := strings.Cut(e, "=")
		n = append(n, k)
	}
	return n
}

// daemon is a binary's run command started by a test.
type daemon struct {
	addr string
}

var servingRE = regexp.MustCompile(`"msg":"serving /metrics, /healthz, /readyz".*"addr":"([^"]+)"`)

// startDaemon runs bin with argv's global flags and command, --listen
// replaced by a free loopback port, against a fresh schema; it is stopped
// with SIGTERM when the test ends and must exit 0.
func startDaemon(t *testing.T, bin string, args []string, env []string) daemon {
	t.Helper()
	_, url := pgtest.Schema(t)
	for i := range args {
		if (args[i] == "--listen" || args[i] == "-listen") && i+1 < len(args) {
			args[i+1] = "127.0.0.1:0"
		}
	}
	cmd := exec.Command(filepath.Join(binaries(t), bin), args...)
	cmd.Env = append(env, "DATABASE_URL="+url, "LOOKOUT_LOG_FORMAT=json")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	addrCh := make(chan string, 1)
	var logs bytes.Buffer
	var logsMu sync.Mutex
	done := make(chan struct{})
	go func() {
		defer close(done)
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			logsMu.Lock()
			logs.WriteString(sc.Text() + "\n")
			logsMu.Unlock()
			if m := servingRE.FindStringSubmatch(sc.Text()); m != nil {
				select {
				case addrCh <- m[1]:
				default:
				}
			}
		}
	}()
	exited := make(chan error, 1)
	go func() {
		<-done
		exited <- cmd.Wait()
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case err := <-exited:
			if err != nil {
				logsMu.Lock()
				t.Errorf("%s %v exited with %v after SIGTERM:\n%s", bin, args, err, logs.String())
				logsMu.Unlock()
			}
		case <-time.After(time.Minute):
			_ = cmd.Process.Kill()
			t.Errorf("%s did not stop within a minute of SIGTERM", bin)
		}
	})
	select {
	case addr := <-addrCh:
		return daemon{addr: addr}
	case err := <-exited:
		logsMu.Lock()
		defer logsMu.Unlock()
		t.Fatalf("%s %v exited before serving: %v\n%s", bin, args, err, logs.String())
	case <-time.After(2 * time.Minute):
		t.Fatalf("%s did not serve within two minutes", bin)
	}
	return daemon{}
}

// TestProbesAreServed starts each Deployment's binary with the container's
// arguments (its --listen moved to a free loopback port) and the compose
// configuration (offline), and GETs the paths of its probes: /healthz at
// once, /readyz once the database and listeners are up.
func TestProbesAreServed(t *testing.T) {
	cfg := composeConfigDir(t)
	for _, d := range byKind(baseObjects(t), "Deployment") {
		c := d.Spec.Template.Spec.Containers[0]
		bin := filepath.Base(c.Command[0])
		t.Run(bin, func(t *testing.T) {
			t.Parallel()
			args := append([]string{}, c.Args...)
			for i := range args {
				if args[i] == "--config" && i+1 < len(args) {
					args[i+1] = cfg
				}
			}
			dm := startDaemon(t, bin, args, nil)
			for _, p := range []*probe{c.LivenessProbe, c.ReadinessProbe} {
				url := "http://" + dm.addr + p.HTTPGet.Path
				testsignal.Eventually(t, "GET "+url+" answers 200", func() bool {
					resp, err := http.Get(url)
					if err != nil {
						return false
					}
					resp.Body.Close()
					return resp.StatusCode == http.StatusOK
				})
			}
		})
	}
}

// TestKubernetesBaseAlone runs each Deployment of the base on the
// configuration directory the base alone mounts (its ConfigMap: lookout.yaml,
// no sources/, as in an API-only deployment): the binary's check passes and
// the daemon starts and answers its probes instead of crash-looping.
func TestKubernetesBaseAlone(t *testing.T) {
	files := map[string]string{"lookout.yaml": string(readFile(t, baseDir+"/config/lookout.yaml"))}
	binaries(t) // built before runCheck's deadline starts
	for _, d := range byKind(baseObjects(t), "Deployment") {
		c := d.Spec.Template.Spec.Containers[0]
		bin := filepath.Base(c.Command[0])
		t.Run(bin, func(t *testing.T) {
			t.Parallel()
			for _, v := range d.Spec.Template.Spec.Volumes {
				if v.ConfigMap == nil {
					continue
				}
				for _, it := range v.ConfigMap.Items {
					if _, ok := files[it.Path]; !ok {
						t.Fatalf("volume %s mounts %s, which the base's ConfigMap does not have", v.Name, it.Path)
					}
				}
			}
			dir := t.TempDir()
			writeAtomic(t, dir, files)
			cfg := filepath.Join(dir, "config")
			out := runCheck(t, bin, cfg, nil)
			if !strings.Contains(out, "is valid: 0 sources") {
				t.Errorf("%s check said %q", bin, out)
			}
			args := append([]string{}, c.Args...)
			for i := range args {
				if args[i] == "--config" && i+1 < len(args) {
					args[i+1] = cfg
				}
			}
			dm := startDaemon(t, bin, args, nil)
			url := "http://" + dm.addr + c.ReadinessProbe.HTTPGet.Path
			testsignal.Eventually(t, "GET "+url+" answers 200", func() bool {
				resp, err := http.Get(url)
				if err != nil {
					return false
				}
				resp.Body.Close()
				return resp.StatusCode == http.StatusOK
			})
		})
	}
}
