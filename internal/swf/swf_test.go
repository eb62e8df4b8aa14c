package swf

import (
	"errors"
	"strings"
	"testing"
)

const header = "; Installation: test\n; MaxNodes: 2\n;\n"

func TestRead(t *testing.T) {
	jobs, err := Read(strings.NewReader(header+
		"1\t0\t5\t99\t88\t-1\t-1\t88\t3600\t-1\t1\t62\t62\t-1\t-1\t1\t-1\t-1\n"+
		"\n"+
		"  2 10 0 3 30 -1.0 -1 30 600 -1 0 36 36 -1 -1 0 -1 -1  \n"), 0)
	if err != nil {
		t.Fatal(err)
	}
	want := []Job{
		{Line: 4, ID: 1, Submit: 0, Wait: 5, Run: 99, Procs: 88, ReqProcs: 88, ReqTime: 3600, Status: 1},
		{Line: 6, ID: 2, Submit: 10, Wait: 0, Run: 3, Procs: 30, ReqProcs: 30, ReqTime: 600, Status: 0},
	}
	if len(jobs) != len(want) {
		t.Fatalf("%d jobs, want %d: %+v", len(jobs), len(want), jobs)
	}
	for i := range want {
		if jobs[i] != want[i] {
			t.Errorf("job %d: %+v, want %+v", i, jobs[i], want[i])
		}
	}
}

func TestReadErrors(t *testing.T) {
	good := "1 0 5 99 88 -1 -1 88 3600 -1 1 62 62 -1 -1 1 -1 -1\n"
	for _, tt := range []struct {
		name, in string
		limit    int
		want     string
		is       error
	}{
		{"a field missing", header + good + "2 0 5 99 88 -1 -1 88 3600 -1 1 62 62 -1 -1 1 -1\n", 0, "swf: line 5: 17 fields, want 18", nil},
		{"an extra field", good + good + good[:len(good)-1] + " 7\n", 0, "swf: line 3: 19 fields, want 18", nil},
		{"not an integer", "1 0 5 x9 88 -1 -1 88 3600 -1 1 62 62 -1 -1 1 -1 -1\n", 0, `swf: line 1: field 4 (run time): "x9" is not an integer`, nil},
		{"a fraction", "1 0 5 9.5 88 -1 -1 88 3600 -1 1 62 62 -1 -1 1 -1 -1\n", 0, `field 4 (run time): "9.5" is not an integer`, nil},
		{"below -1", "1 0 5 99 88 -1 -1 88 -7 -1 1 62 62 -1 -1 1 -1 -1\n", 0, "field 9 (requested time): -7 is below -1", nil},
		{"a line too long", good + strings.Repeat("1 ", MaxLine) + "\n", 0, "swf: line 2: longer than 4096 bytes", nil},
		{"too many jobs", good + good + good, 2, "swf: line 3: too many jobs (limit 2)", ErrTooManyJobs},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Read(strings.NewReader(tt.in), tt.limit)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err %v, want one containing %q", err, tt.want)
			}
			if tt.is != nil && !errors.Is(err, tt.is) {
				t.Errorf("err %v is not %v", err, tt.is)
			}
		})
	}
}

// FuzzRead: a trace is input from outside. Read never panics, keeps at
// most its limit, and every job it returns has fields of at least -1 and
// the line number it came from.
func FuzzRead(f *testing.F) {
	f.Add(header + "1 0 5 99 88 -1 -1 88 3600 -1 1 62 62 -1 -1 1 -1 -1\n")
	f.Add("1 0 5 99 88 -1.0 -1 88 3600 -1 1 62 62 -1 -1 1 -1 -1\n; x\n2 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1")
	f.Add("1e3 0 5 99 88 -1 -1 88 3600 -1 1 62 62 -1 -1 1 -1 -1\n")
	f.Fuzz(func(t *testing.T, in string) {
		const limit = 50
		jobs, err := Read(strings.NewReader(in), limit)
		if err != nil {
			if !strings.Contains(err.Error(), "line ") {
				t.Fatalf("error names no line: %v", err)
			}
			return
		}
		if len(jobs) > limit {
			t.Fatalf("%d jobs, limit %d", len(jobs), limit)
		}
		lines := strings.Count(in, "\n") + 1
		prev := 0
		for _, j := range jobs {
			if j.Line <= prev || j.Line > lines {
				t.Fatalf("job on line %d after line %d, of %d lines", j.Line, prev, lines)
			}
			prev = j.Line
			for _, v := range []int64{j.ID, j.Submit, j.Wait, j.Run, j.Procs, j.ReqProcs, j.ReqTime, j.Status} {
				if v < -1 {
					t.Fatalf("field %d below -1 in %+v", v, j)
				}
			}
		}
	})
}
