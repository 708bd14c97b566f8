package semantic

import (
	"fmt"

	"github.com/ollama/ollama/api"

	"github.com/lookout-dev/lookout/internal/modelspec"
)

// messages returns the chat messages of q for in and the input hash.
func messages(q *modelspec.Question, in modelspec.Input) ([]api.Message, string) {
	user, hash := in.UserMessage()
	return []api.Message{{Role: "system", Content: q.System()}, {Role: "user", Content: user}}, hash
}

// correction is the follow-up sent after a malformed answer.
func correction(err error) string {
	return fmt.Sprintf("That answer is not valid (%v). Reply again with only one JSON object that matches the schema.", err)
}
