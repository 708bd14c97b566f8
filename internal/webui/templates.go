package webui

import (
	"bytes"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"path"
	"strings"
)

// Templates are the pages of a server-rendered page set, each parsed with
// the set's layout, by page name (the file name without .html).
type Templates map[string]*template.Template

// ParseTemplates parses every page of dir in fsys with dir's layout.html
// and funcs; layout.html is no page of its own.
func ParseTemplates(fsys fs.FS, dir string, funcs template.FuncMap) (Templates, error) {
	names, err := fs.ReadDir(fsys, dir)
	if err != nil {
		return nil, fmt.Errorf("read templates: %w", err)
	}
	pages := Templates{}
	for _, e := range names {
		name := strings.TrimSuffix(e.Name(), ".html")
		if name == "layout" {
			continue
		}
		t, err := template.New("layout.html").Funcs(funcs).ParseFS(fsys, path.Join(dir, "layout.html"), path.Join(dir, e.Name()))
		if err != nil {
			return nil, fmt.Errorf("parse template %s: %w", e.Name(), err)
		}
		pages[name] = t
	}
	return pages, nil
}

// Render writes page name executed with data, with status, never cached
// (Cache-Control: no-store). A template error is logged (set names the
// page set) and answered with a 500 whose body says so: nothing of a half
// rendered page is sent.
func (t Templates) Render(w http.ResponseWriter, logger *slog.Logger, set string, status int, name string, data any) {
	var buf bytes.Buffer
	if err := t[name].Execute(&buf, data); err != nil {
		logger.Error("render "+set+" page", "page", name, "error", err)
		http.Error(w, "the page could not be rendered; the error is logged", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}
