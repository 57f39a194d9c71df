package trace

import (
	"fmt"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/hcomm-go/hcomm/internal/testutil"
)

// TestEngineRemoteHooks: the engine's batch hooks count remote batches
// (backend/ucx, path "remote") like any other. A peer process (untraced)
// exports its pool; the traced helper connects to it over UCX's tcp
// transport on loopback and submits B engine batches of puts and gets. The
// uprobes must see exactly the batches, transfers and bytes the engine
// counted, all on the remote path: the hooks are the engine's own, so the
// counts are exact (no runtime syscalls are involved).
func TestEngineRemoteHooks(t *testing.T) {
	requireTracing(t)
	const b = 40
	bin := buildRemoteload(t)
	t.Setenv("UCX_TLS", "tcp") // both processes inherit it
	addr := startRemotePeer(t, bin)

	sess, out, s := runWorkloadOutput(t, Options{}, bin, "remote", addr, fmt.Sprint(b))
	if st := sess.Engine(); !st.Present {
		t.Fatalf("engine hooks not found in a binary linking the engine and backend/ucx: %s", st.Reason)
	}
	var batches, transfers, bytes, completed, reaps, remote uint64
	if _, err := fmt.Sscan(out, &batches, &transfers, &bytes, &completed, &reaps, &remote); err != nil {
		t.Fatalf("parse %q: %v", out, err)
	}
	var want uint64
	for i := 0; i < b; i++ {
		want += uint64(i%7 + 1)
	}
	if batches != b || transfers != want || remote != want || completed != want {
		t.Fatalf("engine's own stats: %d batches, %d transfers (%d remote), %d completed; the helper submitted %d, %d",
			batches, transfers, remote, completed, b, want)
	}
	e := s.Engine
	t.Logf("uprobes: %d submit batches (%d on the remote path), %d transfers, %d bytes; %d reap batches, %d completions",
		e.SubmitBatches, e.PathBatches[EnginePathRemote], e.SubmitTransfers, e.SubmitBytes, e.ReapBatches, e.ReapCompletions)
	if e.SubmitBatches != batches || e.SubmitTransfers != transfers || e.SubmitBytes != bytes {
		t.Errorf("uprobes: %d batches, %d transfers, %d bytes; engine: %d, %d, %d", e.SubmitBatches, e.SubmitTransfers, e.SubmitBytes, batches, transfers, bytes)
	}
	if e.PathBatches[EnginePathRemote] != b {
		t.Errorf("%s-path batches = %d, want %d (all paths: %v)", EnginePathName(EnginePathRemote), e.PathBatches[EnginePathRemote], b, e.PathBatches)
	}
	if e.ReapBatches != reaps || e.ReapCompletions != completed || e.ReapErrors != 0 {
		t.Errorf("uprobes: %d reap batches, %d completions, %d errors; engine: %d, %d, 0", e.ReapBatches, e.ReapCompletions, e.ReapErrors, reaps, completed)
	}
}

// buildRemoteload builds trace/testdata/remoteload, which links
// backend/ucx: cgo and libucx-dev, unlike the other helpers.
// In the VM guest (tests/vm) the helper is prebuilt with cgo on the host
// (testdata/vm-helpers) and brings UCX's shared libraries along.
func buildRemoteload(t *testing.T) string {
	t.Helper()
	bin, err := testutil.Helper(t.TempDir(), "remoteload", func(out string) error {
		cmd := exec.Command("go", "build", "-o", out, "./testdata/remoteload")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=1")
		if b, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("go build ./testdata/remoteload (needs libucx-dev): %w\n%s", err, b)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

// startRemotePeer starts "remoteload peer" and returns the address it
// listens on; it stops when the test ends (its standard input closes).
func startRemotePeer(t *testing.T, bin string) string {
	t.Helper()
	return testutil.StartPeer(t, exec.Command(bin, "peer"), testutil.Peer{Start: 60 * time.Second, Stop: 30 * time.Second, CheckExit: true})
}
