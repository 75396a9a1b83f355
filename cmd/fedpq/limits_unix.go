//go:build unix

package main

import (
	"log"
	"syscall"
)

// checkFileLimit warns when this process may not open the descriptors it
// needs: a server holds a connection per client, a fleet one per client it
// runs. Go raises the soft limit to the hard one at start (since Go 1.19),
// so the hard limit is the one that counts.
func checkFileLimit(need int, logger *log.Logger) {
	var l syscall.Rlimit
	if syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l) != nil {
		return
	}
	if want := uint64(need) + 64; l.Cur < want {
		logger.Printf("this process may open %d files (the limit on open files, ulimit -n, hard %d) but needs about %d, one per client's connection: raise it (ulimit -Hn, systemd's LimitNOFILE, a container's --ulimit nofile) or clients will be refused", l.Cur, l.Max, want)
	}
}
