// Package urltest fakes the APIs of the channels of the url sink for
// tests (httptest servers answering as the public API docs say, failures
// included): ntfy (docs.ntfy.sh/publish, JSON publishing), Discord
// (Execute Webhook), Telegram (Bot API sendMessage), Gotify (POST
// /message), a generic JSON webhook (shoutrrr's generic://), a Microsoft
// Teams Incoming Webhook (MessageCard), a Mattermost incoming webhook, a
// Rocket.Chat incoming webhook, a Google Chat space's webhook, Zulip
// (send-message, a form with basic auth) and Pushover (messages.json, a
// form). Each fake checks every request (path, credentials, JSON
// body) and counts the messages it accepted by title.
package urltest

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	neturl "net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// Credentials the fakes accept.
const (
	NtfyUser       = "lookout"
	NtfyPassword   = "ntfy-pass-7731"
	NtfyTopic      = "alerts-93ab"
	DiscordID      = "112233445566778899"
	DiscordToken   = "discord-tok-AbC_dEf-123"
	TelegramToken  = "123456789:AAF-telegram_tok3n"
	TelegramChat   = "-1001234567"
	GotifyToken    = "AgotifyToken123"
	TelegramChat2  = "@lookout_ch"
	GenericPath    = "/api/webhook/lookout-hook-5f2c9e"
	GenericKey     = "generic-key-0c4e7a11"
	TeamsGroup     = "11111111-2222-3333-4444-555555555555"
	TeamsTenant    = "66666666-7777-8888-9999-aaaaaaaaaaaa"
	TeamsAltID     = "0123456789abcdef0123456789abcdef"
	TeamsOwner     = "bbbbbbbb-cccc-dddd-eeee-ffffffffffff"
	TeamsExtraID   = "V2teams-extra-SECRET-id"
	MattermostHook = "mmhook7xk3s9d8f1q2w3e4r5t6y"
	RocketTokenA   = "qkW3zTbFJ8mYv2Lx4"
	RocketTokenB   = "Xr7hGf2pQmZ9cV1nB6sD0kJ3tY8wE5uA"
	ChatSpace      = "AAAAq1w2e3r"
	ChatKey        = "AIzaSy-chat-key-4f1d9"
	ChatToken      = "chat-tok-Zx8_Qw9Rt7Yu6"
	ZulipBot       = "lookout-bot@zulip.example"
	ZulipKey       = "zulipKEYq8w7e6r5t4y3"
	PushoverToken  = "azGDORePK8gMaC0QOYAMyEEuzJnyUi"
	PushoverUser   = "uQiRzpo4DXghDmr9QzzfQu27cmVRsG"
	MatrixToken    = "syt_bG9va291dA_matrixSecretTok_1x2y3z"
	MatrixRoom     = "!ops:matrix.example"
	MatrixRoom2    = "!alerts:matrix.example"
	teamsPath      = "/webhookb2/" + TeamsGroup + "@" + TeamsTenant + "/IncomingWebhook/" + TeamsAltID + "/" + TeamsOwner + "/" + TeamsExtraID
	discordMsgPath = "/api/webhooks/" + DiscordID + "/" + DiscordToken
)

// Server is a fake of one service.
type Server struct {
	// Service is ntfy, discord, telegram or gotify.
	Service string
	srv     *httptest.Server

	// Answer, when set, gives the status to answer the n-th request (1 on
	// the first) of the message titled title instead of accepting it: 429
	// answers the service's rate-limit body with RetryAfter, 5xx and 4xx
	// the service's error body. 0 accepts.
	Answer func(title string, n int) int
	// RetryAfter is the seconds a 429 asks to wait. Defaults to 0.
	RetryAfter int

	mu       sync.Mutex
	requests map[string]int
	accepted map[string]int
	bodies   map[string]map[string]any
	txns     map[string]string // Matrix: the event of each transaction's path
	problems []string
}

// New starts a fake of service (ntfy, discord, telegram or gotify),
// closed when t ends.
func New(t testing.TB, service string) *Server {
	s := &Server{Service: service, requests: map[string]int{}, accepted: map[string]int{}, bodies: map[string]map[string]any{}, txns: map[string]string{}}
	s.srv = httptest.NewServer(http.HandlerFunc(s.serve))
	t.Cleanup(s.srv.Close)
	return s
}

