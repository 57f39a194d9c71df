package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// The parent runs each unit of the run — a scenario, or one transport of
// remote — as a child process of this binary (-scenario-child), so that a
// unit that hangs or overruns (a peer that never answers, a disk that
// stalls) costs its own rows, with the reason, and never the run: at its
// deadline the child gets SIGTERM (its exit handlers give back hugepages),
// then SIGKILL with its whole process group (its fio, its peers, its traced
// workers). The child checkpoints its report after every table, so the
// tables it finished are kept.

// runUnitSpec is one child process of the run.
type runUnitSpec struct {
	name     string   // as progress and the skipped list name it
	scenario string   // the scenario it runs
	args     []string // extra child flags
	weight   float64  // its expected share of the run's time
}

// unitSeconds are the units' expected durations on the 2-vCPU development
// VM when it is quiet (full run, -quick), in seconds; on a loaded machine
// (load 13-18) a full run's units took about twice as long. A unit's
// deadline comes from its share by these of what is left of -timeout
// (unitBudget). footprint starts a fresh process per sample and pages
// touches 1 GiB per backing: both take about as long with -quick.
var unitSeconds = map[string][2]float64{
	"device-small": {240, 35}, "file-4k": {130, 45}, "bulk": {45, 15}, "alloc": {12, 5}, "latency": {200, 55},
	"footprint": {50, 50}, "pages": {80, 60}, "remote": {130, 50}, "pipeline": {150, 55}, "grow": {60, 25},
}

// unitBudget is a unit's deadline: twice its share (by expected duration)
// of the time left, but never eating into the half of their shares that
// the units after it keep. So a slow machine stretches the early units
// and squeezes the later ones, and the run ends within -timeout.
func unitBudget(left time.Duration, w, wLeft float64) time.Duration {
	share := float64(left) * w / wLeft
	keep := 0.5 * float64(left) * (wLeft - w) / wLeft
	return time.Duration(min(2*share, float64(left)-keep))
}

func (b *bench) unitWeight(scenario string) float64 {
	w := unitSeconds[scenario]
	if b.o.quick {
		return w[1]
	}
	return w[0]
}

// units lists the run's units in the order the scenarios always ran.
func (b *bench) units() []runUnitSpec {
	var us []runUnitSpec
	for _, s := range allScenarios {
		if !b.o.scenarios[s] {
			continue
		}
		if s == "remote" {
			for _, t := range remoteTransports {
				us = append(us, runUnitSpec{name: "remote/" + t.name, scenario: s, args: []string{"-remote-tls", t.name}, weight: b.unitWeight(s)})
			}
			continue
		}
		us = append(us, runUnitSpec{name: s, scenario: s, weight: b.unitWeight(s)})
	}
	// The order of allScenarios is the run's: the tables' scenarios
	// first, as before.
	order := []string{"device-small", "file-4k", "bulk", "alloc", "latency", "footprint", "pages", "remote", "pipeline", "grow"}
	var sorted []runUnitSpec
	for _, s := range order {
		for _, u := range us {
			if u.scenario == s {
				sorted = append(sorted, u)
			}
		}
	}
	return sorted
}

// runUnits runs every unit with its deadline and merges what each
// reports; it says whether any failed.
func (b *bench) runUnits() (failed bool) {
	us := b.units()
	b.m.Timeout = b.o.timeout.Seconds()
	b.m.Units = []unitRun{}
	start := time.Now()
	left := 0.0
	for _, u := range us {
		left += u.weight
	}
	doneW := 0.0
	for i, u := range us {
		el := time.Since(start)
		remain := b.o.timeout - el
		budget := unitBudget(remain, u.weight, left)
		est := ""
		if doneW > 0 {
			rest := time.Duration(float64(el) / doneW * left)
			est = fmt.Sprintf(", about %s left", min(rest, remain).Round(time.Second))
		}
		fmt.Fprintf(os.Stderr, "hcomm-bench: [%d/%d] %s (%s so far%s; this one stops at %s)\n", i+1, len(us), u.name, el.Round(time.Second), est, budget.Round(time.Second))
		t0 := time.Now()
		rep, err := b.runUnit(u, budget)
		b.m.Units = append(b.m.Units, unitRun{Name: u.name, Seconds: time.Since(t0).Seconds(), Deadline: budget.Seconds(), Finished: err == nil})
		if err != nil {
			failed = true
			b.skipped = append(b.skipped, fmt.Sprintf("%s FAILED: %v", u.name, err))
			if b.unfinished == nil {
				b.unfinished = map[string]string{}
			}
			b.unfinished[u.name] = firstLine(err.Error())
		}
		if rep != nil {
			b.entries = append(b.entries, rep.Scenarios...)
			for _, s := range rep.Skipped {
				if !contains(b.skipped, s) {
					b.skipped = append(b.skipped, s)
				}
			}
			for _, s := range rep.Skipped {
				if strings.Contains(s, "FAILED") {
					failed = true
				}
			}
		}
		left -= u.weight
		doneW += u.weight
	}
	return failed
}

