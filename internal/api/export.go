package api

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"strings"

	"github.com/danielgtaylor/huma/v2"

	"github.com/lookout-dev/lookout/internal/control"
)

// The media types of import and export besides JSON.
const (
	yamlType = "application/yaml"
	opmlType = "text/x-opml"
)

func (a *API) importExportRoutes() {
	exportSchema := a.huma.OpenAPI().Components.Schemas.Schema(reflectType[control.Export](), true, "Export")
	text := &huma.Schema{Type: "string"}

	exportResponses := problemResponses(http.StatusUnprocessableEntity)
	exportResponses["200"] = &huma.Response{Description: "Your definitions.", Content: map[string]*huma.MediaType{
		"application/json": {Schema: exportSchema},
		yamlType:           {Schema: text},
	}}
	huma.Register(a.huma, huma.Operation{
		OperationID: "export", Method: http.MethodGet, Path: "/v1/export", Tags: []string{"sources"},
		Summary: "Export your sources and watches as source files",
		Description: "Your sources made through the API, each in the shape of a source file (sources/NAME.yaml: its keys and its watches), " +
			"and your watches of shared sources. JSON, or YAML with `?format=yaml` (or `Accept: application/yaml`). Credentials show as " +
			"[redacted] (the export's note says so): give their values when importing into another instance. Send it to import as is.",
		Security: bearer, Responses: exportResponses,
	}, a.export)

	importResponses := func() map[string]*huma.Response {
		return problemResponses(http.StatusNotFound, http.StatusConflict, http.StatusUnprocessableEntity, http.StatusForbidden)
	}
	huma.Register(a.huma, huma.Operation{
		OperationID: "import", Method: http.MethodPost, Path: "/v1/import", Tags: []string{"sources"},
		Summary: "Import sources and watches (an export)",
		Description: "Creates each source of `sources` (a source file's keys with its watches) and each watch of `watches` (a watch of a " +
			"source you did not create), in one transaction, with the checks and limits of create_source and create_watch. " +
			"What exists already with the same definition is unchanged, so importing the same export twice changes nothing; a name " +
			"that exists with another definition (or is someone else's) is a 409 naming it, and nothing is saved. A credential still " +
			"[redacted] in a new source is a 422 at its field. `dry_run: true` answers what would be created without saving. " +
			"A created watch's own webhook gets a new signing secret, in its item's webhook_secret, shown this once.",
		Security: bearer, Responses: importResponses(),
	}, a.importDefs)

	opmlResponses := problemResponses(http.StatusUnprocessableEntity)
	opmlResponses["200"] = &huma.Response{Description: "Your feeds as OPML 2.0.", Content: map[string]*huma.MediaType{opmlType: {Schema: text}}}
	huma.Register(a.huma, huma.Operation{
		OperationID: "export_opml", Method: http.MethodGet, Path: "/v1/export.opml", Tags: []string{"sources"},
		Summary: "Export your feed (rss) sources as OPML",
		Description: "An OPML 2.0 document as feed readers (Miniflux, ...) import it: one category outline, `lookout`, holding an " +
			"outline type=\"rss\" per feed source with text and title its name, xmlUrl its URL and htmlUrl the feed's site.",
		Security: bearer, Responses: opmlResponses,
	}, a.exportOPML)

	huma.Register(a.huma, huma.Operation{
		OperationID: "import_opml", Method: http.MethodPost, Path: "/v1/import/opml", Tags: []string{"sources"},
		Summary: "Import the feeds of an OPML document as rss sources",
		Description: "The body is an OPML document (OPML 1.0 or 2.0, UTF-8, at most 1 MiB and 500 feeds), as Miniflux and other " +
			"readers export it: every outline with an xmlUrl becomes an rss source (named after its title, every `every`, default 1h); " +
			"categories are flattened. A feed you have a source of already (same URL) is unchanged. Errors name the OPML line.",
		Security: bearer, Responses: importResponses(),
	}, a.importOPML)

	huma.Register(a.huma, huma.Operation{
		OperationID: "import_urls", Method: http.MethodPost, Path: "/v1/import/urls", Tags: []string{"sources"},
		Summary: "Import a list of URLs (one per line) as rss or web sources",
		Description: "`urls` holds one URL per line (blank lines and lines starting with # are skipped); each becomes a source of " +
			"`kind` (rss, the default, or web: the page's text) named after its host. A URL you have a source of already is unchanged. " +
			"Errors name the line.",
		Security: bearer, Responses: importResponses(),
	}, a.importURLs)
}

// ExportInput is export's request.
type ExportInput struct {
	Format string `query:"format" enum:"json,yaml" doc:"json (the default) or yaml; Accept: application/yaml asks for YAML too."`
	Accept string `header:"Accept" doc:"application/yaml for YAML."`
}

// RawOutput is an answer written as is, in its Content-Type.
type RawOutput struct {
	ContentType string `header:"Content-Type"`
	Body        []byte
}

