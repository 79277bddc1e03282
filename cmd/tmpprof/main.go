package main

import (
	"context"
	"fmt"
	"os"
	"runtime/pprof"
	"time"

	"github.com/memwatch/memwatch/confine"
	"github.com/memwatch/memwatch/layout/sessiondetail"
	"github.com/memwatch/memwatch/recall"
)

func main() {
	dir, idx, word := os.Args[1], os.Args[2], os.Args[3]
	root, err := confine.Open(dir, confine.Options{MaxFileSize: 1 << 40})
	if err != nil {
		panic(err)
	}
	q, _ := recall.ParseQuery(word)
	f, _ := os.Create("/tmp/cpu.prof")
	pprof.StartCPUProfile(f)
	t0 := time.Now()
	n := 20
	for i := 0; i < n; i++ {
		_, st, err := recall.Search(context.Background(), q, recall.Options{Roots: []recall.Root{{Root: root, Sources: sessiondetail.Sources}}, Limit: 10, Index: idx})
		if err != nil {
			panic(err)
		}
		if i == 0 {
			fmt.Printf("%+v\n", st)
		}
	}
	pprof.StopCPUProfile()
	fmt.Println("per query", time.Since(t0)/time.Duration(n))
}
