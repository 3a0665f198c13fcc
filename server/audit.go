package server

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/tabletop-relay/relay/audit"
	relayv1 "github.com/tabletop-relay/relay/gen/go/relay/v1"
	"github.com/tabletop-relay/relay/server/keys"
)

// AuditLog is what the server needs of the audit log: a recorder for the
// audited calls and a listing for AuditService.
type AuditLog interface {
	audit.Recorder
	List(ctx context.Context, q audit.Query) (audit.Page, error)
}

// auditedMethod says how a call of an audited method is recorded.
type auditedMethod struct {
	action string
	// readOnly methods change nothing: only their refusals are recorded.
	readOnly bool
	// target names what the call acted on, from its request and (when it
	// succeeded) its response; detail says what was made. Either may be
	// nil.
	target func(req, resp proto.Message) string
	detail func(req, resp proto.Message) string
}

// auditedMethods are the methods every call of which is recorded in the
// audit log, whether it succeeded or was refused: every method of the
// account, key and link services (a test holds them to that).
var auditedMethods = map[string]auditedMethod{
	relayv1.AccountService_CreateAccount_FullMethodName: {action: audit.ActionAccountCreate,
		target: func(_, resp proto.Message) string {
			return resp.(*relayv1.CreateAccountResponse).GetAccount().GetId()
		},
		detail: func(req, _ proto.Message) string {
			return fmt.Sprintf("name %q", req.(*relayv1.CreateAccountRequest).GetName())
		}},
	relayv1.AccountService_ListAccounts_FullMethodName: {action: audit.ActionAccountList, readOnly: true},
	relayv1.AccountService_GetAccount_FullMethodName: {action: audit.ActionAccountShow, readOnly: true,
		target: func(req, _ proto.Message) string { return req.(*relayv1.GetAccountRequest).GetId() }},
	relayv1.AccountService_UpdateAccount_FullMethodName: {action: audit.ActionAccountUpdate,
		target: func(req, _ proto.Message) string { return req.(*relayv1.UpdateAccountRequest).GetId() },
		detail: func(req, _ proto.Message) string {
			r := req.(*relayv1.UpdateAccountRequest)
			var parts []string
			if r.GetName() != "" {
				parts = append(parts, fmt.Sprintf("name %q", r.GetName()))
			}
			if q := r.GetQuotas(); q != nil {
				parts = append(parts, fmt.Sprintf("quotas worlds %d, keys %d, streams %d, requests a minute %d",
					q.GetWorlds(), q.GetKeys(), q.GetStreams(), q.GetRequestsPerMinute()))
			}
			return strings.Join(parts, "; ")
		}},
	relayv1.AccountService_SuspendAccount_FullMethodName: {action: audit.ActionAccountSuspend,
		target: func(req, _ proto.Message) string { return req.(*relayv1.SuspendAccountRequest).GetId() }},
	relayv1.AccountService_ResumeAccount_FullMethodName: {action: audit.ActionAccountResume,
		target: func(req, _ proto.Message) string { return req.(*relayv1.ResumeAccountRequest).GetId() }},
	relayv1.AccountService_DeleteAccount_FullMethodName: {action: audit.ActionAccountDelete,
		target: func(req, _ proto.Message) string { return req.(*relayv1.DeleteAccountRequest).GetId() }},

	relayv1.KeyService_CreateKey_FullMethodName: {action: audit.ActionKeyCreate,
		target: func(_, resp proto.Message) string { return resp.(*relayv1.CreateKeyResponse).GetApiKey().GetId() },
		detail: func(req, _ proto.Message) string {
			r := req.(*relayv1.CreateKeyRequest)
			d := fmt.Sprintf("name %q, scopes %s", r.GetName(), strings.Join(r.GetScopes(), ","))
			if len(r.GetClientIds()) > 0 {
				d += ", worlds " + strings.Join(r.GetClientIds(), ",")
			}
			return d
		}},
	relayv1.KeyService_ListKeys_FullMethodName: {action: audit.ActionKeyList, readOnly: true},
	relayv1.KeyService_RevokeKey_FullMethodName: {action: audit.ActionKeyRevoke,
		target: func(req, _ proto.Message) string { return req.(*relayv1.RevokeKeyRequest).GetId() }},

	relayv1.LinkService_CreatePairingCode_FullMethodName: {action: audit.ActionPairingCodeCreate,
		target: func(req, resp proto.Message) string {
			if resp != nil {
				return resp.(*relayv1.CreatePairingCodeResponse).GetClientId()
			}
			return req.(*relayv1.CreatePairingCodeRequest).GetClientId()
		}},
	relayv1.LinkService_UnpairWorld_FullMethodName: {action: audit.ActionPairingUnpair,
		target: func(req, _ proto.Message) string { return req.(*relayv1.UnpairWorldRequest).GetClientId() }},
}