func (a *API) export(ctx context.Context, in *ExportInput) (*RawOutput, error) {
	exp, err := a.svc.Export(ctx, principal(ctx))
	if err != nil {
		return nil, a.fail(ctx, err)
	}
	if in.Format == "yaml" || (in.Format == "" && strings.Contains(in.Accept, yamlType)) {
		b, err := exp.YAML()
		if err != nil {
			return nil, a.fail(ctx, err)
		}
		return &RawOutput{ContentType: yamlType, Body: b}, nil
	}
	b, err := json.Marshal(exp)
	if err != nil {
		return nil, a.fail(ctx, err)
	}
	return &RawOutput{ContentType: "application/json", Body: b}, nil
}

// ImportBody is import's body: an export (format and note may be left in).
type ImportBody struct {
	Format  string          `json:"format,omitempty" doc:"Ignored: lookout-export/v1 as export writes it."`
	Note    string          `json:"note,omitempty" doc:"Ignored: the export's note."`
	Sources []Definition    `json:"sources,omitempty" doc:"Sources to create, each a source file's keys with its watches."`
	Watches []ImportedWatch `json:"watches,omitempty" doc:"Watches of sources you did not create."`
	YAML    string          `json:"yaml,omitempty" doc:"Instead of sources and watches: the YAML export (?format=yaml) or one source file (sources/NAME.yaml), as text."`
	DryRun  bool            `json:"dry_run,omitempty" doc:"Check and answer what would be created, saving nothing."`
}

// ImportedWatch is a watch of import's body.
type ImportedWatch struct {
	Source string     `json:"source" doc:"The watched source."`
	Watch  Definition `json:"watch" doc:"The watch, as an item of a source file's watches."`
}

// ImportInput is import's request.
type ImportInput struct {
	Body ImportBody
}

// ImportOutput is the answer of the imports.
type ImportOutput struct{ Body *control.ImportResult }

func (a *API) importDefs(ctx context.Context, in *ImportInput) (*ImportOutput, error) {
	req := control.ImportRequest{DryRun: in.Body.DryRun}
	if in.Body.YAML != "" {
		if len(in.Body.Sources) > 0 || len(in.Body.Watches) > 0 {
			return nil, a.fail(ctx, control.Invalid("/yaml", "give either yaml or sources and watches, not both"))
		}
		y, err := control.ParseImportYAML(in.Body.YAML)
		if err != nil {
			return nil, a.fail(ctx, err)
		}
		req.Sources, req.Watches = y.Sources, y.Watches
	}
	for _, s := range in.Body.Sources {
		req.Sources = append(req.Sources, marshalDef(s))
	}
	for _, w := range in.Body.Watches {
		req.Watches = append(req.Watches, control.ExportedWatch{Source: w.Source, Watch: marshalDef(w.Watch)})
	}
	res, err := a.svc.Import(ctx, principal(ctx), req)
	if err != nil {
		return nil, a.fail(ctx, err)
	}
	return &ImportOutput{Body: res}, nil
}

func (a *API) exportOPML(ctx context.Context, _ *struct{}) (*RawOutput, error) {
	b, err := a.svc.ExportOPML(ctx, principal(ctx))
	if err != nil {
		return nil, a.fail(ctx, err)
	}
	return &RawOutput{ContentType: opmlType, Body: b}, nil
}

// ImportOPMLInput is import_opml's request.
type ImportOPMLInput struct {
	Every   string `query:"every" doc:"The schedule of the new sources (a duration). Defaults to 1h."`
	DryRun  bool   `query:"dry_run" doc:"Check and answer what would be created, saving nothing."`
	RawBody []byte `contentType:"text/x-opml"`
}

func (a *API) importOPML(ctx context.Context, in *ImportOPMLInput) (*ImportOutput, error) {
	feeds, err := control.ParseOPML(bytes.NewReader(in.RawBody))
	if err != nil {
		return nil, a.fail(ctx, err)
	}
	res, err := a.svc.ImportFeeds(ctx, principal(ctx), feeds, control.FeedImport{Every: in.Every, DryRun: in.DryRun, Where: "OPML line %d"})
	if err != nil {
		return nil, a.fail(ctx, err)
	}
	return &ImportOutput{Body: res}, nil
}

// ImportURLsInput is import_urls' request.
type ImportURLsInput struct {
	Body struct {
		URLs   string `json:"urls" doc:"One URL per line."`
		Kind   string `json:"kind,omitempty" enum:"rss,web" doc:"The connector of the new sources: rss (the default) or web."`
		Every  string `json:"every,omitempty" doc:"The schedule of the new sources (a duration). Defaults to 1h."`
		DryRun bool   `json:"dry_run,omitempty" doc:"Check and answer what would be created, saving nothing."`
	}
}

func (a *API) importURLs(ctx context.Context, in *ImportURLsInput) (*ImportOutput, error) {
	feeds, err := control.ParseURLList(in.Body.URLs)
	if err != nil {
		return nil, a.fail(ctx, err)
	}
	res, err := a.svc.ImportFeeds(ctx, principal(ctx), feeds, control.FeedImport{Kind: in.Body.Kind, Every: in.Body.Every, DryRun: in.Body.DryRun})
	if err != nil {
		return nil, a.fail(ctx, err)
	}
	return &ImportOutput{Body: res}, nil
}
