package link

import (
	"context"
	"encoding/json"
	"net/http"

	"github.com/tabletop-relay/relay/audit"
	"github.com/tabletop-relay/relay/server/keys"
)

// auditNote is what a handler of the pairing, key-request and
// pair-request endpoints tells the audit record of its request: who acted
// and on what. The record itself is written by [Service.audited] once the
// answer is known, whichever way the handler answered. A handler that
// clears action leaves its request unrecorded (a poll that delivered
// nothing, a successful read).
type auditNote struct {
	action  string
	account string
	keyID   string
	target  string
	detail  string
}

// auditNoteKey is the context key of a request's *auditNote.
type auditNoteKey struct{}

// noteOf returns the audit note of the request ctx belongs to; a request
// that is not audited gets a note nobody reads.
func noteOf(ctx context.Context) *auditNote {
	if n, ok := ctx.Value(auditNoteKey{}).(*auditNote); ok {
		return n
	}
	return &auditNote{}
}

// accountOrOperator is the account of a world record: "" stands for the
// operator's.
func accountOrOperator(account string) string {
	if account == "" {
		return keys.OperatorAccount
	}
	return account
}

// auditWriter keeps the status of an answer and, for a refusal, the start
// of its body, whose `error` the record quotes.
type auditWriter struct {
	http.ResponseWriter
	status int
	body   []byte
}

// maxAuditBody bounds what is kept of a refusal's body.
const maxAuditBody = 1 << 10

func (w *auditWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *auditWriter) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	if w.status >= 400 && len(w.body) < maxAuditBody {
		w.body = append(w.body, p[:min(len(p), maxAuditBody-len(w.body))]...)
	}
	return w.ResponseWriter.Write(p)
}

// audited serves r with serve and records the outcome as action in the
// audit log the request's context carries (see package audit); without
// one it only serves. Preflight requests are not actions.
func (s *Service) audited(w http.ResponseWriter, r *http.Request, action string, serve func(http.ResponseWriter, *http.Request)) {
	if audit.RecorderFrom(r.Context()) == nil || r.Method == http.MethodOptions {
		serve(w, r)
		return
	}
	note := &auditNote{action: action}
	aw := &auditWriter{ResponseWriter: w}
	serve(aw, r.WithContext(context.WithValue(r.Context(), auditNoteKey{}, note)))
	if note.action == "" || aw.status == 0 {
		return
	}
	e := audit.Entry{Action: note.action, Account: note.account, KeyID: note.keyID, Target: note.target, Detail: note.detail}
	switch {
	case aw.status < 400:
		e.Outcome = audit.OutcomeOK
	case aw.status >= 500 && aw.status != http.StatusServiceUnavailable:
		e.Outcome = audit.OutcomeFailed
	default:
		e.Outcome = audit.OutcomeRefused
		var body struct {
			Error string `json:"error"`
		}
		if json.Unmarshal(aw.body, &body) == nil && body.Error != "" {
			e.Detail = body.Error
		} else {
			e.Detail = http.StatusText(aw.status)
		}
	}
	audit.Record(r.Context(), e)
}

// requestAction is the audit action of a step of a key request or a pair
// request.
func requestAction(kind RequestKind, step string) string {
	if kind == KindPairRequest {
		return "pair-request." + step
	}
	return "key-request." + step
}
