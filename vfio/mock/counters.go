package mock

import "sync/atomic"

// Counters is a snapshot of what the device did since New.
type Counters struct {
	SQDoorbells uint64 // SQ_TAIL writes, all queues
	CQDoorbells uint64 // CQ_HEAD writes, all queues
	Descriptors uint64 // submission entries fetched
	// Completions counts completion entries written, by status
	// (index = status; the last index counts any larger status).
	Completions    [8]uint64
	BytesH2D       uint64 // bytes moved host → device memory
	BytesD2H       uint64 // bytes moved device memory → host
	BytesD2D       uint64 // bytes moved within device memory
	IOMMUFaults    uint64 // accesses the IOMMU refused (descriptor data and ring accesses)
	DevMemFaults   uint64 // device-memory bounds violations
	BadDescriptors uint64 // descriptors refused by validation
	Fences         uint64
	// Injected faults that fired, by kind.
	InjectedErrors, InjectedLatency, InjectedStalls, InjectedResets uint64
	Resets                                                          uint64 // controller resets, function-level resets, injected resets
	FatalFaults                                                     uint64 // times the device halted with STATUS.fatal
	MSIs                                                            uint64 // eventfd signals written
	MSIErrors                                                       uint64 // eventfd writes that failed
	CQFullWaits                                                     uint64 // times a queue waited for the host to release completions
	IgnoredWrites                                                   uint64 // writes to queue configuration while enabled
	WorkerSleeps                                                    uint64 // times the worker blocked after spinning
	// Late counts descriptors that completed more than Config.LateAfter
	// after the doorbell that published them, their injected latency
	// deducted (always 0 when LateAfter is 0).
	Late uint64
}

// QueueCounters is a snapshot of one queue's counters.
type QueueCounters struct {
	SQDoorbells, CQDoorbells, Descriptors, Completions uint64
}

// counters are the device-side counters. They are plain integers guarded by
// Device.mu (the worker holds it while it works, so counting costs no atomic
// operation per descriptor); Counters takes mu, so a snapshot taken after the
// host saw a completion includes that completion.
type counters struct {
	descriptors, bytesH2D, bytesD2H, bytesD2D             uint64
	completions                                           [8]uint64
	iommuFaults, devMemFaults, badDescriptors, fences     uint64
	injErrors, injLatency, injStalls, injResets           uint64
	resets, fatal, msis, msiErrors, cqFull, ignoredWrites uint64
	late                                                  uint64
}

// queueCounters are per-queue counters: doorbells are counted lock-free by
// the host-side register path, the rest under Device.mu by the worker.
type queueCounters struct {
	sqDoorbells, cqDoorbells atomic.Uint64
	// bellSince is the device clock at the first SQ_TAIL doorbell the
	// worker has not yet seen, 0 when none (Config.LateAfter only): a
	// lower bound on when the entries the worker finds new were published.
	bellSince                atomic.Int64
	descriptors, completions uint64
}

// Counters returns a snapshot of the device's counters.
func (d *Device) Counters() Counters {
	d.mu.Lock()
	c := d.ctr
	d.mu.Unlock()
	s := Counters{
		Descriptors:     c.descriptors,
		Completions:     c.completions,
		BytesH2D:        c.bytesH2D,
		BytesD2H:        c.bytesD2H,
		BytesD2D:        c.bytesD2D,
		IOMMUFaults:     c.iommuFaults,
		DevMemFaults:    c.devMemFaults,
		BadDescriptors:  c.badDescriptors,
		Fences:          c.fences,
		InjectedErrors:  c.injErrors,
		InjectedLatency: c.injLatency,
		InjectedStalls:  c.injStalls,
		InjectedResets:  c.injResets,
		Resets:          c.resets,
		FatalFaults:     c.fatal,
		MSIs:            c.msis,
		MSIErrors:       c.msiErrors,
		CQFullWaits:     c.cqFull,
		IgnoredWrites:   c.ignoredWrites,
		WorkerSleeps:    d.sleeps.Load(),
		Late:            c.late,
	}
	for i := range d.qctr {
		s.SQDoorbells += d.qctr[i].sqDoorbells.Load()
		s.CQDoorbells += d.qctr[i].cqDoorbells.Load()
	}
	return s
}

// CompletionsTotal is the number of completion entries written, any status.
func (c Counters) CompletionsTotal() uint64 {
	var n uint64
	for _, v := range c.Completions {
		n += v
	}
	return n
}

// QueueCounters returns a snapshot of queue q's counters (zero for a queue
// the device does not have).
func (d *Device) QueueCounters(q int) QueueCounters {
	if q < 0 || q >= len(d.qctr) {
		return QueueCounters{}
	}
	c := &d.qctr[q]
	d.mu.Lock()
	desc, cpl := c.descriptors, c.completions
	d.mu.Unlock()
	return QueueCounters{
		SQDoorbells: c.sqDoorbells.Load(),
		CQDoorbells: c.cqDoorbells.Load(),
		Descriptors: desc,
		Completions: cpl,
	}
}
