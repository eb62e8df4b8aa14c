package actuate

import (
	"strings"
	"testing"
)

// ValidateConfigs names each bad key and fills the defaults of the good
// tables.
func TestValidateConfigs(t *testing.T) {
	good := []Config{{On: OnDown, Command: []string{"scontrol", "update", "node={node}", "reason={reason}"}},
		{On: OnUp, Command: []string{"resume", "{nodes}"}}}
	if err := ValidateConfigs(good, "actuator"); err != nil {
		t.Fatal(err)
	}
	if good[0].Timeout.D() != DefaultActuatorTimeout || good[0].Retries == nil || *good[0].Retries != DefaultActuatorRetries {
		t.Errorf("defaults not filled: %+v", good[0])
	}
	many := 101
	for _, c := range []struct {
		name string
		cs   []Config
		want string
	}{
		{"on", []Config{{On: "sideways", Command: []string{"x"}}}, `key "actuator[0].on"`},
		{"no program", []Config{{On: OnDown}}, `key "actuator[0].command": must name a program`},
		{"placeholder", []Config{{On: OnDown, Command: []string{"x", "{host}"}}}, "unknown placeholder {host}"},
		{"batch on down", []Config{{On: OnDown, Command: []string{"x", "{nodes}"}}}, "{nodes} is for on = \"up\""},
		{"batch with node", []Config{{On: OnDown, Command: []string{"x"}}, {On: OnUp, Command: []string{"x", "{nodes}", "{node}"}}},
			`key "actuator[1].command": {node} in "{node}"`},
		{"retries", []Config{{On: OnDown, Command: []string{"x"}, Retries: &many}}, `key "actuator[0].retries"`},
		{"up alone", []Config{{On: OnUp, Command: []string{"x"}}}, `key "actuator": an on = "up" actuator`},
	} {
		t.Run(c.name, func(t *testing.T) {
			if err := ValidateConfigs(c.cs, "actuator"); err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %v, want %q", err, c.want)
			}
		})
	}
}
