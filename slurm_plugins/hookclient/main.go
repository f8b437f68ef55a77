package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unicode/utf8"
)

// scontrolTimeoutS bounds the one scontrol a failed resume runs.
const scontrolTimeoutS = 10

// asciiBlanks are trimmed from scontrol's output before it goes into the log line.
const asciiBlanks = " \t\n\r\v\f"

func main() {
	os.Exit(run(os.Args[1:], os.LookupEnv))
}

// run is one hook call: its log line and its exit status, unless it hands nodes to the site's own
// program (handoff.go), which then takes the process over.
func run(argv []string, getenv func(string) (string, bool)) int {
	start := time.Now()
	s := settingsFromEnv(getenv)
	log := func(message string) { writeLog(s.logPath, logLine(time.Now(), os.Getpid(), message)) }
	call, err := parseArgv(argv)
	if err != nil {
		log("argv=" + logList(argv) + " result=UsageError error=" + logValue(err.Error()))
		return exitUsage
	}
	note, raw := "", []byte(nil)
	if call.kind == "resume" { // first thing: the fd behind the file lives only briefly
		raw, note = readResumeFile(getenv)
		call.resumeFile = validUTF8(raw)
	}
	requestID := newRequestID(call.kind)
	head := fmt.Sprintf("%s request_id=%s hostlist=%s", call.name(), requestID, logValue(call.hostlist))
	if note != "" {
		head += " note=" + logValue(note)
	}
	results, err := send(call, s, requestID)
	if err != nil {
		failure, detail := describeFailure(err)
		action := onFailure(call, s, failure, detail)
		log(fmt.Sprintf("%s result=%s error=%s action=%s %s", head, failure, logValue(detail), logValue(action), elapsed(start)))
		return exitFailed
	}
	line := head + " result=ok " + summarize(results)
	program := s.siteProgram(call.kind)
	var nodes []string
	if program != "" {
		nodes = siteNodes(results)
	}
	if len(nodes) == 0 {
		log(line + " " + elapsed(start))
		return exitOK
	}
	handedOff := strings.Join(nodes, ",") // a comma list is a Slurm hostlist
	log(fmt.Sprintf("%s handed_off=%s program=%s %s", line, logValue(handedOff), logValue(program), elapsed(start)))
	why := handOff(program, handedOff, os.Environ(), raw) // returns only when it failed
	log(fmt.Sprintf("%s request_id=%s handoff=failed program=%s error=%s", call.name(), requestID, logValue(program), logValue(why)))
	return exitFailed
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
		out += " first_not_ok=" + logValue(strings.Join(shown, ", "))
	}
	return out
}

// ourReason is the bridge's reason text (bridge.domain.reason.Reason.text): `k8s: <Kind>:
// <message>` on one line of at most 200 characters (code points; an undecodable byte counts as
// one and is kept), cut to 197 and "..." when longer.
func ourReason(kind, message string) string {
	text := strings.TrimSpace(strings.ReplaceAll("k8s: "+kind+": "+message, "\n", " "))
	if charOffset(text, 201) >= 0 { // more than 200 characters
		return text[:charOffset(text, 197)] + "..."
	}
	return text
}

// charOffset is the byte offset of the n-th character of s (code points, an invalid byte counting
// as one), or -1 when s has fewer than n characters.
func charOffset(s string, n int) int {
	i := 0
	for ; n > 0; n-- {
		if i >= len(s) {
			return -1
		}
		_, size := utf8.DecodeRuneInString(s[i:])
		i += size
	}
	return i
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
	if failure == kindNotLeader {
		// Mid-failover: whichever bridge leads next finishes the resume from POWERING_UP (its
		// first pass re-reads Slurm); if none does, ResumeTimeout fails the nodes.
		return "none:left-powering-up-for-the-next-leader"
	}
	argv := []string{
		filepath.Join(s.slurmBin, "scontrol"), "update", "nodename=" + call.hostlist,
		"state=down", "reason=" + ourReason(failure, detail),
	}
	ctx, cancel := context.WithTimeout(context.Background(), scontrolTimeoutS*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	const what = "scontrol update state=down"
	if ctx.Err() == context.DeadlineExceeded {
		return what + " timed out after " + strconv.Itoa(scontrolTimeoutS) + " s"
	}
	var exitErr *exec.ExitError
	if errors.As(err, &exitErr) {
		how := "exited " + strconv.Itoa(exitErr.ExitCode())
		if ws, ok := exitErr.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			how = "killed by signal " + strconv.Itoa(int(ws.Signal()))
		}
		out := stderr.String()
		if out == "" {
			out = stdout.String()
		}
		if out = strings.Trim(out, asciiBlanks); out != "" {
			return what + " " + how + ": " + strings.ReplaceAll(out, "\n", " ")
		}
		return what + " " + how
	}
	if err != nil {
		return what + " failed: " + strerror(err)
	}
	return "scontrol-state=down"
}
