package procfs

import (
	"fmt"
	"strconv"
	"strings"
)

// SigKillMask is SIGKILL's bit in a signal mask: bit n-1 stands for signal n.
const SigKillMask = 1 << (9 - 1)

// signalNames are the names of signals 1 to 31 in the generic numbering used
// by x86, arm, arm64, riscv, powerpc and s390 (alpha, mips, parisc and sparc
// differ).
var signalNames = [32]string{
	1: "SIGHUP", 2: "SIGINT", 3: "SIGQUIT", 4: "SIGILL", 5: "SIGTRAP",
	6: "SIGABRT", 7: "SIGBUS", 8: "SIGFPE", 9: "SIGKILL", 10: "SIGUSR1",
	11: "SIGSEGV", 12: "SIGUSR2", 13: "SIGPIPE", 14: "SIGALRM", 15: "SIGTERM",
	16: "SIGSTKFLT", 17: "SIGCHLD", 18: "SIGCONT", 19: "SIGSTOP", 20: "SIGTSTP",
	21: "SIGTTIN", 22: "SIGTTOU", 23: "SIGURG", 24: "SIGXCPU", 25: "SIGXFSZ",
	26: "SIGVTALRM", 27: "SIGPROF", 28: "SIGWINCH", 29: "SIGIO", 30: "SIGPWR",
	31: "SIGSYS",
}

// sigRTMin is the kernel's SIGRTMIN. glibc keeps 32 and 33 for itself and
// calls 34 its SIGRTMIN, so a mask bit for 34 is named SIGRTMIN+2 here, the
// kernel's view.
const sigRTMin = 32

// ParseSigMask parses a hexadecimal mask of /proc/PID/status
// ("0000000000000100").
func ParseSigMask(s string) (uint64, error) {
	m, err := strconv.ParseUint(strings.TrimSpace(s), 16, 64)
	if err != nil {
		return 0, fmt.Errorf("parse signal mask %q: %w", s, err)
	}
	return m, nil
}

// SignalName names signal n (1 to 64): "SIGKILL", "SIGRTMIN+3", or "SIG<n>"
// for a number without a name.
func SignalName(n int) string {
	switch {
	case n > 0 && n < sigRTMin && signalNames[n] != "":
		return signalNames[n]
	case n == sigRTMin:
		return "SIGRTMIN"
	case n > sigRTMin && n <= 64:
		return fmt.Sprintf("SIGRTMIN+%d", n-sigRTMin)
	}
	return fmt.Sprintf("SIG%d", n)
}

// SignalNames names the signals of mask, lowest number first: bit n-1 stands
// for signal n, so 0x100 gives ["SIGKILL"].
func SignalNames(mask uint64) []string {
	var names []string
	for n := 1; n <= 64; n++ {
		if mask&(1<<(n-1)) != 0 {
			names = append(names, SignalName(n))
		}
	}
	return names
}