// runUnit runs one unit as a child with the deadline budget, and returns
// the report it checkpointed (nil if none), and an error when it failed,
// was stopped at its deadline (what it had not finished is named), or
// reported nothing.
func (b *bench) runUnit(u runUnitSpec, budget time.Duration) (*report, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	out, err := os.CreateTemp("", "hcomm-bench-unit-*.json")
	if err != nil {
		return nil, err
	}
	out.Close()
	defer os.Remove(out.Name())
	args := []string{"-scenario-child", "-child-out", out.Name(), "-scenarios", u.scenario, "-reps", strconv.Itoa(b.o.reps)}
	args = append(args, u.args...)
	args = append(args, childFlags(b.o)...)
	if b.o.noTrace {
		args = append(args, "-no-trace")
	}
	if b.o.verbose {
		args = append(args, "-v")
	}
	if !b.tables() {
		args = append(args, "-json") // the child prints no tables
	}
	cmd := exec.Command(exe, args...)
	cmd.Stdout, cmd.Stderr = b.out, os.Stderr
	// Its own process group, so that its children go with it (Ctrl-C of
	// the parent stops the group through atExit).
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start: %w", err)
	}
	undo := atExit(func() { stopGroup(cmd.Process.Pid, nil) })
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var werr error
	timedOut, killed := false, false
	select {
	case werr = <-done:
	case <-time.After(budget):
		timedOut = true
		killed = stopGroup(cmd.Process.Pid, done)
		werr = <-done
	}
	undo()
	var rep *report
	if b, err := os.ReadFile(out.Name()); err == nil && len(b) > 0 {
		var r report
		if jerr := json.Unmarshal(b, &r); jerr == nil {
			rep = &r
		} else {
			werr = errors.Join(werr, fmt.Errorf("its report: %w", jerr))
		}
	}
	switch {
	case timedOut:
		how := "stopped (SIGTERM)"
		if killed {
			how = "killed (SIGKILL, after SIGTERM did not stop it in 10 s)"
		}
		kept := "nothing"
		if rep != nil && len(rep.Scenarios) > 0 {
			kept = fmt.Sprintf("the %d entries of the tables it finished", len(rep.Scenarios))
		}
		msg := fmt.Sprintf("ran out of its time (%s of -timeout %s) and was %s; kept %s; its last step: %s", budget.Round(time.Second), b.o.timeout, how, kept, lastStep(rep))
		if b.tables() {
			fmt.Fprintf(b.out, "\n== %s: NOT FINISHED: %s\n", u.name, msg)
		}
		return rep, errors.New(msg)
	case werr != nil && rep == nil:
		return nil, fmt.Errorf("child: %w (no report)", werr)
	case rep == nil:
		return nil, errors.New("child reported nothing")
	}
	return rep, nil
}

// stopGroup sends SIGTERM to the process group pgid, and SIGKILL when it
// has not exited 10 s later (done receives the leader's exit; nil: do not
// wait). It says whether SIGKILL was needed.
func stopGroup(pgid int, done chan error) (killed bool) {
	_ = syscall.Kill(-pgid, syscall.SIGTERM)
	if done == nil {
		time.Sleep(100 * time.Millisecond)
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		return true
	}
	select {
	case err := <-done:
		done <- err // for the caller
	case <-time.After(10 * time.Second):
		killed = true
	}
	// The group's other processes (fio, peers, traced workers) go now.
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
	return killed
}

// lastStep is what the child was doing when stopped: the step its last
// checkpoint recorded.
func lastStep(rep *report) string {
	if rep == nil || rep.Step == "" {
		return "unknown (no checkpoint)"
	}
	return rep.Step
}

// checkpoint writes what a scenario child has so far to -child-out
// (atomically: the parent may stop the child at any time).
func (b *bench) checkpoint() error {
	if b.o.childOut == "" {
		return nil
	}
	rep := report{SchemaVersion: schemaVersion, Scenarios: b.entries, Skipped: b.skipped, Step: b.curStep}
	tmp := b.o.childOut + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	err = json.NewEncoder(f).Encode(rep)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, b.o.childOut)
	}
	if err != nil {
		return fmt.Errorf("checkpoint %s: %w", filepath.Base(b.o.childOut), err)
	}
	return nil
}

// remoteNames names the remote transports this process measures.
func remoteNames() string {
	var n []string
	for _, t := range remoteTransports {
		n = append(n, t.name)
	}
	return strings.Join(n, ", ")
}
