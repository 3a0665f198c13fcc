package link

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/tabletop-relay/relay/audit"
	"github.com/tabletop-relay/relay/server/keys"
)

// Paths of the key requests and pair requests.
const (
	PathKeyRequest         = "/auth/key-request"
	PathPairRequest        = "/auth/pair-request"
	PathKeyRequestExchange = PathKeyRequest + "/exchange"
)

// Refusal is a refusal of an approval by the rest of the relay: the HTTP
// status to answer and the message naming what was refused.
type Refusal struct {
	Status int
	Msg    string
}

func (e *Refusal) Error() string { return e.Msg }

// KeyGrant is the key an approval of a key request asks the relay to
// create.
type KeyGrant struct {
	Name      string
	Scopes    []string
	ClientIDs []string
	UserID    string
	ExpiresAt time.Time
}

// Approvals is what approving requests needs of the rest of the relay.
// Every method acts with the approver's own API key, through the same
// path as that key's own calls (its authentication, scopes and bindings),
// so that an approval can never grant more than the approver holds. A
// refusal is a *Refusal.
type Approvals interface {
	// Approver authenticates an API key that may approve requests and
	// returns its id and its account's: 401 for a missing or bad key, 403
	// for one that may not approve.
	Approver(ctx context.Context, apiKey string) (keyID, account string, err error)
	// CreateKey creates the key of an approved key request, as
	// `POST /keys` with the approver's key does.
	CreateKey(ctx context.Context, apiKey string, g KeyGrant) (keyID, plaintext string, err error)
	// CreatePairingCode issues the pairing code of an approved pair
	// request, as `POST /pairing-codes` with the approver's key does.
	CreatePairingCode(ctx context.Context, apiKey, clientID string) (string, error)
}

// Bounds of what a request may say, in bytes.
const (
	maxAppNameChars = 100
	maxAppTextBytes = 2048
	maxRequestIDs   = 64
)

// ownsRequestPath reports whether path is one of the requests' paths.
func ownsRequestPath(path string) bool {
	for _, p := range []string{PathKeyRequest, PathPairRequest} {
		if path == p || strings.HasPrefix(path, p+"/") {
			return true
		}
	}
	return false
}

// RequestRoute is the route of a request's path with its code replaced by
// {code}, such as /auth/key-request/{code}/status, for logs and metrics,
// which must show neither a code nor an unbounded set of paths; false for
// a path that is not a request's.
func RequestRoute(path string) (string, bool) {
	if !ownsRequestPath(path) {
		return "", false
	}
	if path == PathKeyRequestExchange {
		return path, true
	}
	base := PathKeyRequest
	if strings.HasPrefix(path, PathPairRequest) {
		base = PathPairRequest
	}
	rest := strings.Trim(strings.TrimPrefix(path, base), "/")
	if rest == "" {
		return base, true
	}
	_, action, _ := strings.Cut(rest, "/")
	switch action {
	case "":
		return base + "/{code}", true
	case "status", "approve", "deny":
		return base + "/{code}/" + action, true
	}
	return base + "/{code}/other", true
}

