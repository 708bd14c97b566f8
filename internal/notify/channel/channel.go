// Package channel reads notification URLs in the shoutrrr format
// (github.com/nicholas-fedor/shoutrrr): ntfy://, discord://, telegram://,
// gotify://, generic://, teams://, mattermost://, rocketchat://,
// googlechat://, zulip://, pushover://, matrix://. Parse checks a URL offline with shoutrrr's own parser of its
// service (its keys, defaults and checks) and knows its secrets (Secrets,
// Redacted); Requests builds the HTTP requests of a notification, which
// the url sink (internal/notify/url) sends. It registers nothing, so the
// api's validation of users' channels can link it alone.
package channel

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	neturl "net/url"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/nicholas-fedor/shoutrrr/pkg/services/chat/discord"
	"github.com/nicholas-fedor/shoutrrr/pkg/services/chat/googlechat"
	"github.com/nicholas-fedor/shoutrrr/pkg/services/chat/matrix"
	"github.com/nicholas-fedor/shoutrrr/pkg/services/chat/mattermost"
	"github.com/nicholas-fedor/shoutrrr/pkg/services/chat/rocketchat"
	"github.com/nicholas-fedor/shoutrrr/pkg/services/chat/teams"
	"github.com/nicholas-fedor/shoutrrr/pkg/services/chat/telegram"
	"github.com/nicholas-fedor/shoutrrr/pkg/services/chat/zulip"
	"github.com/nicholas-fedor/shoutrrr/pkg/services/push/gotify"
	"github.com/nicholas-fedor/shoutrrr/pkg/services/push/ntfy"
	"github.com/nicholas-fedor/shoutrrr/pkg/services/push/pushover"
	"github.com/nicholas-fedor/shoutrrr/pkg/services/specialized/generic"
	"github.com/nicholas-fedor/shoutrrr/pkg/types"

	"github.com/lookout-dev/lookout/internal/notify"
	"github.com/lookout-dev/lookout/internal/redact"
)

// Channel is one notification URL in the shoutrrr format, parsed by
// shoutrrr's own service configuration (its keys, defaults and checks)
// without any I/O. lookout sends the requests itself (the url sink), so
// that every connection goes through the egress policy and every answer is
// classified for the outbox.
type Channel struct {
	// Service is the URL's scheme, one of Services.
	Service string

	raw      string
	secrets  []string
	redacted string
	// endpoint is the base of the requests (scheme and host, no secret):
	// what a user's channel is checked against the egress policy with.
	// For Discord and Telegram it is their API (DiscordAPI, TelegramAPI),
	// for Teams, Rocket.Chat, Google Chat and Zulip the URL's host
	// (always https); Options.APIBase replaces them.
	endpoint string
	build    func(n *notify.Notification, base string) ([]Request, error)
}

// Request is one HTTP request of a delivery (Telegram sends one per
// chat).
type Request struct {
	// Method is POST unless a generic webhook's URL says otherwise.
	Method string
	URL    string
	Header http.Header
	Body   []byte
}

// Requests returns the requests that deliver n; base replaces the API of
// Discord, Telegram and Teams ("" for theirs), e.g. a test's fake.
func (c *Channel) Requests(n *notify.Notification, base string) ([]Request, error) {
	return c.build(n, base)
}

// Services lists the URL schemes the url sink sends to, sorted.
func Services() []string {
	return slices.Sorted(func(yield func(string) bool) {
		for k := range parsers {
			if !yield(k) {
				return
			}
		}
	})
}

var parsers = map[string]func(c *Channel, u *neturl.URL) error{
	"discord":    parseDiscord,
	"generic":    parseGeneric,
	"googlechat": parseGoogleChat,
	"gotify":     parseGotify,
	"mattermost": parseMattermost,
	"matrix":     parseMatrix,
	"ntfy":       parseNtfy,
	"pushover":   parsePushover,
	"rocketchat": parseRocketChat,
	"teams":      parseTeams,
	"telegram":   parseTelegram,
	"zulip":      parseZulip,
}

