// Package deploy holds the files to deploy lookout — the Kubernetes
// manifests (kubernetes/), the Grafana dashboard (grafana/), the Prometheus
// alerting rules (prometheus/) and compose's lookout.yaml (compose/) — and
// the tests that keep them, the top-level Dockerfile and compose.yaml true
// to the binaries: commands and flags, ports, probe paths, environment
// variables and metric names. It has no code of its own (docs/deploy.md).
package deploy
