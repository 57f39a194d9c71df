module github.com/hcomm-go/hcomm

go 1.26.0

require (
	github.com/cilium/ebpf v0.22.0 // indirect
	github.com/prometheus/client_golang v1.25.0 // indirect
	golang.org/x/sys v0.50.0 // indirect
)
