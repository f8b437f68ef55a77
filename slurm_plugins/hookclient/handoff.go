package main

import (
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// Hand-off: slurmctld has one ResumeProgram (SuspendProgram, ResumeFailProgram) for all nodes, so
// a site that powers its own static nodes names its previous program in SKB_SITE_*_PROGRAM. After
// the bridge answered, the nodes it answered UNKNOWN_NODE for (no pool owns them) are the site's,
// and the hook execs that program for them in its own place (bridge/hooks.py has the same).

// sitePrograms names the setting that holds the site's own program for each hook kind that hands
// nodes off (hooks.SITE_PROGRAM_KEYS).
var sitePrograms = map[string]string{
	"resume":      "SKB_SITE_RESUME_PROGRAM",
	"suspend":     "SKB_SITE_SUSPEND_PROGRAM",
	"resume_fail": "SKB_SITE_RESUME_FAIL_PROGRAM",
}

// siteProgram is the program the nodes no pool owns go to after a call of kind ("": none).
func (s settings) siteProgram(kind string) string {
	switch kind {
	case "resume":
		return s.siteResume
	case "suspend":
		return s.siteSuspend
	case "resume_fail":
		return s.siteResumeFail
	}
	return ""
}

// siteNodes are the nodes no pool owns (UNKNOWN_NODE), in the bridge's order: the site's to power.
func siteNodes(results []nodeResult) []string {
	var nodes []string
	for _, r := range results {
		if r.errorClass == "UNKNOWN_NODE" {
			nodes = append(nodes, r.node)
		}
	}
	return nodes
}

// siteEnv is the site program's environment: the hook's, without our SKB_* settings, and with
// SLURM_RESUME_FILE=resumeFile when resumeFile is not empty.
func siteEnv(environ []string, resumeFile string) []string {
	env := make([]string, 0, len(environ)+1)
	for _, kv := range environ {
		if strings.HasPrefix(kv, "SKB_") || (resumeFile != "" && strings.HasPrefix(kv, "SLURM_RESUME_FILE=")) {
			continue
		}
		env = append(env, kv)
	}
	if resumeFile != "" {
		env = append(env, "SLURM_RESUME_FILE="+resumeFile)
	}
	return env
}

// handOff execs `program nodes` in place of this process (same pid, so the program's exit status
// is the hook's, as if slurmctld had run it) and returns why not only when that failed. resume,
// when not nil, is the resume file's bytes as slurmctld wrote them: they go in a memfd without
// close-on-exec that SLURM_RESUME_FILE names, since slurmctld's own fd is short-lived.
func handOff(program, nodes string, environ []string, resume []byte) string {
	if !filepath.IsAbs(program) {
		return "not an absolute path"
	}
	resumeFile := ""
	if resume != nil {
		if fd := memfdHolding(resume); fd >= 0 { // else slurmctld's SLURM_RESUME_FILE stays
			resumeFile = "/proc/" + strconv.Itoa(syscall.Getpid()) + "/fd/" + strconv.Itoa(fd)
		}
	}
	err := syscall.Exec(program, []string{program, nodes}, siteEnv(environ, resumeFile))
	return strerror(err)
}

// memfdHolding is a memfd holding data that an exec'd program inherits (-1 when one cannot be
// made). Raw fds, not an *os.File: its finalizer would close the fd.
func memfdHolding(data []byte) int {
	fd, err := unix.MemfdCreate("slurm_resume_file", 0) // 0: no MFD_CLOEXEC
	if err != nil {
		return -1
	}
	for len(data) > 0 {
		n, err := unix.Write(fd, data)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			_ = unix.Close(fd)
			return -1
		}
		data = data[n:]
	}
	return fd
}
