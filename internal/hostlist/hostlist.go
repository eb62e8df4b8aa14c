// Package hostlist reads and writes Slurm-style hostlists ("node[1-4,7]"):
// Expand lists a hostlist's names, Compress writes names as one. It is
// bounded (MaxExpand names, 18 digits a number) because its input comes
// from outside (the HTTP API, the command line, Slurm's own output).
package hostlist

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"unicode"
)

// MaxExpand bounds how many names Expand produces, so that a hostlist such
// as "n[0-999999999999]" is an error rather than an exhausted memory.
const MaxExpand = 1 << 18

// maxDigits is the longest numeric suffix handled as a number (it fits an
// int64 with room to spare); a name with a longer digit run stays literal.
const maxDigits = 18

// ErrHostlist is wrapped by every error of Compress and Expand.
var ErrHostlist = errors.New("invalid hostlist")

// Compress writes names as a Slurm-style hostlist: names that differ only in
// their last run of digits share a bracket of ranges, e.g. "node[3,17-19]",
// "rack1-n[01-12]-ib", "login1". Zero padding is kept: "node[001-003]"; a
// name without padding joins a padded group when it prints the same at
// that width ("node[098-100]"). Duplicates are dropped, and the result does
// not depend on the order of names. Expand(Compress(x)) holds each name of x
// exactly once.
//
// A name that a hostlist cannot carry (empty, or holding a comma, a bracket,
// white space or a control character) is an error.
func Compress(names []string) (string, error) {
	type key struct {
		prefix, suffix string
		width          int // 0: numbers without padding
	}
	byAffix := map[[2]string][]string{} // (prefix, suffix) -> digit strings
	literals := map[string]bool{}
	for _, name := range names {
		if err := checkHostname(name); err != nil {
			return "", err
		}
		p, ok := splitDigits(name)
		if !ok {
			literals[name] = true
			continue
		}
		k := [2]string{p.prefix, p.suffix}
		byAffix[k] = append(byAffix[k], p.digits)
	}

	groups := map[key][]int64{}
	for affix, digits := range byAffix {
		slices.Sort(digits)
		digits = slices.Compact(digits)
		var widths []int // padded widths present, ascending
		for _, d := range digits {
			if padded(d) {
				widths = append(widths, len(d))
			}
		}
		slices.Sort(widths)
		widths = slices.Compact(widths)
		for _, d := range digits {
			n, _ := strconv.ParseInt(d, 10, 64) // all digits, at most maxDigits
			w := 0
			if padded(d) {
				w = len(d)
			} else {
				// Join the widest padded group that prints n the same.
				for _, pw := range widths {
					if pw <= len(d) {
						w = pw
					}
				}
			}
			k := key{affix[0], affix[1], w}
			groups[k] = append(groups[k], n)
		}
	}

	type item struct {
		sortKey key
		text    string
	}
	items := make([]item, 0, len(groups)+len(literals))
	for k, nums := range groups {
		slices.Sort(nums)
		var b strings.Builder
		b.WriteString(k.prefix)
		if len(nums) == 1 {
			b.WriteString(formatNum(nums[0], k.width))
		} else {
			b.WriteByte('[')
			for i := 0; i < len(nums); {
				j := i
				for j+1 < len(nums) && nums[j+1] == nums[j]+1 {
					j++
				}
				if i > 0 {
					b.WriteByte(',')
				}
				b.WriteString(formatNum(nums[i], k.width))
				if j > i {
					b.WriteByte('-')
					b.WriteString(formatNum(nums[j], k.width))
				}
				i = j + 1
			}
			b.WriteByte(']')
		}
		b.WriteString(k.suffix)
		items = append(items, item{k, b.String()})
	}
	for name := range literals {
		items = append(items, item{key{prefix: name, width: -1}, name})
	}
	slices.SortFunc(items, func(a, b item) int {
		if c := strings.Compare(a.sortKey.prefix, b.sortKey.prefix); c != 0 {
			return c
		}
		if c := strings.Compare(a.sortKey.suffix, b.sortKey.suffix); c != 0 {
			return c
		}
		return a.sortKey.width - b.sortKey.width
	})
	texts := make([]string, len(items))
	for i, it := range items {
		texts[i] = it.text
	}
	return strings.Join(texts, ","), nil
}

// Expand lists the names of a Slurm-style hostlist, in its order: items
// separated by commas, each a name with any number of bracketed lists of
// numbers and ranges ("node[1-3,7]", "r[1-2]n[01-02]" for the product). A
// range "lo-hi" prints every number at the width of lo, so "node[08-10]"
// gives node08, node09, node10. An empty hostlist has no names.
func Expand(hostlist string) ([]string, error) {
	if hostlist == "" {
		return []string{}, nil
	}
	items, err := splitTop(hostlist)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, it := range items {
		names, err := expandItem(it, MaxExpand-len(out))
		if err != nil {
			return nil, err
		}
		out = append(out, names...)
	}
	return out, nil
}

