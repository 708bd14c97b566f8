package mcp

import (
	"context"
	"errors"
	"fmt"
	"strings"

	mcpsdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/lookout-dev/lookout/internal/control"
	"github.com/lookout-dev/lookout/internal/idempotency"
)

// Tool errors: what a tool call could not do, as an isError result whose
// text a model reads to correct its next call. The first line names the
// kind of problem (the same words as the HTTP API's problem types,
// docs/api.md#errors); for invalid arguments each further line is
// "<JSON pointer>: <what is wrong>", the pointer naming the argument and
// the detail being the HTTP API's text for the same field.
const (
	errValidation  = "invalid arguments"
	errNotFound    = "not found"
	errConflict    = "conflict"
	errLimit       = "limit exceeded"
	errForbidden   = "forbidden"
	errUnavailable = "unavailable"
	errInternal    = "internal error"
)

// toolError turns err into the isError result of a tool call. Errors of
// the control layer become their message; anything else is logged under
// the call's request id and answered without its text.
func (s *Server) toolError(ctx context.Context, p control.Principal, tool string, err error) *mcpsdk.CallToolResult {
	var (
		nf  *control.NotFoundError
		inv *control.InvalidError
		cf  *control.ConflictError
		lim *control.LimitError
		fb  *control.ForbiddenError
		un  *control.UnavailableError
		mm  *idempotency.MismatchError
	)
	var text string
	switch {
	case errors.As(err, &inv):
		text = invalidText(inv)
	case errors.As(err, &nf):
		text = notFoundText(nf)
	case errors.As(err, &cf):
		text = errConflict + ": " + located(cf.Pointer, cf.Detail)
	case errors.As(err, &lim):
		text = errLimit + ": " + located(lim.Pointer, lim.Error())
	case errors.As(err, &fb):
		text = errForbidden + ": " + fb.Detail
	case errors.As(err, &un):
		text = errUnavailable + ": " + un.Detail
	case errors.As(err, &mm):
		text = errValidation + " (nothing was changed):\n/idempotency_key: " + mm.Error()
	default:
		if ctx.Err() != nil {
			text = errInternal + ": the call was cancelled"
			break
		}
		s.logger.Error("tool failed", "tool", tool, "owner", p.Owner, "request_id", p.RequestID, "error", err)
		text = fmt.Sprintf("%s: lookout failed; the error was logged with request id %s: retry later, or tell an operator that id", errInternal, p.RequestID)
	}
	res := &mcpsdk.CallToolResult{}
	res.SetError(errors.New(text))
	return res
}

// invalidText writes an InvalidError one field a line.
func invalidText(inv *control.InvalidError) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s (%d problem(s); each line names the argument as a JSON pointer and what to change; nothing was changed):", errValidation, len(inv.Errors))
	for _, f := range inv.Errors {
		b.WriteString("\n")
		b.WriteString(located(fieldPointer(f), f.Detail))
	}
	return b.String()
}

// fieldPointer locates a FieldError among a tool's arguments: a body
// pointer as it is, a query parameter of the HTTP API as the argument of
// the same name.
func fieldPointer(f control.FieldError) string {
	switch {
	case f.Pointer != "":
		return f.Pointer
	case f.Parameter != "":
		return "/" + f.Parameter
	case f.Header == "Idempotency-Key":
		return "/idempotency_key"
	}
	return ""
}

func located(ptr, detail string) string {
	if ptr == "" {
		return detail
	}
	return ptr + ": " + detail
}

// notFoundText says that an object does not exist for the caller and
// which tool finds the ones that do (the control layer's hints name the
// HTTP API's endpoints).
func notFoundText(nf *control.NotFoundError) string {
	text := fmt.Sprintf("%s: %s %q does not exist for you (it does not exist, or it is another user's)", errNotFound, nf.Kind, nf.Name)
	switch nf.Kind {
	case "source":
		text += `: call describe_source with connector (http, rss, github, notion, web, imap, file or postgres) to see the sources of that kind you can watch`
	case "watch":
		text += ": call list_watches to see your watches (a watch is named by its source and its name)"
	case "change":
		text += ": pass the change_id of one of your notifications (recent_notifications)"
	}
	return text
}