// Base is the fake's http://127.0.0.1:port.
func (s *Server) Base() string { return s.srv.URL }

// NotificationURL is a notification URL pointing at the fake: the host of
// ntfy and Gotify is the fake's; Discord and Telegram need Base as their
// API base.
func (s *Server) NotificationURL() string {
	host := strings.TrimPrefix(s.srv.URL, "http://")
	switch s.Service {
	case "ntfy":
		return fmt.Sprintf("ntfy://%s:%s@%s/%s?scheme=http&tags=eyes", NtfyUser, NtfyPassword, host, NtfyTopic)
	case "discord":
		return fmt.Sprintf("discord://%s@%s?username=lookout", DiscordToken, DiscordID)
	case "telegram":
		return fmt.Sprintf("telegram://%s@telegram?chats=%s,%s", TelegramToken, TelegramChat, TelegramChat2)
	case "gotify":
		return fmt.Sprintf("gotify://%s/%s?disabletls=yes", host, GotifyToken)
	case "generic":
		return fmt.Sprintf("generic://%s%s?disabletls=yes&template=json&messagekey=text&@X-Api-Key=%s&$source=lookout", host, GenericPath, GenericKey)
	case "teams":
		return fmt.Sprintf("teams://%s@%s/%s/%s/%s?host=example.webhook.office.com", TeamsGroup, TeamsTenant, TeamsAltID, TeamsOwner, TeamsExtraID)
	case "mattermost":
		return fmt.Sprintf("mattermost://lookout-bot@%s/%s/alerts?disabletls=yes&icon=:eyes:", host, MattermostHook)
	case "rocketchat":
		return fmt.Sprintf("rocketchat://lookout-bot@chat.example/%s/%s/alerts", RocketTokenA, RocketTokenB)
	case "googlechat":
		return fmt.Sprintf("googlechat://chat.googleapis.com/v1/spaces/%s/messages?key=%s&token=%s", ChatSpace, ChatKey, ChatToken)
	case "zulip":
		return fmt.Sprintf("zulip://%s:%s@zulip.example/?stream=alerts", neturl.QueryEscape(ZulipBot), ZulipKey)
	case "pushover":
		return fmt.Sprintf("pushover://shoutrrr:%s@%s/?devices=phone,tablet", PushoverToken, PushoverUser)
	case "matrix":
		return fmt.Sprintf("matrix://:%s@%s/?disableTLS=yes&rooms=%s,%s", MatrixToken, host, MatrixRoom, MatrixRoom2)
	}
	panic("urltest: unknown service " + s.Service)
}

// Secrets are the credentials in NotificationURL: none may show in an
// error, a log line or a view.
func (s *Server) Secrets() []string {
	switch s.Service {
	case "ntfy":
		return []string{NtfyPassword}
	case "discord":
		return []string{DiscordToken, DiscordID}
	case "telegram":
		return []string{TelegramToken, strings.SplitN(TelegramToken, ":", 2)[1]}
	case "gotify":
		return []string{GotifyToken}
	case "generic":
		return []string{GenericKey}
	case "teams":
		return []string{TeamsGroup, TeamsTenant, TeamsAltID, TeamsOwner, TeamsExtraID}
	case "mattermost":
		return []string{MattermostHook}
	case "rocketchat":
		return []string{RocketTokenA, RocketTokenB}
	case "googlechat":
		return []string{ChatKey, ChatToken}
	case "zulip":
		return []string{ZulipKey}
	case "pushover":
		return []string{PushoverToken, PushoverUser}
	case "matrix":
		return []string{MatrixToken}
	}
	return nil
}

// Requests is how many requests came for the message titled title
// (Telegram: per chat, summed).
func (s *Server) Requests(title string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.requests[title]
}

// Accepted is how many times the message titled title was accepted
// (Telegram: per chat, summed).
func (s *Server) Accepted(title string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.accepted[title]
}

// Total is how many messages the fake accepted, every title counted.
func (s *Server) Total() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, c := range s.accepted {
		n += c
	}
	return n
}

