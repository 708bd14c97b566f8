package ollamatest

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/ollama/ollama/api"
)

// Real starts `ollama serve` ($LOOKOUT_TEST_OLLAMA) on a free
// loopback port with a private model folder, registers the GGUF model
// $LOOKOUT_TEST_MODEL as "tiny", and returns the server URL. It skips the
// test when either is absent; scripts/test.sh (and so .ci/run) provides both.
// The server is killed when the test ends.
func Real(t *testing.T) string {
	t.Helper()
	bin, model := os.Getenv("LOOKOUT_TEST_OLLAMA"), os.Getenv("LOOKOUT_TEST_MODEL")
	switch {
	case bin == "":
		t.Skip("LOOKOUT_TEST_OLLAMA is not set: no Ollama binary to test against (scripts/test.sh builds one into .tools/bin and sets it)")
	case model == "":
		t.Skip("LOOKOUT_TEST_MODEL is not set: no model file to test with (scripts/test.sh points it at ../shared/models/llama-2-tiny-random.gguf)")
	}
	for _, p := range []string{bin, model} {
		if _, err := os.Stat(p); err != nil {
			t.Skipf("real Ollama test needs %s: %v", p, err)
		}
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()

	dir := t.TempDir()
	env := append(os.Environ(), "OLLAMA_HOST="+addr, "OLLAMA_MODELS="+filepath.Join(dir, "models"), "HOME="+dir)
	var logs bytes.Buffer
	serve := exec.Command(bin, "serve")
	serve.Env, serve.Stdout, serve.Stderr = env, &logs, &logs
	serve.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // its runner subprocesses die with it
	if err := serve.Start(); err != nil {
		t.Fatalf("start %s serve: %v", bin, err)
	}
	t.Cleanup(func() {
		_ = syscall.Kill(-serve.Process.Pid, syscall.SIGKILL)
		_ = serve.Wait()
		if t.Failed() {
			t.Logf("ollama serve output:\n%s", logs.String())
		}
	})

	base := "http://" + addr
	u, _ := url.Parse(base)
	client := api.NewClient(u, http.DefaultClient)
	deadline := time.Now().Add(60 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := client.Heartbeat(ctx)
		cancel()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("ollama serve did not answer within 60s: %v\n%s", err, logs.String())
		}
		time.Sleep(100 * time.Millisecond)
	}

	modelfile := filepath.Join(dir, "Modelfile")
	if err := os.WriteFile(modelfile, []byte(fmt.Sprintf("FROM %s\n", model)), 0o644); err != nil {
		t.Fatal(err)
	}
	create := exec.Command(bin, "create", "tiny", "-f", modelfile)
	create.Env = env
	if out, err := create.CombinedOutput(); err != nil {
		t.Fatalf("ollama create tiny: %v\n%s", err, out)
	}
	return base
}
