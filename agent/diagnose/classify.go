package diagnose

import (
	"slices"
	"strings"

	"github.com/gracewatch/gracewatch/agent/procfs"
)

// classOrder lists the classes worst first.
var classOrder = []Class{Unkillable, ExitHang, KillableD, Missed, Dying, Zombie}

// exitFrames are the kernel functions whose presence in the stack of a task
// in D with PF_EXITING shows that it hangs in its own exit (the SIGKILL was
// consumed): tearing down its memory or closing its files.
var exitFrames = []string{"do_exit", "exit_mmap", "__fput"}

// Classify returns the class of one thread by docs/DESIGN.md §3.3:
//
//   - zombie: state Z (or X);
//   - exit-hang: D with PF_EXITING and do_exit, exit_mmap or __fput in the
//     stack (checked before unkillable: the SIGKILL may still show);
//   - unkillable: D with SIGKILL pending (SigPnd or ShdPnd);
//   - killable-d: D without SIGKILL pending;
//   - missed: the main thread, a zombie, while other threads of its process
//     live (mainZombieWithLiveThreads; pass false for every other thread),
//     or any other state without SIGKILL pending;
//   - dying: any other state with SIGKILL pending.
//
// It reads t.State, t.Flags or t.Exiting, t.Stack and t.KillPending. A
// thread whose state could not be read counts as running.
func Classify(t Thread, mainZombieWithLiveThreads bool) Class {
	switch t.State {
	case "Z":
		if mainZombieWithLiveThreads {
			return Missed
		}
		return Zombie
	case "X", "x":
		return Zombie
	case "D":
		exiting := t.Exiting || t.Flags&procfs.PFExiting != 0
		if exiting && inExitPath(t.Stack) {
			return ExitHang
		}
		if t.KillPending {
			return Unkillable
		}
		return KillableD
	}
	if t.KillPending {
		return Dying
	}
	return Missed
}

func inExitPath(stack []string) bool {
	return slices.ContainsFunc(stack, func(fn string) bool {
		return slices.Contains(exitFrames, baseSymbol(fn))
	})
}

// baseSymbol strips the compiler's suffixes from a kernel symbol
// ("__fput.isra.0" gives "__fput").
func baseSymbol(fn string) string {
	if i := strings.IndexByte(fn, '.'); i > 0 {
		return fn[:i]
	}
	return fn
}

// worstThread returns the index of the thread that speaks for its process:
// the worst class; among equals a live thread before a zombie main thread,
// then the lowest tid. It returns -1 for no threads.
func worstThread(ts []Thread) int {
	best := -1
	for i, t := range ts {
		if best < 0 {
			best = i
			continue
		}
		b := ts[best]
		switch {
		case t.Class.Severity() > b.Class.Severity():
			best = i
		case t.Class.Severity() == b.Class.Severity() && b.State == "Z" && t.State != "Z":
			best = i
		}
	}
	return best
}
