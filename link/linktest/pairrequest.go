package linktest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"

	"github.com/tabletop-relay/relay/link"
)

// PairRequest is the relay's answer to `POST /auth/pair-request`: the code
// and the page where the game master approves it.
type PairRequest struct {
	Code      string `json:"code"`
	PairURL   string `json:"pairUrl"`
	ExpiresAt string `json:"expiresAt"`
	ExpiresIn int    `json:"expiresIn"`
}

// ErrPairRequestEnded is the end of a pair request that did not give a
// pairing code: denied, expired, exchanged elsewhere or unknown. Its
// *PairRequestEnd says which.
var ErrPairRequestEnded = errors.New("pair request ended without a pairing code")

// PairRequestEnd is how a pair request ended without a pairing code: the
// status it ended in ("denied", "expired", "exchanged", or "unknown" for
// a 404).
type PairRequestEnd struct{ Status string }

func (e *PairRequestEnd) Error() string { return "pair request " + e.Status }

// Is makes every end match ErrPairRequestEnded.
func (e *PairRequestEnd) Is(target error) bool { return target == ErrPairRequestEnded }

// RequestPairing opens a pair request with the world's details, as the
// module's "pair in the browser" button does.
func (t *Tabletop) RequestPairing(ctx context.Context) (PairRequest, error) {
	body := map[string]string{
		"worldId": t.cfg.WorldID, "worldTitle": t.cfg.WorldTitle, "systemId": t.cfg.SystemID,
		"systemTitle": t.cfg.SystemTitle, "systemVersion": t.cfg.SystemVersion,
		"foundryVersion": t.cfg.FoundryVersion, "serverFingerprint": t.cfg.ServerFingerprint,
	}
	var res PairRequest
	if err := t.post(ctx, link.PathPairRequest, body, &res); err != nil {
		return PairRequest{}, err
	}
	return res, nil
}

// PairRequestStatus polls a pair request once: its status and, once
// approved, its pairing code. An unknown request is an *HTTPError (404).
func (t *Tabletop) PairRequestStatus(ctx context.Context, code string) (status, pairingCode string, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, t.httpBase()+link.PathPairRequest+"/"+url.PathEscape(code)+"/status", nil)
	if err != nil {
		return "", "", err
	}
	req.Header.Set("Origin", t.cfg.Origin)
	resp, err := t.client.Do(req)
	if err != nil {
		return "", "", err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return "", "", err
	}
	var out struct {
		Status      string `json:"status"`
		PairingCode string `json:"pairingCode"`
		Error       string `json:"error"`
	}
	_ = json.Unmarshal(data, &out)
	switch resp.StatusCode {
	case http.StatusOK, http.StatusGone:
		return out.Status, out.PairingCode, nil
	}
	return "", "", &HTTPError{Status: resp.StatusCode, Msg: out.Error}
}

// PairByRequest pairs as the module does without a typed code: it opens a
// pair request, hands its answer to open (the module opens pairUrl in the
// game master's browser), polls its status every interval until it is
// approved, and trades the pairing code at `/auth/pair`. A request that is
// denied, expires, was exchanged already or is unknown ends it with an
// error matching ErrPairRequestEnded.
func (t *Tabletop) PairByRequest(ctx context.Context, interval time.Duration, open func(PairRequest)) (PairResult, error) {
	pr, err := t.RequestPairing(ctx)
	if err != nil {
		return PairResult{}, fmt.Errorf("open pair request: %w", err)
	}
	if open != nil {
		open(pr)
	}
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		status, pairingCode, err := t.PairRequestStatus(ctx, pr.Code)
		var herr *HTTPError
		switch {
		case errors.As(err, &herr) && herr.Status == http.StatusNotFound:
			return PairResult{}, &PairRequestEnd{Status: "unknown"}
		case err != nil:
			return PairResult{}, fmt.Errorf("poll pair request: %w", err)
		case status == link.StatusApproved:
			return t.Pair(ctx, pairingCode)
		case status != link.StatusPending:
			return PairResult{}, &PairRequestEnd{Status: status}
		}
		select {
		case <-ctx.Done():
			return PairResult{}, ctx.Err()
		case <-tick.C:
		}
	}
}
