package trace

import "time"

// ProcessInfo identifies the traced process.
type ProcessInfo struct {
	PID    int      `json:"pid"`
	Comm   string   `json:"comm"`
	Argv   []string `json:"argv,omitempty"`
	Cgroup string   `json:"cgroup,omitempty"`
}

// Meta is what a report says about the traced process besides counters.
type Meta struct {
	Process     ProcessInfo
	Mode        string
	Duration    time.Duration
	ExitCode    *int
	Engine      EngineStatus
	Execs       []Exec
	Unavailable []string
	Filter      Filter
	By          Breakdown
}
