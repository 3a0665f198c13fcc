package signin

import (
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/tabletop-relay/relay/audit"
	"github.com/tabletop-relay/relay/netlimit"
	"github.com/tabletop-relay/relay/server/keys"
)

// Paths the service answers itself.
const (
	// PathSession signs in (POST), tells the session (GET) and signs out
	// (DELETE).
	PathSession = "/console/session"
	// PathSignup makes an account (POST), as --signup allows.
	PathSignup = "/signup"
)

// CookieName is the session cookie's name.
const CookieName = "relay_session"

// CSRFHeader carries a session's CSRF token on its writes.
const CSRFHeader = "X-CSRF-Token"

// maxBodyBytes bounds the bodies of sign-in and sign-up.
const maxBodyBytes = 16 << 10

// Handler serves the sign-in and sign-up paths and hands every other
// request to next. A request that brings the session cookie and no API
// key goes on with the session's token as its API key, once a write
// (any method but GET, HEAD and OPTIONS) has shown the session's CSRF
// token; a write without it is refused with 403 before anything runs.
func (s *Service) Handler(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case PathSession:
			s.serveSession(w, r)
			return
		case PathSignup:
			s.serveSignup(w, r)
			return
		}
		if r.Header.Get("X-Api-Key") == "" {
			if c, err := r.Cookie(CookieName); err == nil && IsToken(c.Value) {
				if isWrite(r.Method) && !csrfMatches(r, c.Value) {
					writeError(w, http.StatusForbidden, "A session's writes need its CSRF token in the "+CSRFHeader+" header")
					return
				}
				r.Header.Set("X-Api-Key", c.Value)
			}
		}
		next.ServeHTTP(w, r)
	})
}

// isWrite reports whether a method may change anything.
func isWrite(method string) bool {
	switch method {
	case http.MethodGet, http.MethodHead, http.MethodOptions:
		return false
	}
	return true
}

func csrfMatches(r *http.Request, token string) bool {
	got := r.Header.Get(CSRFHeader)
	return got != "" && subtle.ConstantTimeCompare([]byte(got), []byte(CSRFToken(token))) == 1
}

// sessionAnswer is what the console is told of its session.
type sessionAnswer struct {
	Account     accountAnswer `json:"account"`
	CSRFToken   string        `json:"csrfToken"`
	IdleTimeout int64         `json:"idleTimeoutSeconds"`
}

type accountAnswer struct {
	ID        string `json:"id"`
	Name      string `json:"name"`
	CreatedAt string `json:"createdAt,omitempty"`
	Operator  bool   `json:"operator"`
}

func describe(a keys.Account) accountAnswer {
	out := accountAnswer{ID: a.ID, Name: a.Name, Operator: a.ID == keys.OperatorAccount}
	if !a.CreatedAt.IsZero() {
		out.CreatedAt = a.CreatedAt.UTC().Format(time.RFC3339)
	}
	return out
}

// serveSession signs in, tells the session, or signs out.
func (s *Service) serveSession(w http.ResponseWriter, r *http.Request) {
	addr := netlimit.AddressKey(r.RemoteAddr)
	switch r.Method {
	case http.MethodPost:
		var body struct {
			Name     string `json:"name"`
			Password string `json:"password"`
		}
		if !readJSON(w, r, &body) {
			return
		}
		token, acct, err := s.SignIn(r.Context(), body.Name, body.Password, addr)
		if err != nil {
			// The name tried is kept (cut short), never the password;
			// a refused name belongs to no account, so only the
			// operator sees the record.
			audit.Record(r.Context(), audit.Entry{Action: audit.ActionSignIn, Target: truncateName(body.Name),
				Outcome: audit.OutcomeRefused, Detail: err.Error()})
			s.writeErr(w, err)
			return
		}
		audit.Record(r.Context(), audit.Entry{Account: acct.ID, Action: audit.ActionSignIn, Target: acct.ID, Outcome: audit.OutcomeOK})
		http.SetCookie(w, s.cookie(r, token, false))
		writeJSON(w, http.StatusOK, sessionAnswer{Account: describe(acct), CSRFToken: CSRFToken(token), IdleTimeout: int64(s.cfg.IdleTimeout / time.Second)})
	case http.MethodGet, http.MethodHead:
		c, err := r.Cookie(CookieName)
		if err != nil || !IsToken(c.Value) {
			writeError(w, http.StatusUnauthorized, "Not signed in")
			return
		}
		key, err := s.Authenticate(r.Context(), c.Value)
		if err != nil {
			http.SetCookie(w, s.cookie(r, "", true))
			s.writeErr(w, err)
			return
		}
		acct, err := s.cfg.Accounts.GetAccount(r.Context(), key.Account())
		if err != nil {
			s.writeErr(w, err)
			return
		}
		writeJSON(w, http.StatusOK, sessionAnswer{Account: describe(acct), CSRFToken: CSRFToken(c.Value), IdleTimeout: int64(s.cfg.IdleTimeout / time.Second)})
	case http.MethodDelete:
		c, err := r.Cookie(CookieName)
		if err == nil && IsToken(c.Value) {
			if !csrfMatches(r, c.Value) {
				writeError(w, http.StatusForbidden, "A session's writes need its CSRF token in the "+CSRFHeader+" header")
				return
			}
			key, authErr := s.Authenticate(r.Context(), c.Value)
			if err := s.SignOut(r.Context(), c.Value); err != nil {
				s.writeErr(w, err)
				return
			}
			if authErr == nil {
				audit.Record(r.Context(), audit.Entry{Account: key.Account(), Action: audit.ActionSignOut, Target: key.Account(), Outcome: audit.OutcomeOK})
			}
		}
		http.SetCookie(w, s.cookie(r, "", true))
		writeJSON(w, http.StatusOK, map[string]bool{"signedOut": true})
	default:
		w.Header().Set("Allow", "GET, HEAD, POST, DELETE")
		writeError(w, http.StatusMethodNotAllowed, "Method not allowed: "+r.Method+" "+PathSession)
	}
}

