package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"mime/multipart"
	"net/http"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tabletop-relay/relay/relaytest"
)

// The crash test's workload: what the writers send, what they remember as
// acknowledged, and the checks after each restart.

// crashDenominations are the coin denominations, as the relay names them.
var crashDenominations = []string{"pp", "gp", "ep", "sp", "cp"}

// crashCoins is an actor's coins by denomination.
type crashCoins map[string]int

// crashField is a document field that one writer sets to ever larger
// numbers.
type crashField struct {
	uuid, field string
	acked       int64 // the last value the relay acknowledged (or was seen after a restart)
	attempted   int64 // the last value sent
}

// crashTransfer is a transfer sent and not answered.
type crashTransfer struct {
	fromAria bool
	amount   crashCoins
}

// crashFile is what the test knows of one uploaded path.
type crashFile struct {
	acked    int // sequence number of the version last acknowledged or seen; 0: none
	inflight int // sequence number of a version sent and not answered; 0: none
}

// crashState is everything the writers were told, kept across cycles.
type crashState struct {
	t        *testing.T
	filesDir string

	fields []*crashField

	totals         crashCoins // coins of both actors together; never changes
	aria, brom     crashCoins // balances after the last acknowledged transfer
	transferUnsure *crashTransfer

	uploadSeq []int                   // per upload writer, the last sequence number used
	files     []map[string]*crashFile // per upload writer, by path
}

// crashUploadWriters is the number of concurrent upload writers.
const crashUploadWriters = 2

func newCrashState(t *testing.T, c *crashClient, dataDir string) *crashState {
	t.Helper()
	st := &crashState{
		t:        t,
		filesDir: filepath.Join(dataDir, "worlds", "demo", "files"),
		fields: []*crashField{
			// Aria and Brom also take part in the transfers: an update of
			// another field must not undo or be undone by them.
			{uuid: relaytest.AriaUUID, field: "flags.crash.w0"},
			{uuid: relaytest.BromUUID, field: "flags.crash.w1"},
			{uuid: relaytest.GuardUUID, field: "flags.crash.w2"},
		},
		uploadSeq: make([]int, crashUploadWriters),
	}
	for range crashUploadWriters {
		st.files = append(st.files, map[string]*crashFile{})
	}
	var err error
	if st.aria, err = crashBalance(context.Background(), c, relaytest.AriaUUID); err != nil {
		t.Fatal(err)
	}
	if st.brom, err = crashBalance(context.Background(), c, relaytest.BromUUID); err != nil {
		t.Fatal(err)
	}
	st.totals = crashCoins{}
	for _, d := range crashDenominations {
		st.totals[d] = st.aria[d] + st.brom[d]
	}
	t.Logf("coins of Aria and Brom together: %v", st.totals)
	return st
}

// drive runs the writers against a relay and kills it after delay. It
// returns how many writes were acknowledged.
func (st *crashState) drive(c *crashClient, seed uint64, delay time.Duration, kill func()) crashCounts {
	var mu sync.Mutex
	var counts crashCounts
	count := func(f func(*crashCounts)) {
		mu.Lock()
		f(&counts)
		mu.Unlock()
	}
	var work []func(ctx context.Context)
	for _, f := range st.fields {
		work = append(work, func(ctx context.Context) {
			for ctx.Err() == nil {
				if !st.update(ctx, c, f) {
					return
				}
				count(func(n *crashCounts) { n.updates++ })
			}
		})
	}
	work = append(work, func(ctx context.Context) {
		rng := rand.New(rand.NewPCG(seed, 1))
		for ctx.Err() == nil {
			if !st.transfer(ctx, c, rng) {
				return
			}
			count(func(n *crashCounts) { n.transfers++ })
		}
	})
	for w := range crashUploadWriters {
		work = append(work, func(ctx context.Context) {
			rng := rand.New(rand.NewPCG(seed, uint64(100+w)))
			for ctx.Err() == nil {
				if !st.upload(ctx, c, rng, w) {
					return
				}
				count(func(n *crashCounts) { n.uploads++ })
			}
		})
	}
	crashKillDuring(delay, kill, work)
	return counts
}

// update sets the field to its next value; it reports whether the relay
// acknowledged it. Any answer but 200 fails the test.
func (st *crashState) update(ctx context.Context, c *crashClient, f *crashField) bool {
	f.attempted++
	v := f.attempted
	reply, err := c.sendJSON(ctx, http.MethodPut, "/update", map[string]any{"uuid": f.uuid, "data": map[string]any{f.field: v}})
	if err != nil {
		return false
	}
	if reply.status != http.StatusOK {
		st.t.Errorf("update %s %s=%d: %d %s", f.uuid, f.field, v, reply.status, reply.body)
		return false
	}
	f.acked = v
	return true
}