// Titles lists the titles of the messages accepted.
func (s *Server) Titles() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for t := range s.accepted {
		out = append(out, t)
	}
	return out
}

// Body is the last JSON body accepted for title.
func (s *Server) Body(title string) map[string]any {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.bodies[title]
}

// Problems lists the requests the real API would have refused for a
// reason the test did not plan (a wrong path, missing credentials, a
// malformed body).
func (s *Server) Problems() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.problems...)
}

func (s *Server) problem(w http.ResponseWriter, status int, format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	s.mu.Lock()
	s.problems = append(s.problems, s.Service+": "+msg)
	s.mu.Unlock()
	s.fail(w, status, msg)
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	if want := map[bool]string{true: http.MethodPut, false: http.MethodPost}[s.Service == "matrix"]; r.Method != want {
		s.problem(w, http.StatusMethodNotAllowed, "method %s, want %s", r.Method, want)
		return
	}
	raw, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	var body map[string]any
	if s.Service == "zulip" || s.Service == "pushover" { // forms, not JSON
		form, err := neturl.ParseQuery(string(raw))
		if r.Header.Get("Content-Type") != "application/x-www-form-urlencoded" || err != nil {
			s.problem(w, http.StatusBadRequest, "body is not a form (Content-Type %q): %.100s", r.Header.Get("Content-Type"), raw)
			return
		}
		body = map[string]any{}
		for k, v := range form {
			body[k] = v[0]
		}
	} else if !strings.HasPrefix(r.Header.Get("Content-Type"), "application/json") || json.Unmarshal(raw, &body) != nil {
		s.problem(w, http.StatusBadRequest, "body is not JSON (Content-Type %q): %.100s", r.Header.Get("Content-Type"), raw)
		return
	}
	title, ok := s.check(w, r, body)
	if !ok {
		return
	}
	s.mu.Lock()
	s.requests[title]++
	n := s.requests[title]
	event, seen := s.txns[r.URL.Path]
	s.mu.Unlock()
	if seen { // Matrix: the same transaction again is the same event
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"event_id": event})
		return
	}
	if s.Answer != nil {
		if code := s.Answer(title, n); code != 0 {
			s.fail(w, code, "planned failure")
			return
		}
	}
	s.mu.Lock()
	s.accepted[title]++
	s.bodies[title] = body
	event = fmt.Sprintf("$ev%d_%d", len(s.txns), n)
	if s.Service == "matrix" {
		s.txns[r.URL.Path] = event
	}
	s.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	switch s.Service {
	case "generic":
		w.WriteHeader(http.StatusAccepted)
		_ = json.NewEncoder(w).Encode(map[string]any{"received": true})
	case "teams": // the connector answers 200 with the text "1"
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = io.WriteString(w, "1")
	case "mattermost":
		w.Header().Set("Content-Type", "text/plain")
		_, _ = io.WriteString(w, "ok")
	case "rocketchat":
		_ = json.NewEncoder(w).Encode(map[string]any{"success": true})
	case "zulip":
		_ = json.NewEncoder(w).Encode(map[string]any{"result": "success", "msg": "", "id": 4000 + n})
	case "matrix":
		_ = json.NewEncoder(w).Encode(map[string]any{"event_id": event})
	case "pushover":
		_ = json.NewEncoder(w).Encode(map[string]any{"status": 1, "request": fmt.Sprintf("req-%d", n)})
	case "googlechat":
		_ = json.NewEncoder(w).Encode(map[string]any{"name": fmt.Sprintf("spaces/%s/messages/m%d", ChatSpace, n),
			"text": body["text"], "createTime": "2026-12-01T10:00:00.000000Z", "space": map[string]any{"name": "spaces/" + ChatSpace}})
	case "ntfy":
		_ = json.NewEncoder(w).Encode(map[string]any{"id": "sPs71M8A2T", "time": 1700000000, "event": "message",
			"topic": body["topic"], "title": body["title"], "message": body["message"]})
	case "discord":
		_ = json.NewEncoder(w).Encode(map[string]any{"id": "1203", "type": 0, "content": "", "channel_id": "99",
			"webhook_id": DiscordID, "embeds": body["embeds"]})
	case "telegram":
		_ = json.NewEncoder(w).Encode(map[string]any{"ok": true, "result": map[string]any{"message_id": n,
			"chat": map[string]any{"id": body["chat_id"]}, "text": body["text"]}})
	case "gotify":
		_ = json.NewEncoder(w).Encode(map[string]any{"id": n, "appid": 1, "title": body["title"],
			"message": body["message"], "priority": body["priority"], "date": "2026-12-01T10:00:00Z"})
	}
}

