package shared

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tabletop-relay/relay/audit"
	"github.com/tabletop-relay/relay/cluster/internal/steady"
)

// AuditStream is the JetStream stream of the cluster's audit log.
const AuditStream = "RELAY_AUDIT"

// auditSubjectPrefix starts the subject of every audit record:
// `relay.audit.<account>.<action>`, where the action's dots make tokens of
// its own, so that a listing selects one account and one action (or class
// of actions) by subject, in the stream's index.
const auditSubjectPrefix = "relay.audit."

// noAccount is the subject token of a record without an account.
const noAccount = "_"

// AuditStore is the audit log of a cluster ([audit.Store]): a JetStream
// stream every node appends to and lists from, so that any node shows
// every record. The stream itself forgets records older than the
// retention and beyond the count (MaxAge, MaxMsgs), so Prune has nothing
// to do. A record's ID is its sequence in the stream.
type AuditStore struct {
	js     jetstream.JetStream
	stream jetstream.Stream
}

var _ audit.Store = (*AuditStore)(nil)

// OpenAudit opens (creating, or updating to these limits) the audit
// stream.
func OpenAudit(ctx context.Context, js jetstream.JetStream, opts Options, retention time.Duration, maxRecords int) (*AuditStore, error) {
	replicas := opts.Replicas
	if replicas <= 0 {
		replicas = max(1, min(3, len(js.Conn().Servers())))
	}
	cfg := jetstream.StreamConfig{
		Name:        AuditStream,
		Description: "relay audit log: who did what to accounts, keys, pairings and requests",
		Subjects:    []string{auditSubjectPrefix + ">"},
		Retention:   jetstream.LimitsPolicy,
		MaxAge:      retention,
		MaxMsgs:     int64(maxRecords),
		MaxBytes:    -1,
		Discard:     jetstream.DiscardOld,
		Storage:     jetstream.FileStorage,
		Replicas:    replicas,
	}
	wait, cancel := context.WithTimeout(ctx, StartWait)
	defer cancel()
	for {
		attempt, cancelAttempt := context.WithTimeout(wait, attemptTimeout)
		stream, err := js.CreateOrUpdateStream(attempt, cfg)
		cancelAttempt()
		if err == nil {
			return &AuditStore{js: js, stream: stream}, nil
		}
		select {
		case <-wait.Done():
			return nil, fmt.Errorf("shared: open audit stream: %w", err)
		case <-time.After(placementRetry):
		}
	}
}

// auditRecord is a record as the stream keeps it.
type auditRecord struct {
	Time      time.Time `json:"t"`
	Account   string    `json:"a,omitempty"`
	KeyID     string    `json:"k,omitempty"`
	Session   string    `json:"s,omitempty"`
	Address   string    `json:"ip,omitempty"`
	Action    string    `json:"x"`
	Target    string    `json:"o,omitempty"`
	Outcome   string    `json:"r"`
	Detail    string    `json:"d,omitempty"`
	RequestID string    `json:"q,omitempty"`
}

// subjectToken makes s safe as one subject token.
func subjectToken(s string) string {
	if s == "" {
		return noAccount
	}
	return strings.Map(func(r rune) rune {
		if r == '.' || r == '*' || r == '>' || r <= ' ' || r == 0x7f {
			return '_'
		}
		return r
	}, s)
}

// actionTokens makes an action safe as the subject's last tokens.
func actionTokens(action string) string {
	parts := strings.Split(action, ".")
	for i, p := range parts {
		parts[i] = subjectToken(p)
	}
	return strings.Join(parts, ".")
}

// Append implements audit.Store.
func (s *AuditStore) Append(ctx context.Context, e audit.Entry) error {
	data, err := json.Marshal(auditRecord{Time: e.Time, Account: e.Account, KeyID: e.KeyID, Session: e.Session,
		Address: e.Address, Action: e.Action, Target: e.Target, Outcome: e.Outcome, Detail: e.Detail, RequestID: e.RequestID})
	if err != nil {
		return err
	}
	if _, err := s.js.Publish(ctx, auditSubjectPrefix+subjectToken(e.Account)+"."+actionTokens(e.Action), data); err != nil {
		return fmt.Errorf("shared: append audit record: %w", err)
	}
	return nil
}