// API hosts of the services whose host is not in the URL; a test points
// them at its fake (the base of Requests).
const (
	DiscordAPI  = "https://discord.com"
	TelegramAPI = "https://api.telegram.org"
	PushoverAPI = "https://api.pushover.net"
)

// Parse reads a notification URL. Its errors never quote a secret of the
// URL (tokens, passwords, webhook ids and paths show as [REDACTED]).
func Parse(raw string) (*Channel, error) {
	raw = strings.TrimSpace(raw)
	c := &Channel{raw: raw}
	u, err := neturl.Parse(raw)
	if err != nil {
		// url.Parse quotes the whole input: say only what is wrong.
		var ue *neturl.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return nil, fmt.Errorf("is not a URL: %w", err)
	}
	c.secrets = secretsOf(u)
	c.redacted = redact.New(c.secrets...).String(raw)
	c.Service = strings.ToLower(u.Scheme)
	parse, ok := parsers[c.Service]
	if !ok {
		if c.Service == "" {
			return nil, fmt.Errorf("has no scheme: write it as <service>://..., the service one of %s", strings.Join(Services(), ", "))
		}
		return nil, fmt.Errorf("has scheme %q, which is not a channel of the url sink (known: %s)", u.Scheme, strings.Join(Services(), ", "))
	}
	if err := parse(c, u); err != nil {
		return nil, fmt.Errorf("is not a valid %s URL (%s): %s", c.Service, c.redacted, redact.New(c.secrets...).String(err.Error()))
	}
	return c, nil
}

// Secrets are the parts of the URL that are credentials: the user and
// password (Mattermost's user is a display name, not one), every path
// segment (a generic webhook's of 12 characters or more; Mattermost's
// first, its webhook token; none of Google Chat's or Matrix's), Discord's
// webhook id, Teams' tenant id, the values of a generic webhook's headers
// (@Authorization=...) and of query keys named token, password, secret,
// key, apikey.
func (c *Channel) Secrets() []string { return slices.Clone(c.secrets) }

// Redacted is the URL with its secrets replaced by [REDACTED]: what logs,
// errors and views show.
func (c *Channel) Redacted() string { return c.redacted }

// Endpoint is the scheme and host the channel's requests go to, without
// any secret: what the egress policy of a user's channel is checked with
// before it is stored.
func (c *Channel) Endpoint() string { return c.endpoint }

// secretsOf returns the credential parts of u.
func secretsOf(u *neturl.URL) []string {
	var out []string
	if u.User != nil {
		out = append(out, u.User.Username())
		if p, ok := u.User.Password(); ok {
			out = append(out, p, u.User.Username()+":"+p)
		}
	}
	scheme := strings.ToLower(u.Scheme)
	i := 0
	for seg := range strings.SplitSeq(strings.TrimPrefix(u.Path, "/"), "/") {
		i++
		// A generic webhook's path is mostly words (/api/hooks/...): only
		// a segment long enough to be a token is one. Mattermost's second
		// segment and Rocket.Chat's third are the channel; Google Chat's
		// path (/v1/spaces/<space>/messages) names the space, its
		// credentials are the key and token of the query; Matrix's path is
		// unused (its rooms are in the query).
		secret := seg != ""
		switch scheme {
		case "generic":
			secret = secret && len(seg) >= 12
		case "mattermost":
			secret = secret && i == 1
		case "rocketchat":
			secret = secret && i <= 2
		case "googlechat", "matrix":
			secret = false
		}
		if secret {
			out = append(out, seg)
		}
	}
	switch scheme {
	case "mattermost", "rocketchat", "pushover": // the user is a display name (Pushover's any word), not a credential
		if u.User != nil {
			out = slices.DeleteFunc(out, func(s string) bool { return s == u.User.Username() })
		}
	}
	switch scheme {
	case "discord", "teams", "pushover": // the webhook id, the tenant id, the user key
		if u.Host != "" {
			out = append(out, u.Host, u.Hostname())
		}
	}
	for k, vs := range u.Query() {
		switch {
		case strings.HasPrefix(k, "@") && strings.EqualFold(u.Scheme, "generic"):
			// a generic webhook's headers: Authorization, X-Api-Key, ...
			for _, v := range vs {
				out = append(out, v)
				if _, cred, ok := strings.Cut(v, " "); ok { // "Bearer <token>"
					out = append(out, strings.TrimSpace(cred))
				}
			}
		default:
			switch strings.ToLower(strings.TrimLeft(k, "$")) {
			case "token", "password", "secret", "apikey", "api_key", "key":
				out = append(out, vs...)
			}
		}
	}
	return slices.DeleteFunc(out, func(s string) bool { return s == "" })
}

