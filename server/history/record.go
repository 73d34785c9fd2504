package history

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// The database's keys. Every key starts with one byte naming its space:
//
//	'k' key 0x00 rev(8)     the record of key's change at rev (record):
//	                        a key's changes are adjacent, oldest first
//	'r' rev(8) key          the revision index: one byte, the change's kind
//	't' nanos(8) rev(8)     the time index: rev was recorded at nanos
//	'm' name                metadata (recorded, oldest, gaps, format)
//
// Numbers are big-endian, so that keys sort by them. etcd keys hold no
// 0x00 (objwatch's are paths), which the record keys rely on to end a key.
// Records are keyed by key first so that rebuilding a value (its last
// whole copy and the deltas after it) and listing a prefix at a revision
// read adjacent records; the revision index serves what walks the
// history in revision order (changes, retention).
const (
	spaceRecord = 'k'
	spaceRev    = 'r'
	spaceTime   = 't'
	spaceMeta   = 'm'
)

// keyPrefix is the start of key's records.
func keyPrefix(key string) []byte {
	b := make([]byte, 0, len(key)+10)
	b = append(b, spaceRecord)
	b = append(b, key...)
	return append(b, 0)
}

func recordKey(key string, rev int64) []byte {
	return binary.BigEndian.AppendUint64(keyPrefix(key), uint64(rev))
}

// parseRecordKey splits a record's key; ok is false for anything else.
func parseRecordKey(k []byte) (key string, rev int64, ok bool) {
	if len(k) < 10 || k[0] != spaceRecord || k[len(k)-9] != 0 {
		return "", 0, false
	}
	return string(k[1 : len(k)-9]), int64(binary.BigEndian.Uint64(k[len(k)-8:])), true
}

func revKey(rev int64, key string) []byte {
	b := make([]byte, 0, 9+len(key))
	b = append(b, spaceRev)
	b = binary.BigEndian.AppendUint64(b, uint64(rev))
	return append(b, key...)
}

// parseRevKey splits a revision index entry's key.
func parseRevKey(k []byte) (rev int64, key string, ok bool) {
	if len(k) < 9 || k[0] != spaceRev {
		return 0, "", false
	}
	return int64(binary.BigEndian.Uint64(k[1:9])), string(k[9:]), true
}

func timeKey(t time.Time, rev int64) []byte {
	b := make([]byte, 0, 17)
	b = append(b, spaceTime)
	b = binary.BigEndian.AppendUint64(b, uint64(t.UnixNano()))
	return binary.BigEndian.AppendUint64(b, uint64(rev))
}

func parseTimeKey(k []byte) (t time.Time, rev int64, ok bool) {
	if len(k) != 17 || k[0] != spaceTime {
		return time.Time{}, 0, false
	}
	return time.Unix(0, int64(binary.BigEndian.Uint64(k[1:9]))), int64(binary.BigEndian.Uint64(k[9:])), true
}

func metaKey(name string) []byte { return append([]byte{spaceMeta}, name...) }

// upper is the first key after every key starting with p.
func upper(p []byte) []byte {
	u := append([]byte(nil), p...)
	for i := len(u) - 1; i >= 0; i-- {
		if u[i] != 0xff {
			u[i]++
			return u[:i+1]
		}
	}
	return nil
}

// kind is what a record holds.
type kind byte

const (
	// kindFull: the value, whole.
	kindFull kind = iota
	// kindDelta: a Fossil delta (the format of the Fossil SCM, with a
	// checksum of the value it makes) from the key's previous record's
	// value to this one's: bytes to bytes, no JSON parsed either way.
	kindDelta
	// kindDelete: the key was deleted; no value.
	kindDelete
)

// Author is who made a revision: the user and groups of the request, its
// verb, field manager and the server that handled it. The server's own
// writes (garbage collector, namespace cleanup) name their controller as
// the user. A write made behind the servers' back (straight to etcd) has
// none.
type Author struct {
	User    string   `json:"user,omitempty"`
	Groups  []string `json:"groups,omitempty"`
	Verb    string   `json:"verb,omitempty"`
	Manager string   `json:"manager,omitempty"`
	Server  string   `json:"server,omitempty"`
}

// record is one key's change at one revision as the database keeps it:
//
//	byte     format (recordFormat)
//	byte     kind
//	uvarint  create revision
//	varint   time (unix nanoseconds)
//	uvarint  length of the author's JSON, then that JSON (0: none)
//	the rest: the value (kindFull) or the delta (kindDelta)
type record struct {
	kind     kind
	created  int64
	time     time.Time
	author   *Author
	payload  []byte
	inGap    bool // a deletion found after a gap, at the relist's revision
	authorJS []byte
}

const (
	recordFormat = 1
	// flagInGap is or-ed into the kind byte of a deletion found only after
	// a gap (see Recorder).
	flagInGap = 0x80
)

// maxRecordAuthor bounds an author's JSON.
const maxRecordAuthor = 64 << 10

func (r *record) encode() ([]byte, error) {
	aj := r.authorJS
	if aj == nil && r.author != nil {
		var err error
		if aj, err = json.Marshal(r.author); err != nil {
			return nil, fmt.Errorf("history: author: %w", err)
		}
	}
	b := make([]byte, 0, 2+3*binary.MaxVarintLen64+len(aj)+len(r.payload))
	k := byte(r.kind)
	if r.inGap {
		k |= flagInGap
	}
	b = append(b, recordFormat, k)
	b = binary.AppendUvarint(b, uint64(r.created))
	b = binary.AppendVarint(b, r.time.UnixNano())
	b = binary.AppendUvarint(b, uint64(len(aj)))
	b = append(b, aj...)
	return append(b, r.payload...), nil
}

var errCorruptRecord = errors.New("history: corrupt record")

// decodeRecord decodes a record; the payload aliases b.
func decodeRecord(b []byte) (record, error) {
	var r record
	if len(b) < 2 || b[0] != recordFormat {
		return r, errCorruptRecord
	}
	r.kind, r.inGap = kind(b[1]&^flagInGap), b[1]&flagInGap != 0
	if r.kind > kindDelete {
		return r, errCorruptRecord
	}
	i := 2
	created, n := binary.Uvarint(b[i:])
	if n <= 0 || created > 1<<62 {
		return r, errCorruptRecord
	}
	i += n
	nanos, n := binary.Varint(b[i:])
	if n <= 0 {
		return r, errCorruptRecord
	}
	i += n
	alen, n := binary.Uvarint(b[i:])
	if n <= 0 || alen > maxRecordAuthor || alen > uint64(len(b)-i-n) {
		return r, errCorruptRecord
	}
	i += n
	r.created, r.time = int64(created), time.Unix(0, nanos)
	if alen > 0 {
		r.authorJS = b[i : i+int(alen)]
		// Pebble's checksums guard the bytes; an author that is not an
		// Author's JSON came so from its note (written by whoever may
		// write etcd) and is unknown, not damage of the record.
		var a Author
		if json.Unmarshal(r.authorJS, &a) == nil {
			r.author = &a
		}
	}
	r.payload = b[i+int(alen):]
	if r.kind == kindDelete && len(r.payload) != 0 {
		return r, errCorruptRecord
	}
	return r, nil
}
