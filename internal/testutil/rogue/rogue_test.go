package rogue

import (
	"bytes"
	"io"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/gracewatch/gracewatch/internal/testutil"
)

// userMsgs is a memberlist Delegate that keeps the user messages.
type userMsgs struct {
	mu   sync.Mutex
	msgs []string
}

func (u *userMsgs) NotifyMsg(b []byte) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.msgs = append(u.msgs, string(b))
}

func (u *userMsgs) got(msg string) bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	for _, m := range u.msgs {
		if m == msg {
			return true
		}
	}
	return false
}

func (*userMsgs) NodeMeta(int) []byte                 { return nil }
func (*userMsgs) GetBroadcasts(int, int) [][]byte     { return nil }
func (*userMsgs) LocalState(bool) []byte              { return nil }
func (*userMsgs) MergeRemoteState(buf []byte, _ bool) {}

// The crafted messages are memberlist's own: a real, encrypted and
// labelled memberlist takes an invented member from an alive message and
// marks it dead from a dead message; a wrong key or label is dropped; a
// user message reaches its delegate.
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
	user := &userMsgs{}
	mc.Delegate = user
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
		testutil.Eventually(t, 20*time.Second, what, cond)
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
	if err := c.Send(addr, User([]byte("marker"))); err != nil {
		t.Fatal(err)
	}
	wait("the user message", func() bool { return user.got("marker") })
}
