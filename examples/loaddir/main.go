// Command loaddir loads every file of a directory into device memory with
// one engine: a device (vfio-mock here; vfio.OpenPCI on hardware) and a
// file backend serving all the files, one Copy per file streamed through
// the pool (no CPU copy), then checks the bytes by reading them back.
//
//	go run ./examples/loaddir [dir]    (default: a directory of 64 shards it writes)
package main

import (
	"bytes"
	"context"
	"fmt"
	"log"
	"os"
	"path/filepath"

	"github.com/hcomm-go/hcomm/backend"
	"github.com/hcomm-go/hcomm/backend/hdmadev"
	"github.com/hcomm-go/hcomm/backend/uringfile"
	"github.com/hcomm-go/hcomm/engine"
	"github.com/hcomm-go/hcomm/vfio/mock"
)

func main() {
	var dir string
	if len(os.Args) > 1 {
		dir = os.Args[1]
	} else {
		dir = sampleDir()
		defer os.RemoveAll(dir)
	}
	paths, _ := filepath.Glob(filepath.Join(dir, "*"))
	ctx := context.Background()

	// The path: one engine, one pool, two backends.
	dev, err := mock.New(mock.Config{DevMemSize: 256 << 20})
	check(err)
	hdma, err := hdmadev.New(dev, hdmadev.Config{CloseDevice: true})
	check(err)
	files, err := uringfile.NewEmpty(uringfile.Config{})
	check(err)
	eng, err := engine.Open(engine.Config{Backend: hdma, Backends: []backend.Backend{files}, PoolSize: 16 << 20})
	check(err)
	defer eng.Close()
	device, disk := eng.Targets()[0], eng.Targets()[1]

	// Every file into device memory, one after another.
	var off uint64
	for _, p := range paths {
		f, err := os.Open(p)
		check(err)
		st, _ := f.Stat()
		id, err := files.AddFile(f)
		check(err)
		c, err := eng.Copy(ctx, engine.CopySpec{Src: disk.File(id, 0), Dst: device.DeviceAt(off), Len: st.Size()})
		check(err)
		check(c.Wait(ctx))
		check(verify(eng, device.DeviceAt(off), p))
		check(files.RemoveFile(id))
		f.Close()
		off += uint64(st.Size()+4095) &^ 4095
	}
	st := eng.Stats()
	fmt.Printf("loaded %d files, %d bytes, into device memory: %d transfers, %d doorbells, pool peak %d bytes\n",
		len(paths), off, st.Transfers, st.Doorbells, st.Pool.Peak)
}

// verify reads n bytes back from the device and compares them with the file.
func verify(eng *engine.Engine, from engine.Loc, path string) error {
	want, err := os.ReadFile(path)
	if err != nil || len(want) == 0 {
		return err
	}
	b, err := eng.Alloc(len(want))
	if err != nil {
		return err
	}
	defer eng.Free(b)
	id, err := eng.Submit(engine.Transfer{Src: from, Dst: engine.Host(b), Len: len(want)})
	if err == nil {
		err = eng.Wait(context.Background(), id)
	}
	if err == nil && !bytes.Equal(b.Bytes()[:len(want)], want) {
		err = fmt.Errorf("%s: device memory differs from the file", path)
	}
	return err
}

// sampleDir writes 64 shards of 1 MiB into a temporary directory.
func sampleDir() string {
	dir, err := os.MkdirTemp("", "loaddir")
	check(err)
	buf := make([]byte, 1<<20)
	for i := range 64 {
		for j := range buf {
			buf[j] = byte(i + j*7)
		}
		check(os.WriteFile(filepath.Join(dir, fmt.Sprintf("shard-%02d.bin", i)), buf, 0o600))
	}
	return dir
}

func check(err error) {
	if err != nil {
		log.Fatal(err)
	}
}
