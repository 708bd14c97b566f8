package mcp

import (
	"context"
	"strings"
	"time"

	mcpsdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/lookout-dev/lookout/internal/control"
)

func (s *Server) addExportTools() {
	addTool(s, &mcpsdk.Tool{
		Name:        "export",
		Annotations: readOnly("Export the user's sources and watches"),
		Description: `Exports the sources the user created and their watches, each source in the shape of a source file (sources/NAME.yaml: its keys and its watches), and the user's watches of shared sources, so that the user can keep a backup or move to another lookout instance (pass the export to import there).
format: json (the default: the export as an object), yaml (the same as YAML text, in text) or opml (the user's rss sources as an OPML document feed readers such as Miniflux import, in text).
Credentials (tokens, passwords, credential headers) show as "[redacted]": the user gives their values when importing into another instance. Example: {"format": "yaml"}.`,
	}, s.export)

	addTool(s, &mcpsdk.Tool{
		Name:        "import",
		Annotations: additive("Import sources and watches", true),
		Description: `Creates sources and watches from an export (the answer of export, as is or edited): sources (source definitions with their watches) and watches (watches of sources the user did not create: {"source": "news", "watch": {...}}), in one transaction, with the checks and limits of create_watch.
What exists already with the same definition is unchanged, so importing the same export twice changes nothing. Instead of sources and watches, yaml may hold the YAML export (export with format yaml) or one source file as text. Pass dry_run: true first to see what would be created (items with action created or unchanged); nothing is saved.
A created watch's own webhook gets a new signing secret, in its item's webhook_secret, shown this once.
Errors: "invalid arguments" names the field, e.g. "/sources/0/github/token: is [redacted] ...: give the credential's value"; "conflict" names the source or watch that exists with another definition (or whose name is taken): rename it or update the existing one; nothing was saved.`,
	}, s.importDefs)

	addTool(s, &mcpsdk.Tool{
		Name:        "import_feeds",
		Annotations: additive("Import feeds (OPML or a list of URLs)", true),
		Description: `Creates a source for each feed of an OPML document (opml: the text of a feed reader's export, e.g. Miniflux's; every outline with an xmlUrl) or of a list of URLs (urls: one per line, blank lines and # comments skipped), not both.
kind is the connector of the new sources: rss (the default) or web (for urls: a page's text). every is their schedule (default 1h). A feed the user has a source of already (same URL) is unchanged. dry_run: true answers what would be created, saving nothing.
Errors name the line: "OPML line 12: ..." or "/urls: line 3: \"htp:/x\" is not an http(s) URL".`,
	}, s.importFeeds)
}

// ExportInput are export's arguments.
type ExportInput struct {
	Format string `json:"format,omitempty" jsonschema:"json (the default), yaml or opml."`
}

// ExportOutput is export's answer: the export, or its text.
type ExportOutput struct {
	Export *control.Export `json:"export,omitempty" jsonschema:"The export (format json)."`
	Text   string          `json:"text,omitempty" jsonschema:"The export as YAML, or the OPML document (formats yaml and opml)."`
}

func (s *Server) export(ctx context.Context, p control.Principal, in ExportInput) (*ExportOutput, error) {
	switch in.Format {
	case "", "json":
		exp, err := s.svc.Export(ctx, p)
		if err != nil {
			return nil, err
		}
		return &ExportOutput{Export: exp}, nil
	case "yaml":
		exp, err := s.svc.Export(ctx, p)
		if err != nil {
			return nil, err
		}
		b, err := exp.YAML()
		if err != nil {
			return nil, err
		}
		return &ExportOutput{Text: string(b)}, nil
	case "opml":
		b, err := s.svc.ExportOPML(ctx, p)
		if err != nil {
			return nil, err
		}
		return &ExportOutput{Text: string(b)}, nil
	}
	return nil, control.Invalid("/format", "must be json, yaml or opml, not %q", in.Format)
}

// ImportedWatch is a watch of import's arguments.
type ImportedWatch struct {
	Source string     `json:"source" jsonschema:"The watched source."`
	Watch  definition `json:"watch" jsonschema:"The watch, as for create_watch."`
}

