package rogue

import (
	"bytes"
	"io"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
)

// The crafted messages are memberlist's own: a real, encrypted and
// labelled memberlist takes an invented member from an alive message and
// marks it dead from a dead message; a wrong key or label is dropped.
func TestCraftedMessagesReachMemberlist(t *testing.T) {
	key := bytes.Repeat([]byte{7}, 16)
	kr, err := memberlist.NewKeyring(nil, key)
	if err != nil {
		t.Fatal(err)
	}
	mc := memberlist.DefaultLocalConfig()
	mc.Name, mc.BindAddr, mc.BindPort, mc.AdvertisePort = "victim", "127.0.0.1", 0, 0
	mc.Label, mc.Keyring, mc.GossipVerifyIncoming, mc.GossipVerifyOutgoing = "rogue-test", kr, true, true
	mc.LogOutput = io.Discard
	ml, err := memberlist.Create(mc)
	if err != nil {
		t.Fatal(err)
	}
	defer ml.Shutdown()
	addr := net.JoinHostPort(ml.LocalNode().Addr.String(), strconv.Itoa(int(ml.LocalNode().Port)))

	stateOf := func(name string) (memberlist.NodeStateType, bool) {
		for _, n := range ml.Members() {
			if n.Name == name {
				return n.State, true
			}
		}
		return 0, false
	}
	wait := func(what string, cond func() bool) {
		t.Helper()
		for end := time.Now().Add(5 * time.Second); !cond(); time.Sleep(10 * time.Millisecond) {
			if time.Now().After(end) {
				t.Fatalf("%s: not within 5 s", what)
			}
		}
	}

	wrong, err := New("rogue-test", bytes.Repeat([]byte{8}, 16))
	if err != nil {
		t.Fatal(err)
	}
	defer wrong.Close()
	if err := wrong.Send(addr, Alive("wrong-key", "127.0.0.9:7946", 1, nil)); err != nil {
		t.Fatal(err)
	}
	c, err := New("rogue-test", key)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Send(addr, Compound(Alive("phantom", "127.0.0.9:7946", 3, []byte("meta")), Alive("phantom2", "127.0.0.10:7946", 1, nil))); err != nil {
		t.Fatal(err)
	}
	wait("phantom alive", func() bool { s, ok := stateOf("phantom"); return ok && s == memberlist.StateAlive })
	wait("phantom2 alive", func() bool { _, ok := stateOf("phantom2"); return ok })
	if _, ok := stateOf("wrong-key"); ok {
		t.Error("a packet sealed with another key was taken")
	}
	if err := c.Send(addr, Dead("phantom", "someone", MaxIncarnation)); err != nil {
		t.Fatal(err)
	}
	wait("phantom dead", func() bool { s, ok := stateOf("phantom"); return !ok || s == memberlist.StateDead })
}