// check verifies a request as the real API would and returns the
// message's title.
func (s *Server) check(w http.ResponseWriter, r *http.Request, body map[string]any) (string, bool) {
	check := map[string]func(http.ResponseWriter, *http.Request, map[string]any) (string, bool){
		"ntfy":       s.checkNtfy,
		"discord":    s.checkDiscord,
		"telegram":   s.checkTelegram,
		"gotify":     s.checkGotify,
		"generic":    s.checkGeneric,
		"teams":      s.checkTeams,
		"mattermost": s.checkMattermost,
		"rocketchat": s.checkRocketchat,
		"googlechat": s.checkGooglechat,
		"zulip":      s.checkZulip,
		"matrix":     s.checkMatrix,
		"pushover":   s.checkPushover,
	}[s.Service]
	if check == nil {
		return "", false
	}
	return check(w, r, body)
}

// checkNtfy checks a request to the ntfy fake: POST / with {"topic", "message", "title", ...};
// basic auth.
func (s *Server) checkNtfy(w http.ResponseWriter, r *http.Request, body map[string]any) (string, bool) {
	str := func(k string) string { v, _ := body[k].(string); return v }
	if r.URL.Path != "/" {
		s.problem(w, http.StatusNotFound, "path %s, want / (JSON publishing)", r.URL.Path)
		return "", false
	}
	if u, p, ok := r.BasicAuth(); !ok || u != NtfyUser || p != NtfyPassword {
		s.problem(w, http.StatusUnauthorized, "basic auth %q/%q", u, p)
		return "", false
	}
	if str("topic") != NtfyTopic || str("message") == "" {
		s.problem(w, http.StatusBadRequest, "topic %q, message %q", str("topic"), str("message"))
		return "", false
	}
	return str("title"), true
}

// checkDiscord checks a request to the discord fake: POST /api/webhooks/{id}/{token}?wait=true
// with embeds.
func (s *Server) checkDiscord(w http.ResponseWriter, r *http.Request, body map[string]any) (string, bool) {
	str := func(k string) string { v, _ := body[k].(string); return v }
	if r.URL.Path != discordMsgPath {
		s.problem(w, http.StatusNotFound, "path %s, want the webhook's", r.URL.Path)
		return "", false
	}
	embeds, _ := body["embeds"].([]any)
	if len(embeds) != 1 || str("content") != "" && len(str("content")) > 2000 {
		s.problem(w, http.StatusBadRequest, "want one embed, got %d", len(embeds))
		return "", false
	}
	e, _ := embeds[0].(map[string]any)
	title, _ := e["title"].(string)
	if title == "" || len([]rune(title)) > 256 {
		s.problem(w, http.StatusBadRequest, "embed title %q", title)
		return "", false
	}
	return title, true
}

// checkTelegram checks a request to the telegram fake: POST /bot<token>/sendMessage with
// {"chat_id", "text"}.
func (s *Server) checkTelegram(w http.ResponseWriter, r *http.Request, body map[string]any) (string, bool) {
	str := func(k string) string { v, _ := body[k].(string); return v }
	if r.URL.Path != "/bot"+TelegramToken+"/sendMessage" {
		s.problem(w, http.StatusNotFound, "path %s, want /bot<token>/sendMessage", r.URL.Path)
		return "", false
	}
	if c := str("chat_id"); c != TelegramChat && c != TelegramChat2 {
		s.problem(w, http.StatusBadRequest, "chat_id %q", c)
		return "", false
	}
	return s.messageTitle(w, str("text"))
}