// ImportInput are import's arguments: an export.
type ImportInput struct {
	Format  string          `json:"format,omitempty" jsonschema:"Ignored (the export's format)."`
	Note    string          `json:"note,omitempty" jsonschema:"Ignored (the export's note)."`
	Sources []definition    `json:"sources,omitempty" jsonschema:"Sources to create, each a source definition with its watches."`
	Watches []ImportedWatch `json:"watches,omitempty" jsonschema:"Watches of sources the user did not create."`
	YAML    string          `json:"yaml,omitempty" jsonschema:"Instead of sources and watches: the YAML export (export with format yaml) or one source file, as text."`
	DryRun  bool            `json:"dry_run,omitempty" jsonschema:"Check and answer what would be created, saving nothing."`
}

func (s *Server) importDefs(ctx context.Context, p control.Principal, in ImportInput) (*control.ImportResult, error) {
	req := control.ImportRequest{DryRun: in.DryRun}
	if in.YAML != "" {
		if len(in.Sources) > 0 || len(in.Watches) > 0 {
			return nil, control.Invalid("/yaml", "give either yaml or sources and watches, not both")
		}
		y, err := control.ParseImportYAML(in.YAML)
		if err != nil {
			return nil, err
		}
		req.Sources, req.Watches = y.Sources, y.Watches
	}
	for _, d := range in.Sources {
		req.Sources = append(req.Sources, marshal(d))
	}
	for _, w := range in.Watches {
		req.Watches = append(req.Watches, control.ExportedWatch{Source: w.Source, Watch: marshal(w.Watch)})
	}
	return s.svc.Import(ctx, p, req)
}

// ImportFeedsInput are import_feeds' arguments.
type ImportFeedsInput struct {
	OPML   string `json:"opml,omitempty" jsonschema:"An OPML document (as text)."`
	URLs   string `json:"urls,omitempty" jsonschema:"URLs, one per line."`
	Kind   string `json:"kind,omitempty" jsonschema:"rss (the default) or web."`
	Every  string `json:"every,omitempty" jsonschema:"The new sources' schedule, a duration. Defaults to 1h."`
	DryRun bool   `json:"dry_run,omitempty" jsonschema:"Check and answer what would be created, saving nothing."`
}

func (s *Server) importFeeds(ctx context.Context, p control.Principal, in ImportFeedsInput) (*control.ImportResult, error) {
	if (in.OPML == "") == (in.URLs == "") {
		return nil, control.Invalid("/opml", "give either opml (an OPML document) or urls (one URL per line), not both and not neither")
	}
	opt := control.FeedImport{Kind: in.Kind, Every: in.Every, DryRun: in.DryRun}
	var feeds []control.Feed
	var err error
	if in.OPML != "" {
		feeds, err = control.ParseOPML(strings.NewReader(in.OPML))
		opt.Where = "OPML line %d"
	} else {
		feeds, err = control.ParseURLList(in.URLs)
	}
	if err != nil {
		return nil, err
	}
	return s.svc.ImportFeeds(ctx, p, feeds, opt)
}

func (s *Server) addAccountTools() {
	addTool(s, &mcpsdk.Tool{
		Name:        "me_link",
		Annotations: additive("A sign-in link to the user's page", false),
		Description: `Mints a sign-in link to the user's own page, /me on this lookout: their watches (pause, resume, delete), their notifications with the full message, delivery attempts and why each fired, a form that previews a new watch over the stored history before saving it, and their channels. Give the link to the user when they want to see or manage their watches themselves.
The link opens the page as the owner of your token (never as an admin), works once, and expires after ttl (default 10m, at most 1h): mint a new one each time. url is the whole link when the operator set the public address; otherwise give path with the address of this lookout. Example: {"ttl": "15m"}.`,
	}, s.meLink)
}

// MeLinkInput are me_link's arguments.
type MeLinkInput struct {
	TTL string `json:"ttl,omitempty" jsonschema:"How long the link may be used, a duration from 1m to 1h. Defaults to 10m."`
}

func (s *Server) meLink(ctx context.Context, p control.Principal, in MeLinkInput) (*control.SignInLink, error) {
	var ttl time.Duration
	if in.TTL != "" {
		d, err := time.ParseDuration(in.TTL)
		if err != nil || d <= 0 {
			return nil, control.Invalid("/ttl", "must be a duration between 1m and 1h such as 10m, not %q", in.TTL)
		}
		ttl = d
	}
	return s.svc.MintSignInLink(ctx, p, ttl, time.Now())
}