// serveRequests routes the requests' paths.
func (s *Service) serveRequests(w http.ResponseWriter, r *http.Request) {
	kind, base := KindKeyRequest, PathKeyRequest
	if strings.HasPrefix(r.URL.Path, PathPairRequest) {
		kind, base = KindPairRequest, PathPairRequest
	}
	if s.requests == nil {
		writeError(w, http.StatusNotFound, "Not found")
		return
	}
	rest := strings.TrimPrefix(strings.TrimPrefix(r.URL.Path, base), "/")
	switch {
	case rest == "":
		if allowMethod(w, r, http.MethodPost) {
			s.audited(w, r, requestAction(kind, "create"), func(w http.ResponseWriter, r *http.Request) { s.serveCreateRequest(w, r, kind) })
		}
		return
	case kind == KindKeyRequest && r.URL.Path == PathKeyRequestExchange:
		if allowMethod(w, r, http.MethodPost) {
			s.audited(w, r, audit.ActionKeyRequestExchange, s.serveExchange)
		}
		return
	}
	code, action, _ := strings.Cut(rest, "/")
	switch action {
	case "":
		if allowApproval(w, r, http.MethodGet) {
			s.audited(w, r, requestAction(kind, "show"), func(w http.ResponseWriter, r *http.Request) { s.serveShowRequest(w, r, kind, code) })
		}
	case "status":
		if allowMethod(w, r, http.MethodGet) {
			// Polls are recorded only when they deliver what an approval
			// granted: the asker polls every few seconds.
			s.audited(w, r, "", func(w http.ResponseWriter, r *http.Request) { s.serveRequestStatus(w, r, kind, code) })
		}
	case "approve", "deny":
		if allowApproval(w, r, http.MethodPost) {
			s.audited(w, r, requestAction(kind, action), func(w http.ResponseWriter, r *http.Request) {
				s.serveDecision(w, r, kind, code, action == "approve")
			})
		}
	default:
		writeError(w, http.StatusNotFound, "Not found")
	}
}

// allowApproval is allowMethod for the endpoints that take an API key:
// their preflight allows its header.
func allowApproval(w http.ResponseWriter, r *http.Request, method string) bool {
	if r.Method == http.MethodOptions {
		w.Header().Set("Access-Control-Allow-Methods", method+", OPTIONS")
		w.Header().Set("Access-Control-Allow-Headers", "Content-Type, x-api-key")
		w.Header().Set("Access-Control-Max-Age", "600")
		w.WriteHeader(http.StatusNoContent)
		return false
	}
	return allowMethod(w, r, method)
}

// notFoundText is the answer for an unknown code of each kind.
func notFoundText(kind RequestKind) string {
	if kind == KindPairRequest {
		return "Pair request not found"
	}
	return "Key request not found"
}

// kindName names the kind in messages.
func kindName(kind RequestKind) string {
	if kind == KindPairRequest {
		return "Pair request"
	}
	return "Key request"
}

// consoleURL is the console's approval page of a request.
func (s *Service) consoleURL(r *http.Request, kind RequestKind, code string) string {
	base := s.publicHTTP
	if base == "" {
		scheme := "http"
		if r.TLS != nil || strings.EqualFold(r.Header.Get("X-Forwarded-Proto"), "https") {
			scheme = "https"
		}
		base = scheme + "://" + r.Host
	}
	return base + "/console/?" + string(kind) + "-request=" + code
}

// keyRequestBody is the body of `POST /auth/key-request`.
type keyRequestBody struct {
	AppName        string   `json:"appName"`
	AppDescription string   `json:"appDescription"`
	AppURL         string   `json:"appUrl"`
	Scopes         []string `json:"scopes"`
	ClientIDs      []string `json:"clientIds"`
	CallbackURL    string   `json:"callbackUrl"`
}

// pairRequestBody is the body of `POST /auth/pair-request`.
type pairRequestBody struct {
	WorldID           string `json:"worldId"`
	WorldTitle        string `json:"worldTitle"`
	SystemID          string `json:"systemId"`
	SystemTitle       string `json:"systemTitle"`
	SystemVersion     string `json:"systemVersion"`
	FoundryVersion    string `json:"foundryVersion"`
	ServerFingerprint string `json:"serverFingerprint"`
}

// checkText refuses a field that is too long or holds control characters.
func checkText(name, value string, max int) error {
	switch {
	case len(value) > max:
		return invalid("'%s' is longer than %d bytes", name, max)
	case !utf8.ValidString(value) || strings.ContainsFunc(value, isControl):
		return invalid("'%s' must be text without control characters", name)
	}
	return nil
}

// checkWebURL refuses a URL that is not an absolute http(s) one, in the
// existing relay's words.
func checkWebURL(name, value string) error {
	if value == "" {
		return nil
	}
	u, err := url.Parse(value)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || len(value) > maxOriginBytes {
		return invalid("Invalid %s: must be an http:// or https:// URL", name)
	}
	return nil
}

