package history

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
)

// The segment file format (docs/DESIGN.md §5d). A segment is a header and
// a sequence of frames, appended only:
//
//	header  "GWTDHIS1" (8 bytes: magic and version)
//	frame   kind u8 | n u8 | payload (n bytes) | CRC-32C of kind, n, payload (u32 LE)
//
// Kind 'S' defines the segment's next string (ids count from 1; 0 is the
// empty string): a node, user, command or cause, written once per segment
// before the first record that uses it. Kind 'R' is a record:
//
//	outcome u8 | node u32 | user u32 | command u32 | cause u32 |
//	start_ms i64 | duration_ms u32 | grace_ms u32 | job (the rest)
//
// 33 fixed bytes and the job id (a Slurm job id: 8 bytes), so a record
// takes about 47 bytes on disk. Every integer is little-endian. A segment
// holds its own strings, so dropping a segment drops nothing another
// needs, and a segment is read without any other.
const (
	magic        = "GWTDHIS1"
	headerSize   = len(magic)
	frameOver    = 2 + 4 // kind, n; CRC
	recordFixed  = 1 + 4*4 + 8 + 4 + 4
	maxPayload   = 255
	maxFrameSize = frameOver + maxPayload
	kindString   = 'S'
	kindRecord   = 'R'
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// errCorrupt is a frame that does not decode: a torn write at the end of
// the last segment, or damage.
var errCorrupt = errors.New("corrupt frame")

// appendFrame appends a frame of kind with payload p to b.
func appendFrame(b []byte, kind byte, p []byte) []byte {
	start := len(b)
	b = append(b, kind, byte(len(p)))
	b = append(b, p...)
	return binary.LittleEndian.AppendUint32(b, crc32.Checksum(b[start:], castagnoli))
}

// ids are a record's string ids in its segment.
type ids struct{ node, user, command, cause uint32 }

// appendRecord appends r's record frame to b.
func appendRecord(b []byte, r *Record, id ids) []byte {
	var p [recordFixed + MaxJobBytes]byte
	p[0] = byte(r.Outcome)
	binary.LittleEndian.PutUint32(p[1:], id.node)
	binary.LittleEndian.PutUint32(p[5:], id.user)
	binary.LittleEndian.PutUint32(p[9:], id.command)
	binary.LittleEndian.PutUint32(p[13:], id.cause)
	binary.LittleEndian.PutUint64(p[17:], uint64(r.StartMs))
	binary.LittleEndian.PutUint32(p[25:], uint32(min(max(r.DurationMs(), 0), maxDurationMs)))
	binary.LittleEndian.PutUint32(p[29:], uint32(r.GraceMs))
	n := copy(p[recordFixed:], r.Job)
	return appendFrame(b, kindRecord, p[:recordFixed+n])
}

// decoder reads the frames of one segment, keeping its strings.
type decoder struct {
	strs []string // id-1 → string
}

// str returns the string of id, or false for an id not defined yet.
func (d *decoder) str(id uint32) (string, bool) {
	if id == 0 {
		return "", true
	}
	if int(id) > len(d.strs) {
		return "", false
	}
	return d.strs[id-1], true
}

// frame decodes the frame at the start of b (at most maxFrameSize bytes
// are looked at). It returns its size; a string frame adds to d's strings,
// a record frame fills r (r.Node set) and returns rec true. Node is the
// only field whose string must be defined (and non-empty). A frame that
// does not fit in b, fails its CRC, or is not well formed is errCorrupt.
func (d *decoder) frame(b []byte, r *Record) (size int, rec bool, err error) {
	if len(b) < frameOver {
		return 0, false, fmt.Errorf("%w: %d bytes left, a frame takes at least %d", errCorrupt, len(b), frameOver)
	}
	n := int(b[1])
	size = frameOver + n
	if len(b) < size {
		return 0, false, fmt.Errorf("%w: frame of %d bytes, %d left", errCorrupt, size, len(b))
	}
	if got, want := binary.LittleEndian.Uint32(b[2+n:]), crc32.Checksum(b[:2+n], castagnoli); got != want {
		return 0, false, fmt.Errorf("%w: checksum %08x, want %08x", errCorrupt, got, want)
	}
	p := b[2 : 2+n]
	switch b[0] {
	case kindString:
		if len(d.strs) >= maxStringsPerSegment {
			return 0, false, fmt.Errorf("%w: more than %d strings", errCorrupt, maxStringsPerSegment)
		}
		d.strs = append(d.strs, string(p))
		return size, false, nil
	case kindRecord:
		if n < recordFixed+1 {
			return 0, false, fmt.Errorf("%w: record of %d bytes, want at least %d", errCorrupt, n, recordFixed+1)
		}
		var ok [4]bool
		r.Outcome = Outcome(p[0])
		r.Node, ok[0] = d.str(binary.LittleEndian.Uint32(p[1:]))
		r.User, ok[1] = d.str(binary.LittleEndian.Uint32(p[5:]))
		r.Command, ok[2] = d.str(binary.LittleEndian.Uint32(p[9:]))
		r.Cause, ok[3] = d.str(binary.LittleEndian.Uint32(p[13:]))
		if ok != [4]bool{true, true, true, true} || r.Node == "" || r.Outcome >= numOutcomes {
			return 0, false, fmt.Errorf("%w: record names an undefined string or outcome", errCorrupt)
		}
		r.StartMs = int64(binary.LittleEndian.Uint64(p[17:]))
		r.ReleasedMs = r.StartMs + int64(binary.LittleEndian.Uint32(p[25:]))
		r.GraceMs = int64(binary.LittleEndian.Uint32(p[29:]))
		r.Job = p[recordFixed:]
		return size, true, nil
	}
	return 0, false, fmt.Errorf("%w: unknown kind %#x", errCorrupt, b[0])
}

// maxStringsPerSegment bounds the strings one segment defines: its
// decoder's memory. A segment rotates before it reaches it.
const maxStringsPerSegment = 1 << 20

// readSegment reads the frames of a segment from rd (header included) up
// to limit bytes, calling fn for each record until it returns false. It
// returns the bytes of whole valid frames read (the header included) and
// the first error: errCorrupt (wrapped, with the offset) where a frame
// does not decode, or the reader's.
func readSegment(rd io.Reader, limit int64, fn func(r *Record) bool) (int64, error) {
	return readSegmentWith(rd, limit, nil, fn)
}

// readSegmentWith is readSegment that also hands its decoder (the
// segment's strings) to got, before the first frame.
func readSegmentWith(rd io.Reader, limit int64, got func(*decoder), fn func(r *Record) bool) (int64, error) {
	br := bufio.NewReaderSize(io.LimitReader(rd, limit), 1<<20)
	hdr := make([]byte, headerSize)
	if _, err := io.ReadFull(br, hdr); err != nil {
		return 0, fmt.Errorf("%w at offset 0: header: %v", errCorrupt, err)
	}
	if string(hdr) != magic {
		return 0, fmt.Errorf("%w at offset 0: not a history segment (header %q)", errCorrupt, hdr)
	}
	var d decoder
	if got != nil {
		got(&d)
	}
	var r Record
	off := int64(headerSize)
	for {
		b, err := br.Peek(maxFrameSize)
		if len(b) == 0 {
			if err == io.EOF {
				return off, nil
			}
			return off, err
		}
		size, rec, ferr := d.frame(b, &r)
		if ferr != nil {
			return off, fmt.Errorf("%w at offset %d", ferr, off)
		}
		if rec && !fn(&r) {
			return off + int64(size), nil
		}
		br.Discard(size)
		off += int64(size)
	}
}