// transfer moves a few coins of one denomination from the richer of the
// two actors to the other; it reports whether the relay acknowledged it.
// The answer's balances must be those the test expects.
func (st *crashState) transfer(ctx context.Context, c *crashClient, rng *rand.Rand) bool {
	fromAria := rng.IntN(2) == 0
	src := st.brom
	if fromAria {
		src = st.aria
	}
	var have []string
	for _, d := range crashDenominations {
		if src[d] > 0 {
			have = append(have, d)
		}
	}
	if len(have) == 0 {
		fromAria = !fromAria
		src = st.brom
		if fromAria {
			src = st.aria
		}
		for _, d := range crashDenominations {
			if src[d] > 0 {
				have = append(have, d)
			}
		}
	}
	amount := crashCoins{}
	for _, d := range have {
		if rng.IntN(2) == 0 || len(amount) == 0 && d == have[len(have)-1] {
			amount[d] = 1 + rng.IntN(min(src[d], 5))
		}
	}
	source, target := relaytest.BromUUID, relaytest.AriaUUID
	if fromAria {
		source, target = relaytest.AriaUUID, relaytest.BromUUID
	}
	st.transferUnsure = &crashTransfer{fromAria: fromAria, amount: amount}
	reply, err := c.sendJSON(ctx, http.MethodPost, "/dnd5e/transfer-currency", map[string]any{"sourceActorUuid": source, "targetActorUuid": target, "currency": amount})
	if err != nil {
		return false
	}
	if reply.status != http.StatusOK {
		st.t.Errorf("transfer %v from %s: %d %s", amount, source, reply.status, reply.body)
		return false
	}
	aria, brom := st.applied(*st.transferUnsure)
	st.aria, st.brom, st.transferUnsure = aria, brom, nil
	data, err := reply.data()
	if err != nil {
		st.t.Error(err)
		return false
	}
	wantSource, wantTarget := brom, aria
	if fromAria {
		wantSource, wantTarget = aria, brom
	}
	if got := crashCoinsOf(data["sourceBalance"]); !crashSameCoins(got, wantSource) {
		st.t.Errorf("transfer %v from %s: source balance %v, want %v", amount, source, got, wantSource)
	}
	if got := crashCoinsOf(data["targetBalance"]); !crashSameCoins(got, wantTarget) {
		st.t.Errorf("transfer %v from %s: target balance %v, want %v", amount, source, got, wantTarget)
	}
	return true
}

// applied returns Aria's and Brom's balances after a transfer.
func (st *crashState) applied(tr crashTransfer) (aria, brom crashCoins) {
	aria, brom = crashCoins{}, crashCoins{}
	for _, d := range crashDenominations {
		n := tr.amount[d]
		if !tr.fromAria {
			n = -n
		}
		aria[d], brom[d] = st.aria[d]-n, st.brom[d]+n
	}
	return aria, brom
}

// upload sends a self-checking file, either under a new name or over one
// of a few names it keeps replacing; it reports whether the relay
// acknowledged it.
func (st *crashState) upload(ctx context.Context, c *crashClient, rng *rand.Rand, w int) bool {
	st.uploadSeq[w]++
	seq := st.uploadSeq[w]
	dir := fmt.Sprintf("crash/u%d", w)
	name, overwrite := fmt.Sprintf("n%06d.bin", seq), false
	if rng.IntN(2) == 0 {
		name, overwrite = fmt.Sprintf("slot%d.bin", rng.IntN(4)), true
	}
	p := path.Join(dir, name)
	// Mostly small files; now and then a large one, over a slot only, so
	// that a long run does not fill the disk.
	size := rng.IntN(4 << 10)
	switch r := rng.IntN(10); {
	case r == 0 && overwrite:
		size = rng.IntN(4 << 20)
	case r < 5:
		size = rng.IntN(64 << 10)
	}
	content := crashFileContent(p, seq, size, rng)

	var body bytes.Buffer
	mw := multipart.NewWriter(&body)
	_ = mw.WriteField("path", dir)
	_ = mw.WriteField("overwrite", strconv.FormatBool(overwrite))
	part, err := mw.CreateFormFile("file", name)
	if err != nil {
		st.t.Error(err)
		return false
	}
	_, _ = part.Write(content)
	_ = mw.Close()

	f := st.files[w][p]
	if f == nil {
		f = &crashFile{}
		st.files[w][p] = f
	}
	f.inflight = seq
	reply, err := c.send(ctx, http.MethodPost, "/upload", &body, mw.FormDataContentType())
	if err != nil {
		return false
	}
	if reply.status != http.StatusOK {
		st.t.Errorf("upload %s (seq %d, %d bytes): %d %s", p, seq, len(content), reply.status, reply.body)
		return false
	}
	f.acked, f.inflight = seq, 0
	data, err := reply.data()
	if err != nil {
		st.t.Error(err)
		return false
	}
	if data["path"] != p || data["size"] != float64(len(content)) {
		st.t.Errorf("upload %s (%d bytes) answered %v", p, len(content), data)
	}
	return true
}