// initialize runs svc's own parsing of u: its defaults, its keys, its
// checks. It does no I/O for the services listed in parsers.
func initialize(svc types.Service, u *neturl.URL) error {
	cp := *u
	return svc.Initialize(&cp, nil)
}

func parseNtfy(c *Channel, u *neturl.URL) error {
	svc := &ntfy.Service{}
	if err := initialize(svc, u); err != nil {
		return err
	}
	cfg := svc.Config
	if cfg.Host == "" {
		return errors.New("has no host: write ntfy://ntfy.sh/<topic> (or your server's host)")
	}
	scheme := cfg.Scheme
	if cfg.DisableTLS {
		scheme = "http"
	}
	if scheme != "http" && scheme != "https" {
		return fmt.Errorf("scheme=%s: must be http or https", scheme)
	}
	if cfg.DisableTLSVerification {
		return errors.New("disabletlsverification is not supported by lookout: certificates are always verified")
	}
	c.endpoint = scheme + "://" + cfg.Host
	c.build = func(n *notify.Notification, _ string) ([]Request, error) {
		// ntfy's JSON publishing (docs.ntfy.sh/publish/#publish-as-json):
		// a POST of the message to the server's root.
		prio := int(cfg.Priority)
		if cfg.Priority == ntfy.PriorityDefault {
			prio = map[string]int{"high": 4, "low": 2}[n.Urgency]
		}
		msg := map[string]any{"topic": cfg.Topic, "title": cmpOr(cfg.Title, n.Title), "message": cut(messageText(n, false), 4096)}
		if prio != 0 {
			msg["priority"] = prio
		}
		if len(cfg.Tags) > 0 {
			msg["tags"] = cfg.Tags
		}
		if click := cmpOr(cfg.Click, recordURL(n)); click != "" {
			msg["click"] = click
		}
		if cfg.Icon != "" {
			msg["icon"] = cfg.Icon
		}
		body, err := json.Marshal(msg)
		if err != nil {
			return nil, err
		}
		h := jsonHeader()
		if cfg.Username != "" || cfg.Password != "" {
			if cfg.Username == "" {
				h.Set("Authorization", "Bearer "+cfg.Password) // an access token
			} else {
				r := &http.Request{Header: h}
				r.SetBasicAuth(cfg.Username, cfg.Password)
			}
		}
		if !cfg.Cache {
			h.Set("Cache", "no")
		}
		if !cfg.Firebase {
			h.Set("Firebase", "no")
		}
		return []Request{{URL: c.endpoint + "/", Header: h, Body: body}}, nil
	}
	return nil
}

