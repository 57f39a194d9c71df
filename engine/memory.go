package engine

// memoryTarget copies host blocks to host blocks. The submitter performs the
// copy (memmove) itself; the completion still goes through the reaper, so
// callbacks, Wait and the hooks behave as for every target.
type memoryTarget struct{}

func (memoryTarget) forward(*Engine, uint64, *req, bool) bool { return false }
func (memoryTarget) flush(*Engine)                            {}
func (memoryTarget) reap(*Engine, []completion) int           { return 0 }
func (memoryTarget) check(*Engine)                            {}
func (memoryTarget) outstanding() int                         { return 0 }
func (memoryTarget) sleepFd() (int, bool)                     { return -1, false }
func (memoryTarget) cancel(*Engine, []completion) int         { return 0 }
func (memoryTarget) close(*Engine) error                      { return nil }
