package jsonbody

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

type body struct {
	Job   string   `json:"job"`
	Count int      `json:"count"`
	Tags  []string `json:"tags"`
	Inner struct {
		On bool `json:"on"`
	} `json:"inner"`
}

func TestDecode(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Error // Offset compared where not 0; Err and Detail not compared
	}{
		{"", Error{Kind: Empty}},
		{"  \n\t", Error{Kind: Empty}},
		{`{"job":"4`, Error{Kind: Truncated, Offset: 9}},
		{`{"job":`, Error{Kind: Truncated, Offset: 7}},
		{`{"job" 1}`, Error{Kind: Syntax, Offset: 8}},
		{`nope`, Error{Kind: Syntax, Offset: 2}},
		{`[1,2]`, Error{Kind: NotObject, Got: "array"}},
		{`42`, Error{Kind: NotObject, Got: "number"}},
		{`"s"`, Error{Kind: NotObject, Got: "string"}},
		{`{"job":42}`, Error{Kind: WrongType, Offset: 9, Field: "job", Want: "a string", Got: "number"}},
		{`{"count":"x"}`, Error{Kind: WrongType, Field: "count", Want: "a number", Got: "string"}},
		{`{"tags":{}}`, Error{Kind: WrongType, Field: "tags", Want: "a list", Got: "object"}},
		{`{"inner":{"on":1}}`, Error{Kind: WrongType, Field: "inner.on", Want: "true or false", Got: "number"}},
		{`{"jobs":"1"}`, Error{Kind: UnknownField, Field: "jobs"}},
		{`{"j\"o\u00e9":"1"}`, Error{Kind: UnknownField, Field: `j"oé`}},
		{`{"job":"1"} {}`, Error{Kind: Trailing, Offset: 13}},
		{`{"job":"1"}x`, Error{Kind: Trailing}},
		{`{"job":"1"}` + "\n\n  ", Error{}},
	} {
		var v body
		err := Decode(strings.NewReader(tc.in), &v)
		if tc.want.Kind == 0 {
			if err != nil {
				t.Errorf("%q: %v, want accepted", tc.in, err)
			}
			continue
		}
		var e *Error
		if !errors.As(err, &e) {
			t.Errorf("%q: %v (%T), want an *Error", tc.in, err, err)
			continue
		}
		got := Error{Kind: e.Kind, Offset: e.Offset, Field: e.Field, Want: e.Want, Got: e.Got}
		if tc.want.Offset == 0 {
			got.Offset = 0
		}
		if got != tc.want {
			t.Errorf("%q: %+v, want %+v", tc.in, got, tc.want)
		}
		if e.Err == nil || e.Error() == "" {
			t.Errorf("%q: no cause or no message: %#v", tc.in, e)
		}
	}
}

// The reader's own error (here the body's limit) reaches the caller as the
// reader returned it, for a 413, whether it cuts the object or the data
// after it; a reader's io.ErrUnexpectedEOF (a cut chunked body) is a
// truncated input.
func TestDecodeKeepsTheLimit(t *testing.T) {
	for _, in := range []string{`{"job":"` + strings.Repeat("x", 100) + `"}`, `{"job":"1"}` + strings.Repeat(" ", 100) + "x"} {
		r := http.MaxBytesReader(httptest.NewRecorder(), io.NopCloser(strings.NewReader(in)), 20)
		var v body
		var mbe *http.MaxBytesError
		var e *Error
		if err := Decode(r, &v); !errors.As(err, &e) || e.Kind != Read || !errors.As(err, &mbe) {
			t.Errorf("%.20q...: %v (%T), want a Read *Error of *http.MaxBytesError", in, err, err)
		}
	}
	var v body
	var e *Error
	if err := Decode(io.MultiReader(strings.NewReader(`{"job":"1`), cutReader{}), &v); !errors.As(err, &e) || e.Kind != Truncated || e.Offset != 9 {
		t.Errorf("cut by its reader: %#v, want Truncated at 9", err)
	}
}

type cutReader struct{}

func (cutReader) Read([]byte) (int, error) { return 0, io.ErrUnexpectedEOF }

// Classify of json.Unmarshal's errors (no decoder, no offset): the kinds
// that Unmarshal can return.
func TestClassifyUnmarshal(t *testing.T) {
	for in, kind := range map[string]Kind{
		`{"job":`:   Syntax, // Unmarshal reports a cut input as a syntax error
		`{"job":1}`: WrongType,
		`true`:      NotObject,
		`{]`:        Syntax,
	} {
		var v body
		err := json.Unmarshal([]byte(in), &v)
		if e := Classify(err, 0); e.Kind != kind {
			t.Errorf("%q: kind %d (%v), want %d", in, e.Kind, e, kind)
		}
	}
	if e := Classify(errors.New("json: cannot do that"), 0); e.Kind != Other || e.Detail != "cannot do that" {
		t.Errorf("other error: %#v", e)
	}
}

// FuzzDecode: any input is accepted or refused with one Kind and a
// message; what is accepted is one object that encoding/json also reads.
func FuzzDecode(f *testing.F) {
	for _, s := range []string{``, `{"job":"1"}`, `{"job":1}`, `[`, `{"x":1}`, `{"job":"1"} 2`, `{"inner":{"on":"y"}}`, "\xff"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		var v body
		err := Decode(strings.NewReader(in), &v)
		if err == nil {
			var w body
			dec := json.NewDecoder(strings.NewReader(in))
			if err := dec.Decode(&w); err != nil {
				t.Fatalf("accepted %q, which encoding/json refuses: %v", in, err)
			}
			return
		}
		var e *Error
		if !errors.As(err, &e) {
			t.Fatalf("%q: %v (%T), want an *Error", in, err, err)
		}
		if e.Kind < Empty || e.Kind > Read || e.Err == nil {
			t.Fatalf("%q: bad classification %#v", in, e)
		}
		if e.Kind == Other || e.Kind == Read {
			t.Fatalf("%q: encoding/json error not classified: %v", in, e.Err)
		}
		if e.Error() == "" {
			t.Fatalf("%q: empty message", in)
		}
	})
}
