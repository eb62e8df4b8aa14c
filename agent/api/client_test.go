package api

import (
	"bytes"
	"strings"
	"testing"
)

func TestReadFrames(t *testing.T) {
	tests := []struct {
		name       string
		in         string
		wantStatus int
		wantOut    string
		wantErr    string
	}{
		{"exit", `{"stream":"stdout","data":"aGk="}` + "\n" + `{"stream":"exit","status":7}` + "\n", 7, "hi", ""},
		{"blank lines and unknown streams skipped", "\n" + `{"stream":"progress"}` + "\n" + `{"stream":"exit","status":0}` + "\n", 0, "", ""},
		{"error frame", `{"stream":"error","error":"boom"}` + "\n", 0, "", "boom"},
		{"eof before exit", `{"stream":"stdout","data":"aGk="}` + "\n", 0, "hi", "stream ended before the exit status"},
		{"eof inside frame", `{"stream":"exit","sta`, 0, "", "stream ended inside frame 1"},
		{"exit without status", `{"stream":"exit"}` + "\n", 0, "", "without a status"},
		{"status out of range", `{"stream":"exit","status":300}` + "\n", 0, "", "out of range"},
		{"bad json", "{x}\n", 0, "", "frame 1 from the agent: frame: invalid JSON at offset 2"},
		{"bad base64", `{"stream":"stdout","data":"!!"}` + "\n", 0, "", "frame 1"},
		{"too long", `{"stream":"stdout","data":"` + strings.Repeat("A", maxFrameLine) + `"}` + "\n", 0, "", "longer than"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out bytes.Buffer
			status, err := readFrames(strings.NewReader(tt.in), &out, &out)
			if tt.wantErr == "" {
				if err != nil || status != tt.wantStatus {
					t.Fatalf("readFrames = %d, %v; want %d", status, err, tt.wantStatus)
				}
			} else if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("readFrames error = %v; want %q", err, tt.wantErr)
			}
			if out.String() != tt.wantOut {
				t.Errorf("output %q; want %q", out.String(), tt.wantOut)
			}
		})
	}
}
