module github.com/hcomm-go/hcomm

go 1.26.0

require (
	github.com/cilium/ebpf v0.22.0
	golang.org/x/sys v0.50.0
)

require (
	golang.org/x/net v0.59.0 // indirect
	golang.org/x/sync v0.23.0 // indirect
)