// splitTop splits at the commas outside brackets.
func splitTop(s string) ([]string, error) {
	var items []string
	depth, start := 0, 0
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '[':
			if depth > 0 {
				return nil, fmt.Errorf("%w: nested '[' at offset %d", ErrHostlist, i)
			}
			depth++
		case ']':
			if depth == 0 {
				return nil, fmt.Errorf("%w: unmatched ']' at offset %d", ErrHostlist, i)
			}
			depth--
		case ',':
			if depth == 0 {
				if i == start {
					return nil, fmt.Errorf("%w: empty name at offset %d", ErrHostlist, i)
				}
				items = append(items, s[start:i])
				start = i + 1
			}
		}
	}
	if depth != 0 {
		return nil, fmt.Errorf("%w: unterminated '['", ErrHostlist)
	}
	if start == len(s) {
		return nil, fmt.Errorf("%w: empty name at the end", ErrHostlist)
	}
	return append(items, s[start:]), nil
}

// expandItem expands one item (no top-level commas, brackets balanced and
// not nested) into at most limit names.
func expandItem(item string, limit int) ([]string, error) {
	names := []string{""}
	for item != "" {
		open := strings.IndexByte(item, '[')
		if open < 0 {
			open = len(item)
		}
		if lit := item[:open]; lit != "" {
			if err := checkLiteral(lit); err != nil {
				return nil, err
			}
			for i := range names {
				names[i] += lit
			}
		}
		if open == len(item) {
			break
		}
		end := strings.IndexByte(item, ']')
		parts, err := parseRanges(item[open+1 : end])
		if err != nil {
			return nil, err
		}
		count := 0
		for _, r := range parts {
			count += int(r.hi - r.lo + 1)
			if count > limit || len(names)*count > limit {
				return nil, fmt.Errorf("%w: more than %d names", ErrHostlist, MaxExpand)
			}
		}
		next := make([]string, 0, len(names)*count)
		for _, base := range names {
			for _, r := range parts {
				for n := r.lo; n <= r.hi; n++ {
					next = append(next, base+formatNum(n, r.width))
				}
			}
		}
		names = next
		item = item[end+1:]
	}
	if len(names) > limit {
		return nil, fmt.Errorf("%w: more than %d names", ErrHostlist, MaxExpand)
	}
	if len(names) == 1 && names[0] == "" {
		return nil, fmt.Errorf("%w: empty name", ErrHostlist)
	}
	return names, nil
}

type numRange struct {
	lo, hi int64
	width  int
}

// parseRanges parses "1-3,07,10-12", the inside of a bracket.
func parseRanges(s string) ([]numRange, error) {
	if s == "" {
		return nil, fmt.Errorf("%w: empty brackets", ErrHostlist)
	}
	var out []numRange
	for _, part := range strings.Split(s, ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		if !isRange {
			hi = lo
		}
		l, err := parseDigits(lo)
		if err != nil {
			return nil, err
		}
		h, err := parseDigits(hi)
		if err != nil {
			return nil, err
		}
		if h < l {
			return nil, fmt.Errorf("%w: range %q goes backwards", ErrHostlist, part)
		}
		out = append(out, numRange{l, h, len(lo)})
	}
	return out, nil
}

func parseDigits(s string) (int64, error) {
	if s == "" || len(s) > maxDigits {
		return 0, fmt.Errorf("%w: %q is not a number of 1 to %d digits", ErrHostlist, s, maxDigits)
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, fmt.Errorf("%w: %q is not a number", ErrHostlist, s)
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%w: %q: %v", ErrHostlist, s, err)
	}
	return n, nil
}

// splitDigits splits name around its last run of digits.
func splitDigits(name string) (struct{ prefix, digits, suffix string }, bool) {
	var p struct{ prefix, digits, suffix string }
	end := strings.LastIndexFunc(name, isDigit)
	if end < 0 {
		return p, false
	}
	start := end
	for start > 0 && isDigit(rune(name[start-1])) {
		start--
	}
	if end+1-start > maxDigits {
		return p, false
	}
	p.prefix, p.digits, p.suffix = name[:start], name[start:end+1], name[end+1:]
	return p, true
}

func isDigit(r rune) bool { return r >= '0' && r <= '9' }

// padded reports whether a digit string carries zero padding.
func padded(d string) bool { return len(d) > 1 && d[0] == '0' }

func formatNum(n int64, width int) string {
	s := strconv.FormatInt(n, 10)
	if len(s) < width {
		s = strings.Repeat("0", width-len(s)) + s
	}
	return s
}

// checkHostname refuses names a hostlist cannot carry.
func checkHostname(name string) error {
	if name == "" {
		return fmt.Errorf("%w: empty node name", ErrHostlist)
	}
	if err := checkLiteral(name); err != nil {
		return err
	}
	if strings.ContainsAny(name, ",[]") {
		return fmt.Errorf("%w: node name %q holds a comma or a bracket", ErrHostlist, name)
	}
	return nil
}

// checkLiteral refuses white space and control characters.
func checkLiteral(s string) error {
	for _, r := range s {
		if unicode.IsSpace(r) || unicode.IsControl(r) {
			return fmt.Errorf("%w: %q holds white space or a control character", ErrHostlist, s)
		}
	}
	return nil
}
