package config

import "errors"

// Problems collects what a Validate method finds wrong, each problem a
// *KeyError naming its full key, so that Parse places every one at its
// line of the file. The zero value is ready; not safe for concurrent use.
//
//	p := config.Problems{Prefix: "http"}
//	p.Add("listen", "want host:port, got %q", h.Listen) // key "http.listen"
//	return p.Err()
type Problems struct {
	// Prefix is the table the keys are under ("http": Add("listen") is
	// about "http.listen"); empty, the keys are given in full.
	Prefix string
	errs   []error
}

// Add records a problem with key (under Prefix); format and a say what
// it is. Its signature is CheckCommon's bad.
func (p *Problems) Add(key, format string, a ...any) {
	if p.Prefix != "" {
		key = p.Prefix + "." + key
	}
	p.errs = append(p.errs, KeyErr(key, format, a...))
}

// Include records the problems err holds, as returned by another table's
// Validate: each error of a join (errors.Join) on its own, so that each
// keeps its line. A nil err records nothing.
func (p *Problems) Include(err error) {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		for _, e := range j.Unwrap() {
			p.Include(e)
		}
		return
	}
	if err != nil {
		p.errs = append(p.errs, err)
	}
}

// Err returns the problems recorded, joined (errors.Join), or nil if
// there are none.
func (p *Problems) Err() error { return errors.Join(p.errs...) }
