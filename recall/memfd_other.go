//go:build !linux

package recall

import (
	"errors"
	"os"
)

func memfd() (*os.File, error) { return nil, errors.New("no memfd") }
