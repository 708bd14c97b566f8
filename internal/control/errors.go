package control

import (
	"fmt"
	"strings"
)

// NotFoundError is an object that does not exist for the caller: it does
// not exist at all, or it belongs to another owner.
type NotFoundError struct {
	// Kind is watch, source, notification, change or token.
	Kind string
	Name string
	// Hint says what to do instead (optional).
	Hint string
}

func (e *NotFoundError) Error() string {
	msg := fmt.Sprintf("%s %q does not exist", e.Kind, e.Name)
	if e.Hint != "" {
		msg += ": " + e.Hint
	}
	return msg
}

// FieldError is one thing wrong with a request, located by a JSON pointer
// into the request body (Pointer), or naming a query parameter
// (Parameter) or header (Header).
type FieldError struct {
	Pointer   string
	Parameter string
	Header    string
	// Detail says what is wrong and what a correct value looks like.
	Detail string
	// Value is the offending value, echoed back (never a secret).
	Value any
}

// InvalidError is a request that cannot be carried out as sent: each
// FieldError says where and why. Nothing was changed.
type InvalidError struct {
	Errors []FieldError
}

func (e *InvalidError) Error() string {
	parts := make([]string, len(e.Errors))
	for i, f := range e.Errors {
		loc := f.Pointer
		switch {
		case f.Parameter != "":
			loc = "query parameter " + f.Parameter
		case f.Header != "":
			loc = "header " + f.Header
		}
		parts[i] = loc + ": " + f.Detail
	}
	return "invalid request: " + strings.Join(parts, "; ")
}

// Invalid returns an InvalidError with one error at a body pointer.
func Invalid(pointer, format string, args ...any) *InvalidError {
	return &InvalidError{Errors: []FieldError{{Pointer: pointer, Detail: fmt.Sprintf(format, args...)}}}
}

// InvalidParameter returns an InvalidError about a query parameter.
func InvalidParameter(name string, value any, format string, args ...any) *InvalidError {
	return &InvalidError{Errors: []FieldError{{Parameter: name, Value: value, Detail: fmt.Sprintf(format, args...)}}}
}

// ConflictError is a change that collides with the state of an object:
// it exists already, or a configuration file manages it.
type ConflictError struct {
	Detail string
	// Pointer locates the field that collides, when one does.
	Pointer string
}

func (e *ConflictError) Error() string { return e.Detail }

// LimitError is a create past one of the owner's limits.
type LimitError struct {
	// What is limited: watches, sources, model_calls_per_day.
	What  string
	Limit int
	// Pointer locates the field of the request that would pass it.
	Pointer string
	// Detail replaces the default message when set.
	Detail string
}

func (e *LimitError) Error() string {
	if e.Detail != "" {
		return e.Detail
	}
	return fmt.Sprintf("you have reached your limit of %d %s: delete one you no longer need, or ask an operator to raise api.limits.%s", e.Limit, strings.ReplaceAll(e.What, "_", " "), e.What)
}

// ForbiddenError is an action the caller's scope does not allow on an
// object it can see (an admin-only action with a user token).
type ForbiddenError struct{ Detail string }

func (e *ForbiddenError) Error() string { return e.Detail }

// UnavailableError is a request that needs another deployment which did
// not answer in time (a dry run with the model waits for an evaluator).
type UnavailableError struct{ Detail string }

func (e *UnavailableError) Error() string { return e.Detail }