// checkGotify checks a request to the gotify fake: POST /message with X-Gotify-Key and {"title",
// "message", "priority"}.
func (s *Server) checkGotify(w http.ResponseWriter, r *http.Request, body map[string]any) (string, bool) {
	str := func(k string) string { v, _ := body[k].(string); return v }
	if r.URL.Path != "/message" {
		s.problem(w, http.StatusNotFound, "path %s, want /message", r.URL.Path)
		return "", false
	}
	if r.Header.Get("X-Gotify-Key") != GotifyToken || r.URL.Query().Has("token") {
		s.problem(w, http.StatusUnauthorized, "X-Gotify-Key %q, token in the query %t", r.Header.Get("X-Gotify-Key"), r.URL.Query().Has("token"))
		return "", false
	}
	if str("message") == "" {
		s.problem(w, http.StatusBadRequest, "empty message")
		return "", false
	}
	if _, ok := body["priority"].(float64); !ok {
		s.problem(w, http.StatusBadRequest, "priority %v is not a number", body["priority"])
		return "", false
	}
	return str("title"), true
}

// checkGeneric checks a request to the generic fake: the receiver's own path, its key in
// X-Api-Key, the JSON template with messagekey=text and the $source extra field.
func (s *Server) checkGeneric(w http.ResponseWriter, r *http.Request, body map[string]any) (string, bool) {
	str := func(k string) string { v, _ := body[k].(string); return v }
	if r.URL.Path != GenericPath {
		s.problem(w, http.StatusNotFound, "path %s, want %s", r.URL.Path, GenericPath)
		return "", false
	}
	if r.Header.Get("X-Api-Key") != GenericKey {
		s.problem(w, http.StatusUnauthorized, "X-Api-Key %q", r.Header.Get("X-Api-Key"))
		return "", false
	}
	if str("text") == "" || str("source") != "lookout" {
		s.problem(w, http.StatusBadRequest, "text %q, source %q", str("text"), str("source"))
		return "", false
	}
	return str("title"), true
}

// checkTeams checks a request to the teams fake: POST
// /webhookb2/{group}@{tenant}/IncomingWebhook/{id}/{owner}/{extra} with a MessageCard.
func (s *Server) checkTeams(w http.ResponseWriter, r *http.Request, body map[string]any) (string, bool) {
	str := func(k string) string { v, _ := body[k].(string); return v }
	if r.URL.Path != teamsPath {
		s.problem(w, http.StatusNotFound, "path %s, want the webhook's", r.URL.Path)
		return "", false
	}
	sections, _ := body["sections"].([]any)
	if str("@type") != "MessageCard" || str("summary") == "" && str("text") == "" || len(sections) == 0 {
		s.problem(w, http.StatusBadRequest, "Summary or Text is required (@type %q, %d sections)", str("@type"), len(sections))
		return "", false
	}
	return str("title"), true
}

// checkMattermost checks a request to the mattermost fake: POST /hooks/{token} with {"text",
// "username", "channel", ...}.
func (s *Server) checkMattermost(w http.ResponseWriter, r *http.Request, body map[string]any) (string, bool) {
	str := func(k string) string { v, _ := body[k].(string); return v }
	if r.URL.Path != "/hooks/"+MattermostHook {
		s.problem(w, http.StatusBadRequest, "path %s: invalid webhook", r.URL.Path)
		return "", false
	}
	if str("text") == "" || str("channel") != "alerts" || str("username") != "lookout-bot" {
		s.problem(w, http.StatusBadRequest, "text %q, channel %q, username %q", str("text"), str("channel"), str("username"))
		return "", false
	}
	return firstLine(str("text")), true
}

// checkRocketchat checks a request to the rocketchat fake: POST /hooks/{token a}/{token b} with
// {"text", "username", "channel"}.
func (s *Server) checkRocketchat(w http.ResponseWriter, r *http.Request, body map[string]any) (string, bool) {
	str := func(k string) string { v, _ := body[k].(string); return v }
	if r.URL.Path != "/hooks/"+RocketTokenA+"/"+RocketTokenB {
		s.problem(w, http.StatusNotFound, "path %s: invalid integration", r.URL.Path)
		return "", false
	}
	if str("text") == "" || str("channel") != "#alerts" || str("username") != "lookout-bot" {
		s.problem(w, http.StatusBadRequest, "text %q, channel %q, username %q", str("text"), str("channel"), str("username"))
		return "", false
	}
	return firstLine(str("text")), true
}