func parseDiscord(c *Channel, u *neturl.URL) error {
	svc := &discord.Service{}
	if err := initialize(svc, u); err != nil {
		return err
	}
	cfg := svc.Config
	c.endpoint = DiscordAPI
	if cfg.JSON {
		return errors.New("the /raw form (the message as the whole payload) is not supported: lookout composes the message")
	}
	c.build = func(n *notify.Notification, base string) ([]Request, error) {
		// Execute Webhook (discord.com/developers/docs/resources/webhook):
		// wait=true makes Discord answer 200 with the message once it is
		// stored, rather than 204 before.
		q := neturl.Values{"wait": {"true"}}
		if cfg.ThreadID != "" {
			q.Set("thread_id", cfg.ThreadID)
		}
		color := map[string]uint{"high": cfg.ColorError, "medium": cfg.ColorWarn, "low": cfg.ColorInfo}[n.Urgency]
		embed := map[string]any{"title": cut(n.Title, 256), "description": cut(messageText(n, false), 4096), "color": cmpOr(color, cfg.Color)}
		if u := recordURL(n); u != "" {
			embed["url"] = u
		}
		msg := map[string]any{"embeds": []any{embed}, "allowed_mentions": map[string]any{"parse": []string{}}}
		if cfg.Username != "" {
			msg["username"] = cfg.Username
		}
		if cfg.Avatar != "" {
			msg["avatar_url"] = cfg.Avatar
		}
		body, err := json.Marshal(msg)
		if err != nil {
			return nil, err
		}
		target := cmpOr(base, c.endpoint) + "/api/webhooks/" + neturl.PathEscape(cfg.WebhookID) + "/" + neturl.PathEscape(cfg.Token) + "?" + q.Encode()
		return []Request{{URL: target, Header: jsonHeader(), Body: body}}, nil
	}
	return nil
}

func parseTelegram(c *Channel, u *neturl.URL) error {
	svc := &telegram.Service{}
	if err := initialize(svc, u); err != nil {
		return err
	}
	cfg := svc.Config
	c.endpoint = TelegramAPI
	c.build = func(n *notify.Notification, base string) ([]Request, error) {
		// sendMessage (core.telegram.org/bots/api#sendmessage), one per
		// chat; plain text, so nothing in the notification is markup.
		var calls []Request
		for _, chat := range cfg.Chats {
			msg := map[string]any{"chat_id": chat, "text": cut(messageText(n, true), 4096),
				"link_preview_options": map[string]bool{"is_disabled": !cfg.Preview}, "disable_notification": !cfg.Notification}
			body, err := json.Marshal(msg)
			if err != nil {
				return nil, err
			}
			calls = append(calls, Request{URL: cmpOr(base, c.endpoint) + "/bot" + cfg.Token + "/sendMessage", Header: jsonHeader(), Body: body})
		}
		return calls, nil
	}
	return nil
}

func parseGotify(c *Channel, u *neturl.URL) error {
	svc := &gotify.Service{}
	if err := initialize(svc, u); err != nil {
		return err
	}
	cfg := svc.Config
	if cfg.Token == "" {
		return errors.New("has no application token: write gotify://host/<token>")
	}
	if cfg.InsecureSkipVerify {
		return errors.New("insecureskipverify is not supported by lookout: certificates are always verified")
	}
	scheme := "https"
	if cfg.DisableTLS {
		scheme = "http"
	}
	c.endpoint = scheme + "://" + cfg.Host
	c.build = func(n *notify.Notification, _ string) ([]Request, error) {
		// POST /message (gotify.net/api-docs): the token in X-Gotify-Key,
		// never in the query, so that no URL lookout handles carries it.
		prio := cfg.Priority
		if prio == 0 {
			prio = map[string]int{"high": 8, "medium": 5, "low": 2}[n.Urgency]
		}
		extras := map[string]any{}
		for k, v := range cfg.Extras {
			extras[k] = v
		}
		if u := recordURL(n); u != "" {
			extras["client::notification"] = map[string]any{"click": map[string]string{"url": u}}
		}
		msg := map[string]any{"title": n.Title, "message": messageText(n, false), "priority": prio}
		if len(extras) > 0 {
			msg["extras"] = extras
		}
		body, err := json.Marshal(msg)
		if err != nil {
			return nil, err
		}
		h := jsonHeader()
		h.Set("X-Gotify-Key", cfg.Token)
		return []Request{{URL: c.endpoint + strings.TrimSuffix("/"+strings.Trim(cfg.Path, "/"), "/") + "/message", Header: h, Body: body}}, nil
	}
	return nil
}