// validate checks a key request, naming the first bad parameter.
func (b *keyRequestBody) validate() (Request, error) {
	b.AppName = strings.TrimSpace(b.AppName)
	if b.AppName == "" || len(b.Scopes) == 0 {
		return Request{}, invalid("appName and scopes are required")
	}
	if utf8.RuneCountInString(b.AppName) > maxAppNameChars {
		return Request{}, invalid("'appName' is longer than %d characters", maxAppNameChars)
	}
	for _, f := range []struct{ name, value string }{{"appName", b.AppName}, {"appDescription", b.AppDescription}} {
		if err := checkText(f.name, f.value, maxAppTextBytes); err != nil {
			return Request{}, err
		}
	}
	if err := checkWebURL("appUrl", b.AppURL); err != nil {
		return Request{}, err
	}
	if err := checkWebURL("callbackUrl", b.CallbackURL); err != nil {
		return Request{}, err
	}
	if len(b.Scopes) > len(keys.AllScopes) {
		return Request{}, invalid("'scopes' lists more than the %d scopes there are", len(keys.AllScopes))
	}
	var scopes []string
	for _, sc := range b.Scopes {
		if !keys.ValidScope(sc) {
			return Request{}, invalid("Invalid scope: %s", clip(sc))
		}
		if !slices.Contains(scopes, sc) {
			scopes = append(scopes, sc)
		}
	}
	if len(b.ClientIDs) > maxRequestIDs {
		return Request{}, invalid("'clientIds' lists more than %d worlds", maxRequestIDs)
	}
	for _, c := range b.ClientIDs {
		if !keys.ValidClientID(c) {
			return Request{}, invalid("'clientIds' holds a malformed client id: %s", clip(c))
		}
	}
	return Request{Kind: KindKeyRequest, AppName: b.AppName, AppDescription: b.AppDescription, AppURL: b.AppURL,
		CallbackURL: b.CallbackURL, Scopes: scopes, ClientIDs: slices.Compact(slices.Sorted(slices.Values(b.ClientIDs)))}, nil
}

// validate checks a pair request, naming the first bad parameter.
func (b *pairRequestBody) validate() (Request, error) {
	if strings.TrimSpace(b.WorldID) == "" {
		return Request{}, invalid("worldId is required")
	}
	for _, f := range []struct {
		name, value string
		max         int
	}{
		{"worldId", b.WorldID, maxWorldIDBytes}, {"worldTitle", b.WorldTitle, maxTitleBytes},
		{"systemId", b.SystemID, maxWorldIDBytes}, {"systemTitle", b.SystemTitle, maxTitleBytes},
		{"systemVersion", b.SystemVersion, maxInfoBytes}, {"foundryVersion", b.FoundryVersion, maxInfoBytes},
		{"serverFingerprint", b.ServerFingerprint, maxFingerprintBytes},
	} {
		if err := checkText(f.name, f.value, f.max); err != nil {
			return Request{}, err
		}
	}
	return Request{Kind: KindPairRequest, WorldID: b.WorldID, WorldTitle: b.WorldTitle, SystemID: b.SystemID,
		SystemTitle: b.SystemTitle, SystemVersion: b.SystemVersion, FoundryVersion: b.FoundryVersion,
		ServerFingerprint: b.ServerFingerprint}, nil
}

