//go:build unix

package extern

import (
	"os/exec"
	"syscall"
)

// setGroup starts the trainer in a process group of its own, so that
// stopping it stops what it started too (a shell, data loader workers).
func setGroup(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
}

// killGroup kills the trainer's process group.
func killGroup(cmd *exec.Cmd) {
	if cmd.Process != nil {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
}