func parseGeneric(c *Channel, u *neturl.URL) error {
	svc := &generic.Service{}
	if err := initialize(svc, u); err != nil {
		return err
	}
	cfg := svc.Config
	if u.Host == "" {
		return errors.New("has no host: write generic://host/path (https) or add ?disabletls=yes for http")
	}
	method := strings.ToUpper(cfg.RequestMethod)
	switch method {
	case http.MethodPost, http.MethodPut, http.MethodPatch:
	default:
		return fmt.Errorf("method=%s: must be POST, PUT or PATCH (a notification has a body)", cfg.RequestMethod)
	}
	tmpl := strings.ToLower(cfg.Template)
	if tmpl != "" && tmpl != "json" {
		return fmt.Errorf("template=%s: only template=json (or none, for plain text) is supported", cfg.Template)
	}
	// shoutrrr keeps the headers (@Key=value) and extra fields ($key=value)
	// unexported: read them from the URL as it does.
	headers, extra := http.Header{}, map[string]string{}
	for k, vs := range u.Query() {
		if len(k) < 2 || len(vs) == 0 {
			continue
		}
		switch k[0] {
		case '@':
			headers.Set(genericHeaderKey(k[1:]), vs[0])
		case '$':
			extra[k[1:]] = vs[0]
		}
	}
	target := cfg.WebhookURL()
	target.User = nil // generic://user:pass@host is basic auth, not a URL's userinfo
	user, pass := "", ""
	if u.User != nil {
		user = u.User.Username()
		pass, _ = u.User.Password()
	}
	c.endpoint = target.Scheme + "://" + target.Host
	c.build = func(n *notify.Notification, _ string) ([]Request, error) {
		// shoutrrr's generic webhook: plain text of the message, or with
		// template=json {titlekey: title, messagekey: message} plus the
		// $extra fields.
		h := http.Header{"User-Agent": {"lookout-url/1"}}
		var body []byte
		if tmpl == "" {
			h.Set("Content-Type", "text/plain; charset=utf-8")
			body = []byte(messageText(n, true))
		} else {
			h.Set("Content-Type", cfg.ContentType)
			msg := map[string]any{}
			for k, v := range extra {
				msg[k] = v
			}
			msg[cfg.TitleKey] = cmpOr(cfg.Title, n.Title)
			msg[cfg.MessageKey] = messageText(n, false)
			var err error
			if body, err = json.Marshal(msg); err != nil {
				return nil, err
			}
		}
		for k, v := range headers {
			h[k] = v
		}
		if user != "" || pass != "" {
			r := &http.Request{Header: h}
			r.SetBasicAuth(user, pass)
		}
		return []Request{{Method: method, URL: target.String(), Header: h, Body: body}}, nil
	}
	return nil
}

// genericHeaderKey is shoutrrr's spelling of a header key of a generic
// URL: XApiKey and x-api-key are both X-Api-Key.
func genericHeaderKey(k string) string {
	var b strings.Builder
	for i, r := range k {
		switch {
		case r >= 'A' && r <= 'Z':
			if i > 0 && k[i-1] != '-' {
				b.WriteByte('-')
			}
		case i == 0 || k[i-1] == '-':
			r = unicode.ToUpper(r)
		}
		b.WriteRune(r)
	}
	return http.CanonicalHeaderKey(b.String())
}

func parseTeams(c *Channel, u *neturl.URL) error {
	svc := &teams.Service{}
	if err := initialize(svc, u); err != nil {
		return err
	}
	cfg := svc.Config
	if !teams.HostValidator.MatchString(cfg.Host) {
		return fmt.Errorf("host=%s: must be your organization's <name>.webhook.office.com (the host of the webhook's URL)", cfg.Host)
	}
	c.endpoint = "https://" + cfg.Host
	c.build = func(n *notify.Notification, base string) ([]Request, error) {
		// An Incoming Webhook's MessageCard (learn.microsoft.com,
		// "Create an Incoming Webhook"): the title, the body as a section,
		// the record's link as an OpenUri action; markdown off, so
		// nothing in a notification is read as markup.
		section := map[string]any{"text": cut(messageText(n, false), 20000)}
		card := map[string]any{"@type": "MessageCard", "@context": "http://schema.org/extensions",
			"summary": cut(n.Title, 200), "title": cut(cmpOr(cfg.Title, n.Title), 256), "markdown": false,
			"sections": []any{section}}
		if color := cmpOr(cfg.Color, map[string]string{"high": "D13438", "medium": "FFB900", "low": "0078D4"}[n.Urgency]); color != "" {
			card["themeColor"] = color
		}
		if u := recordURL(n); u != "" {
			card["potentialAction"] = []any{map[string]any{"@type": "OpenUri", "name": "Open",
				"targets": []any{map[string]string{"os": "default", "uri": u}}}}
		}
		body, err := json.Marshal(card)
		if err != nil {
			return nil, err
		}
		path := "/webhookb2/" + cfg.Group + "@" + cfg.Tenant + "/IncomingWebhook/" + cfg.AltID + "/" + cfg.GroupOwner + "/" + neturl.PathEscape(cfg.ExtraID)
		return []Request{{URL: cmpOr(base, c.endpoint) + path, Header: jsonHeader(), Body: body}}, nil
	}
	return nil
}