// List implements audit.Store: an ephemeral consumer reads the records
// the query's account and action select, from the cursor or the query's
// start.
func (s *AuditStore) List(ctx context.Context, q audit.Query) (audit.Page, error) {
	acct := "*"
	if q.Account != "" {
		acct = subjectToken(q.Account)
	}
	filters := []string{auditSubjectPrefix + acct + ".>"}
	if q.Action != "" {
		exact := auditSubjectPrefix + acct + "." + actionTokens(q.Action)
		filters = []string{exact, exact + ".>"}
	}
	cfg := jetstream.ConsumerConfig{
		FilterSubjects:    filters,
		AckPolicy:         jetstream.AckNonePolicy,
		InactiveThreshold: 30 * time.Second,
		MemoryStorage:     true,
		Replicas:          1,
		DeliverPolicy:     jetstream.DeliverAllPolicy,
	}
	switch {
	case q.Cursor != "":
		after, err := strconv.ParseUint(q.Cursor, 10, 64)
		if err != nil {
			return audit.Page{}, audit.ErrInvalidCursor
		}
		cfg.DeliverPolicy, cfg.OptStartSeq = jetstream.DeliverByStartSequencePolicy, after+1
	case !q.Since.IsZero():
		since := q.Since
		cfg.DeliverPolicy, cfg.OptStartTime = jetstream.DeliverByStartTimePolicy, &since
	}
	// The consumer is named before it is asked for, so that asking again
	// (the stream electing a leader, an answer lost on a loaded machine)
	// finds the one made already rather than making a second.
	cfg.Name = "audit_" + rand.Text()
	var cons jetstream.Consumer
	err := steady.Do(ctx, s.js.Conn(), func(attempt context.Context) error {
		var err error
		cons, err = s.stream.CreateConsumer(attempt, cfg)
		return err
	})
	if err != nil {
		return audit.Page{}, fmt.Errorf("shared: list audit records: %w", err)
	}
	defer func() {
		// The consumer goes away on its own when it is idle; deleting it
		// now is a courtesy.
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), stopTimeout)
		defer cancel()
		_ = s.stream.DeleteConsumer(dctx, cons.CachedInfo().Name)
	}()
	page := audit.Page{Records: []audit.Entry{}}
	pending := int(cons.CachedInfo().NumPending)
	var unheardSince time.Time // when a fetch first found no one to answer it
	for pending > 0 {
		batch, err := cons.Fetch(min(pending, q.Limit+1, 256), jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			return audit.Page{}, fmt.Errorf("shared: list audit records: %w", err)
		}
		got := 0
		for msg := range batch.Messages() {
			got++
			pending--
			var r auditRecord
			if err := json.Unmarshal(msg.Data(), &r); err != nil {
				continue
			}
			e := audit.Entry{Time: r.Time.UTC(), Account: r.Account, KeyID: r.KeyID, Session: r.Session, Address: r.Address,
				Action: r.Action, Target: r.Target, Outcome: r.Outcome, Detail: r.Detail, RequestID: r.RequestID}
			if meta, err := msg.Metadata(); err == nil {
				e.ID = strconv.FormatUint(meta.Sequence.Stream, 10)
			}
			if !q.Until.IsZero() && e.Time.After(q.Until) {
				// Records come in the order they were kept: none after
				// this one is in the range.
				return page, nil
			}
			if !q.Matches(e) {
				continue
			}
			if len(page.Records) == q.Limit {
				page.NextCursor = page.Records[len(page.Records)-1].ID
				return page, nil
			}
			page.Records = append(page.Records, e)
		}
		if err := batch.Error(); err != nil && !errors.Is(err, jetstream.ErrNoMessages) {
			// The new consumer's subscription may not have reached this
			// node's server yet (seen on a loaded machine: no responders):
			// a fetch that nobody heard delivered nothing, and is asked
			// again for a while.
			if got == 0 && steady.Transient(err) && (unheardSince.IsZero() || time.Since(unheardSince) < steady.Wait) {
				if unheardSince.IsZero() {
					unheardSince = time.Now()
				}
				select {
				case <-ctx.Done():
					return audit.Page{}, fmt.Errorf("shared: list audit records: %w", err)
				case <-time.After(50 * time.Millisecond):
				}
				continue
			}
			return audit.Page{}, fmt.Errorf("shared: list audit records: %w", err)
		}
		if got == 0 {
			break
		}
	}
	return page, nil
}

// Prune implements audit.Store: the stream's own limits prune it.
func (s *AuditStore) Prune(context.Context, time.Time, int) (int, error) { return 0, nil }