// serveCreateRequest opens a key request or a pair request.
func (s *Service) serveCreateRequest(w http.ResponseWriter, r *http.Request, kind RequestKind) {
	addr := addressOf(r.RemoteAddr)
	if s.requestAttempts != nil {
		if ok, wait := s.requestAttempts.Allow(addr); !ok {
			tooMany(w, wait, strings.ToLower(kindName(kind))+"s")
			return
		}
	}
	var req Request
	var err error
	if kind == KindKeyRequest {
		var b keyRequestBody
		if err = readBody(w, r, &b); err == nil {
			req, err = b.validate()
		}
	} else {
		var b pairRequestBody
		if err = readBody(w, r, &b); err == nil {
			req, err = b.validate()
		}
	}
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	now := s.now().UTC()
	req.Status, req.CreatedAt, req.ExpiresAt = StatusPending, now, now.Add(RequestTTL)
	code, err := newRequest(r.Context(), s.requests, req)
	if err != nil {
		s.requestStoreFailed(w, "request not stored", addr, err)
		return
	}
	s.log.Info(strings.ToLower(kindName(kind))+" opened", "addr", addr, "appName", req.AppName, "worldTitle", req.WorldTitle, "expiresAt", req.ExpiresAt)
	noteOf(r.Context()).detail = requestSummary(req)
	answer := map[string]any{"code": code, "expiresIn": int(RequestTTL / time.Second), "expiresAt": req.ExpiresAt.Format(time.RFC3339)}
	if kind == KindKeyRequest {
		answer["approvalUrl"] = s.consoleURL(r, kind, code)
	} else {
		answer["pairUrl"] = s.consoleURL(r, kind, code)
		answer["upgradeOnly"] = false
	}
	writeJSON(w, http.StatusCreated, answer)
}

// requestStoreFailed answers a failure of the request store: 503 when it
// is full or unavailable for the moment, else as storeFailed.
func (s *Service) requestStoreFailed(w http.ResponseWriter, what, addr string, err error) {
	if errors.Is(err, ErrRequestsFull) {
		s.log.Warn(what, "addr", addr, "error", err)
		w.Header().Set("Retry-After", "60")
		writeError(w, http.StatusServiceUnavailable, "The relay holds as many open requests as it may: try again later")
		return
	}
	s.storeFailed(w, what, addr, err)
}

// requestCode puts the code of a path in canonical form; a malformed one
// is reported unknown.
func requestCode(code string) (string, bool) {
	c, err := url.PathUnescape(code)
	if err != nil {
		return "", false
	}
	return normaliseCode(c)
}

// pollAllowed takes one poll from the address's allowance, answering 429
// when none is left.
func (s *Service) pollAllowed(w http.ResponseWriter, addr string) bool {
	if s.requestPolls == nil {
		return true
	}
	if ok, wait := s.requestPolls.Allow(addr); !ok {
		tooMany(w, wait, "status polls")
		return false
	}
	return true
}