func parseMattermost(c *Channel, u *neturl.URL) error {
	svc := &mattermost.Service{}
	if err := initialize(svc, u); err != nil {
		return err
	}
	cfg := svc.Config
	if cfg.Host == "" {
		return errors.New("has no host: write mattermost://[username@]host/<webhook token>[/channel]")
	}
	scheme := "https"
	if cfg.DisableTLS {
		scheme = "http"
	}
	c.endpoint = scheme + "://" + cfg.Host
	c.build = func(n *notify.Notification, _ string) ([]Request, error) {
		// An incoming webhook (developers.mattermost.com, "Incoming
		// webhooks"): POST /hooks/<token> with text, username, channel,
		// icon_url or icon_emoji.
		msg := map[string]any{"text": cut(messageText(n, true), 16383)}
		if cfg.UserName != "" {
			msg["username"] = cfg.UserName
		}
		if cfg.Channel != "" {
			msg["channel"] = cfg.Channel
		}
		if cfg.Icon != "" {
			if strings.HasPrefix(cfg.Icon, "http://") || strings.HasPrefix(cfg.Icon, "https://") {
				msg["icon_url"] = cfg.Icon
			} else {
				msg["icon_emoji"] = cfg.Icon
			}
		}
		body, err := json.Marshal(msg)
		if err != nil {
			return nil, err
		}
		return []Request{{URL: c.endpoint + "/hooks/" + neturl.PathEscape(cfg.Token), Header: jsonHeader(), Body: body}}, nil
	}
	return nil
}

func parseRocketChat(c *Channel, u *neturl.URL) error {
	svc := &rocketchat.Service{}
	if err := initialize(svc, u); err != nil {
		return err
	}
	cfg := svc.Config
	if cfg.Host == "" || cfg.TokenA == "" || cfg.TokenB == "" {
		return errors.New("needs a host and both parts of the webhook's token: write rocketchat://[username@]host[:port]/<token a>/<token b>[/channel]")
	}
	host := cfg.Host
	if cfg.Port != "" {
		host = net.JoinHostPort(cfg.Host, cfg.Port)
	}
	c.endpoint = "https://" + host
	c.build = func(n *notify.Notification, base string) ([]Request, error) {
		// An incoming webhook integration (docs.rocket.chat, "Incoming
		// webhook"): POST /hooks/<token a>/<token b> with text, username,
		// channel.
		msg := map[string]any{"text": messageText(n, true)}
		if cfg.UserName != "" {
			msg["username"] = cfg.UserName
		}
		if cfg.Channel != "" {
			msg["channel"] = cfg.Channel
		}
		body, err := json.Marshal(msg)
		if err != nil {
			return nil, err
		}
		return []Request{{URL: cmpOr(base, c.endpoint) + "/hooks/" + neturl.PathEscape(cfg.TokenA) + "/" + neturl.PathEscape(cfg.TokenB),
			Header: jsonHeader(), Body: body}}, nil
	}
	return nil
}