// checkGooglechat checks a request to the googlechat fake: POST
// /v1/spaces/{space}/messages?key=&token= with {"text"}.
func (s *Server) checkGooglechat(w http.ResponseWriter, r *http.Request, body map[string]any) (string, bool) {
	str := func(k string) string { v, _ := body[k].(string); return v }
	if r.URL.Path != "/v1/spaces/"+ChatSpace+"/messages" {
		s.problem(w, http.StatusNotFound, "path %s, want the space's messages", r.URL.Path)
		return "", false
	}
	if q := r.URL.Query(); q.Get("key") != ChatKey || q.Get("token") != ChatToken {
		s.problem(w, http.StatusUnauthorized, "key %q, token %q", q.Get("key"), q.Get("token"))
		return "", false
	}
	return s.messageTitle(w, str("text"))
}

// checkZulip checks a request to the zulip fake: POST /api/v1/messages, basic auth bot email:API
// key, a form with type=stream, to, topic, content.
func (s *Server) checkZulip(w http.ResponseWriter, r *http.Request, body map[string]any) (string, bool) {
	str := func(k string) string { v, _ := body[k].(string); return v }
	if r.URL.Path != "/api/v1/messages" {
		s.problem(w, http.StatusNotFound, "path %s, want /api/v1/messages", r.URL.Path)
		return "", false
	}
	if u, p, ok := r.BasicAuth(); !ok || u != ZulipBot || p != ZulipKey {
		s.problem(w, http.StatusUnauthorized, "Invalid API key (basic auth %q)", u)
		return "", false
	}
	if str("type") != "stream" || str("to") != "alerts" || str("topic") == "" || str("content") == "" {
		s.problem(w, http.StatusBadRequest, "type %q, to %q, topic %q, content %q", str("type"), str("to"), str("topic"), str("content"))
		return "", false
	}
	return str("topic"), true
}

// checkMatrix checks a request to the matrix fake: PUT
// /_matrix/client/v3/rooms/{room}/send/m.room.message/{txn} with the access token as Bearer and
// {"msgtype", "body"}.
func (s *Server) checkMatrix(w http.ResponseWriter, r *http.Request, body map[string]any) (string, bool) {
	str := func(k string) string { v, _ := body[k].(string); return v }
	parts := strings.Split(strings.TrimPrefix(r.URL.Path, "/_matrix/client/v3/rooms/"), "/")
	if !strings.HasPrefix(r.URL.Path, "/_matrix/client/v3/rooms/") || len(parts) != 4 || parts[1] != "send" || parts[2] != "m.room.message" || parts[3] == "" {
		s.problem(w, http.StatusNotFound, "path %s: M_UNRECOGNIZED", r.URL.Path)
		return "", false
	}
	if r.Header.Get("Authorization") != "Bearer "+MatrixToken {
		s.problem(w, http.StatusUnauthorized, "M_UNKNOWN_TOKEN: Authorization %q", r.Header.Get("Authorization"))
		return "", false
	}
	if parts[0] != MatrixRoom && parts[0] != MatrixRoom2 {
		s.problem(w, http.StatusForbidden, "M_FORBIDDEN: not in room %s", parts[0])
		return "", false
	}
	if str("msgtype") != "m.text" || str("body") == "" {
		s.problem(w, http.StatusBadRequest, "M_BAD_JSON: msgtype %q, body %q", str("msgtype"), str("body"))
		return "", false
	}
	title, _, _ := strings.Cut(str("body"), "\n")
	return title, true
}

// checkPushover checks a request to the pushover fake: POST /1/messages.json, a form with token,
// user, message.
func (s *Server) checkPushover(w http.ResponseWriter, r *http.Request, body map[string]any) (string, bool) {
	str := func(k string) string { v, _ := body[k].(string); return v }
	if r.URL.Path != "/1/messages.json" {
		s.problem(w, http.StatusNotFound, "path %s, want /1/messages.json", r.URL.Path)
		return "", false
	}
	if str("token") != PushoverToken || str("user") != PushoverUser {
		s.problem(w, http.StatusBadRequest, "application token or user key is invalid")
		return "", false
	}
	if str("message") == "" || len([]rune(str("message"))) > 1024 || str("device") != "phone,tablet" {
		s.problem(w, http.StatusBadRequest, "message %q, device %q", str("message"), str("device"))
		return "", false
	}
	return str("title"), true
}

