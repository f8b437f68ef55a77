package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// scontrolTimeout bounds the one scontrol a failed resume runs.
const scontrolTimeout = 10 * time.Second

func main() {
	os.Exit(run(os.Args[1:], os.LookupEnv))
}

// run is hooks.main: one hook call, its log line, and the exit status.
func run(argv []string, getenv func(string) (string, bool)) int {
	start := time.Now()
	s := settingsFromEnv(getenv)
	log := func(message string) { writeLog(s.logPath, logLine(time.Now(), os.Getpid(), message)) }
	call, err := parseArgv(argv)
	if err != nil {
		log(fmt.Sprintf("usage error: %s; argv=%s", err, pyListRepr(argv)))
		return exitUsage
	}
	note := ""
	if call.kind == "resume" { // first thing: the fd behind the file lives only briefly
		call.resumeFile, note = readResumeFile(getenv)
	}
	requestID := newRequestID(call.kind)
	head := fmt.Sprintf("%s request_id=%s hostlist=%s", call.name(), requestID, call.hostlist)
	if note != "" {
		head += " note=" + pyRepr(note)
	}
	results, err := send(call, s, requestID)
	if err != nil {
		failure, detail := describeFailure(err)
		action := onFailure(call, s, failure, detail)
		log(fmt.Sprintf("%s result=%s error=%s action=%s %s", head, failure, pyRepr(detail), action, elapsed(start)))
		return exitFailed
	}
	log(fmt.Sprintf("%s result=ok %s %s", head, summarize(results), elapsed(start)))
	return exitOK
}

// summarize counts per-node outcomes for the log line; the bridge handles the not-ok ones, and
// listing a few helps whoever reads the hook log.
func summarize(results []nodeResult) string {
	accepted, notOK := 0, []nodeResult{}
	for _, r := range results {
		switch r.outcome {
		case "ACCEPTED":
			accepted++
		case "OK":
		default:
			notOK = append(notOK, r)
		}
	}
	ok := len(results) - accepted - len(notOK)
	out := fmt.Sprintf("nodes=%d ok=%d accepted=%d not_ok=%d", len(results), ok, accepted, len(notOK))
	if len(notOK) > 0 {
		shown := make([]string, 0, 5)
		for _, r := range notOK[:min(5, len(notOK))] {
			shown = append(shown, r.node+":"+r.errorClass+":"+r.message)
		}
		out += " first_not_ok=" + pyRepr(strings.Join(shown, ", "))
	}
	return out
}

// ourReason is bridge.domain.nodes.our_reason: `k8s: <Kind>: <message>` on one short line.
func ourReason(kind, message string) string {
	text := strings.TrimSpace(strings.ReplaceAll("k8s: "+kind+": "+message, "\n", " "))
	if r := []rune(text); len(r) > 200 { // Python counts characters
		return string(r[:197]) + "..."
	}
	return text
}

// onFailure sets a resume's nodes DOWN so their jobs requeue now; returns what was done.
func onFailure(call hookCall, s settings, failure, detail string) string {
	if call.kind != "resume" {
		return "none" // reconcile repairs a lost suspend/resume_fail/event; nothing waits on it
	}
	if failure == kindNoAnswer {
		// The bridge may hold the call: failing the nodes would fight pods it is creating. Its
		// reconciler finishes the resume from POWERING_UP once it answers; else ResumeTimeout.
		return "none:left-powering-up-for-the-reconciler"
	}
	argv := []string{
		filepath.Join(s.slurmBin, "scontrol"), "update", "nodename=" + call.hostlist,
		"state=down", "reason=" + ourReason(failure, detail),
	}
	ctx, cancel := context.WithTimeout(context.Background(), scontrolTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if ctx.Err() == context.DeadlineExceeded {
		return fmt.Sprintf("'scontrol update state=down failed: Command %s timed out after 10.0 seconds'", pyListRepr(argv))
	}
	var exitErr *exec.ExitError
	if errors.As(err, &exitErr) {
		code := exitErr.ExitCode()
		if ws, ok := exitErr.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			code = -int(ws.Signal())
		}
		out := stderr.String()
		if out == "" {
			out = stdout.String()
		}
		return fmt.Sprintf("'scontrol update state=down exited %d: %s'", code, strings.ReplaceAll(strings.TrimSpace(out), "\n", " "))
	}
	if err != nil {
		var pe *os.PathError
		if errors.As(err, &pe) {
			err = pe.Err
		}
		return fmt.Sprintf("'scontrol update state=down failed: %s'", pyOSError(err, argv[0]))
	}
	return "scontrol-state=down"
}