func parseGoogleChat(c *Channel, u *neturl.URL) error {
	svc := &googlechat.Service{}
	if err := initialize(svc, u); err != nil {
		return err
	}
	cfg := svc.Config
	if cfg.Key == "" || cfg.Token == "" {
		return errors.New("needs the webhook's key and token: write googlechat://chat.googleapis.com/v1/spaces/<space>/messages?key=<key>&token=<token>")
	}
	if cfg.Host == "" || !strings.HasPrefix(cfg.Path, "/v1/spaces/") {
		return errors.New("is not a space's webhook: write googlechat://chat.googleapis.com/v1/spaces/<space>/messages?key=<key>&token=<token>")
	}
	c.endpoint = "https://" + cfg.Host
	c.build = func(n *notify.Notification, base string) ([]Request, error) {
		// A space's incoming webhook (developers.google.com/workspace/chat,
		// "Build a Google Chat app as a webhook"): POST of {"text"} to the
		// webhook's URL.
		body, err := json.Marshal(map[string]any{"text": cut(messageText(n, true), 4000)})
		if err != nil {
			return nil, err
		}
		q := neturl.Values{"key": {cfg.Key}, "token": {cfg.Token}}
		h := jsonHeader()
		h.Set("Content-Type", "application/json; charset=UTF-8")
		return []Request{{URL: cmpOr(base, c.endpoint) + cfg.Path + "?" + q.Encode(), Header: h, Body: body}}, nil
	}
	return nil
}

func parseZulip(c *Channel, u *neturl.URL) error {
	svc := &zulip.Service{}
	if err := initialize(svc, u); err != nil {
		return err
	}
	cfg := svc.Config
	if cfg.Stream == "" {
		return errors.New("has no stream: write zulip://bot-email:api-key@host/?stream=<stream>[&topic=<topic>]")
	}
	c.endpoint = "https://" + u.Host // shoutrrr's Host drops the port
	c.build = func(n *notify.Notification, base string) ([]Request, error) {
		// Send a message (zulip.com/api/send-message): a form POSTed to
		// /api/v1/messages with the bot's email and API key as basic auth;
		// the topic from the URL, else the notification's title.
		form := neturl.Values{"type": {"stream"}, "to": {cfg.Stream}, "content": {cut(messageText(n, false), 10000)},
			"topic": {cut(cmpOr(cfg.Topic, n.Title), 60)}}
		h := http.Header{"Content-Type": {"application/x-www-form-urlencoded"}, "User-Agent": {"lookout-url/1"}}
		r := &http.Request{Header: h}
		r.SetBasicAuth(cfg.BotMail, cfg.BotKey)
		return []Request{{URL: cmpOr(base, c.endpoint) + "/api/v1/messages", Header: h, Body: []byte(form.Encode())}}, nil
	}
	return nil
}

func parsePushover(c *Channel, u *neturl.URL) error {
	svc := &pushover.Service{}
	if err := initialize(svc, u); err != nil {
		return err
	}
	cfg := svc.Config
	if cfg.Priority < -2 || cfg.Priority > 2 {
		return fmt.Errorf("priority=%d: must be from -2 to 2", cfg.Priority)
	}
	c.endpoint = PushoverAPI
	prioritySet := u.Query().Has("priority")
	c.build = func(n *notify.Notification, base string) ([]Request, error) {
		// POST /1/messages.json (pushover.net/api): one form for all the
		// devices (comma-separated), the record's URL as url; priority
		// from the URL, else high 1, low -1; an emergency (2) repeats
		// every 60 s for an hour until acknowledged.
		prio := int(cfg.Priority)
		if !prioritySet {
			prio = map[string]int{"high": 1, "low": -1}[n.Urgency]
		}
		form := neturl.Values{"token": {cfg.Token}, "user": {cfg.User}, "message": {cut(messageText(n, false), 1024)},
			"title": {cut(cmpOr(cfg.Title, n.Title), 250)}, "priority": {fmt.Sprint(prio)}}
		if prio == 2 {
			form.Set("retry", "60")
			form.Set("expire", "3600")
		}
		if len(cfg.Devices) > 0 {
			form.Set("device", strings.Join(cfg.Devices, ","))
		}
		if u := recordURL(n); u != "" {
			form.Set("url", u)
		}
		h := http.Header{"Content-Type": {"application/x-www-form-urlencoded"}, "User-Agent": {"lookout-url/1"}}
		return []Request{{URL: cmpOr(base, c.endpoint) + "/1/messages.json", Header: h, Body: []byte(form.Encode())}}, nil
	}
	return nil
}