// cookie is the session cookie of token, or the one that removes it.
func (s *Service) cookie(r *http.Request, token string, remove bool) *http.Cookie {
	c := &http.Cookie{Name: CookieName, Value: token, Path: "/", HttpOnly: true, SameSite: http.SameSiteStrictMode,
		Secure: s.cfg.SecureCookies || r.TLS != nil}
	if remove {
		c.Value, c.MaxAge = "", -1
	}
	return c
}

// serveSignup makes an account, as --signup allows.
func (s *Service) serveSignup(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", "POST")
		writeError(w, http.StatusMethodNotAllowed, "Method not allowed: "+r.Method+" "+PathSignup)
		return
	}
	var body struct {
		Name     string `json:"name"`
		Password string `json:"password"`
		Invite   string `json:"invite"`
	}
	if !readJSON(w, r, &body) {
		return
	}
	res, err := s.SignUp(r.Context(), body.Name, body.Password, body.Invite, netlimit.AddressKey(r.RemoteAddr))
	if err != nil {
		audit.Record(r.Context(), audit.Entry{Action: audit.ActionSignUp, Target: truncateName(body.Name),
			Outcome: audit.OutcomeRefused, Detail: err.Error()})
		s.writeErr(w, err)
		return
	}
	audit.Record(r.Context(), audit.Entry{Account: res.Account.ID, Action: audit.ActionSignUp, Target: res.Account.ID,
		Outcome: audit.OutcomeOK, Detail: fmt.Sprintf("name %q", res.Account.Name)})
	writeJSON(w, http.StatusCreated, map[string]any{"account": describe(res.Account), "key": res.Key})
}

// readJSON reads a JSON object body of at most maxBodyBytes, answering
// 400 (or 415) itself when it cannot.
func readJSON(w http.ResponseWriter, r *http.Request, v any) bool {
	// A JSON content type cannot be sent by a plain form of another
	// site, so no other site can sign a visitor in or up unseen.
	if mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); mt != "application/json" {
		writeError(w, http.StatusUnsupportedMediaType, "The body must be JSON, sent with Content-Type: application/json")
		return false
	}
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxBodyBytes))
	if err := dec.Decode(v); err != nil {
		var typeErr *json.UnmarshalTypeError
		var tooBig *http.MaxBytesError
		switch {
		case errors.As(err, &typeErr) && typeErr.Field != "":
			writeError(w, http.StatusBadRequest, "'"+typeErr.Field+"' must be a string")
		case errors.As(err, &tooBig):
			writeError(w, http.StatusRequestEntityTooLarge, "The request body is larger than "+strconv.Itoa(maxBodyBytes)+" bytes")
		default:
			writeError(w, http.StatusBadRequest, "The request body must be a JSON object")
		}
		return false
	}
	return true
}

// writeErr answers err with its status: a refusal's own, the account
// store's (400, 403, 404, 409), else 500 with the cause logged.
func (s *Service) writeErr(w http.ResponseWriter, err error) {
	var ref *refusal
	var wait *waitRefusal
	switch {
	case errors.As(err, &wait):
		w.Header().Set("Retry-After", strconv.Itoa(wait.seconds))
		writeError(w, wait.httpStatus, wait.msg)
	case errors.As(err, &ref):
		writeError(w, ref.httpStatus, ref.msg)
	case errors.Is(err, keys.ErrUnknown):
		writeError(w, http.StatusUnauthorized, err.Error())
	case errors.Is(err, keys.ErrAccountInvalid):
		writeError(w, http.StatusBadRequest, err.Error())
	case errors.Is(err, keys.ErrAccountExists):
		writeError(w, http.StatusConflict, err.Error())
	case errors.Is(err, keys.ErrSuspended):
		writeError(w, http.StatusForbidden, err.Error())
	case errors.Is(err, keys.ErrAccountNotFound):
		writeError(w, http.StatusNotFound, err.Error())
	default:
		s.cfg.Log.Error("sign-in state failed", "error", err)
		writeError(w, http.StatusInternalServerError, "Internal error")
	}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, _ := json.Marshal(v)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

func writeError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, map[string]string{"error": msg})
}

// truncateName bounds a name a caller sent, for a record of its refusal.
func truncateName(name string) string {
	const limit = 64
	if len(name) <= limit {
		return name
	}
	return strings.ToValidUTF8(name[:limit], "") + "…"
}
