package control

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/lookout-dev/lookout/internal/definitions"
	"github.com/lookout-dev/lookout/internal/notify/channel"
	"github.com/lookout-dev/lookout/internal/secrets"
)

// A watch's own channel (docs/api.md#your-own-channel): the watch's
// "channel": {"url": "ntfy://..."} is a notification URL of the url sink
// (docs/delivery.md#url), checked as the url sink checks it and, for the
// host it connects to, by the egress policy of untrusted URLs, as a
// watch's own webhook is. The URL is a credential: it is stored sealed in
// channel.secret, and channel.url keeps it with its secrets redacted,
// which is what the API shows (channel.secret shows as [redacted]).

// prepareChannel checks the channel of watch definition def (a create, or
// an update of prior) and stores its URL sealed. An update that sends the
// channel back as shown keeps the stored URL. pointer locates the watch in
// the request.
func (s *Service) prepareChannel(ctx context.Context, source string, def, prior json.RawMessage, pointer string) (json.RawMessage, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(def, &m); err != nil {
		return def, nil // the validation says what is wrong
	}
	raw, ok := m["channel"]
	if !ok || string(raw) == "null" {
		return def, nil
	}
	var ch map[string]any
	if err := json.Unmarshal(raw, &ch); err != nil {
		return nil, Invalid(pointer+"/channel", `must be an object: {"url": "ntfy://ntfy.sh/<topic>"}`)
	}
	for k := range ch {
		if k != "url" && k != "secret" {
			return nil, Invalid(pointer+"/channel/"+k, "is not a key of a watch's channel (it has url)")
		}
	}
	u, _ := ch["url"].(string)
	sealed, _ := ch["secret"].(string)
	if u == "" {
		return nil, Invalid(pointer+"/channel/url", "is required: a notification URL such as ntfy://ntfy.sh/<topic> or discord://<token>@<webhook id> (docs/delivery.md#url)")
	}
	if prior != nil && (sealed == "" || sealed == definitions.Redacted) {
		var p struct {
			Channel json.RawMessage `json:"channel"`
		}
		var pc struct{ URL, Secret string }
		if json.Unmarshal(prior, &p) == nil && json.Unmarshal(p.Channel, &pc) == nil && pc.URL == u && definitions.IsSealed(pc.Secret) {
			m["channel"] = p.Channel // sent back as shown: the stored URL stays
			return encodeWatch(m)
		}
	}
	if sealed != "" {
		return nil, Invalid(pointer+"/channel/secret", "is set by lookout (the URL, sealed): give only url")
	}
	c, err := channel.Parse(u)
	if err != nil {
		return nil, Invalid(pointer+"/channel/url", "%v", err) // Parse's errors never quote the URL's secrets
	}
	if err := CheckURL(ctx, s.resolver, c.Endpoint(), pointer+"/channel/url", s.conf.AllowPrivate); err != nil {
		return nil, err
	}
	if s.conf.Keys == nil {
		return nil, Invalid(pointer+"/channel", "this lookout cannot store channel URLs: the operator has not set %s; name one of the operator's sinks in notify instead", secrets.KeyEnv)
	}
	var name struct {
		Name string `json:"name"`
	}
	_ = json.Unmarshal(def, &name)
	box, err := s.conf.Keys.Seal([]byte(u), definitions.ChannelContext(source, name.Name))
	if err != nil {
		return nil, fmt.Errorf("seal the channel URL: %w", err)
	}
	if m["channel"], err = json.Marshal(map[string]string{"url": c.Redacted(), "secret": definitions.SealedRef(box)}); err != nil {
		return nil, fmt.Errorf("encode channel: %w", err)
	}
	return encodeWatch(m)
}

func encodeWatch(m map[string]json.RawMessage) (json.RawMessage, error) {
	out, err := json.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("encode watch: %w", err)
	}
	return out, nil
}