func parseMatrix(c *Channel, u *neturl.URL) error {
	// Not matrix.Service's Initialize: it logs in (I/O) when the URL has a
	// user. Its Config parses the URL alone.
	cfg := &matrix.Config{}
	cp := *u
	if err := cfg.SetURL(&cp); err != nil {
		return err
	}
	if cfg.Host == "" {
		return errors.New("has no host: write matrix://:<access token>@<homeserver>/?rooms=!<room id>")
	}
	if cfg.User != "" {
		return errors.New("a user and password (which need a login) are not supported: write matrix://:<access token>@<homeserver>/?rooms=!<room id>")
	}
	if cfg.Password == "" {
		return errors.New("has no access token: write matrix://:<access token>@<homeserver>/?rooms=!<room id>")
	}
	if len(cfg.Rooms) == 0 {
		return errors.New("has no rooms: add ?rooms=!<room id>[,!<room id>...] (rooms the token's user has joined)")
	}
	for _, r := range cfg.Rooms {
		if !strings.HasPrefix(r, "!") {
			return fmt.Errorf("rooms: %s is a room alias, which needs a lookup: write the room's id (!...:server, in the room's settings)", r)
		}
	}
	scheme := "https"
	if cfg.DisableTLS {
		scheme = "http"
	}
	c.endpoint = scheme + "://" + cfg.Host
	c.build = func(n *notify.Notification, _ string) ([]Request, error) {
		// Send a message event (spec.matrix.org, client-server API,
		// PUT /rooms/{roomId}/send/m.room.message/{txnId}), one per room:
		// plain m.text; the transaction id comes from the dedupe key, so a
		// retry of a request the server stored is not a second message.
		body, err := json.Marshal(map[string]any{"msgtype": "m.text", "body": messageText(n, true)})
		if err != nil {
			return nil, err
		}
		key := n.DedupeKey
		if key == "" {
			key = fmt.Sprint(n.ID)
		}
		sum := sha256.Sum256([]byte(key))
		txn := "lookout-" + hex.EncodeToString(sum[:16])
		var calls []Request
		for _, room := range cfg.Rooms {
			h := jsonHeader()
			h.Set("Authorization", "Bearer "+cfg.Password)
			calls = append(calls, Request{Method: http.MethodPut, Header: h, Body: body,
				URL: c.endpoint + "/_matrix/client/v3/rooms/" + neturl.PathEscape(room) + "/send/m.room.message/" + txn})
		}
		return calls, nil
	}
	return nil
}

func jsonHeader() http.Header {
	return http.Header{"Content-Type": {"application/json"}, "User-Agent": {"lookout-url/1"}}
}

// messageText is the text of a channel without a title field of its own
// (withTitle) or the body under the title it has, the record's link at
// the end when the body does not hold it.
func messageText(n *notify.Notification, withTitle bool) string {
	var b strings.Builder
	if withTitle {
		b.WriteString(n.Title)
	}
	if body := strings.TrimSpace(n.Body); body != "" {
		if b.Len() > 0 {
			b.WriteString("\n\n")
		}
		b.WriteString(body)
	}
	if u := recordURL(n); u != "" && !strings.Contains(n.Body, u) {
		if b.Len() > 0 {
			b.WriteString("\n")
		}
		b.WriteString(u)
	}
	if b.Len() == 0 {
		return n.Title
	}
	return b.String()
}

func recordURL(n *notify.Notification) string {
	if n.Kind == notify.KindDigest {
		return ""
	}
	return n.Payload.Record.URL
}

// cut returns at most limit characters of s, ending in "…" when cut.
func cut(s string, limit int) string {
	if utf8.RuneCountInString(s) <= limit {
		return s
	}
	return string([]rune(s)[:limit-1]) + "…"
}

func cmpOr[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
}
