// Command hangfs-serve mounts hangfs (a FUSE file system whose reads of
// "hang" never answer) on the directory given as its argument and serves it
// until killed. The demo uses it to make a truly unkillable process; tests
// use hangfs.Start instead.
package main

import (
	"fmt"
	"os"

	"github.com/gracewatch/gracewatch/internal/testutil/hangfs"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: hangfs-serve MOUNTPOINT")
		os.Exit(2)
	}
	os.Setenv(hangfs.EnvMount, os.Args[1])
	hangfs.RunIfRequested()
}