// auditUnary records the calls of the audited methods (auditedMethods) in
// the audit log, with their final status: it sits outside the error
// mapping, so it sees what the caller is answered. It also puts the
// recorder and the client's address in the context of those calls, for
// whatever the handler records itself; calls of the gateway have them
// from their HTTP request already.
func (c *Chain) auditUnary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	m, ok := auditedMethods[info.FullMethod]
	if !ok || c.Audit == nil {
		return handler(ctx, req)
	}
	if audit.RecorderFrom(ctx) == nil {
		ctx = audit.WithRecorder(ctx, c.Audit)
		if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
			ctx = audit.WithAddress(ctx, p.Addr.String())
		}
	}
	resp, err := handler(ctx, req)
	if err == nil && m.readOnly {
		return resp, err
	}
	call := CallFrom(ctx)
	e := audit.Entry{Action: m.action, KeyID: call.Key.ID, RequestID: call.RequestID, Outcome: outcomeOf(err)}
	if call.Key.ID != "" {
		e.Account = call.Key.Account()
	}
	reqMsg, _ := req.(proto.Message)
	var respMsg proto.Message
	if err == nil {
		respMsg, _ = resp.(proto.Message)
	}
	if m.target != nil && reqMsg != nil && (err == nil || !targetNeedsResponse(info.FullMethod)) {
		e.Target = m.target(reqMsg, respMsg)
	}
	if err != nil {
		e.Detail = status.Convert(err).Message()
	} else if m.detail != nil && reqMsg != nil {
		e.Detail = m.detail(reqMsg, respMsg)
	}
	audit.Record(ctx, e)
	return resp, err
}

// auditRefusedCredentials records a call of an audited method that
// admission refused for its credentials (no key, an unknown, revoked or
// expired key, a suspended account's key): it never reaches the chain,
// and the record has no account, which only the operator sees.
func (s *Server) auditRefusedCredentials(ctx context.Context, method, remoteAddr string, err error) {
	m, ok := auditedMethods[method]
	if !ok || s.chain.Audit == nil {
		return
	}
	ctx = audit.WithAddress(audit.WithRecorder(ctx, s.chain.Audit), remoteAddr)
	audit.Record(ctx, audit.Entry{Action: m.action, Outcome: audit.OutcomeRefused, Detail: status.Convert(err).Message()})
}

// targetNeedsResponse reports the methods whose target comes from their
// response only: a refused call of theirs has none.
func targetNeedsResponse(method string) bool {
	return method == relayv1.AccountService_CreateAccount_FullMethodName ||
		method == relayv1.KeyService_CreateKey_FullMethodName
}

// outcomeOf is the audit outcome of a call's error: refused when the
// caller's request was at fault (credentials, permissions, input,
// limits), failed when the relay was.
func outcomeOf(err error) string {
	switch status.Code(err) {
	case codes.OK:
		return audit.OutcomeOK
	case codes.Internal, codes.Unknown, codes.Unavailable, codes.DeadlineExceeded, codes.DataLoss, codes.Canceled:
		return audit.OutcomeFailed
	}
	return audit.OutcomeRefused
}

// auditService implements relayv1.AuditServiceServer.
type auditService struct {
	relayv1.UnimplementedAuditServiceServer
	log AuditLog
}

func (s auditService) ListAuditRecords(ctx context.Context, req *relayv1.ListAuditRecordsRequest) (*relayv1.ListAuditRecordsResponse, error) {
	if s.log == nil {
		return nil, status.Error(codes.Unimplemented, "This relay keeps no audit log")
	}
	q := audit.Query{Action: strings.TrimSpace(req.GetAction()), Cursor: req.GetCursor(), Limit: int(req.GetLimit())}
	var err error
	if q.Since, err = parseAuditTime("since", req.GetSince()); err != nil {
		return nil, err
	}
	if q.Until, err = parseAuditTime("until", req.GetUntil()); err != nil {
		return nil, err
	}
	if q.Action != "" && (len(q.Action) > 64 || !auditActionPattern.MatchString(q.Action)) {
		return nil, status.Errorf(codes.InvalidArgument, "'action' must be an action such as 'key.create' or a class such as 'key' (lower-case letters, digits, '-' and '.'): %q", clipText(q.Action, 64))
	}
	if req.GetLimit() < 0 {
		return nil, status.Errorf(codes.InvalidArgument, "'limit' must be 0 or more (at most %d): %d", audit.MaxLimit, req.GetLimit())
	}
	key := CallFrom(ctx).Key
	q.Account = strings.TrimSpace(req.GetAccountId())
	if !key.Operator() {
		// A key sees its own account's records, and another account is
		// answered as one without records, as an unknown one is.
		if q.Account != "" && q.Account != key.Account() {
			return &relayv1.ListAuditRecordsResponse{Records: []*relayv1.AuditRecord{}}, nil
		}
		q.Account = key.Account()
	}
	page, err := s.log.List(ctx, q)
	if errors.Is(err, audit.ErrInvalidCursor) {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	if err != nil {
		return nil, err
	}
	out := &relayv1.ListAuditRecordsResponse{Records: make([]*relayv1.AuditRecord, 0, len(page.Records)), NextCursor: page.NextCursor}
	for _, e := range page.Records {
		out.Records = append(out.Records, &relayv1.AuditRecord{
			Id: e.ID, Time: e.Time.UTC().Format(time.RFC3339Nano), AccountId: e.Account, KeyId: e.KeyID,
			SessionId: e.Session, Address: e.Address, Action: e.Action, Target: e.Target, Outcome: e.Outcome,
			Detail: e.Detail, RequestId: e.RequestID,
		})
	}
	return out, nil
}

// auditActionPattern is the form of an action or a class of actions.
var auditActionPattern = regexp.MustCompile(`^[a-z0-9-]+(\.[a-z0-9-]+)*$`)

// clipText cuts s to n bytes for an error message.
func clipText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// parseAuditTime reads an RFC 3339 time parameter; "" is no bound.
func parseAuditTime(name, v string) (time.Time, error) {
	if v == "" {
		return time.Time{}, nil
	}
	t, err := time.Parse(time.RFC3339Nano, v)
	if err != nil {
		return time.Time{}, fmt.Errorf("%w: '%s' must be an RFC 3339 time: %q", keys.ErrInvalid, name, v)
	}
	return t, nil
}