// serveRequestStatus answers the asker's poll. Before approval it tells
// the status only. An approved request hands over what it was granted
// once and is exchanged from then on; a key request of the web flow hands
// its key over only for its exchange code.
func (s *Service) serveRequestStatus(w http.ResponseWriter, r *http.Request, kind RequestKind, raw string) {
	addr := addressOf(r.RemoteAddr)
	if !s.pollAllowed(w, addr) {
		return
	}
	code, ok := requestCode(raw)
	if !ok {
		writeError(w, http.StatusNotFound, notFoundText(kind))
		return
	}
	now := s.now()
	var delivered Request
	_, err := updateRequest(r.Context(), s.requests, kind, code, func(req Request) (Request, error) {
		if req.StatusAt(now) != StatusApproved || req.CallbackURL != "" {
			return req, errNoChange
		}
		delivered = req
		req.Status, req.Secret = StatusExchanged, ""
		return req, nil
	})
	var current Request
	switch {
	case errors.Is(err, ErrUnknownRequest):
		writeError(w, http.StatusNotFound, notFoundText(kind))
		return
	case errors.Is(err, errNoChange):
		current, err = s.readRequest(r.Context(), kind, code)
		if err != nil {
			s.requestStoreFailed(w, "request status failed", addr, err)
			return
		}
	case err != nil:
		s.requestStoreFailed(w, "request status failed", addr, err)
		return
	default:
		s.log.Info(strings.ToLower(kindName(kind))+" delivered", "addr", addr, "keyId", delivered.KeyID)
		n := noteOf(r.Context())
		n.action, n.account, n.target, n.detail = requestAction(kind, "deliver"), delivered.ApprovedAccount, delivered.KeyID, requestSummary(delivered)
		if kind == KindKeyRequest {
			writeJSON(w, http.StatusOK, map[string]any{"status": StatusApproved, "apiKey": delivered.Secret,
				"keyId": delivered.KeyID, "scopes": orEmpty(delivered.GrantedScopes), "clientIds": orEmpty(delivered.GrantedClients)})
		} else {
			writeJSON(w, http.StatusOK, map[string]any{"status": StatusApproved, "pairingCode": delivered.Secret})
		}
		return
	}
	st := current.StatusAt(now)
	if st == statusApproving {
		// The asker learns nothing of an approval under way.
		st = StatusPending
	}
	if st == StatusExpired {
		writeJSON(w, http.StatusGone, map[string]string{"status": st})
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": st})
}

// requestSummary names a request in its audit records, without its code:
// the application of a key request, the world of a pair request.
func requestSummary(req Request) string {
	if req.Kind == KindPairRequest {
		return fmt.Sprintf("world %q (%s)", req.WorldTitle, req.WorldID)
	}
	return fmt.Sprintf("app %q", req.AppName)
}

// errNoChange ends an update that has nothing to write.
var errNoChange = errors.New("no change")

// readRequest reads a request of kind.
func (s *Service) readRequest(ctx context.Context, kind RequestKind, code string) (Request, error) {
	req, _, err := s.requests.Request(ctx, hashOf(code))
	if err == nil && req.Kind != kind {
		err = ErrUnknownRequest
	}
	return req, err
}

func orEmpty(v []string) []string {
	if v == nil {
		return []string{}
	}
	return v
}

// approver authenticates the API key of an approval endpoint, answering
// the refusal itself; failed authentications count against the address.
func (s *Service) approver(w http.ResponseWriter, r *http.Request, addr string) (apiKey, keyID, account string, ok bool) {
	if s.blocked(w, addr) {
		return "", "", "", false
	}
	if s.approvals == nil {
		writeError(w, http.StatusNotFound, "Not found")
		return "", "", "", false
	}
	apiKey = r.Header.Get("x-api-key")
	var err error
	if apiKey == "" {
		// Refused here rather than by the approver, so that a caller who
		// sent a bearer token is told which header to use.
		err = &Refusal{Status: http.StatusUnauthorized, Msg: keys.MissingMessage(r.Header.Get("Authorization"))}
	} else {
		keyID, account, err = s.approvals.Approver(r.Context(), apiKey)
	}
	if err != nil {
		var ref *Refusal
		if errors.As(err, &ref) && ref.Status == http.StatusUnauthorized {
			s.failed(addr)
		}
		s.writeRefusal(w, "approver refused", addr, err)
		return "", "", "", false
	}
	n := noteOf(r.Context())
	n.keyID, n.account = keyID, account
	return apiKey, keyID, account, true
}

// writeRefusal answers a *Refusal with its status and message, and any
// other error as a store failure.
func (s *Service) writeRefusal(w http.ResponseWriter, what, addr string, err error) {
	var ref *Refusal
	if errors.As(err, &ref) {
		if ref.Status == http.StatusTooManyRequests || ref.Status == http.StatusServiceUnavailable {
			w.Header().Set("Retry-After", "1")
		}
		writeError(w, ref.Status, ref.Msg)
		return
	}
	s.requestStoreFailed(w, what, addr, err)
}

// serveShowRequest shows a request to an approver.
func (s *Service) serveShowRequest(w http.ResponseWriter, r *http.Request, kind RequestKind, raw string) {
	addr := addressOf(r.RemoteAddr)
	if _, _, _, ok := s.approver(w, r, addr); !ok {
		return
	}
	code, ok := requestCode(raw)
	if !ok {
		writeError(w, http.StatusNotFound, notFoundText(kind))
		return
	}
	req, err := s.readRequest(r.Context(), kind, code)
	switch {
	case errors.Is(err, ErrUnknownRequest):
		writeError(w, http.StatusNotFound, notFoundText(kind))
		return
	case err != nil:
		s.requestStoreFailed(w, "request not read", addr, err)
		return
	}
	out := map[string]any{"code": code, "status": req.StatusAt(s.now()), "expiresAt": req.ExpiresAt.Format(time.RFC3339),
		"createdAt": req.CreatedAt.Format(time.RFC3339)}
	if kind == KindKeyRequest {
		out["appName"], out["appDescription"], out["appUrl"] = req.AppName, req.AppDescription, req.AppURL
		out["requestedScopes"], out["clientIds"] = orEmpty(req.Scopes), orEmpty(req.ClientIDs)
		out["webFlow"] = req.CallbackURL != ""
	} else {
		out["worldId"], out["worldTitle"], out["systemId"] = req.WorldID, req.WorldTitle, req.SystemID
		out["systemTitle"], out["systemVersion"], out["foundryVersion"] = req.SystemTitle, req.SystemVersion, req.FoundryVersion
	}
	// Reading a request changes nothing: only refusals are recorded.
	noteOf(r.Context()).action = ""
	writeJSON(w, http.StatusOK, out)
}

// decisionBody is the body of an approval: the narrowing of a key
// request, or the world a pair request pairs again.
type decisionBody struct {
	Scopes    []string `json:"scopes"`
	ClientIDs []string `json:"clientIds"`
	UserID    string   `json:"userId"`
	ExpiresAt string   `json:"expiresAt"`
	ClientID  string   `json:"clientId"`
}

// requestGone answers 410 for an expired request, 400 for one that is
// not pending; it reports whether it answered.
func requestGone(w http.ResponseWriter, kind RequestKind, req Request, now time.Time) bool {
	switch req.StatusAt(now) {
	case StatusPending:
		return false
	case StatusExpired:
		writeError(w, http.StatusGone, kindName(kind)+" has expired")
	default:
		writeError(w, http.StatusBadRequest, kindName(kind)+" is not pending")
	}
	return true
}

// serveDecision approves or denies a request. An approval checks that the
// request is pending and that the narrowing is valid, claims the request
// (so that of two approvals at once only one makes a key), makes the key
// or the pairing code with the approver's key, and records the outcome;
// when the making is refused, the request is pending again.
func (s *Service) serveDecision(w http.ResponseWriter, r *http.Request, kind RequestKind, raw string, approve bool) {
	addr := addressOf(r.RemoteAddr)
	apiKey, approverID, approverAccount, ok := s.approver(w, r, addr)
	if !ok {
		return
	}
	code, ok := requestCode(raw)
	if !ok {
		writeError(w, http.StatusNotFound, notFoundText(kind))
		return
	}
	var body decisionBody
	if r.ContentLength != 0 {
		if err := readBody(w, r, &body); err != nil {
			writeError(w, http.StatusBadRequest, err.Error())
			return
		}
	}
	req, err := s.readRequest(r.Context(), kind, code)
	switch {
	case errors.Is(err, ErrUnknownRequest):
		writeError(w, http.StatusNotFound, notFoundText(kind))
		return
	case err != nil:
		s.requestStoreFailed(w, "request not read", addr, err)
		return
	}
	noteOf(r.Context()).detail = requestSummary(req)
	now := s.now()
	if requestGone(w, kind, req, now) {
		return
	}
	if !approve {
		_, err := updateRequest(r.Context(), s.requests, kind, code, func(cur Request) (Request, error) {
			if cur.StatusAt(now) != StatusPending {
				return cur, errNoChange
			}
			cur.Status, cur.ApprovedBy, cur.ApprovedAccount = StatusDenied, approverID, approverAccount
			return cur, nil
		})
		s.finishDecision(w, r, kind, code, addr, err, map[string]any{"success": true, "status": StatusDenied})
		return
	}

	// What the approval grants, checked before anything is made.
	var grant KeyGrant
	if kind == KindKeyRequest {
		if grant, err = narrow(req, body); err != nil {
			writeError(w, http.StatusBadRequest, err.Error())
			return
		}
	} else {
		noteOf(r.Context()).target = body.ClientID
	}
	if kind == KindPairRequest && body.ClientID != "" && !keys.ValidClientID(body.ClientID) {
		writeError(w, http.StatusBadRequest, "'clientId' must be a world's id (letters, digits, '_' and '-', at most 64)")
		return
	}

	// The approval claims the request first, so that of two approvals at
	// once only one makes a key.
	_, err = updateRequest(r.Context(), s.requests, kind, code, func(cur Request) (Request, error) {
		if cur.StatusAt(now) != StatusPending {
			return cur, errNoChange
		}
		cur.Status, cur.ApprovedBy, cur.ApprovedAccount = statusApproving, approverID, approverAccount
		return cur, nil
	})
	if err != nil {
		s.finishDecision(w, r, kind, code, addr, err, nil)
		return
	}
	var secret, keyID, exchange, exchangeHash string
	if kind == KindKeyRequest {
		keyID, secret, err = s.approvals.CreateKey(r.Context(), apiKey, grant)
		if err == nil && req.CallbackURL != "" {
			exchange, exchangeHash, err = newExchangeCode(code)
		}
	} else {
		secret, err = s.approvals.CreatePairingCode(r.Context(), apiKey, body.ClientID)
	}
	_, uerr := updateRequest(r.Context(), s.requests, kind, code, func(cur Request) (Request, error) {
		if err != nil {
			// Nothing was made: the request waits for another decision.
			cur.Status, cur.ApprovedBy, cur.ApprovedAccount = StatusPending, "", ""
			return cur, nil
		}
		cur.Status, cur.Secret, cur.KeyID, cur.ExchangeHash = StatusApproved, secret, keyID, exchangeHash
		cur.GrantedScopes, cur.GrantedClients = grant.Scopes, grant.ClientIDs
		// The asker has a full period from now to fetch it.
		cur.ExpiresAt = s.now().UTC().Add(RequestTTL)
		return cur, nil
	})
	if err != nil {
		s.writeRefusal(w, "approval refused", addr, err)
		return
	}
	if uerr != nil {
		s.requestStoreFailed(w, "approval not recorded", addr, uerr)
		return
	}
	s.log.Info(strings.ToLower(kindName(kind))+" approved", "addr", addr, "approvedBy", approverID, "keyId", keyID)
	noteOf(r.Context()).target = keyID
	answer := map[string]any{"success": true, "status": StatusApproved}
	if kind == KindKeyRequest {
		answer["keyId"] = keyID
		if exchange != "" {
			answer["exchangeCode"] = exchange
			answer["callbackUrl"] = req.CallbackURL
		}
	}
	writeJSON(w, http.StatusOK, answer)
}

// statusApproving marks a request whose approval is making its key or
// pairing code: it is neither pending nor approved for anyone else, and
// is reported as pending to the asker.
const statusApproving = "approving"

// finishDecision answers a decision's update: the outcome, or why it
// could not be made.
func (s *Service) finishDecision(w http.ResponseWriter, r *http.Request, kind RequestKind, code, addr string, err error, answer map[string]any) {
	switch {
	case errors.Is(err, ErrUnknownRequest):
		writeError(w, http.StatusNotFound, notFoundText(kind))
	case errors.Is(err, errNoChange):
		cur, rerr := s.readRequest(r.Context(), kind, code)
		if rerr != nil {
			s.requestStoreFailed(w, "request not read", addr, rerr)
			return
		}
		requestGone(w, kind, cur, s.now())
	case err != nil:
		s.requestStoreFailed(w, "decision not recorded", addr, err)
	default:
		s.log.Info(strings.ToLower(kindName(kind))+" "+fmt.Sprint(answer["status"]), "addr", addr)
		writeJSON(w, http.StatusOK, answer)
	}
}

// narrow checks an approval of a key request against what it asked: the
// scopes and worlds may only be narrowed. Absent ones keep the request's.
func narrow(req Request, body decisionBody) (KeyGrant, error) {
	g := KeyGrant{Name: req.AppName, Scopes: req.Scopes, ClientIDs: req.ClientIDs, UserID: strings.TrimSpace(body.UserID)}
	if body.Scopes != nil {
		if len(body.Scopes) == 0 {
			return KeyGrant{}, invalid("'scopes' must name at least one scope")
		}
		g.Scopes = nil
		for _, sc := range body.Scopes {
			if !slices.Contains(req.Scopes, sc) {
				return KeyGrant{}, invalid("Cannot grant scope not in original request: %s", clip(sc))
			}
			if !slices.Contains(g.Scopes, sc) {
				g.Scopes = append(g.Scopes, sc)
			}
		}
	}
	if body.ClientIDs != nil {
		if len(body.ClientIDs) > maxRequestIDs {
			return KeyGrant{}, invalid("'clientIds' lists more than %d worlds", maxRequestIDs)
		}
		g.ClientIDs = nil
		for _, c := range body.ClientIDs {
			if len(req.ClientIDs) > 0 && !slices.Contains(req.ClientIDs, c) {
				return KeyGrant{}, invalid("Cannot grant a world not in original request: %s", clip(c))
			}
			if !keys.ValidClientID(c) {
				return KeyGrant{}, invalid("'clientIds' holds a malformed client id: %s", clip(c))
			}
			if !slices.Contains(g.ClientIDs, c) {
				g.ClientIDs = append(g.ClientIDs, c)
			}
		}
	}
	if body.ExpiresAt != "" {
		t, err := time.Parse(time.RFC3339, body.ExpiresAt)
		if err != nil {
			return KeyGrant{}, invalid("'expiresAt' must be an RFC 3339 time: %s", clip(body.ExpiresAt))
		}
		g.ExpiresAt = t
	}
	return g, nil
}

// serveExchange hands the key of an approved web-flow key request over
// for its exchange code, once.
func (s *Service) serveExchange(w http.ResponseWriter, r *http.Request) {
	addr := addressOf(r.RemoteAddr)
	if !s.pollAllowed(w, addr) {
		return
	}
	var body struct {
		Code string `json:"code"`
	}
	if err := readBody(w, r, &body); err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	if body.Code == "" {
		writeError(w, http.StatusBadRequest, "'code' is required")
		return
	}
	reqCode, secret, _ := strings.Cut(body.Code, ".")
	code, ok := normaliseCode(reqCode)
	if !ok {
		writeError(w, http.StatusNotFound, "Invalid exchange code")
		return
	}
	now := s.now()
	var delivered Request
	_, err := updateRequest(r.Context(), s.requests, KindKeyRequest, code, func(req Request) (Request, error) {
		switch {
		case req.CallbackURL == "":
			return req, ErrUnknownRequest
		case req.Status == StatusDenied:
			return req, errNoChange
		case !exchangeMatches(req, secret):
			return req, ErrUnknownRequest
		case req.StatusAt(now) != StatusApproved:
			return req, errNoChange
		}
		delivered = req
		req.Status, req.Secret = StatusExchanged, ""
		return req, nil
	})
	switch {
	case errors.Is(err, ErrUnknownRequest):
		writeError(w, http.StatusNotFound, "Invalid exchange code")
	case errors.Is(err, errNoChange):
		writeError(w, http.StatusGone, "Exchange code has already been used or request was denied")
	case err != nil:
		s.requestStoreFailed(w, "exchange failed", addr, err)
	default:
		s.log.Info("key request exchanged", "addr", addr, "keyId", delivered.KeyID)
		n := noteOf(r.Context())
		n.account, n.target, n.detail = delivered.ApprovedAccount, delivered.KeyID, requestSummary(delivered)
		writeJSON(w, http.StatusOK, map[string]any{"apiKey": delivered.Secret, "keyId": delivered.KeyID,
			"scopes": orEmpty(delivered.GrantedScopes), "clientIds": orEmpty(delivered.GrantedClients)})
	}
}
