package main

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/hcomm-go/hcomm/internal/testutil"
	"github.com/hcomm-go/hcomm/trace"
)

func requireTracing(t *testing.T) {
	t.Helper()
	testutil.RequirePrivileged(t, "load eBPF tracing programs")
	testutil.RequireFeature(t, "eBPF tracing (CAP_BPF, CAP_PERFMON)", trace.CheckPrivileges())
}

func TestRunTrueJSON(t *testing.T) {
	requireTracing(t)
	var stdout, stderr bytes.Buffer
	if code := run([]string{"run", "-o", "json", "--", "true"}, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d, stderr: %s", code, stderr.String())
	}
	// Exactly one JSON object on standard output, with the documented keys.
	dec := json.NewDecoder(&stdout)
	var obj map[string]any
	if err := dec.Decode(&obj); err != nil {
		t.Fatalf("decode: %v\n%s", err, stdout.String())
	}
	if dec.More() {
		t.Error("more than one JSON value on standard output")
	}
	for _, k := range []string{"process", "syscalls", "copy", "io_uring", "engine", "duration_ns", "page_faults", "exit_code"} {
		if _, ok := obj[k]; !ok {
			t.Errorf("key %q missing", k)
		}
	}
	var r trace.Report
	b, _ := json.Marshal(obj)
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatal(err)
	}
	if r.Process.PID <= 0 || r.Process.Comm != "true" {
		t.Errorf("process = %+v, want comm true and a PID", r.Process)
	}
	if r.Syscalls["execve"].Count != 1 {
		t.Errorf("execve count = %d, want 1 (traced from the first instruction)", r.Syscalls["execve"].Count)
	}
	if r.Syscalls["exit_group"].Count != 1 {
		t.Errorf("exit_group count = %d, want 1", r.Syscalls["exit_group"].Count)
	}
	if r.Engine.Present || r.Engine.Reason == "" {
		t.Errorf("engine = %+v, want absent with a reason", r.Engine)
	}
	if r.DurationNs <= 0 || r.ExitCode == nil || *r.ExitCode != 0 {
		t.Errorf("duration %d, exit %v", r.DurationNs, r.ExitCode)
	}
}

func TestRunExitStatusAndTable(t *testing.T) {
	requireTracing(t)
	var stdout, stderr bytes.Buffer
	code := run([]string{"run", "-top", "5", "--", "sh", "-c", "exit 7"}, &stdout, &stderr)
	if code != 7 {
		t.Fatalf("exit %d, want 7 (the command's); stderr: %s", code, stderr.String())
	}
	out := stdout.String()
	for _, want := range []string{"SYSCALL", "COPY (bytes)", "PAGE FAULTS", "ENGINE: absent", "exit status 7"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
}

func TestAttachMissingPID(t *testing.T) {
	requireTracing(t)
	var stdout, stderr bytes.Buffer
	code := run([]string{"attach", "-p", "4194000"}, &stdout, &stderr)
	if code != 1 || !strings.Contains(stderr.String(), "no such process") {
		t.Fatalf("exit %d, stderr %q; want 1 and 'no such process'", code, stderr.String())
	}
}

func TestUsageErrors(t *testing.T) {
	tests := []struct {
		name string
		args []string
	}{
		{"no subcommand", nil},
		{"unknown subcommand", []string{"frob"}},
		{"run without command", []string{"run"}},
		{"attach without pid", []string{"attach"}},
		{"bad format", []string{"run", "-o", "xml", "--", "true"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			if code := run(tc.args, &stdout, &stderr); code != 2 {
				t.Errorf("exit %d, want 2; stderr %q", code, stderr.String())
			}
		})
	}
}

// TestNotRootFailsClearly runs hcomm-trace without privileges: in-process
// when the test itself is not root, else as user nobody.
func TestNotRootFailsClearly(t *testing.T) {
	var stderr string
	var code int
	if os.Geteuid() != 0 {
		var out, errb bytes.Buffer
		code = run([]string{"run", "-o", "json", "--", "true"}, &out, &errb)
		stderr = errb.String()
	} else {
		dir, err := os.MkdirTemp("", "hcomm-trace-cli-")
		if err != nil {
			t.Fatal(err)
		}
		defer os.RemoveAll(dir)
		os.Chmod(dir, 0o755)
		bin := filepath.Join(dir, "hcomm-trace")
		if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
			t.Fatalf("build: %v\n%s", err, out)
		}
		cmd := exec.Command(bin, "run", "-o", "json", "--", "true")
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
		var errb bytes.Buffer
		cmd.Stderr = &errb
		err = cmd.Run()
		stderr = errb.String()
		code = cmd.ProcessState.ExitCode()
		if err == nil {
			t.Fatal("hcomm-trace succeeded as user nobody")
		}
	}
	if code != 1 {
		t.Errorf("exit %d, want 1", code)
	}
	if !strings.Contains(stderr, "CAP_BPF") || !strings.Contains(stderr, "CAP_PERFMON") {
		t.Errorf("stderr does not name the missing capabilities: %q", stderr)
	}
}

func TestIntervalJSONLinesKeepStrings(t *testing.T) {
	r := &trace.Report{Mode: "run-interval", Engine: trace.EngineReport{Reason: "no symbol table (stripped binary?)"}}
	line := compactJSON(r)
	if strings.Contains(line, "\n") {
		t.Fatalf("not one line: %q", line)
	}
	var back trace.Report
	if err := json.Unmarshal([]byte(line), &back); err != nil {
		t.Fatal(err)
	}
	if back.Engine.Reason != r.Engine.Reason {
		t.Errorf("reason %q, want %q", back.Engine.Reason, r.Engine.Reason)
	}
}