// crashFileContent is a file that checks itself: a header line naming its
// path, sequence number, body length and the body's SHA-256, then the body.
func crashFileContent(p string, seq, size int, rng *rand.Rand) []byte {
	body := make([]byte, size)
	for i := 0; i < size; i += 8 {
		v := rng.Uint64()
		for j := 0; j < 8 && i+j < size; j++ {
			body[i+j] = byte(v >> (8 * j))
		}
	}
	sum := sha256.Sum256(body)
	header := fmt.Sprintf("relay-crash path=%s seq=%d len=%d sha256=%s\n", p, seq, size, hex.EncodeToString(sum[:]))
	return append([]byte(header), body...)
}

// crashCheckFile checks a file's content against its own header and
// returns its path and sequence number.
func crashCheckFile(content []byte) (p string, seq int, err error) {
	header, body, ok := bytes.Cut(content, []byte("\n"))
	if !ok {
		return "", 0, fmt.Errorf("no header line in %d bytes", len(content))
	}
	var size int
	var sum string
	if _, err := fmt.Sscanf(string(header), "relay-crash path=%s seq=%d len=%d sha256=%s", &p, &seq, &size, &sum); err != nil {
		return "", 0, fmt.Errorf("bad header %q: %v", header, err)
	}
	if len(body) != size {
		return p, seq, fmt.Errorf("torn: body of %d bytes, header says %d", len(body), size)
	}
	if got := sha256.Sum256(body); hex.EncodeToString(got[:]) != sum {
		return p, seq, fmt.Errorf("corrupt: body does not match its SHA-256")
	}
	return p, seq, nil
}

// verify checks, after a restart, that every acknowledged write is there
// and nothing is half done, then takes what it found as the new baseline
// (a write that was not acknowledged but landed must stay from now on).
func (st *crashState) verify(c *crashClient, cycle int) {
	t := st.t
	ctx := context.Background()

	// Updates: the last acknowledged value, or the one in flight.
	for _, f := range st.fields {
		doc, err := crashGet(ctx, c, f.uuid)
		if err != nil {
			t.Errorf("cycle %d: %v", cycle, err)
			continue
		}
		got, _ := crashAt(doc, f.field).(float64)
		if v := int64(got); v < f.acked || v > f.attempted {
			t.Errorf("cycle %d: %s %s = %v after the restart; acknowledged %d, last sent %d", cycle, f.uuid, f.field, got, f.acked, f.attempted)
		} else {
			f.acked, f.attempted = v, v
		}
	}

	// Transfers: whole or not at all, and the last acknowledged one there.
	aria, err1 := crashBalance(ctx, c, relaytest.AriaUUID)
	brom, err2 := crashBalance(ctx, c, relaytest.BromUUID)
	if err1 != nil || err2 != nil {
		t.Errorf("cycle %d: balances: %v %v", cycle, err1, err2)
		return
	}
	for _, d := range crashDenominations {
		if aria[d]+brom[d] != st.totals[d] {
			t.Errorf("cycle %d: %s of Aria (%d) and Brom (%d) add up to %d, not %d: a transfer was half applied", cycle, d, aria[d], brom[d], aria[d]+brom[d], st.totals[d])
		}
	}
	ok := crashSameCoins(aria, st.aria) && crashSameCoins(brom, st.brom)
	if !ok && st.transferUnsure != nil {
		wantAria, wantBrom := st.applied(*st.transferUnsure)
		ok = crashSameCoins(aria, wantAria) && crashSameCoins(brom, wantBrom)
	}
	if !ok {
		t.Errorf("cycle %d: balances Aria %v Brom %v; the last acknowledged transfer left Aria %v Brom %v (then sent: %v)", cycle, aria, brom, st.aria, st.brom, st.transferUnsure)
	}
	st.aria, st.brom, st.transferUnsure = aria, brom, nil

	// Uploads: every acknowledged one there and intact, or replaced by the
	// one in flight to the same path.
	for w := range st.files {
		for p, f := range st.files[w] {
			content, err := os.ReadFile(filepath.Join(st.filesDir, filepath.FromSlash(p)))
			if err != nil {
				if f.acked != 0 {
					t.Errorf("cycle %d: acknowledged upload %s (seq %d) lost: %v", cycle, p, f.acked, err)
				}
				f.inflight = 0
				continue
			}
			gotPath, seq, err := crashCheckFile(content)
			switch {
			case err != nil:
				t.Errorf("cycle %d: upload %s: %v", cycle, p, err)
			case gotPath != p:
				t.Errorf("cycle %d: %s holds the content of %s", cycle, p, gotPath)
			case seq != f.acked && seq != f.inflight:
				t.Errorf("cycle %d: %s holds seq %d; acknowledged %d, in flight %d", cycle, p, seq, f.acked, f.inflight)
			default:
				f.acked = seq
			}
			f.inflight = 0
		}
	}
	st.checkFileArea(c, cycle)
}