// fail answers status with the service's error body.
func (s *Server) fail(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	var body any
	switch s.Service {
	case "ntfy":
		if status == http.StatusTooManyRequests {
			msg = "limit reached: too many requests, please be nice"
		}
		body = map[string]any{"code": status*100 + 1, "http": status, "error": msg}
	case "discord":
		if status == http.StatusTooManyRequests {
			w.Header().Set("Retry-After", strconv.Itoa(s.RetryAfter))
			body = map[string]any{"message": "You are being rate limited.", "retry_after": float64(s.RetryAfter), "global": false}
		} else {
			body = map[string]any{"message": msg, "code": 10015}
		}
	case "telegram":
		b := map[string]any{"ok": false, "error_code": status, "description": http.StatusText(status) + ": " + msg}
		if status == http.StatusTooManyRequests {
			b["description"] = fmt.Sprintf("Too Many Requests: retry after %d", s.RetryAfter)
			b["parameters"] = map[string]any{"retry_after": s.RetryAfter}
		}
		body = b
	case "gotify":
		body = map[string]any{"error": http.StatusText(status), "errorCode": status, "errorDescription": msg}
	case "generic":
		if status == http.StatusTooManyRequests {
			w.Header().Set("Retry-After", strconv.Itoa(s.RetryAfter))
		}
		body = map[string]any{"error": msg}
	case "teams": // text, not JSON
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.WriteHeader(status)
		if status == http.StatusTooManyRequests {
			msg = "Microsoft Teams endpoint returned HTTP error 429 with ContextId tcid=0,server=msgapi-production-eus-azsc2-4-170,cv=deadbeef.0"
		} else if status == http.StatusBadRequest {
			msg = "Bad payload received by generic incoming webhook. " + msg
		}
		_, _ = io.WriteString(w, msg)
		return
	case "rocketchat":
		body = map[string]any{"success": false, "error": msg}
	case "zulip":
		b := map[string]any{"result": "error", "msg": msg, "code": "BAD_REQUEST"}
		if status == http.StatusTooManyRequests {
			w.Header().Set("Retry-After", strconv.Itoa(s.RetryAfter))
			b = map[string]any{"result": "error", "msg": "API usage exceeded rate limit", "code": "RATE_LIMIT_HIT", "retry-after": s.RetryAfter}
		}
		body = b
	case "matrix":
		b := map[string]any{"errcode": "M_UNKNOWN", "error": msg}
		if status == http.StatusTooManyRequests {
			b = map[string]any{"errcode": "M_LIMIT_EXCEEDED", "error": "Too Many Requests", "retry_after_ms": s.RetryAfter * 1000}
		}
		body = b
	case "pushover":
		body = map[string]any{"status": 0, "errors": []string{msg}, "request": "5042853c-402d-4a18-abcb-168734a801de"}
	case "googlechat":
		st := map[int]string{400: "INVALID_ARGUMENT", 401: "UNAUTHENTICATED", 403: "PERMISSION_DENIED", 404: "NOT_FOUND",
			429: "RESOURCE_EXHAUSTED", 500: "INTERNAL", 503: "UNAVAILABLE"}[status]
		body = map[string]any{"error": map[string]any{"code": status, "message": msg, "status": st}}
	case "mattermost":
		body = map[string]any{"id": "web.incoming_webhook.error", "message": msg, "detailed_error": "",
			"request_id": "q7a3kx9", "status_code": status}
	}
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(body)
}

// messageTitle checks a message text as Telegram and Google Chat do (not
// empty, at most 4,096 characters) and gives its first line, the title
// lookout put there; a bad text is answered with 400.
func (s *Server) messageTitle(w http.ResponseWriter, text string) (string, bool) {
	if text == "" || len([]rune(text)) > 4096 {
		s.problem(w, http.StatusBadRequest, "text of %d characters", len([]rune(text)))
		return "", false
	}
	return firstLine(text), true
}

// firstLine is text up to its first newline.
func firstLine(text string) string {
	line, _, _ := strings.Cut(text, "\n")
	return line
}
