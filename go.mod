module github.com/hcomm-go/hcomm

go 1.26.0