// checkFileArea checks the whole file area on disk and through the API:
// every file the test wrote checks out against its header, and no
// temporary file of an interrupted upload is left anywhere.
func (st *crashState) checkFileArea(c *crashClient, cycle int) {
	t := st.t
	var temps []string
	onDisk := 0
	err := filepath.WalkDir(st.filesDir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(st.filesDir, p)
		rel = filepath.ToSlash(rel)
		if strings.HasPrefix(d.Name(), ".relay-upload-") {
			temps = append(temps, rel)
			return nil
		}
		if d.IsDir() || !strings.HasPrefix(rel, "crash/") {
			return nil
		}
		onDisk++
		content, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if gotPath, _, err := crashCheckFile(content); err != nil {
			t.Errorf("cycle %d: file %s: %v", cycle, rel, err)
		} else if gotPath != rel {
			t.Errorf("cycle %d: %s holds the content of %s", cycle, rel, gotPath)
		}
		return nil
	})
	if err != nil {
		t.Errorf("cycle %d: walk the file area: %v", cycle, err)
	}
	if len(temps) > 0 {
		t.Errorf("cycle %d: %d temporary upload files left in the file area after the restart: %v", cycle, len(temps), temps)
	}

	// The API lists the same files, and no temporary ones.
	listed := 0
	for w := range crashUploadWriters {
		dir := fmt.Sprintf("crash/u%d", w)
		if _, err := os.Stat(filepath.Join(st.filesDir, filepath.FromSlash(dir))); err != nil {
			continue
		}
		reply, err := c.send(context.Background(), http.MethodGet, "/file-system?"+url.Values{"path": {dir}}.Encode(), nil, "")
		if err != nil || reply.status != http.StatusOK {
			t.Errorf("cycle %d: list %s: %v %d %s", cycle, dir, err, reply.status, reply.body)
			continue
		}
		data, err := reply.data()
		if err != nil {
			t.Error(err)
			continue
		}
		results, _ := data["results"].([]any)
		for _, r := range results {
			e, _ := r.(map[string]any)
			if name, _ := e["name"].(string); strings.HasPrefix(name, ".relay-upload-") {
				t.Errorf("cycle %d: listing shows temporary file %s", cycle, e["path"])
			}
			if e["type"] == "file" {
				listed++
			}
		}
	}
	if listed != onDisk {
		t.Errorf("cycle %d: the API lists %d uploaded files, the disk holds %d", cycle, listed, onDisk)
	}
}

// crashGet reads a document.
func crashGet(ctx context.Context, c *crashClient, uuid string) (map[string]any, error) {
	reply, err := c.send(ctx, http.MethodGet, "/get?"+url.Values{"uuid": {uuid}}.Encode(), nil, "")
	if err != nil {
		return nil, fmt.Errorf("get %s: %v", uuid, err)
	}
	if reply.status != http.StatusOK {
		return nil, fmt.Errorf("get %s: %d %s", uuid, reply.status, reply.body)
	}
	return reply.data()
}

// crashBalance reads an actor's coins.
func crashBalance(ctx context.Context, c *crashClient, uuid string) (crashCoins, error) {
	doc, err := crashGet(ctx, c, uuid)
	if err != nil {
		return nil, err
	}
	return crashCoinsOf(crashAt(doc, "system.currency")), nil
}

// crashAt follows a dotted path through nested objects.
func crashAt(doc map[string]any, dotted string) any {
	var cur any = doc
	for _, k := range strings.Split(dotted, ".") {
		m, ok := cur.(map[string]any)
		if !ok {
			return nil
		}
		cur = m[k]
	}
	return cur
}

// crashCoinsOf reads coins from a decoded JSON object.
func crashCoinsOf(v any) crashCoins {
	m, _ := v.(map[string]any)
	out := crashCoins{}
	for _, d := range crashDenominations {
		n, _ := m[d].(float64)
		out[d] = int(n)
	}
	return out
}

// crashSameCoins compares two balances denomination by denomination.
func crashSameCoins(a, b crashCoins) bool {
	for _, d := range crashDenominations {
		if a[d] != b[d] {
			return false
		}
	}
	return true
}
