package main

import (
	"os/exec"
	"syscall"
)

// dieWithUs has cmd killed when the bench exits, whichever way: fail
// exits at once, and a daemon or S3 server it started was left running
// (three stayed up after a failed fleet run, through the next benches).
func dieWithUs(cmd *exec.Cmd) *exec.Cmd {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	return cmd
}
